"""What a live final transcript loses by not hearing the future (``specvoice bench causal-final``).

A live final is decoded when the VAD confirms the end of an utterance: it can hear everything said before, never
what comes after. Offline Whisper decodes 30 s windows, so each word is also heard with the audio after it (the
encoder attends over the whole window). This benchmark measures that loss apart from any streaming method's own:
at each end of speech of the streaming default's run (the ``conversation`` section of
``bench/results/conversation.json``: the utterances' ``t_end``), offline Whisper decodes all the audio heard so far
(the last ≤ 30 s: faster-whisper ``transcribe`` with word timestamps, beam ``asr.final_beam_size``, greedy at
temperature 0) and keeps the words whose middle lies between the previous end of speech and this one. Compute and
latency are unlimited; the past is all there; only the future is missing. With a look-ahead of L seconds the decode
also hears the L s after each end of speech (a final held back that long), and keeps the same words.

Reported per look-ahead, pooled, per condition and per file: WER against offline beam 5 and against the text
(:func:`bench.conversation_scoring.normalise`), beside offline greedy and the streaming final of the same run, and the
deltas the conversation targets read (final − offline greedy). The whole file decoded offline at the same beam is
the look-ahead-without-limit row.

    python -m bench.causal_final_bench [--lookahead 0,1,3] [--from bench/results/conversation.json]

Raises SystemExit 2 (one line on stderr) when the result file or an audio file is missing or unreadable.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from audio.io import SAMPLE_RATE

from bench.stats import rnd as _r

HERE = Path(__file__).resolve().parent
SR = SAMPLE_RATE  # Hz
WINDOW_S = 30.0  # Whisper's window: the most audio one decode hears


def causal_words(model, audio: np.ndarray, ends: list[float], beam_size: int, lookahead_s: float = 0.0,
                 language: str = "en") -> list[str]:
    """The text of each utterance decoded from the audio heard up to its end of speech (+ ``lookahead_s``).

    Args:
        model: a ``faster_whisper.WhisperModel``.
        audio: float32 16 kHz mono samples, shape (n,).
        ends: the utterances' ends of speech, seconds from the start of ``audio``, ascending.
        beam_size: beam width (1 = greedy at temperature 0; wider keeps faster-whisper's temperature fallback,
            which re-decodes a window that fails Whisper's thresholds by sampling: in babble such a window's text
            can differ from run to run; without the fallback those windows loop and the loss looks larger).
        lookahead_s: seconds of audio after each end that the decode also hears (≥ 0).
        language: the Whisper language code decoded in.

    Returns:
        One text per end: the words (faster-whisper word timestamps) whose middle lies in [previous end, end); the
        decode covers [max(0, end + lookahead − 30 s), end + lookahead], after the text kept before its start as the
        prompt (last 200 characters).
    """
    dur = len(audio) / SR
    kept: list[tuple[float, float, str]] = []  # (start, end, word) in audio time
    out: list[str] = []
    prev = 0.0
    for e in ends:
        t1 = min(e + lookahead_s, dur)
        t0 = max(0.0, t1 - WINDOW_S)
        prompt = "".join(w for _, end, w in kept if end <= t0).strip()[-200:] or None
        kw = {"temperature": 0.0} if beam_size == 1 else {}
        segs, _ = model.transcribe(audio[int(t0 * SR): int(t1 * SR)], language=language, beam_size=beam_size,
                                   word_timestamps=True, vad_filter=False, initial_prompt=prompt, **kw)
        words = [(w.start + t0, w.end + t0, w.word) for s in segs for w in (s.words or [])]
        mine = [w for w in words if prev <= (w[0] + w[1]) / 2 < e]
        kept += mine
        out.append("".join(w for _, _, w in mine).strip())
        prev = e
    return out


def _scores(W, rows: list[dict], keys: list[str]) -> dict:
    """{key: pooled WER of ``rows``' ``key`` text against offline beam 5 and the text, with the deltas over
    offline greedy}."""
    b5, ref = [r["beam5"] for r in rows], [r["ref"] for r in rows]
    gr = [r["greedy"] for r in rows]
    gb, gref = W.wer(b5, gr), W.wer(ref, gr)
    out = {}
    for key in keys:
        hyp = [r[key] for r in rows]
        vb, vr = W.wer(b5, hyp), W.wer(ref, hyp)
        out[key] = {"wer_vs_beam5": vb, "wer_vs_ref": vr, "offline_greedy_wer_vs_beam5": gb,
                    "offline_greedy_wer_vs_ref": gref, "wer_delta_vs_offline_greedy": _r(vb - gb, 4),
                    "wer_delta_vs_offline_greedy_ref": _r(vr - gref, 4)}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="specvoice bench causal-final", description=__doc__.split("\n\n")[0])
    ap.add_argument("--from", dest="src", default=str(HERE / "results" / "conversation.json"),
                    help="bench conversation result whose default run gives the ends of speech")
    ap.add_argument("--data", default=str(HERE / "data" / "conversation"), help="folder of the conversation corpus")
    ap.add_argument("--lookahead", default="0,1,3", help="comma list of look-aheads, seconds")
    ap.add_argument("--out", default=str(HERE / "results" / "conversation_causal.json"))
    ap.add_argument("--config", help="TOML config file (as specvoice --config)")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    a = ap.parse_args(argv)

    from audio.io import AudioError, load_audio
    from bench.asr_stream_bench import machine, write_json
    from bench.conversation_bench import Offline, _whisper
    from bench.conversation_scoring import ConversationWER
    from engine.config import ConfigError, load_config
    from engine.runtime import Runtime

    try:
        lookaheads = [float(x) for x in a.lookahead.split(",") if x.strip()]
        if not lookaheads or min(lookaheads) < 0:
            raise ValueError
    except ValueError:
        print(f"causal-final: --lookahead wants non-negative seconds, got {a.lookahead!r}", file=sys.stderr)
        return 2
    try:
        cfg = load_config(a.config, sets=a.set)
    except ConfigError as e:
        print(f"causal-final: {e}", file=sys.stderr)
        return 2
    try:
        src = json.loads(Path(a.src).read_text(encoding="utf-8"))
        files = src["conversation"]["per_file"]
    except (OSError, ValueError, KeyError) as e:
        print(f"causal-final: no conversation results in {a.src} ({e})", file=sys.stderr)
        return 2
    rows = []
    try:
        for f in files:
            m = f["methods"].get("default")
            if not m or "error" in m:
                continue
            rows.append({"file": f["file"], "group": f["group"], "ref": f["ref"], "beam5": f["offline"]["beam5"],
                         "greedy": f["offline"]["greedy"], "stream": m["text"],
                         "ends": [u["t_end"] for u in m["utterance_detail"]],
                         "audio": load_audio(Path(a.data) / f["file"])})
    except (AudioError, OSError) as e:
        print(f"causal-final: {e}", file=sys.stderr)
        return 2

    beam = cfg.asr.final_beam_size
    model = _whisper(Runtime(cfg, progress=False), cfg)
    off, W = Offline(model), ConversationWER()
    t_run = time.monotonic()
    for r in rows:
        r["offline_same_beam"] = off.transcribe(r["audio"], beam)["text"]
        for la in lookaheads:
            r[f"causal_{la:g}"] = " ".join(t for t in causal_words(model, r["audio"], r["ends"], beam, la) if t)
        print(f"causal-final: {r['file']}", file=sys.stderr, flush=True)
    keys = [f"causal_{la:g}" for la in lookaheads] + ["offline_same_beam", "stream"]
    groups = {"all": rows, **{g: [r for r in rows if r["group"] == g] for g in dict.fromkeys(r["group"] for r in rows)}}
    report = {
        "config": {"source": Path(a.src).name, "source_started": src.get("config", {}).get("started"),
                   "beam_size": beam, "lookahead_s": lookaheads, "window_s": WINDOW_S, "machine": machine(),
                   "seconds": _r(time.monotonic() - t_run, 1)},
        "methods": {"stream": "the streaming default's final text (from the source run)",
                    "offline_same_beam": f"offline Whisper on the whole file, beam {beam}",
                    **{f"causal_{la:g}": f"offline Whisper at each end of speech on the audio heard so far + {la:g} s"
                       for la in lookaheads}},
        "per_group": {g: _scores(W, rs, keys) for g, rs in groups.items()},
        "per_file": [{"file": r["file"], "group": r["group"], "ends": r["ends"],
                      **{k: {"text": r[k], "wer_vs_beam5": W.wer(r["beam5"], r[k]), "wer_vs_ref": W.wer(r["ref"], r[k])}
                         for k in keys}} for r in rows],
    }
    write_json(Path(a.out), report)
    print("group      method             WER vs beam 5 (− greedy)   WER vs text (− greedy)")
    for g, per in report["per_group"].items():
        for k, s in per.items():
            print(f"{g:10s} {k:18s} {s['wer_vs_beam5']:.3f} ({s['wer_delta_vs_offline_greedy']:+.3f})"
                  f"            {s['wer_vs_ref']:.3f} ({s['wer_delta_vs_offline_greedy_ref']:+.3f})")
    print(f"→ {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
