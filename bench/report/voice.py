"""Sections on answering speech: the latency report of ``specvoice assist``, voice to voice (``bench voice``), what
PredGen speculates on, the compute-aware PredGen simulation (``bench predgen``) and PredGen over an LLM server.

Each section returns Markdown (no trailing newline) and reads only what it prints."""

from __future__ import annotations

import re

from bench.report.markdown import bold, count, num, pct, produced_by, sec, span, stem, table, times, trio
from bench.report.results import Results, defaults


def section_latency_report(r: Results) -> str:
    p, c = r("assist_predgen"), r("assist_cascade")
    load_key = next(k for k in p["load_s"] if k.startswith("asr:"))
    win = re.search(r"min_s=([\d.]+)", load_key)
    rows = []
    for name, d in (("`predgen`", p), ("`cascade`", c)):
        a = d["answers"][0]
        nfetfs = a.get("nfetfs")
        nf = "—" if d["answer_method"] == "cascade" else (
            f"{nfetfs} (pre-synthesised piece played)" if a.get("presynth_used") else str(nfetfs))
        rows.append([name, num(d["asr"]["rtf"]), sec(a["eos_to_final_transcript_s"]), sec(a["ttfs_s"]),
                     sec(a["eos_to_first_audio_s"]), sec(a["final_transcript_to_first_audio_s"]),
                     num(a["llm"]["tokens_per_s"], 1), num(a["tts"]["rtf"]), nf])
    pa = p["answers"][0]
    return f"""## The latency report (`specvoice assist`)

Every live command writes `OUT/<command>-report.json`. Times are measured from **end of speech**: the wall-clock
moment the audio holding the user's last speech sample was available, so they include the VAD's end-of-speech
silence (`vad.min_silence_s`).

{table(["field", "meaning"], [
        ["`asr.rtf`", "ASR compute seconds per second of audio (all streaming updates)"],
        ["`asr.utterances[].eos_to_final_s`", "end of speech → final transcript"],
        ["`answers[].eos_to_first_token_s`", "end of speech → first answer token"],
        ["`answers[].ttfs_s`", "**TTFS**: end of speech → first answer piece complete (its first sentence, or its "
                               "first clause of at least `tts.first_clause_words` words)"],
        ["`answers[].eos_to_first_audio_s`", "end of speech → first answer audio sample (played, or synthesised "
                                             "when there is no output device)"],
        ["`answers[].llm.tokens_per_s`, `answers[].tts.rtf`", "LLM decode speed; TTS compute per second of speech"],
    ])}

{produced_by("assist_predgen.json", "assist_cascade.json")}

The embedded question ({num(p["asr"]["audio_s"], 1)} s of audio, real-time pace, `--no-play`), one run per answer
method, with the ASR settings of the time of the run (encoder window of at least {num(float(win.group(1)), 0) if win
else "—"} s; today's ASR defaults are measured in the streaming-ASR section below):

{table(["answer method", "ASR RTF", "end of speech → final transcript", "TTFS", "end of speech → first audio",
        "final transcript → first audio", "LLM tok/s", "TTS RTF", "NFETFS"], rows)}

Where the time goes: end of speech → final transcript is the VAD's end-of-speech silence plus at most the update in
flight (the final decode usually already ran at the VAD's pause event). With the streaming ASR at
{num(p["asr"]["rtf"])} of the CPU, PredGen's {pa["speculative_updates"]} speculative updates got the compute to
verify and pre-synthesise the first sentence while the user spoke. One question is not a benchmark: see the
voice-to-voice benchmark."""


# the voice benchmark's methods in table order: method → (answer method, what is spoken first)
VOICE_ROWS = {"cascade_sentence": ("cascade", "sentence"), "cascade": ("cascade", "clause"),
              "cascade_prefill": ("cascade + incremental prefill", "clause"),
              "predgen_sentence": ("PredGen greedy", "sentence"), "predgen": ("PredGen greedy", "clause")}


def section_voice(r: Results) -> str:
    v = r("voice")
    m = v["methods"]
    n = len(v["files"])
    rates = sorted({re.search(r"rate(\d+(?:\.\d+)?)", f).group(1) for f in v["files"] if "rate" in f})
    jfk = sum(1 for f in v["files"] if "jfk" in f)
    default_method = defaults().llm.answer_method  # "predgen"
    rows = []
    for key, (label, piece) in VOICE_ROWS.items():
        d = m[key]
        is_default = key == default_method
        vs_c = 1.0 if key == "cascade" else d.get("mean_speedup_vs_cascade")
        vs_p = 1.0 if key == "cascade_prefill" else d.get("mean_speedup_vs_cascade_prefill")
        vs_s = d.get(f"mean_speedup_vs_{key}_sentence")
        nf = "—" if d["nfetfs_mean"] is None else f"{num(d['nfetfs_mean'], 1)} ({pct(d['nfetfs_1_rate'])} = 1)"
        acc = "—" if key.startswith("cascade") and key != "cascade_prefill" else num(d["accepted_tokens_mean"], 1)
        same = count(d.get("identical_answer_share"), d["files"]) if "identical_answer_share" in d else "—"
        rows.append([bold(label + (" (the default)" if is_default else ""), is_default), bold(piece, is_default),
                     bold(trio(d, "eos_to_first_audio_s"), is_default), bold(num(vs_c), is_default),
                     bold(num(vs_p), is_default), bold(num(vs_s), is_default and vs_s is not None),
                     num(d["first_piece_words_mean"], 1), sec(d["eos_to_final_s_p50"]), nf, acc, same])
    sentence_gain = [m["predgen"]["mean_speedup_vs_predgen_sentence"], m["cascade"]["mean_speedup_vs_cascade_sentence"]]
    nf1 = [round(m[k]["nfetfs_1_rate"] * n) for k in ("predgen", "predgen_sentence")]
    eos_final = [m[k]["eos_to_final_s_p50"] for k in m]
    pg = m["predgen"]
    return f"""## Voice to voice (`specvoice bench voice`)

{n} spoken questions — {n - jfk} MT-Bench first turns spoken by the Piper voice at length scales {", ".join(rates)}
with short pauses between clauses (`bench/data/voice_questions`, made by `python -m bench.make_speech`) and
jfk.flac — played in real time through the whole live pipeline (VAD → streaming ASR → answer stage → TTS, built
as
`assist` builds it), every method on the same file in turn, one run, with nothing else at normal priority, Whisper
base int8 streaming ASR (`{v["asr_method"]}`, with the streaming-ASR settings of the time of the run),
Qwen2.5-Coder-1.5B Q4_K_M, speculation on every core (`llm.predgen_speculation_threads = {v["speculation_threads"]}`),
{v["tokens_per_update"]} tokens per speculative update, every method with PredGen's system prompt (so answers
compare token by token). End of speech = when the audio holding the last speech sample was available; first audio
= the first answer piece synthesised (the player starts it then). "First piece" = what is spoken first: the first
clause of at least `tts.first_clause_words` words (`clause` rows, the default) or the whole first sentence
(`sentence` rows, `tts.first_clause_words = {m["predgen_sentence"]["first_clause_words"]}`).

{produced_by("voice.json")}

{table(["answer method", "first piece", "EOS → first audio p50 / p90 / mean", "vs cascade (mean)",
        "vs cascade + prefill (mean)", "vs the same method speaking whole sentences (mean)",
        "words in the first piece (mean)", "EOS → final transcript p50", "NFETFS mean (share = 1)",
        "accepted tokens", "answer = cascade's"], rows)}

The default's median is {sec(pg["eos_to_first_audio_s_p50"])} and its p90 {sec(pg["eos_to_first_audio_s_p90"])};
speaking whole first sentences its median would be {sec(m["predgen_sentence"]["eos_to_first_audio_s_p50"])}.
Starting at the first clause is worth {span(sentence_gain, unit="×")} (mean), more than PredGen's own gain over the
honest baseline ({times(pg["mean_speedup_vs_cascade_prefill"])} vs cascade + incremental prefill, which is most of
PredGen's gain over the plain cascade: the prompt is already in the KV cache when the user stops). Speculating on
every core does not slow the ASR (end of speech → final transcript {span(eos_final, unit=" s")} at the median for
every method): every speculative forward pass waits for the streaming decode in flight (`engine/core/cpu.py`). On
this CPU a verification pass costs about what its tokens cost to decode, and a candidate's first piece was rarely
accepted whole (NFETFS = 1 in {span(nf1, 0)} of {n} turns). Answers differ from the cascade's even with no
speculation at all (cascade + prefill: {count(m["cascade_prefill"]["identical_answer_share"], n)} identical):
llama.cpp's logits depend on how tokens are batched (prefill in chunks vs at once), so greedy near-ties flip; on
the torch adapter, whose batched and sequential logits agree, greedy PredGen is exactly the cascade (see the torch
exactness run below and tests/test_exactness_torch.py)."""


def section_voice_source(r: Results) -> str:
    v = r("voice_source")
    m = v["methods"]
    n = len(v["files"])
    default_src = defaults().llm.predgen_source
    rows = []
    for key, label in (("predgen", "hypothesis of the final transcript"), ("predgen_partial", "partial transcript")):
        d = m[key]
        is_def = d["predgen_source"] == default_src
        vs = 1.0 if key == "predgen_partial" else m["predgen"]["eos_to_first_audio_s_mean"] and (
            m["predgen_partial"]["eos_to_first_audio_s_mean"] / m["predgen"]["eos_to_first_audio_s_mean"])
        rows.append([bold(label + (" (default)" if is_def else ""), is_def), trio(d, "eos_to_first_audio_s"),
                     num(vs), sec(d["final_to_first_audio_s_p50"]),
                     f"{num(d['nfetfs_mean'], 1)} ({pct(d['nfetfs_1_rate'])})", num(d["accepted_tokens_mean"], 1),
                     f"{round(d['presynth_rate'] * n)} / {n}"])
    a, b = v["turns"]["predgen"], v["turns"]["predgen_partial"]
    gains = [(y["eos_to_first_audio_s"] - x["eos_to_first_audio_s"], x, y) for x, y in zip(a, b)]
    g, x, y = max(gains, key=lambda t: t[0])
    return f"""### What PredGen answers while the user speaks

The same {n} files, both ways in one run (`voice_source.json`): the ASR's hypothesis of the final transcript
(`llm.predgen_source = hypothesis`: the latest decode of the whole utterance, the final transcript if the user
stopped now) or the partial transcript as shown (words committed from shorter audio, which the final decode may
still correct).

{produced_by("voice_source.json")}

{table(["PredGen speculates on", "EOS → first audio p50 / p90 / mean", "× partial (mean)",
        "final transcript → first audio p50", "NFETFS mean (share = 1)", "accepted tokens",
        "pre-synthesised piece used"], rows)}

A small gain, inside the per-file spread: the turn that gains most ({stem(x["file"])}:
{sec(y["eos_to_first_audio_s"])} → {sec(x["eos_to_first_audio_s"])}) is one where the final decode corrected an
early word. The same hypothesis feeds the live captions, where it matters more (below)."""


def _predgen_rows(d: dict) -> list[list[str]]:
    rows = []
    for key, label in (("cascade", "cascade"), ("cascade_prefill", "cascade + incremental prefill"),
                       ("greedy", "greedy"), ("top_k", f"top-{d['top_k']}"), ("reflection", "reflection")):
        if key not in d["methods"]:
            continue
        m = d["methods"][key]
        same = "—"
        checks = m.get("lossless_checks") or m.get("answer_checks")
        if checks is not None:
            gaps = [c["divergence"]["gap"] for c in checks if c["divergence"]]
            k = sum(1 for c in checks if c["identical"])
            same = f"{k}/{len(checks)}" + (f" (largest logit gap at a difference {num(max(gaps))})" if gaps else "")
            if key == "top_k":
                same += ", lossy by design"
        elif key == "top_k":
            same = "lossy by design"
        rows.append([label, num(m["audio_latency_s_mean"]), num(m["audio_latency_s_median"]),
                     times(m["audio_latency_speedup_vs_cascade"]),
                     times(m.get("audio_latency_speedup_vs_cascade_prefill")), num(m["ttfs_s_mean"]),
                     num(m["nfetfs_mean"], 1), pct(m["nfetfs_1_share"]),
                     num(m["accepted_tokens_mean"], 1) if "accepted_tokens_mean" in m else "—", same])
    return rows


PREDGEN_HEAD = ["method", "audio latency mean (s)", "median (s)", "vs cascade", "vs cascade + prefill",
                "TTFS mean (s)", "NFETFS mean", "NFETFS = 1", "accepted tokens", "final answer = cascade's"]


def section_predgen(r: Results) -> str:
    mt, ap, gs = r("predgen_mtbench_qwen1.5b"), r("predgen_asr_partials_qwen1.5b"), r("predgen_gsm8k_qwen1.5b")
    vp, tx = r("predgen_voice_asr_partials"), r("predgen_torch_exactness_qwen0.5b")
    g = vp["methods"]["greedy"]
    gaps = [c["divergence"]["gap"] for c in vp["methods"]["cascade_prefill"]["answer_checks"] if c["divergence"]]
    tg = tx["methods"]["greedy"]
    return f"""## PredGen, compute-aware simulation (`specvoice bench predgen`)

Partial prompts are revealed on a simulated clock that charges every LLM call its measured wall time (the method
runs while the user speaks only as far as the compute allows); audio latency = end of input → first audio of the
answer (TTS included unless the pre-synthesised piece is played). Every run: Qwen2.5-Coder-1.5B Q4_K_M unless
noted, {mt["tokens_per_update"]} tokens per update, {mt["max_tokens"]} answer tokens per turn. The "= cascade's"
column compares token sequences; where they differ it gives the largest logit gap between the two top tokens at the
first difference (a near-tie of llama.cpp's batched numerics, not speculation: the plain prefill baseline, which
speculates nothing, shows the same gaps).

### On this project's streaming-ASR partials of the spoken questions

Partials of the streaming ASR on the {vp["turns"]} spoken questions of the voice benchmark
(`{vp["input"]}`), every method with the same thread budget (speculation on all cores), first spoken piece = first
clause of at least {vp["first_clause_words"]} words, one run:

{produced_by("predgen_voice_asr_partials.json")}

{table(PREDGEN_HEAD, _predgen_rows(vp))}

Greedy PredGen reaches {times(g["audio_latency_speedup_vs_cascade"])} the cascade and
{times(g["audio_latency_speedup_vs_cascade_prefill"])} the incremental-prefill cascade. Its answers equal the
cascade's only up to llama.cpp's batching numerics: every divergence is a near-tie of at most
{num(g["divergence_logit_gap_max"])}, the same size as the plain prefill baseline's ({num(max(gaps))}), which
speculates nothing. Reflection accepts prefixes greedy would not (gaps up to
{num(vp["methods"]["reflection"]["divergence_logit_gap_max"])}); top-k is lossy by design.

### Exactness on torch

On real weights in float32 torch, whose batched and one-at-a-time logits agree, greedy PredGen is the cascade token
for token: the same {tx["turns"]} streams on the 0.5B's GGUF dequantised into transformers (needs
`pip install -e ".[torch-gguf]"`): {count(tg["identical_to_cascade_share"], tx["turns"])} answers identical to the
cascade for greedy PredGen ({num(tg["accepted_tokens_mean"], 1)} accepted tokens per turn) and
{count(tx["methods"]["cascade_prefill"]["identical_to_cascade_share"], tx["turns"])} for cascade + prefill. Its
latencies are float32-on-this-CPU numbers, run beside other work, and say nothing about the llama.cpp path.

{produced_by("predgen_torch_exactness_qwen0.5b.json")}

{table(PREDGEN_HEAD, _predgen_rows(tx))}

### MT-Bench text and spoken MT-Bench

MT-Bench first turns revealed as text at {mt["chars_per_minute"]} characters per minute, and the same questions
spoken by Piper through the real-time streaming ASR (`{ap["input"]}`, made by `specvoice bench partial-streams`);
first spoken piece = the whole first sentence:

{produced_by("predgen_mtbench_qwen1.5b.json", "predgen_asr_partials_qwen1.5b.json")}

MT-Bench text ({mt["turns"]} turns):

{table(PREDGEN_HEAD, _predgen_rows(mt))}

Spoken MT-Bench → streaming-ASR partials ({ap["turns"]} turns):

{table(PREDGEN_HEAD, _predgen_rows(ap))}

### GSM8K

GSM8K questions revealed as text at {gs["chars_per_minute"]} characters per minute ({gs["turns"]} turns):

{produced_by("predgen_gsm8k_qwen1.5b.json")}

{table(PREDGEN_HEAD, _predgen_rows(gs))}

On this CPU a verification pass over a few dozen tokens is not free, which bounds the latency of an NFETFS = 1
turn; on a GPU that pass is nearly free."""


def section_remote(r: Results) -> str:
    d = r("remote_predgen_voice_asr_partials_qwen0.5b")
    lo, re_ = d["backends"]["local"], d["backends"]["remote"]
    h = re_["http"]
    rows = [
        ["answers identical to in-process (greedy)", "—", count(re_["identical_to_local_share"], re_["turns"])],
        ["audio latency, mean / median (s)",
         f"{num(lo['audio_latency_s_mean'], 1)} / {num(lo['audio_latency_s_median'], 1)}",
         f"{num(re_['audio_latency_s_mean'], 1)} / {num(re_['audio_latency_s_median'], 1)}"],
        ["TTFS, mean (s)", num(lo["ttfs_s_mean"], 1), num(re_["ttfs_s_mean"], 1)],
        ["NFETFS, mean", num(lo["nfetfs_mean"], 1), num(re_["nfetfs_mean"], 1)],
        ["pre-synthesised first sentence played", pct(lo["presynth_share"]), pct(re_["presynth_share"])],
        ["speculative updates per turn", num(lo["updates_mean"], 1), num(re_["updates_mean"], 1)],
        ["HTTP requests per update (verification + pre-fill/decode)", "—",
         f"{num(h['requests_per_update'], 1)} ({num(h['verification_requests_per_update'], 1)} + "
         f"{num(h['prefill_or_decode_requests_per_update'], 1)})"],
        ["final step: HTTP requests (verification + streamed decode)", "—",
         f"{num(h['final_step_requests_mean'], 0)} ({num(h['final_step_verification_requests_mean'], 0)} + "
         f"{num(h['final_step_streamed_decode_requests_mean'], 0)}); {num(h['final_step_streamed_tokens_mean'], 1)} "
         f"tokens streamed"],
        ["verifications (all turns)", "—", str(h["verifications"])],
        ["bytes per verification, sent / received", "—",
         f"{num(h['bytes_sent_per_verification'], 0)} B / {num(h['bytes_received_per_verification'] / 1000, 1)} kB"],
        ["bytes per update, sent / received", "—",
         f"{num(h['bytes_sent_per_update'] / 1000, 1)} kB / {num(h['bytes_received_per_update'] / 1000, 1)} kB"],
        ["prompt tokens per verification / re-processed by the server", "—",
         f"{num(h['prompt_tokens_per_verification'], 1)} / {num(h['reprocessed_tokens_per_verification'], 1)} "
         f"({d['reprocessed_tokens_source']})"],
        ["wall time per turn (s)", num(lo["wall_s_mean"], 1), num(re_["wall_s_mean"], 1)],
    ]
    sc = d["server_costs"]
    crow = [[f"verification (echo), {sc['prompt_tokens']}-token prompt", str(v["top_n"]), num(v["s"], 1),
             num(v["s_per_prompt_token"]), f"{v['argmax_equal_to_in_process']} / {v['positions']}"]
            for v in sc["verification_by_top_n"]]
    crow.append(["last row only, with log-probs / without", str(d["top_n"]) + " / —",
                 f"{num(sc['last_row_with_logprobs_s'], 2)} / {num(sc['last_row_without_logprobs_s'], 3)}", "", ""])
    pt, ds = sc["decode_per_token_requests"], sc["decode_streamed"]
    crow.append([f"{pt['tokens']}-token answer: one request per token / ONE streamed request", f"{d['top_n']} / —",
                 f"{num(pt['s'], 1)} ({pt['requests']} requests) / {num(ds['s'], 2)} ({ds['requests']} request)", "",
                 "same tokens" if sc["decode_same_tokens"] else "different tokens"])
    wrong = [v for v in sc["verification_by_top_n"] if v["argmax_equal_to_in_process"] < v["positions"]]
    wrong_txt = "".join(
        f" At `top_n = {v['top_n']}` {v['positions'] - v['argmax_equal_to_in_process']} position came back wrong "
        f"(logit gap {num(max(v['differing_positions_logit_gap']), 1)} in-process): llama-cpp-python keys its "
        f"entries by token text, and among that many entries two tokens with the same text can collide; the default "
        f"{d['top_n']} was exact." for v in wrong[:1])
    per_tok = [v["s_per_prompt_token"] for v in sc["verification_by_top_n"]]
    s = d["scaling"]
    users_key = next(k for k in s if k.startswith("users_per_") and k.endswith("_prefix_cached"))
    per = re.search(r"users_per_(\d+)_tokens", users_key).group(1)
    return f"""## PredGen over an LLM server (`specvoice bench predgen --backend remote`)

The first {d["turns"]} streams of this project's streaming-ASR partials of the spoken questions, greedy PredGen,
the 0.5B GGUF in-process and over a `llama_cpp.server` the benchmark starts on the same machine
({d["server_threads"]} server thread, {d["local_threads"]} in-process thread), both backends in one run, at the
lowest priority while other benchmarks were loading the CPU. Latencies say more about the load than about either
backend; the
request counts and bytes do not depend on it. See [llm-server.md](llm-server.md) for the set-up.

{produced_by("remote_predgen_voice_asr_partials_qwen0.5b.json")}

{table([f"per turn (mean of {re_['turns']})", "in-process", "over `llama_cpp.server`"], rows)}

The final step costs {num(h["final_step_requests_mean"], 0)} requests. What dominates over this server is the
verification itself: it echoes log-probabilities for the whole prompt, and llama-cpp-python sorts the whole
vocabulary in Python for every echoed position. Asking for fewer log-probabilities does not help (`server_costs`,
re-measured with `--costs-only`, one run each):

{table(["request", "top_n", "wall (s)", "s per prompt token", "argmax = in-process"], crow)}

The server sorts the whole vocabulary whatever `logprobs` is, so the cost does not move with N
({span(per_tok)} s per prompt token; the spread is the load). Greedy verification reads only the argmax per position,
which top-1 already gives exactly; the adapter never asks for the top-1 entry alone, so that the spread of the
remaining mass can never tie with it.{wrong_txt} The cure for the verification cost is a server that computes
prompt log-probabilities natively (vLLM, SGLang): there a verification costs the prompt tokens the server
re-processes (SGLang: the draft; vLLM: the whole prompt). From the measured tokens per update, with partials
{num(s["mean_seconds_between_partials"], 2)} s apart, one server carries about
{num(s[users_key], 0)} speaking users per {per} tokens/s of throughput with a prefix
cache ({num(s["token_evaluations_per_update_prefix_cached"], 0)} token evaluations per update), about
{num(s[users_key.replace("prefix_cached", "no_prefix_cache")], 0)} without
({num(s["token_evaluations_per_update_no_prefix_cache"], 0)}); this CPU server
({num(s["this_server_prefill_tokens_per_s"], 0)} prompt tokens/s) carries about
{num(s["this_server_users_prefix_cached"], 1)} user."""


# the fast-turn comparison's methods in table order: method → what it changes
VOICE_TURN_ROWS = {
    "cascade": "cascade (answers after the final transcript)",
    "predgen": "PredGen greedy: VAD silence, 8 tokens per update",
    "predgen_llm_turn": "+ end of turn from the LLM's end-of-turn probability",
    "predgen_first_clause": "+ updates go on to the first clause (48-token budget)",
    "predgen_fast_turn": "+ both",
}


def section_voice_turn(r: Results) -> str:
    """End of speech → first audio with the fast-turn steps alone and together (``voice_turn.json``)."""
    if not (r.folder / "voice_turn.json").exists():
        return ""
    v = r("voice_turn")
    m = v["methods"]
    n = len(v["files"])
    d0 = defaults()
    rows = []
    for key, label in VOICE_TURN_ROWS.items():
        if key not in m:
            continue
        d = m[key]
        st = d.get("stages_s_p50") or {}
        is_def = key == "predgen" and d0.duplex.end_of_turn == "vad" or (
            key == "predgen_fast_turn" and d0.duplex.end_of_turn == "llm")
        same = count(d.get("identical_answer_share"), d.get("same_final_transcript_as_cascade") or d["files"]) \
            if "identical_answer_share" in d else "—"
        rows.append([bold(label + (" (the default)" if is_def else ""), is_def),
                     bold(trio(d, "eos_to_first_audio_s"), is_def),
                     " / ".join(sec(st.get(k)) for k in ("turn_decision", "final", "first_text", "first_audio")),
                     pct(d.get("presynth_rate")), pct(d.get("nfetfs_0_rate")), pct(d.get("turns_by_model_rate")),
                     same])
    best = min((k for k in m if k.startswith("predgen")), key=lambda k: m[k]["eos_to_first_audio_s_p50"] or 9e9)
    b = m[best]
    ok = (b["eos_to_first_audio_s_p50"] or 9) <= 0.6 and (b["eos_to_first_audio_s_p90"] or 9) <= 1.0
    cost = v.get("llm_cost") or {}
    floor = ""
    toks = (m.get("cascade") or b).get("first_piece_tokens_p50")
    if cost.get("decode_s_per_token") and toks:
        floor = f"""

What the first spoken piece costs on this CPU, measured in the same run before the turns: the answering LLM
pre-fills {cost["prefill_s_per_token"] * 1000:.0f} ms and decodes {cost["decode_s_per_token"] * 1000:.0f} ms per
token; the cascade's first piece is {toks:g} tokens at the median, so generating it after the final transcript
takes {sec(toks * cost["decode_s_per_token"])} before its synthesis. Only the part PredGen generated (and kept)
while the user was still speaking comes off that."""
    return f"""### Answering sooner after the user stops (`voice_turn.json`)

The same {n} spoken questions, one run, each method on each file in turn: the default beside each step alone and
both together. End of speech → first audio is split at the median into the **turn decision** (until the VAD, or the
LLM's end-of-turn verdict, ended the turn), the **final** transcript after it, the answer's **first text** after the
final (the verification pass, or the generation of the first piece when the candidate was not kept), and the
**first audio** after that (synthesis; none when the piece was pre-synthesised). "Pre-synthesised" = the first piece
played was synthesised while the user spoke; "NFETFS 0" = the final was the candidate's own prompt, so nothing was
verified; "turn ended by the LLM" = the verdict ended the turn at the pause rather than the silence.

{produced_by("voice_turn.json")}

{table(["method", "EOS → first audio p50 / p90 / mean", "turn decision / final / first text / first audio (p50)",
        "pre-synthesised", "NFETFS 0", "turn ended by the LLM", "answer = cascade's (same final)"], rows)}

The fastest is `{best}` at {sec(b["eos_to_first_audio_s_p50"])} median and {sec(b["eos_to_first_audio_s_p90"])}
p90: {"within" if ok else "short of"} the targets of 0.6 s median and 1.0 s p90 on two cores. End of speech is
the last speech sample the VAD heard (its 0.2 s pad after it not counted).{floor}"""
