"""Voice-to-voice benchmark: spoken questions played in real time through the whole live pipeline (VAD → streaming
ASR → answer stage → TTS), each answer method on the same files in one run.

The pipeline is the one ``specvoice assist`` runs: the session engine (:class:`engine.session.Session`, which builds
the transcriber, :func:`engine.runtime.build_assistant` and :class:`engine.answer.assistant.Conversation`), with no
loudspeaker and the configuration's thread policy: the ASR runs at normal priority, the answer thread at nice +10 with ``llm.predgen_speculation_threads`` LLM
threads while the user speaks and all threads once the final transcript is in. Methods:

* ``cascade``: the answer starts at the final transcript (plain greedy AR, then sentence-by-sentence TTS);
* ``cascade_prefill``: no speculation, but each partial transcript's prompt is prefilled while the user speaks so
  the KV cache follows the committed text (PredGen machinery with 0 speculated tokens per update);
* ``predgen`` (greedy verifier, lossless), ``predgen_top_k``: PredGen (predgen.txt Algorithm 1) with pre-synthesis
  of the first sentence;
* ``predgen_partial``: ``predgen`` speculating on the partial transcript as shown instead of the ASR's hypothesis of
  the final transcript (``llm.predgen_source``);
* ``predgen_codec`` / ``predgen_codec_pcg``: ``predgen`` spoken by the codec-token TTS (``tts.engine = codec``,
  target-only / PCG sampling) instead of Piper — the same pipeline, sentence streaming and pre-synthesis included.

Per file and method: end of speech (the last utterance's ``SpeechEnded.wall``: when the audio holding its last
speech sample was available) → final transcript, → first answer token, → first answer audio ready (the first
``AnswerAudio`` event; the player would start it then), NFETFS (LLM forward passes from the final transcript to the
first sentence), whether the pre-synthesised audio was used, accepted-prefix length (tokens), and whether the answer
equals the cascade's (compared where both runs got the same final transcript). Summary: p50/p90 per method, the
NFETFS = 1 rate, the voice's RTF (synthesis seconds per second of answer audio), and latency ratios against both
cascades and ``predgen``.

Run: ``specvoice bench voice [FILES or folders] [--methods ...] --out bench/results/voice.json``
(default input: bench/data/voice_questions — ``python -m bench.make_speech --questions 12 --out bench/data`` —
and tests/data/jfk.flac).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import threading
import time
from pathlib import Path

import numpy as np

from bench.inputs import audio_files
from bench.stats import pct, rnd as _r
from engine.session_report import asr_method_label

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_INPUTS = [HERE / "data" / "voice_questions", ROOT / "tests" / "data" / "jfk.flac"]
METHODS = {  # name → overrides of the [llm] section (every method answers with PredGen's system prompt, A.3);
    # a "tts" entry overrides the [tts] section
    "cascade": {"answer_method": "cascade", "system_prompt": None},
    "cascade_prefill": {"answer_method": "predgen", "predgen_verifier": "greedy", "predgen_tokens_per_update": 0},
    "predgen": {"answer_method": "predgen", "predgen_verifier": "greedy"},
    # PredGen answering the partial transcript as shown instead of the ASR's hypothesis of the final transcript
    "predgen_partial": {"answer_method": "predgen", "predgen_verifier": "greedy", "predgen_source": "partial"},
    "predgen_top_k": {"answer_method": "predgen", "predgen_verifier": "top_k"},
    "predgen_t1": {"answer_method": "predgen", "predgen_verifier": "greedy", "predgen_speculation_threads": 1},
    # the same with every core for speculation (the ASR still preempts it: the answer thread runs at nice +10)
    "cascade_prefill_t2": {"answer_method": "predgen", "predgen_verifier": "greedy", "predgen_tokens_per_update": 0,
                           "predgen_speculation_threads": 2},
    "predgen_t2": {"answer_method": "predgen", "predgen_verifier": "greedy", "predgen_speculation_threads": 2},
    # the first spoken piece = the whole first sentence (PredGen A.1) instead of its first clause of >= 4 words
    "cascade_sentence": {"answer_method": "cascade", "system_prompt": None, "tts": {"first_clause_words": 0}},
    "cascade_prefill_sentence": {"answer_method": "predgen", "predgen_verifier": "greedy",
                                 "predgen_tokens_per_update": 0, "tts": {"first_clause_words": 0}},
    "predgen_sentence": {"answer_method": "predgen", "predgen_verifier": "greedy", "tts": {"first_clause_words": 0}},
    # the answer spoken by the codec-token TTS (tts.engine = codec, its default sampler) instead of Piper
    "predgen_codec": {"answer_method": "predgen", "predgen_verifier": "greedy", "tts": {"engine": "codec"}},
    "predgen_codec_pcg": {"answer_method": "predgen", "predgen_verifier": "greedy",
                          "tts": {"engine": "codec", "codec_method": "pcg"}},
    # the end of the turn from the LLM's end-of-turn probability after the user's words (duplex.end_of_turn = llm)
    "predgen_llm_turn": {"answer_method": "predgen", "predgen_verifier": "greedy",
                         "duplex": {"end_of_turn": "llm"}},
    # each update goes on until the first clause is generated (and synthesised) unless a newer partial arrives
    "predgen_first_clause": {"answer_method": "predgen", "predgen_verifier": "greedy",
                             "predgen_tokens_per_update": 48},
    "predgen_fast_turn": {"answer_method": "predgen", "predgen_verifier": "greedy", "predgen_tokens_per_update": 48,
                          "duplex": {"end_of_turn": "llm"}},
}


def method_config(cfg, method: str):
    """``cfg`` with the [llm] overrides of ``method``; the cascade gets PredGen's system prompt (the user's prompt +
    the truncation note of predgen.txt A.3) so that answers are comparable token by token."""
    from engine.answer.predictive import PREDGEN_SYSTEM

    over = dict(METHODS[method])
    tts = over.pop("tts", {})
    duplex = over.pop("duplex", {})
    if "system_prompt" in over:
        over["system_prompt"] = (cfg.llm.system_prompt + " " + PREDGEN_SYSTEM).strip()
    return dataclasses.replace(cfg, llm=dataclasses.replace(cfg.llm, **over), tts=dataclasses.replace(cfg.tts, **tts),
                               duplex=dataclasses.replace(cfg.duplex, **duplex))


def run_one(rt, cfg, audio: np.ndarray) -> dict:
    """Play ``audio`` (float32 16 kHz) in real time through the session engine of ``cfg`` (what ``specvoice
    assist`` runs, with no loudspeaker); returns the marks of the last answered utterance. Every time is the wall
    time at which its event was made (``ev.wall``), not when this consumer got it."""
    from audio.sources import ArraySource
    from engine.core.events import (AnswerAudio, AnswerDelta, AnswerDone, AnswerSentence, Error, FinalTranscript,
                                    SpeechEnded, TurnMetrics)
    from engine.session import Session, SessionOptions

    lock = threading.Lock()
    marks: dict[int, dict] = {}
    errors: list[str] = []

    def mark(u: int) -> dict:
        return marks.setdefault(u, {})

    def on_event(ev) -> None:  # the session's events, each on the thread that delivers it
        with lock:
            if isinstance(ev, AnswerDelta):
                mark(ev.utterance).setdefault("first_token", ev.wall)
            elif isinstance(ev, AnswerAudio):
                mark(ev.utterance).setdefault("first_audio", ev.wall)
            elif isinstance(ev, AnswerSentence) and ev.index == 0:
                mark(ev.utterance).setdefault("first_piece", ev.text)
            elif isinstance(ev, AnswerDone):
                mark(ev.utterance).update(answer=ev.text, interrupted=ev.interrupted)
            elif isinstance(ev, SpeechEnded):
                mark(ev.utterance).update(eos=ev.wall, decided=ev.decided_wall)
            elif isinstance(ev, FinalTranscript):
                mark(ev.utterance).update(final=ev.wall, transcript=ev.text)
            elif isinstance(ev, TurnMetrics) and ev.by:
                mark(ev.utterance).update(turn_by=ev.by, turn_p=ev.p_complete)
            elif isinstance(ev, Error):
                errors.append(f"{ev.where}: {ev.message}")

    # silence after the question long enough for the end-of-turn rule's longest wait: the turn is ended by its own
    # rule, never by the end of the file
    d = cfg.duplex
    longest = (max(d.turn_max_silence_s, d.eot_wait_s) if d.end_of_turn in ("llm", "smart_turn")
               else cfg.vad.min_silence_s)
    source = ArraySource(audio, cfg.audio.block_s, realtime=True, trailing_silence_s=max(1.0, longest + 0.5))
    session = Session(cfg, rt, SessionOptions(mode="assist", play=False), on_event, source=source)
    result = session.run()
    st = result.transcriber
    metrics = {rec["utterance"]: rec["metrics"] for rec in result.answers}
    idle = all(rec.get("answer") is not None for rec in result.answers)
    answered = [u for u in sorted(marks) if marks[u].get("answer") and u in metrics]
    if not answered:
        return {"error": "; ".join(errors) or "no answer", "utterances": len(st.stats.utterances)}
    u = answered[-1]
    mk, m = marks[u], metrics[u]
    eos = mk.get("eos")

    def since(key):
        return _r(mk[key] - eos) if eos is not None and mk.get(key) is not None else None

    return {"utterances": len(st.stats.utterances), "transcript": mk.get("transcript", ""),
            "answer": mk.get("answer", ""), "first_piece": mk.get("first_piece", ""), "eos_to_final_s": since("final"),
            "eos_to_first_token_s": since("first_token"),
            "eos_to_first_audio_s": since("first_audio"),
            "final_to_first_audio_s": _r(mk["first_audio"] - mk["final"]) if mk.get("first_audio") and mk.get("final")
            else None,
            # end of speech → first audio, stage by stage: the turn decision (silence or end-of-turn rule), the final
            # transcript after it, the answer's first text after the final (verification, or the generation of the
            # first piece), its audio after that (synthesis, 0 when pre-synthesised)
            "stages_s": stages(mk, eos), "turn_by": mk.get("turn_by"), "turn_p": mk.get("turn_p"),
            "nfetfs": m.nfetfs, "presynth_used": m.presynth_used, "accepted_tokens": m.accepted_tokens,
            "speculative_updates": m.speculative_updates, "asr_compute_s": _r(st.stats.asr_compute_s),
            "tts_compute_s": _r(m.tts_compute_s), "answer_audio_s": _r(m.audio_s),
            "updates": [{"partial": x.partial, "accepted": x.accepted, "previous_len": x.previous_len,
                         "generated": x.generated, "compute_s": _r(x.compute_s), "first_sentence": x.first_sentence,
                         "cancelled": x.cancelled} for x in m.steps],
            "timed_out": not idle, "errors": errors}


STAGES = ("turn_decision", "final", "first_text", "first_audio")


def stages(mk: dict, eos: float | None) -> dict | None:
    """End of speech → first audio split at the turn decision, the final transcript and the first answer text
    (seconds; each stage from the previous mark, a mark before its predecessor counting 0)."""
    marks = [eos, mk.get("decided"), mk.get("final"), mk.get("first_token"), mk.get("first_audio")]
    if any(m is None for m in marks):
        return None
    out, prev = {}, marks[0]
    for name, m in zip(STAGES, marks[1:]):
        out[name] = _r(max(0.0, m - prev))
        prev = max(prev, m)
    return out


def llm_cost(lm, repeats: int = 3) -> dict:
    """The answering LLM's cost on this machine, measured alone before the turns (seconds, median of ``repeats``):
    per token of a 48-token pre-fill (one pass) and per decoded token (one pass each, 16 tokens)."""
    from engine.llm.generate import LMSession

    text = ("Thomas is very healthy, but he has to go to the hospital every day. What could be the reasons? "
            "Please answer in two short sentences that a listener can follow without seeing any text.")
    toks = (lm.tokenize(text) * 4)[:64]
    pre, dec = [], []
    for _ in range(repeats):
        s = LMSession(lm)
        s.crop(0)
        t0 = time.perf_counter()
        s.eval(toks[:48])
        pre.append((time.perf_counter() - t0) / 48)
        t0 = time.perf_counter()
        for t in toks[48:64]:
            s.eval([t])
        dec.append((time.perf_counter() - t0) / 16)
    return {"prefill_s_per_token": _r(statistics.median(pre), 4), "decode_s_per_token": _r(statistics.median(dec), 4)}


def summarise(rows: list[dict]) -> dict:
    ok = [r for r in rows if "error" not in r]
    lat = [r["eos_to_first_audio_s"] for r in ok]
    fin = [r["eos_to_final_s"] for r in ok]
    nfe = [r["nfetfs"] for r in ok if r["nfetfs"] is not None]
    return {"files": len(rows), "answered": len(ok),
            "eos_to_first_audio_s_p50": pct(lat, 50), "eos_to_first_audio_s_p90": pct(lat, 90),
            "eos_to_first_audio_s_mean": _r(statistics.mean([x for x in lat if x is not None])) if ok else None,
            "eos_to_final_s_p50": pct(fin, 50), "eos_to_final_s_p90": pct(fin, 90),
            "final_to_first_audio_s_p50": pct([r["final_to_first_audio_s"] for r in ok], 50),
            "stages_s_p50": {k: pct([r["stages_s"][k] for r in ok if r.get("stages_s")], 50) for k in STAGES},
            "turns_by_model_rate": _r(sum(r.get("turn_by") == "model" for r in ok) / len(ok)) if ok else None,
            "nfetfs_1_rate": _r(sum(n == 1 for n in nfe) / len(nfe)) if nfe else None,
            "nfetfs_0_rate": _r(sum(n == 0 for n in nfe) / len(nfe)) if nfe else None,  # no verification needed
            "nfetfs_mean": _r(statistics.mean(nfe), 2) if nfe else None,
            "presynth_rate": _r(sum(bool(r["presynth_used"]) for r in ok) / len(ok)) if ok else None,
            "accepted_tokens_mean": _r(statistics.mean(r["accepted_tokens"] for r in ok), 2) if ok else None,
            "first_piece_words_mean": _r(statistics.mean(len(r.get("first_piece", "").split()) for r in ok), 2)
            if ok else None,
            "first_piece_tokens_p50": pct([r["first_piece_tokens"] for r in ok if r.get("first_piece_tokens")], 50),
            # the voice's cost: synthesis seconds per second of answer audio (RTF), over the turns that spoke
            "tts_rtf": _r(sum(r.get("tts_compute_s") or 0 for r in ok) / a)
            if (a := sum(r.get("answer_audio_s") or 0 for r in ok)) else None}


def main(argv=None) -> int:
    from bench.input_audio import decode_all
    from engine.config import load_config
    from engine.runtime import Runtime

    p = argparse.ArgumentParser(prog="specvoice bench voice", description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="*", help="spoken questions (WAV/FLAC files or folders)")
    p.add_argument("--methods", nargs="+", default=["cascade", "cascade_prefill", "predgen"], choices=list(METHODS))
    p.add_argument("--n", type=int, default=0, help="use the first N files (0 = all)")
    p.add_argument("--config")
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--out", default="bench/results/voice.json")
    args = p.parse_args(argv)
    files = audio_files(args.files or [x for x in DEFAULT_INPUTS if x.exists()], "voice bench")
    if args.n:
        files = files[: args.n]
    if not files:
        raise SystemExit("voice bench: no input (make some: python -m bench.make_speech --questions 12 --out bench/data)")
    cfg = load_config(args.config, None, args.set)
    rt = Runtime(cfg, progress=True)
    rt.asr_backend(), rt.vad(), rt.llm()  # load everything before the clock runs
    for meth in args.methods:
        rt.tts(method_config(cfg, meth).tts)
    cost = llm_cost(rt.llm())  # alone, before any turn
    audios = decode_all({f: f for f in files}, skip_bad=True)
    # warm-up: one file through the pipeline so first-call costs (thread pools, caches) are not in the numbers
    run_one(rt, cfg, next(iter(audios.values())))
    results: dict[str, list[dict]] = {m: [] for m in args.methods}
    for f, audio in audios.items():  # methods interleaved per file: machine drift hits all alike
        for meth in args.methods:
            mcfg = method_config(cfg, meth)
            r = run_one(rt, mcfg, audio)
            r["file"] = f.name
            if r.get("first_piece"):  # what generating the first spoken piece costs from nothing (no speculation)
                r["first_piece_tokens"] = len(rt.llm().tokenize(r["first_piece"]))
            results[meth].append(r)
            print(f"[{meth}] {f.name}: EOS→audio {r.get('eos_to_first_audio_s')} s, EOS→final "
                  f"{r.get('eos_to_final_s')} s, NFETFS {r.get('nfetfs')}, presynth {r.get('presynth_used')}"
                  + (f" ERROR {r['error']}" if "error" in r else ""), flush=True)
    report = {"benchmark": "voice", "files": [str(f) for f in audios], "asr_method": asr_method_label(cfg),
              "llm": str(rt.model(cfg.llm.model_role).path), "speculation_threads": cfg.llm.predgen_speculation_threads,
              "tokens_per_update": cfg.llm.predgen_tokens_per_update, "max_answer_tokens": cfg.llm.max_answer_tokens,
              "llm_cost": cost, "methods": {}}
    sums = {meth: summarise(rows) for meth, rows in results.items()}
    for meth, rows in results.items():
        s, mcfg = sums[meth], method_config(cfg, meth)
        s["first_clause_words"] = mcfg.tts.first_clause_words
        s["tts_engine"] = mcfg.tts.engine
        s["predgen_source"] = mcfg.llm.predgen_source
        for base in ("cascade", "cascade_prefill", "predgen", meth + "_sentence"):
            if base in results and base != meth and s["eos_to_first_audio_s_p50"]:
                b = sums[base]
                s[f"p50_speedup_vs_{base}"] = _r(b["eos_to_first_audio_s_p50"] / s["eos_to_first_audio_s_p50"])
                s[f"mean_speedup_vs_{base}"] = _r(b["eos_to_first_audio_s_mean"] / s["eos_to_first_audio_s_mean"])
        if "cascade" in results and meth != "cascade":
            pairs = [(r, c) for r, c in zip(rows, results["cascade"]) if "error" not in r and "error" not in c]
            same = [(r, c) for r, c in pairs if r["transcript"] == c["transcript"]]
            s["same_final_transcript_as_cascade"] = len(same)
            s["identical_answer_share"] = _r(sum(r["answer"] == c["answer"] for r, c in same) / len(same)) if same \
                else None
        report["methods"][meth] = s
    report["turns"] = results
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(json.dumps(report["methods"], indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
