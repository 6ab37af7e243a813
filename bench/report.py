"""Write docs/benchmarks.md and the README's results block from the committed benchmark JSON (bench/results/).

    python -m bench.report            write docs/benchmarks.md and the block between the README's markers
    python -m bench.report --check    write nothing; exit 1 when either file differs from what would be written

Every number in the generated text is read from a result file (or a committed JSON next to a model, such as
``assets/codec_tts/stages_before.json``) at generation time: a number in the docs changes only when its file does.
The command that produces each file is taken from :mod:`bench.all` (the job that regenerates it), so the docs
and ``specvoice bench all`` cannot disagree. Which row is the product's default is read from
:class:`engine.config.Config`.

Output is deterministic: the same JSON files give byte-identical Markdown (tests/test_docs.py checks the committed
files against it).

Raises (from :func:`main`):
    FileNotFoundError: a result file a section needs is missing.
    KeyError: a result file lacks a field a table needs (the benchmark's output format changed).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any, Callable, Iterable

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
DOC = ROOT / "docs" / "benchmarks.md"
README = ROOT / "README.md"
BEGIN = "<!-- results:begin -->"
END = "<!-- results:end -->"
MINUS = "\u2212"  # typographic minus for negative numbers


# -- reading ------------------------------------------------------------------------------------------------------
class Results:
    """The result files of one folder, loaded on first use; remembers which files were read."""

    def __init__(self, folder: Path | str = RESULTS):
        self.folder = Path(folder)
        self.used: set[str] = set()
        self._cache: dict[str, Any] = {}

    def __call__(self, name: str) -> Any:
        """The parsed ``<folder>/<name>.json``. Raises FileNotFoundError when it does not exist."""
        if name not in self._cache:
            path = self.folder / f"{name}.json"
            self._cache[name] = json.loads(path.read_text(encoding="utf-8"))
        self.used.add(f"{name}.json")
        return self._cache[name]

    def available(self) -> list[str]:
        """File names of every result JSON in the folder, sorted."""
        return sorted(p.name for p in self.folder.glob("*.json"))


def _asset(path: str) -> Any:
    return json.loads((ROOT / path).read_text(encoding="utf-8"))


def _defaults():
    """The product's defaults (engine.config), to mark the default row of a table."""
    from engine.config import Config

    return Config()


# -- formatting ---------------------------------------------------------------------------------------------------
def num(x: float | None, d: int = 2) -> str:
    """``x`` with ``d`` decimals (a typographic minus when negative); "—" for None."""
    if x is None:
        return "—"
    s = f"{x:.{d}f}"
    if s.startswith("-"):
        s = MINUS + s[1:]
        if s.strip(MINUS + "0.") == "":
            s = s[1:]  # "−0.00" → "0.00"
    return s


def signed(x: float | None, d: int = 3) -> str:
    """``x`` with an explicit sign: "+0.020", "−0.013"."""
    if x is None:
        return "—"
    s = num(x, d)
    return s if s.startswith(MINUS) else "+" + s


def sec(x: float | None, d: int = 2) -> str:
    return "—" if x is None else f"{num(x, d)} s"


def pct(x: float | None, d: int = 0) -> str:
    """A share (0..1) as a percentage."""
    return "—" if x is None else f"{num(100 * x, d)} %"


def times(x: float | None, d: int = 2) -> str:
    return "—" if x is None else f"{num(x, d)}×"


def count(share: float | None, n: int) -> str:
    """A share of ``n`` items as "k/n"."""
    return "—" if share is None else f"{round(share * n)}/{n}"


def trio(d: dict, stem: str, unit: str = " s", d_: int = 2, keys=("p50", "p90", "mean")) -> str:
    """"a / b / c s" from ``d[stem + '_' + key]`` for each key."""
    return " / ".join(num(d[f"{stem}_{k}"], d_) for k in keys) + unit


def bold(s: str, on: bool = True) -> str:
    return f"**{s}**" if on else s


def table(head: Iterable[str], rows: Iterable[Iterable[Any]], keep_empty: bool = False) -> str:
    """A Markdown table. Columns that are "—" in every row are left out unless ``keep_empty``."""
    head = list(head)
    rows = [[str(c) for c in r] for r in rows]
    for r in rows:
        assert len(r) == len(head), (head, r)
    cols = [i for i in range(len(head))
            if keep_empty or i == 0 or any(r[i] not in ("—", "") for r in rows)]
    lines = ["| " + " | ".join(head[i] for i in cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(r[i] for i in cols) + " |" for r in rows]
    return "\n".join(lines)


def reflow(md: str, width: int = 118) -> str:
    """Re-wrap prose paragraphs and bullet items of ``md`` to ``width`` columns; tables, headings, comments and the
    lists of result files (one long command per line) stay as they are."""
    import textwrap

    out = []
    for block in md.split("\n\n"):
        first = block.lstrip("\n")
        if first.startswith(("|", "#", "<!--", "* `bench/results/", "* [", "```")):
            out.append(block)
            continue
        items: list[list[str]] = []
        for line in block.split("\n"):
            if line.startswith("* ") or not items:
                items.append([line])
            else:
                items[-1].append(line)
        wrapped = []
        for item in items:
            text = " ".join(x.strip() for x in item)
            bullet = item[0].startswith("* ")
            wrapped.append(textwrap.fill(text, width, break_long_words=False, break_on_hyphens=False,
                                         subsequent_indent="  " if bullet else ""))
        out.append("\n".join(wrapped))
    return "\n\n".join(out)


def span(values: Iterable[float], d: int = 2, unit: str = "") -> str:
    """"lo–hi" of the values (one value when they agree at this precision)."""
    v = sorted(values)
    lo, hi = num(v[0], d), num(v[-1], d)
    return f"{lo}{unit}" if lo == hi else f"{lo}–{hi}{unit}"


def job_for(output: str):
    """The :mod:`bench.all` job that writes ``bench/results/<output>``."""
    from bench.all import JOBS

    for j in JOBS:
        if j.output == output:
            return j
    raise KeyError(f"no job in bench/all.py writes {output}")


def produced_by(*outputs: str) -> str:
    """Markdown lines naming each file and the command that regenerates it."""
    lines = []
    for out in outputs:
        j = job_for(out)
        lines.append(f"* `bench/results/{out}` — `specvoice bench all --only {j.name}`, i.e. "
                     f"`{j.command('bench/results')}`")
    return "\n".join(lines)


def _key_number(d: dict, prefix: str) -> str:
    """The number in the first key of ``d`` that starts with ``prefix`` ("threads_2" → "2")."""
    return next(k[len(prefix):] for k in d if k.startswith(prefix))


def stem(path: str) -> str:
    return Path(path).name.rsplit(".", 1)[0]


# -- sections -----------------------------------------------------------------------------------------------------
# Each returns Markdown (no trailing newline). They read only what they print.

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


def section_voice(r: Results) -> str:
    v = r("voice")
    m = v["methods"]
    n = len(v["files"])
    rates = sorted({re.search(r"rate(\d+(?:\.\d+)?)", f).group(1) for f in v["files"] if "rate" in f})
    jfk = sum(1 for f in v["files"] if "jfk" in f)
    default_method = _defaults().llm.answer_method  # "predgen"
    rows_spec = [
        ("cascade_sentence", "cascade", "sentence"),
        ("cascade", "cascade", "clause"),
        ("cascade_prefill", "cascade + incremental prefill", "clause"),
        ("predgen_sentence", "PredGen greedy", "sentence"),
        ("predgen", "PredGen greedy", "clause"),
    ]
    rows = []
    for key, label, piece in rows_spec:
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
jfk.flac — played in real time through the whole live pipeline (VAD → streaming ASR → answer stage → TTS, built as
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
    default_src = _defaults().llm.predgen_source
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


def section_ssbd(r: Results) -> str:
    m30, ap = r("ssbd_multi30k_qwen1.5b"), r("ssbd_asr_partials_qwen1.5b")
    dflt = _defaults().caption

    def label(key: str) -> str:
        if key == "ar":
            return "AR re-translation"
        mm = re.fullmatch(r"ssbd_beta([\d.]+)(?:_(display_only_)?mask(\d+))?", key)
        beta, disp, k = mm.groups()
        s = f"SSBD β = {beta}"
        if k:
            s += f" + {'display-only ' if disp else ''}mask-{k}"
        is_def = (float(beta) == dflt.beta and k is not None and int(k) == dflt.mask_k
                  and bool(disp) == dflt.display_only_mask)
        return bold(s + " (the default)", True) if is_def else s

    def rows(d: dict, refs: bool) -> list[list[str]]:
        out = []
        for key, c in d["configs"].items():
            row = [label(key)]
            if refs:
                row += [num(c["bleu"]), num(c["chrf"])]
            row += [num(c["ne"], 3), "—" if key == "ar" else signed(100 * c["ne_change_vs_ar"], 0) + " %",
                    num(c["acceptance_A_over_D"]), num(c["accepted_share_A_over_O"]), num(c["output_tokens_per_s"]),
                    num(c["speedup_vs_ar"]), num(c["sequential_passes_speedup_vs_ar"])]
            out.append(row)
        return out

    head = ["configuration", "NE", "NE vs AR", "A/D", "A/O", "tokens/s", "wall speed-up", "sequential passes ÷"]
    beta_def = f"{dflt.beta:g}"
    b0 = ap["configs"]["ssbd_beta0.0"]
    b2 = ap["configs"][f"ssbd_beta{dflt.beta:.1f}"]
    wall = [c["speedup_vs_ar"] for k, c in m30["configs"].items() if k != "ar" and c["speedup_vs_ar"] > 1]
    bleus = [c["bleu"] for c in m30["configs"].values()]
    return f"""## SSBD re-translation (`specvoice bench ssbd`)

Each streaming update re-translates the grown source with the previous translation as the draft (one forward pass,
Eq. 5 bias β toward the draft, KV cache cropped at the first divergence, greedy AR from there), against AR
re-translation from scratch. NE = normalised erasure (flicker, lower is steadier); A/D = accepted ÷ drafted tokens;
A/O = accepted ÷ output tokens; "sequential passes ÷" = AR's LLM forward passes ÷ the configuration's: the speed-up
where a verification pass costs about one decode step (a GPU). mask-k trims the last k draft tokens before
verification; display-only mask-k keeps them in the draft and only hides them on screen until the source is final.

{produced_by("ssbd_multi30k_qwen1.5b.json", "ssbd_asr_partials_qwen1.5b.json")}

Multi30k (`{m30["input"]}`, {m30["items"]} sentences):

{table(["configuration", "BLEU", "chrF", *head[1:]], rows(m30, True))}

On real streaming-ASR partials ({ap["items"]} spoken MT-Bench questions, `{ap["input"]}`, no references):

{table(head, rows(ap, False))}

On this CPU a batched pass is cheaper per token than decoding but not free, so the wall-clock gain
({span(wall, unit="×")} on Multi30k) is smaller than the pass count suggests. On the ASR partials the unbiased draft is
{times(b0["speedup_vs_ar"])} wall (the ASR's self-corrections make it a poor one), β = {beta_def}
{times(b2["speedup_vs_ar"])}. The embedded Qwen-Coder is a weak translator (BLEU {span(bleus)}); any better GGUF plugs
in with `--model llm_target=PATH`."""


CAPTION_HEAD = ["answers instead of translating (all / of the questions and commands)", "ASR misheard",
                "chrF vs references", "chrF − AR", "displayed NE", "NE ÷ AR", "guard re-translations",
                "final transcript → caption p50 / p90", "EOS → final caption p50 / p90", "first caption p50"]


def _caption_cells(d: dict, ar: dict | None) -> list[str]:
    return [f"{d['answers_instead_of_translating']} / {d['answers_among_questions_commands']}", str(d["asr_misheard"]),
            f"{num(d['chrf'])} ({d['chrf_files']})", "—" if ar is None else signed(d["chrf"] - ar["chrf"], 2),
            num(d["ne_mean"], 3), "1.00" if ar is None else num(d["ne_mean"] / ar["ne_mean"]),
            str(d["guard_triggers"]),
            f"{num(d['final_transcript_to_caption_s_p50'])} / {num(d['final_transcript_to_caption_s_p90'])} s",
            f"{num(d['eos_to_final_caption_s_p50'])} / {num(d['eos_to_final_caption_s_p90'])} s",
            sec(d["first_caption_s_p50"])]


def _caption_kinds(files: Iterable[str]) -> dict[str, int]:
    """How many caption-corpus files are Multi30k sentences (m30k), MT-Bench questions (mt) and voice questions (va)."""
    kinds = {"mt": 0, "va": 0, "m30k": 0}
    for f in files:
        kind = next((k for k in ("m30k", "mt", "va") if Path(f).name.startswith(k)), None)
        if kind:
            kinds[kind] += 1
    return kinds


def section_caption(r: Results) -> str:
    c = r("caption")
    chosen = c["mask_k_choice"]["chosen"]
    dflt = _defaults().caption
    methods = c["methods"]
    show = [("ar", "AR re-translation"), ("ssbd", f"SSBD β {c['beta']}"),
            (f"ssbd_display_mask{chosen}", f"SSBD β {c['beta']} + display-only mask-{chosen}"),
            ("ssbd_partial", f"SSBD β {c['beta']}, partials translate the partial transcript"),
            (f"ssbd_partial_display_mask{chosen}",
             f"SSBD β {c['beta']}, partials translate the partial transcript + display-only mask-{chosen}")]

    def is_default(key: str) -> bool:
        return key == f"ssbd_display_mask{dflt.mask_k}" and dflt.method == "ssbd" and dflt.source == "hypothesis"

    rows = []
    for split in ("test", "val", None):
        src = c["splits"][split] if split else methods
        n = src["ar"]["files"]
        for key, label in show:
            d = src[key]
            lab = label + (" (default)" if is_default(key) else "")
            rows.append([f"{split or 'all'} ({n})", bold(lab, is_default(key)),
                         *_caption_cells(d, None if key == "ar" else src["ar"])])
    mask_rows = []
    for k in sorted(c["mask_k_choice"]["val_ne_vs_ar"], key=int):
        cells = [bold(k, int(k) == chosen)]
        for prefix in ("ssbd", "ssbd_partial"):
            key = f"{prefix}_display_mask{k}"
            cells += [num(c["splits"]["val"][key]["ne_vs_ar"]), num(c["splits"]["test"][key]["ne_vs_ar"]),
                      num(methods[key]["ne_vs_ar"]), sec(methods[key]["first_caption_s_p50"])]
        mask_rows.append(cells)
    ratios = ", ".join(num(c["mask_k_choice"]["val_ne_vs_ar"][k]) for k in sorted(c["mask_k_choice"]["val_ne_vs_ar"],
                                                                                  key=int))
    ks = sorted(c["mask_k_choice"]["val_ne_vs_ar"], key=int)
    val_n, test_n = c["splits"]["val"]["ar"]["files"], c["splits"]["test"]["ar"]["files"]
    val_refs, test_refs = c["splits"]["val"]["ar"]["chrf_files"], c["splits"]["test"]["ar"]["chrf_files"]
    kinds = _caption_kinds(c["files"])
    a, s = methods["ar"], methods["ssbd"]
    sd = methods[f"ssbd_display_mask{chosen}"]
    sp = methods["ssbd_partial"]
    test_sd = c["splits"]["test"][f"ssbd_display_mask{chosen}"]
    val_sd = c["splits"]["val"][f"ssbd_display_mask{chosen}"]
    mis = ", ".join(stem(f) for f in a["asr_misheard_files"])
    answered = sorted({stem(f) for k in ("ar", "ssbd", "ssbd_partial") for f in methods[k]["answer_files"]})
    answered_txt = ("No caption answered" if not answered else "Captions that answered: " + ", ".join(answered)) + (
        f"; the captions the rule flags against the spoken text ({mis}) translate what the ASR heard." if mis else ".")

    seg = r("caption_segment")
    segm = seg["methods"]
    seg_rows = []
    for key, label in (("ssbd_utterance", "whole utterance"), ("ssbd_sentence", "sentence by sentence")):
        d = segm[key]
        dm = segm[f"{key}_display_mask{seg['mask_k']}"]
        is_def = key == f"ssbd_{dflt.segment}"
        seg_rows.append([bold(label + (" (default)" if is_def else ""), is_def), f"{num(d['chrf'])} ({d['chrf_files']})",
                         f"{num(d['ne_mean'], 3)} / {num(dm['ne_mean'], 3)}", str(d["guard_triggers"]),
                         f"{num(d['final_transcript_to_caption_s_p50'])} / {num(d['final_transcript_to_caption_s_p90'])} s",
                         f"{num(d['eos_to_final_caption_s_p50'])} / {num(d['eos_to_final_caption_s_p90'])} s"])
    seg_kinds = _caption_kinds(seg["files"])

    q = r("caption_qwen0.5b")
    qm = q["methods"]
    q_rows = []
    for key, label in [("ar", "AR re-translation"), ("ssbd", f"SSBD β {q['beta']}")] + [
            (f"ssbd_display_mask{k}", f"SSBD β {q['beta']} + display-only mask-{k}") for k in (3, chosen)]:
        d = qm[key]
        q_rows.append(["0.5B", label, *_caption_cells(d, None if key == "ar" else qm["ar"])])
    return f"""## Live captions on speech (`specvoice bench caption`)

English files in real time through the caption loop (VAD → streaming ASR → translator behind the fidelity guard →
display-only mask-k), into {c["target_language"]}. Corpus (`bench/data/caption`, sources in its SOURCES.md):
{kinds["mt"]} spoken MT-Bench questions, {kinds["va"]} spoken voice-assistant requests and {kinds["m30k"]} Multi30k
test sentences with their German references (Piper at several rates and espeak-ng voices); every third file of
each kind is the validation split ({val_n} files, {val_refs} references), the rest the test split ({test_n} files,
{test_refs} references). Both methods in one run, one after the other over all files, with nothing else at normal
priority. Display-only mask-k changes only what is shown, so the mask-k rows are the SSBD run shown with each k
(recomputed from the tokens of the updates it showed: NE and first caption exact for that run; translations and
latencies are the run's). mask-k is chosen on the validation split ({c["mask_k_choice"]["rule"]}: k = {chosen};
NE ÷ AR's for k = {ks[0]}…{ks[-1]}: {ratios}). Latencies are from the final transcript and from the end of speech.
"ASR misheard" counts captions the answer rule flags against the spoken text that translate a misrecognised
transcript faithfully (the transcript is far from the spoken text and shows no reply sign): they are the ASR's
errors, not answers, and are listed apart.

{produced_by("caption.json", "caption_segment.json", "caption_qwen0.5b.json")}

Qwen2.5-Coder-1.5B (the default caption model):

{table(["split", "method", *CAPTION_HEAD], rows)}

Every display-only mask-k of the same run (NE ÷ AR's on the validation / test / all files, and the first caption's
median over all files), partials translating the hypothesis of the final transcript and the partial transcript:

{table(["k", "hypothesis: NE ÷ AR val", "test", "all", "first caption p50", "partial transcript: NE ÷ AR val",
        "test", "all", "first caption p50"], mask_rows)}

With {a["chrf_files"]} references SSBD's final captions score as AR's (chrF {num(s["chrf"])} vs {num(a["chrf"])};
{signed(c["splits"]["test"]["ssbd"]["chrf_minus_ar"], 2)} on the test split,
{signed(c["splits"]["val"]["ssbd"]["chrf_minus_ar"], 2)} on the validation split): β = {c["beta"]} keeps some of the
draft where greedy AR would differ, and that costs no measurable quality (without the bias SSBD's output is AR's by
construction, tests/test_exactness_torch.py). Display-only mask-{chosen} (chosen on the validation split:
{num(val_sd["ne_vs_ar"])} there) brings the displayed flicker to {num(sd["ne_vs_ar"])} of AR's on all files —
{num(test_sd["ne_vs_ar"])} on test — at a first caption of {sec(sd["first_caption_s_p50"])} (p50;
{sec(s["first_caption_s_p50"])} unmasked). Partial captions translate the ASR's hypothesis of the final transcript
(`caption.source = hypothesis`, the default: the latest decode of the whole utterance, the final transcript if
speech ended now, where the partial transcript keeps words committed from shorter audio), so the draft the final
verifies already has the corrections the final decode makes: in the same run the final caption comes
{num(s["final_transcript_to_caption_s_p50"])} / {sec(s["final_transcript_to_caption_s_p90"])} after the final
transcript (p50 / p90) against {num(sp["final_transcript_to_caption_s_p50"])} /
{sec(sp["final_transcript_to_caption_s_p90"])} when partials translate the partial transcript, at the same chrF and
NE. SSBD's final caption comes sooner than AR's ({num(s["final_transcript_to_caption_s_p50"])} vs
{sec(a["final_transcript_to_caption_s_p50"])} at the median, {num(s["final_transcript_to_caption_s_p90"])} vs
{sec(a["final_transcript_to_caption_s_p90"])} at p90) but is not free at p90 on this CPU: the slowest finals are long
inputs (`runs` in the JSON) whose final transcript differs from the last translated partial, so the draft must be
verified under the changed prompt (one batched pass over prompt tail ⊕ draft: cheaper per token than decoding, but
not free on a CPU) and the rest decoded after the final transcript. Two things keep the final from waiting on stale
work: a partial verification cancelled by the final transcript stops inside its forward pass (llama.cpp's abort
callback, `engine.llm.llama_cpp_lm.LlamaCppLM.eval_cancellable`), and a partial cut short while decoding keeps the
rest of its draft after what it decoded (`engine.translate.biased_retranslation.next_draft`), so the final verifies a
whole translation instead of re-decoding it. {answered_txt} "Answer" = looks like a reply (not in the target language, or a reply
sign) and misses the content of the *spoken* text (a low chrF against the Multi30k reference; for the questions and
commands, which have no human translation offline, fewer than half of hand-written German content keywords).

### Sentence by sentence vs the whole utterance

`caption.segment = sentence` translates a finished sentence once and keeps it while the ASR's text of it stays, and
re-translates only the last one. SSBD β {seg["beta"]}, one run over {len(seg["files"])} of the files
({seg_kinds["va"]} requests, {seg_kinds["mt"]} MT-Bench questions, {seg_kinds["m30k"]} Multi30k sentences); NE shown
whole / with display-only mask-{seg["mask_k"]}:

{table(["SSBD translates", "chrF (references)", f"displayed NE (mask-0 / mask-{seg['mask_k']})",
        "guard re-translations", "final transcript → caption p50 / p90", "EOS → final caption p50 / p90"], seg_rows)}

Steadier, but on this CPU not sooner at p90 (most slow finals are one long sentence), so the whole utterance is
the default.

### The 0.5B as the caption model

The same {len(q["files"])} files, AR and SSBD in one run (`caption_qwen0.5b.json`; the SSBD rows with mask-k
recomputed as above; its own validation rule would choose mask-{q["mask_k_choice"]["chosen"]}):

{table(["LLM", "method", *CAPTION_HEAD], q_rows)}

The 1.5B stays the caption model: the 0.5B scores {num(a["chrf"] - qm["ar"]["chrf"], 1)} chrF points less with AR
({num(qm["ssbd"]["chrf"])} with SSBD; the 1.5B {num(s["chrf"])}), answered
{qm["ssbd"]["answers_instead_of_translating"]}–{qm["ar"]["answers_instead_of_translating"]} of the
{len(q["files"])} inputs and its guard re-translated {qm["ar"]["guard_triggers"]}–{qm["ssbd"]["guard_triggers"]}.

{_caption_prompt(r)}"""


CAPTION_PROMPT_LABEL = {"no_pairs": "no worked pairs", "source_pairs": "worked pairs in the source language"}


def _caption_prompt(r: Results) -> str:
    """Captions into English with and without worked pairs (``caption_prompt.json``)."""
    d = r("caption_prompt")
    cfg, methods = d["config"], d["methods"]
    dflt = "source_pairs"
    rows = []
    for key, m in methods.items():
        for lang, x in m["per_language"].items():
            rows.append([lang, bold(CAPTION_PROMPT_LABEL.get(key, key) + (" (default)" if key == dflt else ""),
                                    key == dflt),
                         f"{x['quoted']} / {x['sentences']}", f"{x['echo']} / {x['sentences']}",
                         f"{x['untranslated']} / {x['sentences']}", num(x["chrf"], 1), sec(x["compute_s"], 1)])
    return f"""### Captions into English: worked pairs in the source language

Under `asr.language = auto` speech in another language is captioned from the language it was identified in, and the
target may be English. The prompt's worked pairs (a question, a request and a greeting) are written in the source
language with their translation; without them the model is shown no English output and often wraps its translation
in quote marks or repeats the instruction. One run, both prompts one after the other on the same
{cfg["sentences"]} written sentences of the language-ID corpus (`{cfg["input"]}`: German from Multi30k test 2016 with
its English reference, French and Spanish without one), {cfg["model"]}, {cfg["decoding"]}, the `{cfg["frame"]}`
frame. "Quote-wrapped": the caption opens with a quote mark the sentence does not; "echo": it repeats the prompt's
instruction; "untranslated": more of the source language's stop words and letters than English.

{produced_by("caption_prompt.json")}

{table(["source", "prompt", "quote-wrapped", "echo", "untranslated", "chrF (references)", "compute"], rows)}"""


ASR_STREAM_DESC = {
    "ar": "the default",
    "ar_final_beam5": "beam search for the decode that gives the final text, partials greedy",
    "ar_piece20": "a trimmed utterance's final from one decode of the whole utterance, long speech in pieces",
    "ar_trim_committed": "trimmed words from LocalAgreement-2's commits",
    "ar_no_overlap": "a trimmed buffer starts at its cut",
    "ssd": "CTC self-speculative decoding, the paper's high-accuracy thresholds",
    "ssd_lossless": "lossless SSD: each decode is greedy AR's",
    "specasr": "SpecASR: tiny.en drafts, base verifies",
    "ar_padded": "the padded 30 s window, the baseline",
    "ar_final_greedy": "greedy decoding for the final text too",
    "ar_final_retry": "the final text's decode redone on the padded 30 s window when it fails the guards",
    "ar_context_repeat_off": "a final that opens with the acoustic context's words written again keeps them",
    "ar_no_yield": "streaming updates wait only in a silence their audio ends in, and one running when the silence "
                   "begins goes on",
}


def _setting(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return f"{v:g}" if isinstance(v, float) else str(v)


def asr_stream_label(cfg: dict, key: str) -> str:
    """"`key` (what it is; the settings it changes)", the settings read from the run's ``method_overrides``."""
    over = cfg["method_overrides"].get(key, {}).get("asr", {})
    changes = [f"`asr.{k} = {_setting(v)}`" for k, v in over.items() if not (k == "method" and v == "ar")]
    desc = ASR_STREAM_DESC.get(key, "")
    inner = "; ".join(x for x in [desc, ", ".join(changes)] if x)
    return f"`{key}`" + (f" ({inner})" if inner else "")


def _file(d: dict, name: str) -> dict:
    for p in d["per_file"]:
        if stem(p["file"]) == name:
            return p
    raise KeyError(name)


def section_asr_stream(r: Results) -> str:
    d = r("asr_stream")
    pm = d["per_method"]
    cfg = d["config"]
    s = cfg["settings"]["ar"]["asr"]
    over = cfg["method_overrides"]
    speech = [p for p in d["per_file"] if not p["nonspeech"]]
    nonspeech = [p for p in d["per_file"] if p["nonspeech"]]
    dia = [p["duration_s"] for p in speech if stem(p["file"]).startswith("dialogue")]
    mono = _file(d, "monologue_70s")
    words = sum(p["methods"]["ar"]["vs_beam5"]["ref_words"] for p in speech if "vs_beam5" in p["methods"]["ar"])
    rows = []
    for key in cfg["methods"]:
        m = pm[key]
        lab = asr_stream_label(cfg, key)
        fl = m["final_latency_s"]
        rows.append([bold(lab, key == "ar"), num(m["compute_ratio"], 3), num(m["encoder_s"], 1), num(m["decoder_s"], 1),
                     num(1000 * m["decoder_s"] / m["updates"], 0),
                     f"{num(fl['p50'])} / {num(fl['p90'])} / {num(fl['max'])}", num(m["first_partial_s"]["p50"]),
                     num(m["ne"], 3), num(m["wer_vs_beam5"], 3), signed(m["wer_delta_vs_offline_greedy"], 3),
                     num(m["wer_vs_ref"], 3), str(m["loops"]), str(m["nonspeech_words"]), str(m["fallbacks"]),
                     times(m.get("decoder_speedup_vs_ar")), times(m.get("compute_speedup_vs_ar"))])
    looping = [k for k in cfg["methods"] if pm[k]["loops"]]
    talkers = [f"`{k}` ({pm[k]['nonspeech_words']})" for k in cfg["methods"] if pm[k]["nonspeech_words"]]
    loops_txt = ("No method looped" if not looping else "Loops: " + ", ".join(f"`{k}`" for k in looping)) + (
        "; no method wrote words on the non-speech files." if not talkers else
        "; words on the non-speech files: none but " + ", ".join(talkers) + ".")
    ar, no, tc, pc, b5 = pm["ar"], pm["ar_no_overlap"], pm["ar_trim_committed"], pm["ar_piece20"], pm["ar_final_beam5"]
    pad, ssd, ssl, spec = pm["ar_padded"], pm["ssd"], pm["ssd_lossless"], pm["specasr"]

    def fw(name: str, method: str, key: str = "wer_vs_beam5") -> str:
        return num(_file(d, name)["methods"][method][key], 3)

    rep = r("asr_stream_repeat")
    rp = rep["per_method"]
    ho = r("asr_stream_heldout")
    hp = ho["per_method"]
    hrows = []
    for key in ho["config"]["methods"]:
        m = hp[key]
        fl = m["final_latency_s"]
        hrows.append([bold(asr_stream_label(ho["config"], key), key == "ar"),
                      num(m["compute_ratio"], 3), f"{num(fl['p50'])} / {num(fl['p90'])} / {num(fl['max'])}",
                      num(m["ne"], 3), num(m["wer_vs_beam5"], 3), signed(m["wer_delta_vs_offline_greedy"], 3),
                      num(m["wer_vs_ref"], 3), signed(m["wer_delta_vs_offline_greedy_ref"], 3), str(m["loops"]),
                      str(m["nonspeech_words"])])
    ho_speech = [p for p in ho["per_file"] if not p["nonspeech"]]
    ho_dia = [p["duration_s"] for p in ho_speech if stem(p["file"]).startswith("dialogue")]
    ho_mono = _file(ho, "monologue_70s")
    ho_d2 = _file(ho, "dialogue_2")
    hslow = sorted((u["final_latency_s"], u["t_end"] - u["t_start"]) for p in ho["per_file"]
                   for u in p["methods"]["ar"].get("utterance_detail", []) if u.get("final_latency_s") is not None)
    top = [x for x in hslow if x[0] >= hp["ar"]["final_latency_s"]["p90"]]
    return f"""## Streaming ASR (`specvoice bench asr-stream`)

Every method plays each file in real time through the `transcribe` path (VAD → computation-aware LocalAgreement-2
updates), one run, same files, a {cfg["machine"]["cpu_count"]}-core CPU, Whisper base int8
(faster-whisper {cfg["versions"]["faster_whisper"]}, CTranslate2 {cfg["versions"]["ctranslate2"]}); every method
runs with the default's settings except what its row changes (the JSON's `config.settings` has each method's full
`[asr]` table). Corpus (`bench/data/stream_speech`, made by `python -m bench.make_speech`): {len(dia)} synthetic
dialogues of {span(dia, 0)} s (Piper and espeak-ng voices, varied pauses, one with noise, one with reverb), a
{num(mono["duration_s"], 0)} s monologue without a long pause, spoken questions, clipped speech, jfk.flac, and
{num(sum(p["duration_s"] for p in nonspeech), 0)} s of non-speech (silence, white/pink noise, tones, hum + reversed
babble); {num(ar["audio_s"], 0)} s in all. WER is against the offline faster-whisper beam-5 transcript of the same file
("− offline greedy" = the stream's WER minus offline greedy's, {num(ar["offline_greedy_wer_vs_beam5"], 3)}); "WER
vs text" against the synthesised text (offline greedy {num(ar["offline_greedy_wer_vs_ref"], 3)}, beam 5
{num(ar["offline_beam5_wer_vs_ref"], 3)}). A loop = a word n-gram repeated over and over, or a gzip ratio above the
decode guard's (`asr.guard_compression_ratio`). "Padded re-decodes" = decodes the guards redid on the padded 30 s
window.

{produced_by("asr_stream.json")}

{table(["method", "compute ÷ audio", "encoder s", "decoder s", "decoder ms / update",
        "end of speech → final p50 / p90 / max (s)", "first partial p50 (s)", "NE", "WER vs beam 5",
        "− offline greedy", "WER vs text", "loops", "words on non-speech", "padded re-decodes", "decoder ×AR",
        "compute ×AR"], rows)}

What the default is (`config.settings.ar` in the JSON): the encoder sees the buffered audio plus
`asr.encoder_margin_s` ({num(s["encoder_margin_s"], 0)} s) of silence, never less than `asr.encoder_min_s`
({num(s["encoder_min_s"], 0)} s); each utterance is decoded from `asr.pre_roll_s` ({num(s["pre_roll_s"], 1)} s)
before the VAD's start, re-decoded once at least `asr.min_chunk_s` ({num(s["min_chunk_s"], 1)} s) of new audio has
arrived; every prompt and draft is encoded into the tokens Whisper itself generates (the packaged
Whisper-base `tokenizer.json` lacks the BPE merge "Ġ t", so " the", " to", " than" would be split into two tokens
each; `engine/asr/tokenizer.py` restores the merge on load); a long utterance's buffer is trimmed at a committed
sentence end once it passes `asr.buffer_trim_s` ({num(s["buffer_trim_s"], 0)} s in this run), so the decode at
the end of a long utterance is short, and keeps up to `asr.trim_overlap_s` ({num(s["trim_overlap_s"], 0)} s) of
audio before the cut, from a word start: the decodes after a trim hear the words before their first new word, which
are dropped from them by time and n-gram; the words that leave the buffer at a trim take the text of the decode at
whose sentence end it was cut (it heard them and the audio after them), and the partials show that text from then
on (`asr.trim_latest`); a word leaves by its middle, not its end; and a run-on utterance ends at the quietest word
boundary of its last seconds, its rest starting the next utterance.

Against the default in the same run:

* No overlap after a trim (`ar_no_overlap`): WER against beam 5 {num(no["wer_vs_beam5"], 3)} vs
  {num(ar["wer_vs_beam5"], 3)} (monologue {fw("monologue_70s", "ar_no_overlap")} vs {fw("monologue_70s", "ar")},
  dialogue_3 {fw("dialogue_3", "ar_no_overlap")} vs {fw("dialogue_3", "ar")}), against the text
  {num(no["wer_vs_ref"], 3)} vs {num(ar["wer_vs_ref"], 3)}, compute {num(no["compute_ratio"], 3)} vs
  {num(ar["compute_ratio"], 3)}, p90 {num(no["final_latency_s"]["p90"])} vs {sec(ar["final_latency_s"]["p90"])},
  NE {num(no["ne"])} vs {num(ar["ne"])}.
* Trimmed words from LocalAgreement-2's commits (`ar_trim_committed`): WER against beam 5
  {num(tc["wer_vs_beam5"], 3)} vs {num(ar["wer_vs_beam5"], 3)} (dialogue_2 {fw("dialogue_2", "ar_trim_committed")}
  vs {fw("dialogue_2", "ar")}, the monologue {fw("monologue_70s", "ar_trim_committed")} vs
  {fw("monologue_70s", "ar")}), against the text {num(tc["wer_vs_ref"], 3)} vs {num(ar["wer_vs_ref"], 3)},
  flicker NE {num(tc["ne"])} vs {num(ar["ne"])} (the default's partials rewrite words at a trim), p90
  {num(tc["final_latency_s"]["p90"])} vs {sec(ar["final_latency_s"]["p90"])}, compute {num(tc["compute_ratio"], 3)}
  vs {num(ar["compute_ratio"], 3)}: the default follows the offline transcript more closely at the cost of flicker;
  `asr.trim_latest = false` gives the steadier text.
* Whole-utterance finals (`ar_piece20`: each trimmed utterance's final from one decode of all of it, exactly verified
  against the streaming text, long speech in pieces): WER against beam 5 {num(pc["wer_vs_beam5"], 3)}, against the
  text {num(pc["wer_vs_ref"], 3)}, p90 {sec(pc["final_latency_s"]["p90"])}, compute {num(pc["compute_ratio"], 3)}, NE
  {num(pc["ne"])}: no closer and later, so `asr.final_piece_s` stays {_setting(s["final_piece_s"])}.
* Beam 5 for the decode that gives the final text (`ar_final_beam5`, partials greedy): against beam 5
  {num(b5["wer_vs_beam5"], 3)} ({signed(b5["wer_delta_vs_offline_greedy"], 3)}), against the text
  {num(b5["wer_vs_ref"], 3)} (dialogue_2, the noisy one, {fw("dialogue_2", "ar", "wer_vs_ref")} →
  {fw("dialogue_2", "ar_final_beam5", "wer_vs_ref")} against the text), for {times(b5["compute_ratio"] /
  ar["compute_ratio"])} the compute ({num(b5["compute_ratio"], 3)}) and a later final (p90
  {num(ar["final_latency_s"]["p90"])} → {sec(b5["final_latency_s"]["p90"])}, max {num(ar["final_latency_s"]["max"])} →
  {sec(b5["final_latency_s"]["max"])}). `ar` decoded its finals with beam width
  {_setting(s["final_beam_size"])} in this run; on conversational speech, noisy and
  telephone-band, beam search on the final decode alone brings the final close to offline greedy against the text,
  so `asr.final_beam_size` defaults to {_setting(_defaults().asr.final_beam_size)} (`bench conversation`
  below: `ar_final_greedy`; plain AR only: SSD and SpecASR verify against greedy decoding).
* Lossless SSD gives `ar`'s text (WER {num(ssl["wer_vs_beam5"], 3)} / {num(ssl["wer_vs_ref"], 3)}) with a
  decoder {times(ssl["decoder_speedup_vs_ar"])} as fast on this CPU; SSD with the paper's τ_SLM loses
  {num(ssd["wer_vs_beam5"] - ar["wer_vs_beam5"], 3)} against beam 5 ({num(ssd["wer_vs_beam5"], 3)}) at
  {times(ssd["decoder_speedup_vs_ar"])}; SpecASR's tree verification runs its decoder at
  {times(spec["decoder_speedup_vs_ar"])} and its final p90 is {sec(spec["final_latency_s"]["p90"], 1)}.
* Against the padded 30 s window (`ar_padded`, the baseline): {times(ar["vs_ar_padded"]["compute_speedup"], 1)} less
  compute ({num(ar["compute_ratio"], 3)} vs {num(pad["compute_ratio"], 3)}), p90
  {times(ar["vs_ar_padded"]["p90_latency_ratio"])} ({num(ar["final_latency_s"]["p90"])} vs
  {sec(pad["final_latency_s"]["p90"])}), WER {signed(ar["wer_vs_beam5"] - pad["wer_vs_beam5"], 3)} against beam 5
  and {signed(ar["wer_vs_ref"] - pad["wer_vs_ref"], 3)} against the text.

The default is {signed(ar["wer_delta_vs_offline_greedy"], 4)} from offline greedy against beam 5
({num(ar["wer_vs_beam5"], 4)} vs {num(ar["offline_greedy_wer_vs_beam5"], 4)} on this {words}-word corpus) and
{signed(ar["wer_delta_vs_offline_greedy_ref"], 3)} against the synthesised text. {loops_txt} Most of the WER gap against beam 5 is the noisy espeak dialogue
(dialogue_2: {fw("dialogue_2", "ar")} for the default, {fw("dialogue_2", "ar_padded")} for the padded window,
{num(_file(d, "dialogue_2")["offline"]["greedy_wer_vs_beam5"], 3)} for offline greedy), where every per-utterance
decode — whatever its window — loses the long context the offline 30 s decode has, and where the offline
transcripts share that context's errors. Where the default differs from beam 5 elsewhere it is often right (the
per-file texts are in the JSON).

Now that the encoder is cheap the decoder is most of the compute ({num(ar["decoder_s"], 1)} of the default's
{num(ar["asr_compute_s"], 0)} s, the encoder {num(ar["encoder_s"], 1)} s), and on this CPU verification does not pay:
SSD's align pass plus the continuation cost more than the greedy steps they replace, and the paper's τ_SLM accepts
draft tokens greedy would not; τ_SLM = {_setting(over["ssd_lossless"]["asr"]["tau_slm"])} gives AR's output for each decode (its WER differs from AR's only
through the update timing). SpecASR (a torch fp32 tiny.en draft plus base verification per round) cannot keep up
live: its finals arrive {sec(spec["final_latency_s"]["p50"])} (median) to {sec(spec["final_latency_s"]["p90"])}
(p90) after the end of speech. On a GPU the decoder steps are nearly free to verify in batch, which is where SSD's
accepted prefixes and SpecASR's drafts would turn into speed.

### A second run of the same configuration

The default and the no-overlap row again, in a separate real-time run on another machine of the same kind
(`asr_stream_repeat.json`):

{produced_by("asr_stream_repeat.json")}

{table(["method", "compute ÷ audio", "end of speech → final p50 / p90 / max (s)", "NE", "WER vs beam 5",
        "− offline greedy", "WER vs text"],
       [[f"`{k}`", num(m["compute_ratio"], 3),
         f"{num(m['final_latency_s']['p50'])} / {num(m['final_latency_s']['p90'])} / {num(m['final_latency_s']['max'])}",
         num(m["ne"], 3), num(m["wer_vs_beam5"], 4), signed(m["wer_delta_vs_offline_greedy"], 4),
         num(m["wer_vs_ref"], 3)] for k, m in rp.items()])}

Between runs of the same configuration a file's WER moves by a word or two and a p90 latency by a few tenths of a
second (the update times differ, and Whisper's greedy text on hard audio flips with them), so a target of a few
hundredths of WER against beam 5 is met on this corpus with little margin.

### A corpus no setting was chosen on

`bench/data/stream_speech_heldout`, made by `python -m bench.make_speech` with another seed: {len(ho_dia)} dialogues of
{span(ho_dia, 0)} s and a {num(ho_mono["duration_s"], 1)} s monologue with other sentences, voices, rates, pauses and
noise, the same questions and clipped sentence, other non-speech; {num(hp["ar"]["audio_s"], 0)} s; one real-time run
on the machine of the repeat run:

{produced_by("asr_stream_heldout.json")}

{table(["method", "compute ÷ audio", "end of speech → final p50 / p90 / max (s)", "NE", "WER vs beam 5",
        "− offline greedy", "WER vs text", "− offline greedy (text)", "loops", "words on non-speech"], hrows)}

Offline greedy against beam 5: {num(hp["ar"]["offline_greedy_wer_vs_beam5"], 3)}; against the text: offline greedy
{num(hp["ar"]["offline_greedy_wer_vs_ref"], 3)}, beam 5 {num(hp["ar"]["offline_beam5_wer_vs_ref"], 3)}. On these
recordings the default is as close to the spoken text as offline greedy decoding
({signed(hp["ar"]["wer_delta_vs_offline_greedy_ref"], 3)}) and closer than the padded window
({num(hp["ar"]["wer_vs_ref"], 3)} vs {num(hp["ar_padded"]["wer_vs_ref"], 3)}), with compute
{times(hp["ar"]["vs_ar_padded"]["compute_ratio"])} and p90 {times(hp["ar"]["vs_ar_padded"]["p90_latency_ratio"])} the
padded window's; against the offline beam-5 transcript it is {signed(hp["ar"]["wer_delta_vs_offline_greedy"], 3)}.
Most of that gap is dialogue_2 (noisy espeak voices: {num(ho_d2["methods"]["ar"]["wer_vs_beam5"], 3)} against beam 5,
offline greedy {num(ho_d2["offline"]["greedy_wer_vs_beam5"], 3)}), where the streaming text is as often right as the
offline one. The offline transcripts decode the same 30 s windows and share their errors; a per-utterance decode
starts elsewhere, and Whisper-base's text on hard audio changes with where its window starts (next table). The
slowest finals ({span([x[0] for x in top], unit=" s")}) end utterances of {span([x[1] for x in top], 0, " s")}."""


def section_asr_offline(r: Results) -> str:
    d = r("asr_offline_shift")
    cfg = d["config"]
    shifts = cfg["shifts_s"]
    rows = []
    names = {"bench/data/stream_speech": "first corpus", "bench/data/stream_speech_heldout": "second corpus"}
    for corpus, label in names.items():
        pc = d["per_corpus"][corpus]
        for i, dec in enumerate(("greedy", "beam5")):
            x = pc[dec]
            sh = [x["shifted"][f"{s:g}"] for s in shifts]
            refs = [v["wer_vs_ref"] for v in sh]
            rows.append([f"{label} ({pc['ref_words']} words)" if i == 0 else "", "greedy" if dec == "greedy" else "beam 5",
                         num(x["wer_vs_beam5"], 3), *[num(v["wer_vs_beam5"], 3) for v in sh],
                         f"{num(x['wer_vs_ref'], 3)} / {span(refs, 3)}"])
    other = {k: v for k, v in d["per_corpus"].items() if k not in names}
    other_txt = "; ".join(
        f"`{k}`: greedy {span([v['greedy']['wer_vs_beam5'], *[s['wer_vs_beam5'] for s in v['greedy']['shifted'].values()]], 3)}"
        " against beam 5, unshifted and under every shift" for k, v in other.items())
    h = d["per_corpus"]["bench/data/stream_speech_heldout"]
    f = d["per_corpus"]["bench/data/stream_speech"]
    first = f"{shifts[0]:g}"
    return f"""### How far Whisper's own transcript moves with its windows (`specvoice bench asr-offline`)

The offline transcripts again, after {", ".join(f"{s:g}" for s in shifts)} s of digital silence put before each file
(every 30 s window starts that much earlier; nothing heard changes), scored against the unshifted beam-5 transcript
(faster-whisper {cfg["versions"]["faster_whisper"]}, {cfg["compute_type"]}; one run):

{produced_by("asr_offline_shift.json")}

{table(["corpus", "decoder", "WER vs beam 5: unshifted", *[f"+{s:g} s" for s in shifts],
        "WER vs text: unshifted / shifted range"], rows)}

({other_txt}.) {first} s of silence moves offline greedy by
{signed(h["greedy"]["shifted"][first]["delta_vs_unshifted_vs_beam5"], 3)} against beam 5 on the second corpus, and
beam 5 ends {span([h["beam5"]["shifted_wer_vs_beam5_min"], h["beam5"]["shifted_wer_vs_beam5_max"],
                   f["beam5"]["shifted_wer_vs_beam5_min"], f["beam5"]["shifted_wer_vs_beam5_max"]], 3)} from its own
unshifted transcript: a WER target of a few hundredths against beam 5 is of the size of Whisper-base's own change when
its windows start elsewhere, which every per-utterance decode does."""


def section_asr_decoding(r: Results) -> str:
    d = r("asr")
    s = d["summary"]
    labels = {
        "ar": ("AR greedy (torch decoder)", "the baseline"),
        "ar_ct2": ("AR greedy, CTranslate2 int8 decoder", "faster-whisper's decoder (reference)"),
        "ssd_acc": ("SSD, high-accuracy preset", None),
        "ssd_acc_rejoin": ("SSD, high-accuracy preset + re-join", None),
        "ssd_rtfx": ("SSD, high-RTFx preset", "= the CTC head's own WER"),
        "ssd_rtfx_rejoin": ("SSD, high-RTFx preset + re-join", None),
        "adaptive": ("SpecASR + adaptive draft", None),
        "recycling": ("SpecASR + adaptive draft + recycling", None),
        "tree": ("SpecASR + recycling + sparse tree", None),
        "ctc_draft": ("lossless verification with the CTC draft", None),
    }
    for key in s:
        mm = re.fullmatch(r"sd(\d+)(?:x(\d+))?", key)
        if mm:
            labels[key] = (f"SpecASR plain SD ({mm.group(1)},{mm.group(2) or 1})", None)
    rows = []
    for key, m in s.items():
        label, note = labels.get(key, (f"`{key}`", None))
        notes = []
        if note:
            notes.append(note)
        if "mean_accepted_prefix" in m and m["pct_C"] < 100:
            notes.append(f"accepted prefix {num(m['mean_accepted_prefix'])} of {num(m['mean_draft_len'], 0)} draft tokens")
        if m.get("rejoins"):
            notes.append(f"{m['rejoins']} re-joins, {m['rejoined_tokens']} tokens")
        if "accepted_per_round" in m:
            notes.append(f"{num(m['accepted_per_round'])} accepted per round")
        if m.get("merges"):
            notes.append(f"{m['merges']} merges")
        if key in ("adaptive", "recycling", "tree"):
            notes.append(f"{times(m['speedup_decode_vs_best_plain_sd'])} vs the best plain SD")
        if key == "tree":
            notes.append(f"{num(m['predicted_per_round'])} nodes per round")
        rows.append([label, num(m["wer"]), num(m["decode_s"], 1), num(m["speedup_decode_vs_ar"]),
                     num(m["speedup_total_vs_ar"]), str(m["forward_passes"]), pct(m["pct_C"] / 100),
                     f"{m['identical_to_ar']}/{d['inputs']}", "; ".join(notes)])
    tii = [[labels[k][0], num(s[k]["draft_ms_per_10s"], 0), num(s[k]["draft_encoder_ms_per_10s"], 0),
            num(s[k]["draft_decoder_ms_per_10s"], 0), num(s[k]["target_ms_per_10s"], 0), num(s[k]["total_ms_per_10s"], 0)]
           for k in ("sd8", "sd16", "sd8x2", "adaptive", "recycling", "tree", "ctc_draft")]
    ctc_card = (ROOT / "assets" / "ctc_head" / "card.md").exists()
    st = r("asr_streaming")
    return f"""## ASR decoding, one window at a time (`specvoice bench asr`)

{d["inputs"]} inputs (held-out synthetic utterances, Piper + espeak-ng, text never trained on, and jfk.flac;
{num(d["audio_s"], 0)} s of audio); {d["model"]}, {d["torch_threads"]} threads, every method on the same encoder output
(the length-scaled window; {num(d["encode_s"], 1)} s of encoding for all inputs), one run. %C = share of inputs the
CTC draft finished without a decoder pass; "= AR tokens" = inputs whose tokens equal the torch AR baseline's.

{produced_by("asr.json")}

{table(["method", "WER %", "decode s", "decode speed-up vs AR", "total speed-up", "decoder passes", "%C",
        "= AR tokens", "notes"], rows)}

SpecASR per 10 s of audio (the paper's Table II), milliseconds:

{table(["method", "draft", "draft encoder", "draft decoder", "target", "total"], tii)}

Why speculation pays little here: on this CPU a verification pass is not free (a tiny.en decoder step costs close to
a base step, so SpecASR's draft costs more than the target), and the CTC draft is weak on this synthetic set
({"`assets/ctc_head/card.md`" if ctc_card else "the CTC head's card"}): no draft passed the entropy test at the
high-accuracy τ_CTC. For the live path `asr.ssd_engine = ct2` (default) verifies with CTranslate2's `align` (one int8
pass that also gives the word timestamps) and continues on its int8 decoder.

### Re-decoding a growing buffer

Re-decode every second of a growing buffer ({st["inputs"]} inputs): faster-whisper AR vs SSD on CTranslate2 vs SSD
without timestamps (`asr_streaming.json`; the padded 30 s window of that run, before length-scaled encoding):

{produced_by("asr_streaming.json")}

{table(["method", "wall s", "encode s", "decode s", "updates", "final WER %"],
       [[k, num(st[k]["wall_s"], 1), num(st[k]["encode_s"], 1), num(st[k]["decode_s"], 1), str(st[k]["updates"]),
         num(st[k]["final_wer"])] for k in ("ar", "ar_nots", "ssd")])}

SSD's decoder ran at {times(st["decode_speedup_ssd_vs_ar"])} AR's ({times(st["wall_speedup_ssd_vs_ar"])} wall); its final
text equalled AR-without-timestamps' on {st["ssd_final_equals_ar_nots"]} of {st["inputs"]} inputs."""


def section_soak(r: Results) -> str:
    d = r("soak")
    w = d["windows"]
    win = ", ".join(f"{num(x['eos_to_final_s_p50'])} / {num(x['eos_to_final_s_p90'])}" for x in w)
    peaks = " / ".join(num(x["rss_mib_max"], 0) for x in w)
    rss = [s["rss_mib"] for s in d["samples"] if s["wall_s"] >= 300]
    rss_sorted = sorted(rss)
    median = rss_sorted[len(rss_sorted) // 2]
    caught = [e for e in d["backlog_events"] if not e["caught_up"]]
    at = re.search(r"rss_mib_at_(\d+)min", next(k for k in d if k.startswith("rss_mib_at_"))).group(1)
    behind = max(e["behind_s"] for e in d["backlog_events"])
    return f"""## Long sessions (`specvoice bench soak`)

{num(d["minutes"], 0)} minutes of the streaming corpus (dialogues, monologue, questions, jfk) cycled with short
silences, at {num(d["speed"], 0)}× real time through the `transcribe` pipeline (default ASR, `{d["asr_method"]}`),
while other work shared the CPU (compute ÷ audio {num(d["asr_compute_per_audio"])} overall).

{produced_by("soak.json")}

{table(["audio fed (s)", "audio transcribed (s)", "dropped (s)", "utterances", "errors", "backlog episodes",
        "largest backlog (s)", "RSS at 5 min (MiB)", "RSS at the end (MiB)", "RSS growth after 5 min, peak (MiB)"],
       [[num(d["audio_fed_s"], 0), num(d["audio_transcribed_s"], 0), num(d["dropped_audio_s"], 1), str(d["utterances"]),
         str(len(d["errors"])), str(len(caught)), num(d["max_backlog_s"], 1), num(d["rss_mib_at_5min"], 0),
         num(d["samples"][-1]["rss_mib"], 0), num(d["rss_growth_after_5min_mib"], 0)]])}

Per {num(w[0]["audio_min"][1] - w[0]["audio_min"][0], 0)}-minute window:

{table(["audio minutes", "utterances", "end of speech → final p50 / p90 / max (s)", "compute ÷ audio",
        "longest queue (s)", "peak RSS (MiB)"],
       [[f"{num(x['audio_min'][0], 0)}–{num(x['audio_min'][1], 0)}", str(x["utterances"]),
         f"{num(x['eos_to_final_s_p50'])} / {num(x['eos_to_final_s_p90'])} / {num(x['eos_to_final_s_max'])}",
         num(x["compute_per_audio"]), num(x["queue_s_max"], 1), num(x["rss_mib_max"], 0)] for x in w])}

No audio was dropped; recognition fell behind {len(caught)} times (at most {num(behind, 1)} s behind the live
source) and caught up. End of speech → final p50 / p90 per window: {win} s — the last window's p90 is
{num(abs(d["p90_last_minus_first_window_s"]))} s {"below" if d["p90_last_minus_first_window_s"] < 0 else "above"} the
first's. RSS: {num(d["rss_mib_at_5min"], 0)} MiB at {at} min, median {num(median, 0)} MiB after it,
{num(d["samples"][-1]["rss_mib"], 0)} MiB at the end, per-window peaks {peaks} MiB — no upward trend, but transient
peaks up to {num(d["rss_growth_after_5min_mib"], 0)} MiB above the {at}-minute sample (long utterances decoded in
pieces). The pipeline returns freed heap to the OS after each utterance (`malloc_trim`)."""


DETECTORS = (("raw", "raw microphone, project VAD"), ("clean", "echo-cancelled microphone, project VAD defaults"),
             ("clean_barge", "echo-cancelled, the barge-in detector's VAD rule alone"),
             ("barge_dtd", "echo-cancelled, barge-in detector (VAD or double talk; the default)"))


def section_duplex(r: Results) -> str:
    d = r("duplex")
    e = d["echo"]
    n_echo = e["answers_echo_only"] + e["answers_interrupted"]
    rows = []
    for key, label in DETECTORS:
        f, t = e["false_barge_ins"][key], e["true_barge_in"][key]
        lat = "—" if t["latency_p50_s"] is None else (
            f"{num(t['latency_p50_s'])} / {num(t['latency_p90_s'])} / {num(t['latency_max_s'])} s")
        rows.append([bold(label, key == "barge_dtd"), f"{f['answers_with_false_barge_in']} / {n_echo}",
                     f"{t['detected']} / {t['of']}", lat])
    w = e["wer_double_talk"]
    wrows = [["the user's interruption alone", pct(w["alone"], 1)],
             ["raw microphone", pct(w["raw"], 1)],
             ["echo-cancelled, playback stopped by the VAD rule alone", pct(w["clean"], 1)],
             ["echo-cancelled, playback stopped by the barge-in detector", pct(w["clean_barge_dtd"], 1)],
             ["raw microphone, the assistant talking over all of it", pct(w["raw_overlap"], 1)],
             ["echo-cancelled, the assistant talking over all of it", pct(w["clean_overlap"], 1)],
             ["headphones (no echo, APM on)", pct(w["headphones_clean"], 1)]]
    t = d["turn"]
    dflt = _defaults()
    trows = []
    for key, c in t["configs"].items():
        vad = re.fullmatch(r"vad_only_([\d.]+)s", key)
        smart = re.fullmatch(r"vad_smart_turn_([\d.]+)s", key)
        lab = (f"VAD silence {vad.group(1)} s" if vad else
               f"VAD + Smart Turn ({smart.group(1)} s hard limit)" if smart else key)
        is_def = (dflt.duplex.end_of_turn == "vad" and key == f"vad_only_{dflt.vad.min_silence_s:g}s") or (
            dflt.duplex.end_of_turn == "smart_turn" and key.startswith("vad_smart_turn"))
        trows.append([bold(lab + (" (default)" if is_def else ""), is_def),
                      f"{pct(c['cut_off_rate'], 1)} (after a filler {pct(c['cut_off_rate_filler'])}, after a plain "
                      f"comma {pct(c['cut_off_rate_plain'])})",
                      f"{num(c['delay_p50_s'])} / {num(c['delay_p90_s'])} / {num(c['delay_mean_s'])} s",
                      str(c["turns_never_ended"])])
    s = r("duplex_seeds")
    es = s["echo_seeds"]
    srows = []
    for label, x in [(", ".join(str(k) for k in es["seeds"]) + " pooled", es["pooled"])] + [
            (str(p["seed"]), p) for p in es["per_seed"]]:
        fb, tb = x["false_barge_ins"], x["true_barge_in"]

        def lat(k):
            y = tb[k]
            return (f"{y['detected']} / {y['of']}, {num(y['latency_p50_s'])} / {num(y['latency_p90_s'])} / "
                    f"{num(y['latency_max_s'])} s")
        srows.append([label, f"{x['answers_echo_only']} / {x['answers_interrupted']}",
                      f"{fb['barge_dtd']['answers_with_false_barge_in']} ({fb['barge_dtd']['in_first_answer_of_session']})",
                      f"{fb['clean_barge']['answers_with_false_barge_in']} ({fb['clean_barge']['in_first_answer_of_session']})",
                      lat("barge_dtd"), lat("clean_barge")])
    raw_all = es["pooled"]["false_barge_ins"]["raw"]
    p90s = [p["true_barge_in"]["barge_dtd"]["latency_p90_s"] for p in es["per_seed"]]
    st = next(c for k, c in t["configs"].items() if k.startswith("vad_smart_turn"))
    bd = e["barge_dtd"]
    return f"""## Duplex: talking over the assistant (`specvoice bench duplex`)

All in audio time, so machine load does not matter. {n_echo} simulated answers ({e["answers_echo_only"]} echo-only,
{e["answers_interrupted"]} interrupted by the user) played through synthetic rooms (varied delay, reverberation and
echo gain; the JSON's `echo.sessions`) and {t["turns"]} user turns ({t["paused_turns"]} with a mid-sentence pause).
Each barge-in detector stops the playback of its own copy of the session, so its numbers are those it has in charge.

{produced_by("duplex.json", "duplex_seeds.json")}

{table(["detector", "answers with a false barge-in (echo only)", "true barge-ins detected",
        "detection delay p50 / p90 / max"], rows)}

WER of the user's interruption:

{table(["microphone", "WER"], wrows)}

End of turn:

{table(["end of turn", "mid-sentence pauses cut off", "end-of-turn delay p50 / p90 / mean", "turns never ended"],
       trows)}

Echo cancellation removes every false barge-in. The VAD alone is slow to notice an interruption for two reasons:
Silero needs a few hundred milliseconds of a word before its probability passes the threshold even on the user's
voice alone, and AEC3's suppressor, which cuts the bands the echo dominates during double talk, lowers it further.
Yet from the first chunk the cleaned audio stands far above the cleaned noise floor while the canceller removed only
a little of it (it removes much more of echo alone): that double-talk evidence (VAD probability at least
{num(bd["low_threshold"])}, at most {num(bd["max_suppression_db"], 0)} dB removed, at least
{num(bd["min_snr_db"], 0)} dB above the cleaned floor, after {num(bd["warmup_s"], 1)} s of far end) is the fast path.

A single seed holds few of the rare events, so the barge-in part also runs on more seeds of the same generator
(false barge-ins over all answers, in brackets those in a session's first answer, while AEC3 converges; the raw
microphone has a false barge-in in {raw_all["answers_with_false_barge_in"]} of
{es["pooled"]["answers_echo_only"] + es["pooled"]["answers_interrupted"]}):

{table(["seeds", "answers (echo only / interrupted)", "false barge-ins: barge-in detector", "its VAD rule alone",
        "true barge-ins, barge-in detector: detected, p50 / p90 / max", "its VAD rule alone"], srows)}

The VAD rule's false barge-ins all come while AEC3 converges, from echo leaking through it in a burst; the detector's
echo-envelope check during those first seconds of far end holds them back. The detector's p90 stays at
{span(p90s, unit=" s")} on every seed. Smart Turn cuts off fewer mid-sentence pauses at a lower median delay, but a
complete turn it misjudges waits for the hard limit (p90 {sec(st["delay_p90_s"])}), so it is opt-in
(`duplex.end_of_turn = smart_turn`)."""


GPU_TTS_BACKENDS = {"tts_eager.json": "torch eager, host-side draws",
                    "tts_graphs.json": "rounds on the device, CUDA graphs",
                    "tts_graphs_compiled.json": "rounds on the device, CUDA graphs + torch.compile"}


def _gpu_tts(r: Results, label) -> str:
    """The codec-TTS sampler on each GPU that ``bench gpu-codec-tts`` ran on (bench/results/gpu/<device>/tts_*.json)."""
    parts = []
    for dev in sorted(p for p in (r.folder / "gpu").glob("*") if p.is_dir()):
        files = [f for f in GPU_TTS_BACKENDS if (dev / f).exists()]
        if not files:
            continue
        rows, costs, first = [], [], None
        for f in files:
            g = json.loads((dev / f).read_text(encoding="utf-8"))
            first = first or g
            chosen = g["selection"]["chosen"]
            for k, v in g["results"].items():
                rows.append([GPU_TTS_BACKENDS[f] if k == "ar" else "", bold(label(k) + (" (chosen)" if k == chosen
                                                                                         else ""), k == chosen),
                             num(v["speedup_vs_target"]), num(v["tokens_per_s"], 0), num(v["acceptance_rate"]),
                             num(v["accepted_per_round"]), num(v["cer"], 1), num(v["wer"], 1)])
            if g.get("verification_cost"):
                vc = g["verification_cost"]
                costs.append(f"{GPU_TTS_BACKENDS[f]}: a target pass over 1/2/4/8 tokens costs "
                             + " / ".join(num(vc["target_ratio"][k]) for k in ("1", "2", "4", "8"))
                             + f" single-token steps ({num(vc['target_ms']['1'])} ms); a draft step "
                             f"{num(vc['draft_ratio'])} of a target step")
            if g.get("round_cost"):
                rc = g["round_cost"]
                best = rc.get(chosen) or next(iter(rc.values()))
                Ls = [L for L in sorted(best["ms"], key=int) if L != "0"]
                costs.append(f"{GPU_TTS_BACKENDS[f]}: one AR step (pass and draw) takes "
                             f"{num(rc['ar']['ms']['0'], 3)} ms; "
                             f"a whole round of {label(chosen)} with L_d = " + "/".join(Ls) + " drafts costs "
                             + " / ".join(num(best["in_ar_steps"][L]) for L in Ls) + " AR steps"
                             + (" (the AR step and the full-length round are compiled; the shorter rounds, which only "
                                "an utterance's last frames use, are not)" if "compile" in g["backend"] else ""))
        sel = first["selection"]
        parts.append(f"""#### {first["device"]} (torch {first["torch"]})

{first["sentences"]} held-out sentences of the same test split (the first {first["sentences"]} of the CPU table's),
temperature {num(first["temperature"], 1)}, the methods taking turns sentence by sentence with the same seed per
sentence; exact SD and SSD at L_d = 3; θ and L_d of the chosen PCG row picked per backend on {sel["sentences"]}
validation sentences ({sel["rule"]}). CER is Whisper-base's on the rendered audio, scored on the CPU. Every row of
each backend is from one run on one card (`bench/results/gpu/{dev.name}/`; `specvoice bench gpu-codec-tts prepare`
here, `python -m bench.gpu_codec_tts run --device cuda` with `--sampler eager`, `--sampler graphs` or
`--sampler graphs --compile` there, `specvoice bench gpu-codec-tts score` here).

{table(["backend", "sampler", "× target-only", "codes/s", "acceptance", "accepted per round", "CER %", "WER %"], rows)}

""" + "\n".join(f"* {c}." for c in costs))
    if not parts:
        return ""
    return "### On a GPU\n\n" + "\n\n".join(parts) + "\n"


def section_tts(r: Results) -> str:
    st = r("tts_stages")
    before = _asset("assets/codec_tts/stages_before.json")
    names = {"teacher": "Piper teacher", "codec_round_trip": "codec round trip",
             "lm_true_durations": "target LM free-running on the teacher's own prior and durations",
             "lm_predicted_durations": "full system"}
    srows = [[names.get(k, k), pct(before["results"][k]["cer"] / 100, 1) if k in before["results"] else "—",
              pct(v["cer"] / 100, 1), pct(v["wer"] / 100, 1)] for k, v in st["results"].items()]
    t = r("tts")
    res = t["results"]
    dflt = _defaults().tts
    tnames = {"ar": "target-only AR", "sd": "standard SD", "ssd": "SSD constant bias", "piper_teacher": "Piper teacher"}

    def label(k):
        if not k.startswith("pcg"):
            return tnames.get(k, k)
        th, _, L = k[3:].partition("L")
        return f"PCG θ {th}" + (f", L_d {L}" if L else "")

    trows = []
    for k, v in res.items():
        lab = label(k)
        is_def = (k == dflt.codec_method) or (dflt.codec_method == "pcg" and k == f"pcg{dflt.theta:g}")
        if "tokens_per_s" not in v:
            trows.append([lab, "—", "—", "—", "—", "—", "—", num(v["wer"], 1), num(v["cer"], 1)])
            continue
        trows.append([bold(lab + (" (default)" if is_def else ""), is_def), num(v["speedup_vs_target"]),
                      num(v["tokens_per_s"], 0), num(v["acceptance_rate"]), num(v["mean_accepted_length"]),
                      str(v["target_passes"]), f"{num(v['rtf_tokens'], 3)} / {num(v['rtf_with_vocoder'], 3)}",
                      num(v["wer"], 1), num(v["cer"], 1)])
    vc = t["verification_cost"]
    ks = sorted(vc["target_ms"], key=int)
    vrows = [[f"ONNX Runtime, {vc['threads']} thread", *[num(vc["target_ratio"][k]) for k in ks],
              num(vc["target_ms"]["1"]), num(vc["draft_ratio"])],
             [f"ONNX Runtime, {_key_number(vc, 'threads_')} threads", *[num(vc["threads_2"]["target_ratio"][k]) for k in ks],
              num(vc["threads_2"]["target_ms"]["1"]), num(vc["threads_2"]["draft_ratio"])],
             [f"torch eager, {vc['torch_eager']['torch_threads']} threads",
              *[num(vc["torch_eager"]["target_ratio"][k]) for k in ks], num(vc["torch_eager"]["target_ms"]["1"]),
              num(vc["torch_eager"]["draft_ratio"])]]
    mm = vc["matmul"]["gflops"]
    mk = sorted(mm["torch_mkl"], key=int)
    mrows = [[name, *[num(v[k], 1) for k in mk]] for name, v in mm.items()]
    ar = res["ar"]
    sel = t.get("selection") or {}
    chosen = res.get(sel.get("chosen", ""), {})
    spec = {k: v for k, v in res.items() if "speedup_vs_target" in v and k != "ar"}
    fastest = max(spec, key=lambda k: spec[k]["speedup_vs_target"])
    sd = res["sd"]
    pm = sd["pass_ms"]["target"][str(t["lookahead"] + 1)][1]
    dm = sd["pass_ms"]["draft"]["1"][1]
    vcd = r("voice_codec")
    vm = vcd["methods"]
    vrows2 = []
    for k, lab in (("predgen", "Piper (default)"), ("predgen_codec", "codec TTS, target-only"),
                   ("predgen_codec_pcg", f"codec TTS, PCG θ {num(dflt.theta)}")):
        v = vm[k]
        vs = "1.00 / 1.00" if k == "predgen" else f"{num(v['p50_speedup_vs_predgen'])} / {num(v['mean_speedup_vs_predgen'])}"
        vrows2.append([lab, trio(v, "eos_to_first_audio_s"), vs, sec(v["final_to_first_audio_s_p50"]), num(v["tts_rtf"], 3),
                       f"{round(v['presynth_rate'] * v['files'])} / {v['files']}"])
    return f"""## Codec TTS and PCG (`specvoice bench tts`)

The codec-token TTS (`assets/codec_tts/`, trained here on the Piper voice's own parts: its text encoder and
duration predictor condition a codec LM over k-means tokens of the voice's VITS latent, which the voice's generator
renders) with target-only AR, standard speculative sampling, SSD-style constant bias and PCG (group-level
acceptance). Intelligibility is Whisper-base's WER / CER on the synthesised audio.

### Where intelligibility is lost

Whisper-base CER stage by stage on the same {st["sentences"]} held-out sentences (`tts_stages.json`, temperature
{num(st["temperature"], 1)}); "before" = `assets/codec_tts/stages_before.json`, the previous codec TTS (log-mel
codec, Griffin-Lim, phoneme-id LM; {before["sentences"]} sentences, temperature {num(before["temperature"], 1)}):

{produced_by("tts_stages.json")}

{table(["stage", "CER before", "CER", "WER"], srows)}

### Sampling

{t["sentences"]} held-out sentences, the same seeds, the methods taking turns sentence by sentence, temperature
{num(t["temperature"], 1)}, lookahead L_d = {t["lookahead"]} unless named (`tts.json`, {t.get("device", "cpu")}).
PCG's θ and L_d for the selected row were chosen on {sel.get("sentences", "—")} validation sentences
({sel.get("rule", "—")}): {label(sel["chosen"]) if sel else "—"}. Target and draft run on ONNX Runtime
(`tts/codec_lm.py` writes their graphs from the weights: pre-transposed MatMuls, `GroupQueryAttention` over
preallocated KV buffers updated in place, one call per pass).

{produced_by("tts.json")}

{table(["sampler", "× target-only", "tokens/s", "acceptance", "accepted length", "target passes",
        "RTF (tokens / + vocoder)", "WER %", "CER %"], trows)}

Cost of one KV-cached target pass over {ks[0]}…{ks[-1]} new tokens, in single-token steps, and a draft step as a share of
a target step (`verification_cost` in the JSON):

{table(["backend", *[f"{k} token{'s' if k != '1' else ''}" for k in ks], "1 token (ms)", "draft ÷ target"], vrows)}

Matrix-multiply throughput (GFLOP/s) by rows per call:

{table(["library", *mk], mrows)}

Target-only runs at {num(ar["tokens_per_s"], 0)} tokens/s (RTF {num(ar["rtf_tokens"], 3)}, {num(ar["rtf_with_vocoder"], 3)}
with the voice's generator) at CER {num(ar["cer"], 1)} % (Piper {num(res["piper_teacher"]["cer"], 1)} %). The fastest
speculative row is {label(fastest)} at {times(spec[fastest]["speedup_vs_target"])}; the selected PCG row
{times(chosen.get("speedup_vs_target"))} at {signed(chosen["cer"] - ar["cer"], 1) if chosen else "—"} CER points,
accepting {num(chosen.get("acceptance_rate"))} of its drafts. On this CPU the 1-layer draft is not cheap next to a
4-layer target of this size (a draft step is {num(vc["draft_ratio"])} of a target step: the per-call cost and the
2048-code head dominate), and inside a run a {t["lookahead"] + 1}-token verification takes {num(pm)} ms against
{num(ar["pass_ms"]["target"]["1"][1])} ms for a target-only step, plus draft steps of {num(dm)} ms (`pass_ms`).

{_gpu_tts(r, label)}
### The codec voice in the assistant

The {len(vcd["files"])} spoken questions of the voice benchmark answered by PredGen through the whole live pipeline
(VAD → streaming ASR → PredGen → sentence-streamed TTS, pre-synthesis included), spoken by Piper and by the codec
TTS (`--set tts.engine=codec`), each file through all three in turn, one run (`voice_codec.json`):

{produced_by("voice_codec.json")}

{table(["voice", "EOS → first answer audio p50 / p90 / mean", "× Piper (p50 / mean)",
        "final transcript → first audio p50", "voice RTF (synthesis s ÷ answer audio s)",
        "pre-synthesised first piece used"], vrows2)}

The codec voice works end to end (tests/test_codec_tts.py) and costs
{sec(vm["predgen_codec"]["eos_to_first_audio_s_p50"] - vm["predgen"]["eos_to_first_audio_s_p50"])} more to the first
audio than Piper at the median: its synthesis runs at RTF {num(vm["predgen_codec"]["tts_rtf"])} on the answer
thread's share of the CPU while PredGen and the ASR run too, against {num(vm["predgen"]["tts_rtf"])} for Piper. PCG
does not make it sooner (the sampler is not faster, table above)."""


def section_remote(r: Results) -> str:
    d = r("remote_predgen_voice_asr_partials_qwen0.5b")
    lo, re_ = d["backends"]["local"], d["backends"]["remote"]
    h = re_["http"]
    rows = [
        ["answers identical to in-process (greedy)", "—", count(re_["identical_to_local_share"], re_["turns"])],
        ["audio latency, mean / median (s)", f"{num(lo['audio_latency_s_mean'], 1)} / {num(lo['audio_latency_s_median'], 1)}",
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
lowest priority while other benchmarks were loading the CPU. Latencies say more about the load than about either backend; the
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


def section_tests_slow(r: Results) -> str:
    """The slow-marked tests' run (``tests_slow.json``), when one is committed; "" otherwise."""
    if not (r.folder / "tests_slow.json").exists():
        return ""
    d = r("tests_slow")
    c = d["counts"]
    rows = [[f"`{t['id']}`", t["outcome"], num(t["seconds"], 1), t.get("reason", "")] for t in d["tests"]]
    return f"""## The slow tests (`python -m pytest -m slow`)

The end-to-end tests the default test run leaves out, run as one job ({d["started"]}, {num(d["seconds"], 0)} s in
all): {c["passed"]} passed, {c["failed"]} failed, {c["error"]} errors, {c["skipped"]} skipped (exit status
{d["exit_status"]}).

{produced_by("tests_slow.json")}

{table(["test", "outcome", "seconds", "reason"], rows)}"""


def _language_file(folder: Path) -> str:
    """The result that holds asr.language=auto: "language" (the language job's) where it exists, else the older
    runs' "conversation", which measured it with the English corpora."""
    return "language" if (folder / "language.json").exists() else "conversation"


def _compute_split(x: dict) -> str:
    """Compute ÷ audio: "total (live …, second pass …)", i.e. the updates and finals and the second pass's
    decodes, or the total alone for a run that did not split it."""
    if x.get("live_compute_ratio") is None:
        return num(x.get("compute_ratio"), 3)
    return (f"{num(x['compute_ratio'], 3)} (live {num(x['live_compute_ratio'], 3)}, second pass "
            f"{num(x['second_pass_compute_ratio'], 3)})")


def _conv_row(label: str, x: dict) -> list[str]:
    lat = x["final_latency_s"]
    return [label, _compute_split(x), f"{sec(lat['p50'])} / {sec(lat['p90'])}",
            f"{num(x['wer_vs_beam5'], 3)} ({signed(x['wer_delta_vs_offline_greedy'], 3)})",
            num(x.get("wer_vs_beam5_revised"), 3),
            num(x["offline_greedy_wer_vs_beam5"], 3),
            f"{num(x['wer_vs_ref'], 3)} ({signed(x['wer_delta_vs_offline_greedy_ref'], 3)})",
            num(x.get("wer_vs_ref_revised"), 3),
            f"{num(x['offline_greedy_wer_vs_ref'], 3)} / {num(x['offline_beam5_wer_vs_ref'], 3)}"]


CONV_HEAD = ["", "compute ÷ audio", "final p50 / p90", "final WER vs beam 5 (− offline greedy)",
             "revised vs beam 5", "offline greedy vs beam 5", "final WER vs text (− offline greedy)",
             "revised vs text", "offline greedy / beam 5 vs text"]


def section_conversation(r: Results) -> str:
    """Conversational and real speech (``conversation.json``, ``specvoice bench conversation``)."""
    if not (r.folder / "conversation.json").exists():
        return ""
    d = r("conversation")
    cfg = d["config"]
    parts = []
    for corpus, title in (("conversation", "Generated conversation (bench/data/conversation)"),
                          ("real", "Real recordings (bench/data/real_speech)")):
        c = d.get(corpus)
        if not c:
            continue
        rows = []
        for m, x in c["per_method"].items():
            rows.append(_conv_row(f"**all** ({m}, {num(x['audio_s'], 0)} s)", x))
        for cond, per in c.get("per_condition", {}).items():
            for m, x in per.items():
                rows.append(_conv_row(f"{cond} ({m})", x))
        for f in c["per_file"]:
            for m, x in f["methods"].items():
                if "error" in x:
                    rows.append([f"`{f['file']}` ({m})", "failed: " + x["error"]] + [""] * 7)
                    continue
                y = dict(x, offline_greedy_wer_vs_beam5=f["offline"].get("greedy_wer_vs_beam5"),
                         offline_greedy_wer_vs_ref=f["offline"].get("greedy_wer_vs_ref"),
                         offline_beam5_wer_vs_ref=f["offline"].get("beam5_wer_vs_ref"))
                if y["wer_vs_ref"] is None or y["offline_greedy_wer_vs_ref"] is None:
                    y["wer_delta_vs_offline_greedy_ref"] = None
                several = len(f["methods"]) > 1
                rows.append(_conv_row(f"`{f['file']}`" + (f" ({m})" if several else ""), y))
        parts.append(f"#### {title}\n\n{table(CONV_HEAD, rows)}")
    # the language job (language.json) measures asr.language=auto apart; older runs measured it in this one
    separate = _language_file(r.folder) == "language"
    lang = r("language") if separate else d
    if separate:
        lcfg = lang["config"]
        when = (f"From {lcfg['measured_in']}" if lcfg.get("measured_in") else f"Measured apart ({lcfg['started']})")
        parts.append(f"""#### Languages other than English (`asr.language=auto`)

{when}; played {"in real time" if lcfg.get("realtime") else "as fast as it decodes"}.

{produced_by("language.json")}""")
    ml = lang.get("multilingual")
    if ml:
        mrows = []
        for m, x in ml["per_method"].items():
            for k, v in x["parts"].items():
                mrows.append([m, k, num(x.get("language_accuracy"), 2), num(v.get("stream_wer_vs_beam5"), 3),
                              num(v.get("stream_wer_vs_beam5_revised"), 3),
                              num(v.get("offline_greedy_wer_vs_beam5"), 3)])
        parts.append(f"""#### English → German read text (`{ml["file"]}`)

Language of each utterance as identified (`asr.language=auto`) and WER against offline beam 5 decoded in each part's
language:

{table(["method", "part", "utterances' language right", "final WER vs beam 5", "revised WER vs beam 5",
        "offline greedy vs beam 5"], mrows)}""")
    li = lang.get("langid")
    if li:
        off = li.get("offline", {})
        if li.get("supported") and li.get("summary"):
            sm = li["summary"]
            conv = (li.get("conversation") or {}).get("summary") or {}

            def acc2(x):  # accuracy over utterances of 2 s or more (older results: every utterance)
                return (x.get("utterances_2s") or {}).get("accuracy", x.get("utterance_accuracy", x.get("accuracy")))

            offh = li.get("offline_head") or {}
            lrows = [[k, str(v["files"]), str(v["utterances"]), num(acc2(v), 3),
                      num((conv.get("per_language") or {}).get(k, {}).get("accuracy"), 3),
                      num(off.get("per_language", {}).get(k), 3),
                      num(offh.get("per_language", {}).get(k), 3) if offh else "–"]
                     for k, v in sm["per_language"].items()]
            lrows.append(["**all**", str(len(li["files"])), str(sm["utterances"]), num(acc2(sm), 3),
                          num(acc2(conv), 3) if conv else "–", num(off.get("accuracy"), 3),
                          num(offh.get("accuracy"), 3) if offh else "–"])
            named = li.get("languages_named") or {}
            if named.get("summary"):
                nconv = (named.get("conversation") or {}).get("summary") or {}
                lrows.append([f"**all**, `asr.languages={named['asr.languages']}`", str(len(li["files"])),
                              str(named["summary"]["utterances"]), num(acc2(named["summary"]), 3),
                              num(acc2(nconv), 3) if nconv else "–", "–", "–"])
            last = li.get("last_window") or {}
            if last.get("summary"):
                lconv = (last.get("conversation") or {}).get("summary") or {}
                lrows.append(["**all**, `asr.language_pool=false` (each decode's own window)", str(len(li["files"])),
                              str(last["summary"]["utterances"]), num(acc2(last["summary"]), 3),
                              num(acc2(lconv), 3) if lconv else "–", "–", "–"])
            lid = table(["language", "files", "utterances", "identified right: each clip alone",
                         "identified right: speakers in one stream", "offline Whisper (per file)",
                         "offline Whisper + language-ID head (per file)"], lrows)
            if conv:
                lid += f"\n\nOne stream: {conv.get('clips', '')} clips, {li['conversation'].get('how', '')}."
            if last.get("summary"):
                lid += ("\n\nThe default rows give each decode its utterance's identification so far (its windows "
                        "pooled, `asr.language_pool`); the `asr.language_pool=false` row, in the same run, gives each "
                        "decode its own window's alone.")
        offl = off.get("how", "") + (f"; with the head: {li['offline_head']['how']}" if li.get("offline_head") else "")
        cap = li.get("captions") or {}
        if cap.get("supported"):
            crow = [[k, str(v["files"]), num(v["chrf"], 1), v["reference"]] for k, v in cap["per_language"].items()]
            apart = f", run apart on {cap['started'][:10]} with the same settings" if cap.get("started") else ""
            captxt = f"Captions into {cap['target']} (chrF against the references{apart}):\n\n" + table(
                ["source language", "utterances", "chrF", "reference"], crow)
        else:
            captxt = f"Captions into English: not measured ({cap.get('reason', 'not run')})."
        parts.append(f"""#### Language identification (espeak-ng French, German, Spanish, ≥ 2 s each)

{lid}

Offline: {offl}.

{captxt}""")
    dw = d.get("done_when", {})
    dwrows = [[k, signed(v.get("wer_vs_beam5_delta"), 3), signed(v.get("wer_vs_ref_delta"), 3),
               signed(v.get("revised_wer_vs_beam5_delta"), 3), signed(v.get("revised_wer_vs_ref_delta"), 3),
               sec(v.get("final_latency_p90_s")), _compute_split(v)]
              for k, v in dw.items() if isinstance(v, dict) and "wer_vs_beam5_delta" in v]
    mode = "in real time" if cfg.get("realtime") else "as fast as it decodes (latencies not meaningful)"
    methods = ", ".join(asr_stream_label(cfg, m) for m in cfg.get("methods", []) if m != "default")
    methods = f" Beside the default: {methods}." if methods else ""
    speed = _conversation_speed(d)
    body = "\n\n".join(parts)
    return f"""### Conversation and real speech (`specvoice bench conversation`)

The streaming transcript of disfluent, multi-voice speech (hesitation pauses mid-sentence, fillers, restarts,
backchannels, overlaps; clean, reverberant, babble and telephone-band versions of the same dialogues) and of real
recordings, against the text and against offline Whisper (greedy at temperature 0 and beam 5, in the same run);
fillers are removed from both sides before scoring. *Final* is the text of each utterance when its end of speech
is confirmed; *revised* is the text after the second pass (`asr.revise_mode`: `offline` re-decodes the stream in
consecutive 30 s windows from Whisper's seek position, as offline Whisper moves through a recording, once each
window's audio has been heard and at the end of the stream; `chains` re-decodes consecutive utterances together once a
pause completes them). Played {mode}; faster-whisper {cfg["versions"]["faster_whisper"]} on
{cfg["machine"]["cpu_count"]} cores.{methods}{speed}

{produced_by("conversation.json")}

{body}

Against the targets (final ≤ offline greedy + 0.02, revised ≤ + 0.01, against beam 5 and the text; final p90 ≤ 1 s;
compute ≤ 0.5× audio):

{table(["run", "final − greedy (beam 5)", "final − greedy (text)", "revised − greedy (beam 5)",
        "revised − greedy (text)", "final p90", "compute ÷ audio"], dwrows)}"""


def _english_share(per_file: list[dict], method: str) -> tuple[int, int]:
    """(utterances identified as English, utterances with a language) of ``method`` over ``per_file`` rows."""
    langs = [lang for f in per_file for lang in (f["methods"].get(method, {}).get("languages") or []) if lang]
    return sum(lang == "en" for lang in langs), len(langs)


def section_language_english(r: Results) -> str:
    """What ``asr.language = auto`` costs English speech (``language_english.json``: the conversation job's English
    corpora, the default beside ``ar_language_auto`` in one run)."""
    if not (r.folder / "language_english.json").exists():
        return ""
    d = r("language_english")
    cfg = d["config"]
    rows = []
    for corpus, title in (("conversation", "generated conversation"), ("real", "real recordings")):
        c = d.get(corpus)
        if not c:
            continue
        for m, x in c["per_method"].items():
            en, n = _english_share(c["per_file"], m)
            rows.append(_conv_row(f"{title} ({m}, `asr.language={cfg['settings'][m]['asr']['language']}`)", x)
                        + [f"{en} / {n}" if n else "–"])
    mode = "in real time" if cfg.get("realtime") else "as fast as it decodes (latencies not meaningful)"
    return f"""### English under `asr.language=auto` (`specvoice bench conversation`)

The English corpora of the conversation benchmark (the generated conversation and the English real recordings),
transcribed with the language fixed (`asr.language=en`, the default) and with each utterance's language identified
(`asr.language=auto`), side by side in one run, played {mode} (started {cfg["started"]}) on
{cfg["machine"]["cpu_count"]} cores ({cfg["machine"]["cpu_model"]}).{_conversation_speed(d)} Under `auto` the previous
utterance's audio is not kept as acoustic context (`asr.context_gap_s`): each utterance's language is identified on
its own audio. The last column counts the utterances identified as English.

{produced_by("language_english.json")}

{table(CONV_HEAD + ["utterances identified as English"], rows)}"""


def _conversation_speed(d: dict) -> str:
    """" The machine's speed in this run: …" from the default's decodes of the generated conversation (encoder
    seconds per second of window, decoder seconds per token), so that latencies of runs on a shared machine can be
    compared; "" when the run has none."""
    tot = {"encode_s": 0.0, "window_s": 0.0, "decode_s": 0.0, "tokens": 0}
    for f in (d.get("conversation") or {}).get("per_file", []):
        bt = f["methods"].get("default", {}).get("backend_totals") or {}
        for k in tot:
            tot[k] += bt.get(k) or 0
    if not tot["window_s"] or not tot["tokens"]:
        return ""
    return (f" The machine's speed in this run (the default's decodes of the generated conversation): the encoder "
            f"took {tot['encode_s'] / tot['window_s'] * 1000:.1f} ms per second of window, the decoder "
            f"{tot['decode_s'] / tot['tokens'] * 1000:.1f} ms per token; latency and compute scale with them.")


def section_causal_final(r: Results) -> str:
    """What a live final loses by not hearing the future (``conversation_causal.json``, ``specvoice bench
    causal-final``)."""
    if not (r.folder / "conversation_causal.json").exists():
        return ""
    d = r("conversation_causal")
    cfg = d["config"]
    rows = []
    for g, per in d["per_group"].items():
        for k, s in per.items():
            rows.append([f"**{g}**" if g == "all" else g, k,
                         f"{num(s['wer_vs_beam5'], 3)} ({signed(s['wer_delta_vs_offline_greedy'], 3)})",
                         f"{num(s['wer_vs_ref'], 3)} ({signed(s['wer_delta_vs_offline_greedy_ref'], 3)})"])
    meth = "\n".join(f"* `{k}`: {v}" for k, v in d["methods"].items())
    return f"""### What a live final loses by not hearing the future (`specvoice bench causal-final`)

A live final is decoded at the end of speech; offline Whisper hears each word with the audio after it. At every end
of speech of the `conversation.json` run (started {cfg["source_started"]}), offline Whisper (beam
{cfg["beam_size"]}, word timestamps) decodes all the audio heard so far (the last ≤ {num(cfg["window_s"], 0)} s),
plus a look-ahead, and keeps the words between the previous end of speech and this one: no compute or latency limit,
the whole past as context, only the future withheld. Deltas are over offline greedy of the same run (the
conversation target for a final: ≤ + 0.02).

{produced_by("conversation_causal.json")}

{meth}

{table(["group", "transcript", "WER vs beam 5 (− offline greedy)", "WER vs text (− offline greedy)"], rows)}"""


def _flat(d: Any, prefix: str = "", depth: int = 0) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    if isinstance(d, dict) and depth < 3:
        for k, v in d.items():
            out += _flat(v, f"{prefix}.{k}" if prefix else str(k), depth + 1)
    elif isinstance(d, (int, float, str, bool)) or d is None:
        out.append((prefix, d))
    return out


def section_vad_gate(r: Results) -> str:
    """The VAD's near-talker gate swept on development conversations (``vad_gate.json``, ``specvoice bench
    vad-gate``)."""
    if not (r.folder / "vad_gate.json").exists():
        return ""
    d = r("vad_gate")
    rows = []
    for v in d["sweep"]:
        x = v["summary"]
        name = "off" if not v["near_snr_db"] else f"{num(v['near_snr_db'], 1)} dB"
        if v["near_snr_db"] == d["config_near_snr_db"]:
            name = f"**{name} (default)**"
        rows.append([name, x["utterances"], num(x["longest_utterance_s"], 1), num(x["speech_coverage_min"], 3),
                     num(x["speech_lost_s"], 2), x["files_losing_speech"], num(x["babble_only_s"], 1),
                     num(x["babble_only_excess_s"], 1), num(x["quiet_speech_lost_s"], 2)])
    x0 = d["sweep"][0]["summary"]
    seeds = ", ".join(str(s) for s in d["data"]["seeds"])
    return f"""## VAD near-talker gate (development conversations)

{produced_by("vad_gate.json")}

Silero hears background talkers as speech, so in babble a user's turn would not end until the transcriber's longest
utterance. `vad.near_snr_db` gates it (audio/vad.py): while the background is itself speech, a chunk is the user's
speech only when its level stands that many dB above the background's. The sweep runs the VAD alone (no ASR) over the
babble and clean versions of {x0["files"]} development dialogues (`bench.make_conversation`, seeds {seeds}: not the
held-out test set), {x0["utterances_quiet"]} utterances in quiet. "Lost" is near-talker speech inside a quiet
utterance that no babble-file utterance covers; "babble-only" is time inside utterances where nobody near speaks
(its excess over the same time in quiet). Rule: {d["rule"]}; chosen {num(d["chosen_near_snr_db"], 1)} dB (the
default is {num(d["config_near_snr_db"], 1)} dB).

{table(["near_snr_db", "utterances", "longest (s)", "min coverage", "lost (s)", "files losing speech",
        "babble-only (s)", "excess over quiet (s)", "quiet speech lost with the gate (s)"], rows)}"""


def section_other(r: Results, name: str) -> str:
    """A result file no section describes yet: its command and its scalar fields."""
    d = r(name[:-len(".json")])
    try:
        made = produced_by(name)
    except KeyError:
        made = f"* `bench/results/{name}` (no job in bench/all.py regenerates it)"
    rows = [[f"`{k}`", num(v, 3) if isinstance(v, float) else f"`{v}`" if isinstance(v, str) else str(v)]
            for k, v in _flat(d) if not isinstance(v, str) or len(v) < 80][:60]
    return f"""## Other results: `{name}`

No section of bench/report.py describes this file yet; its scalar fields as recorded:

{made}

{table(["field", "value"], rows)}"""


SECTIONS: tuple[Callable[[Results], str], ...] = (
    section_latency_report, section_voice, section_voice_source, section_predgen, section_ssbd, section_caption,
    section_asr_stream, section_asr_offline, section_asr_decoding, section_soak, section_duplex, section_tts,
    section_remote, section_tests_slow, section_conversation, section_language_english, section_causal_final,
    section_vad_gate,
)


def render_benchmarks(results: Results) -> str:
    """The whole of docs/benchmarks.md: one section per benchmark, then a generic one for each result file no section
    reads (tests/test_docs.py fails while there is one)."""
    body = [b for b in (s(results) for s in SECTIONS) if b]
    body += [section_other(results, n) for n in results.available() if n not in results.used]
    mc = results("asr_stream")["config"]["machine"]
    machine = f"{mc['cpu_count']}-core {mc['processor'].replace('_', '-')} CPU"
    toc = "\n".join(f"* [{_title(b)}](#{_anchor(_title(b))})" for b in body if b.startswith("## "))
    head = f"""# Benchmarks

<!-- Generated by `python -m bench.report` from bench/results/*.json: edit bench/report.py, not this file. -->

Every table below is generated from the JSON a benchmark wrote (`bench/results/`); `python -m bench.report`
regenerates this page and the README's results table, and `python -m bench.report --check` (run by
tests/test_docs.py) fails when they differ from the committed JSON. Each section names its files and the command
that rewrites them; `specvoice bench all` runs every one of them (`specvoice bench all --list` prints the jobs and
their estimated durations). Each benchmark runs the method and its baseline side by side on the same input, on a
{machine} without a GPU unless a section says otherwise. Losses are kept in the tables: a row that is slower
or worse than its baseline is a measured result too. The design each benchmark measures is in
[architecture.md](architecture.md); the papers are in [references.md](references.md).

{toc}
"""
    return reflow(head + "\n" + "\n\n".join(body)) + "\n"


def _title(block: str) -> str:
    return block.splitlines()[0][3:].strip()


def _anchor(title: str) -> str:
    """GitHub's heading anchor: lower case, punctuation removed, spaces to hyphens."""
    a = title.lower()
    a = re.sub(r"[^\w\- ]", "", a)
    return a.replace(" ", "-")


def render_readme_block(results: Results) -> str:
    """The README's results table (between the markers, markers included)."""
    v = results("voice")["methods"]
    p, c = results("assist_predgen")["answers"][0], results("assist_cascade")["answers"][0]
    s = results("asr_stream")["per_method"]
    cap = results("caption")
    capm = cap["methods"]
    k = cap["mask_k_choice"]["chosen"]
    d = results("duplex")["echo"]
    n_echo = d["answers_echo_only"] + d["answers_interrupted"]
    vf = len(results("voice")["files"])
    rows = [
        ["talk → spoken answer: end of speech → first answer audio, median of "
         f"{vf} spoken questions", f"cascade: {sec(v['cascade']['eos_to_first_audio_s_p50'])}",
         f"PredGen: {bold(sec(v['predgen']['eos_to_first_audio_s_p50']))}", "voice.json"],
        ["the same, on the embedded question", f"cascade: {sec(c['eos_to_first_audio_s'])}",
         f"PredGen: {bold(sec(p['eos_to_first_audio_s']))}", "assist_cascade.json, assist_predgen.json"],
        ["streaming ASR: compute ÷ audio", f"30 s window: {num(s['ar_padded']['compute_ratio'], 3)}",
         f"length-scaled: {bold(num(s['ar']['compute_ratio'], 3))}", "asr_stream.json"],
        ["streaming ASR: end of speech → final transcript, p90",
         f"30 s window: {sec(s['ar_padded']['final_latency_s']['p90'])}",
         f"length-scaled: {bold(sec(s['ar']['final_latency_s']['p90']))}", "asr_stream.json"],
        ["streaming ASR: WER against the spoken text", f"offline Whisper greedy: {num(s['ar']['offline_greedy_wer_vs_ref'], 3)}",
         f"streaming: {num(s['ar']['wer_vs_ref'], 3)}", "asr_stream.json"],
        ["live captions: displayed flicker (normalised erasure)", f"AR re-translation: {num(capm['ar']['ne_mean'], 3)}",
         f"SSBD + display-only mask-{k}: {bold(num(capm[f'ssbd_display_mask{k}']['ne_mean'], 3))}", "caption.json"],
        ["live captions: final transcript → caption, median",
         f"AR re-translation: {sec(capm['ar']['final_transcript_to_caption_s_p50'])}",
         f"SSBD: {bold(sec(capm['ssbd']['final_transcript_to_caption_s_p50']))}", "caption.json"],
        ["live captions: chrF against references", f"AR re-translation: {num(capm['ar']['chrf'])}",
         f"SSBD: {num(capm['ssbd']['chrf'])}", "caption.json"],
        ["speaker on: answers stopped by their own echo",
         f"raw microphone: {d['false_barge_ins']['raw']['answers_with_false_barge_in']} / {n_echo}",
         f"echo-cancelled: {bold(str(d['false_barge_ins']['barge_dtd']['answers_with_false_barge_in']) + ' / ' + str(n_echo))}",
         "duplex.json"],
    ]
    if (results.folder / "conversation.json").exists():
        cv = results("conversation")["conversation"]["per_method"]["default"]
        rows += [
            ["conversation (12 generated dialogues, clean/reverb/babble/telephone): WER against offline beam 5",
             f"offline Whisper greedy: {num(cv['offline_greedy_wer_vs_beam5'], 3)}",
             f"streaming final: {num(cv['wer_vs_beam5'], 3)}; after the second pass: "
             f"{num(cv.get('wer_vs_beam5_revised'), 3)}", "conversation.json"],
            ["conversation: end of speech → final transcript, p90 (compute ÷ audio)", "—",
             f"{sec(cv['final_latency_s']['p90'])} ({num(cv['compute_ratio'], 2)}"
             + (f": live {num(cv['live_compute_ratio'], 2)}, second pass {num(cv['second_pass_compute_ratio'], 2)}"
                if cv.get("live_compute_ratio") is not None else "") + ")", "conversation.json"],
        ]
        lang_file = _language_file(results.folder)
        conv_all = results(lang_file)
        dl = conv_all.get("done_when", {}).get("langid") or {}
        if "last_window_utterance_2s_accuracy" in dl:
            def two(prefix: str) -> str:  # accuracy over utterances ≥ 2 s: each clip alone / the clips in one stream
                return (f"{num(dl[f'{prefix}utterance_2s_accuracy'], 3)} / "
                        f"{num(dl.get(f'{prefix}conversation_utterance_2s_accuracy'), 3)}")

            rows.append([f"language ID (`asr.language=auto`), "
                         f"{conv_all['langid']['summary']['utterances_2s']['utterances']} espeak-ng "
                         "French/German/Spanish utterances ≥ 2 s: identified right, each alone / speakers in one "
                         "stream", f"each decode's own window: {two('last_window_')}",
                         f"the utterance's windows pooled: {two('')}", f"{lang_file}.json"])
    if (results.folder / "language_english.json").exists():
        le = results("language_english")["conversation"]
        fixed, auto = le["per_method"]["default"], le["per_method"]["ar_language_auto"]
        en, n = _english_share(le["per_file"], "ar_language_auto")
        rows.append(["the generated conversation under `asr.language=auto`: final WER against the text, final p90 "
                     "(utterances identified as English)",
                     f"`asr.language=en`: {num(fixed['wer_vs_ref'], 3)}, {sec(fixed['final_latency_s']['p90'])}",
                     f"`auto`: {num(auto['wer_vs_ref'], 3)}, {sec(auto['final_latency_s']['p90'])} ({en} / {n})",
                     "language_english.json"])
    if (results.folder / "tts.json").exists():
        tr = results("tts")
        tm = tr["results"]
        chosen = (tr.get("selection") or {}).get("chosen")
        pc = tm.get(chosen) if chosen else None
        rows += [
            [f"codec TTS (`tts.engine=codec`): Whisper-base CER, {tr['sentences']} held-out sentences",
             f"Piper: {num(tm['piper_teacher']['cer'], 1)} %", f"codec LM: {num(tm['ar']['cer'], 1)} %", "tts.json"],
        ]
        if pc is not None:
            rows.append([f"codec TTS: codes/s, PCG ({chosen}, chosen on validation) vs target-only",
                         f"target-only: {num(tm['ar']['tokens_per_s'], 0)}/s",
                         f"PCG: {num(pc['speedup_vs_target'], 2)}× (CER {num(pc['cer'], 1)} %)", "tts.json"])
    for dev in sorted(p for p in (results.folder / "gpu").glob("*") if p.is_dir()):
        for f, backend in GPU_TTS_BACKENDS.items():
            if f != "tts_graphs.json" or not (dev / f).exists():
                continue
            g = json.loads((dev / f).read_text(encoding="utf-8"))
            ch = g["selection"]["chosen"]
            pc, ar = g["results"][ch], g["results"]["ar"]
            rows.append([f"codec TTS on an {g['device']} ({backend}): codes/s, PCG ({ch}, chosen on validation) "
                         "vs target-only", f"target-only: {num(ar['tokens_per_s'], 0)}/s (CER {num(ar['cer'], 1)} %)",
                         f"PCG: {num(pc['speedup_vs_target'], 2)}× (CER {num(pc['cer'], 1)} %)",
                         f"gpu/{dev.name}/{f}"])
    rows = [[a, b, c_, f"`bench/results/{f}`" if "," not in f else ", ".join(f"`bench/results/{x.strip()}`"
                                                                              for x in f.split(","))]
            for a, b, c_, f in rows]
    cores = results("asr_stream")["config"]["machine"]["cpu_count"]
    return "\n".join([BEGIN, table([f"measured on a {cores}-core CPU (no GPU) unless a row names one", "baseline",
                                    "specvoice (default)", "from"], rows), END])


def update_readme(text: str, block: str) -> str:
    """``text`` with the marked block replaced. Raises ValueError when the markers are missing or out of order."""
    i, j = text.find(BEGIN), text.find(END)
    if i < 0 or j < i:
        raise ValueError(f"README.md lacks the {BEGIN} … {END} markers")
    return text[:i] + block + text[j + len(END):]


def main(argv: list[str] | None = None) -> int:
    """Write (or with ``--check`` compare) docs/benchmarks.md and the README block. Returns 0, or 1 when ``--check``
    finds a difference."""
    ap = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a generated file differs")
    ap.add_argument("--results", default=str(RESULTS), help="folder of the result JSONs (default: bench/results)")
    a = ap.parse_args(argv)
    res = Results(a.results)
    doc = render_benchmarks(res)
    readme = update_readme(README.read_text(encoding="utf-8"), render_readme_block(res))
    stale = []
    for path, text in ((DOC, doc), (README, readme)):
        old = path.read_text(encoding="utf-8") if path.exists() else None
        if old != text:
            stale.append(path)
            if not a.check:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
    if a.check and stale:
        for p in stale:
            print(f"{p.relative_to(ROOT)} differs from what `python -m bench.report` writes", file=sys.stderr)
        return 1
    for p in stale:
        print(f"wrote {p.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
