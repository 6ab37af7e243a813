"""How far Whisper's offline transcript moves when the audio moves: ``specvoice bench asr-offline [FILES] --out JSON``.

The streaming benchmark (``bench asr-stream``) scores each method's final text against the offline faster-whisper
beam-5 transcript of the same file and asks for a WER within +0.02 of offline greedy decoding's. Offline greedy and
offline beam 5 decode the same 30 s windows from the same starts, so they share those windows' errors; a streaming
decoder cuts the audio elsewhere (at VAD boundaries). This benchmark measures the size of that effect with the
streaming pipeline left out: each file is transcribed offline again, greedy and beam 5, after ``s`` seconds of
digital silence are put before it (``--shifts``, default 0.05 0.1 0.2 0.5 s), which moves every window boundary by
``s`` and changes nothing that is heard. Reported per file and per corpus (a folder, its ``nonspeech/`` with it):
WER of each transcript against the unshifted beam-5 transcript and against the reference text (refs.json next to
the file, as in ``asr-stream``), and the change from the unshifted transcript of the same decoder.

WER: jiwer over Whisper's English normaliser, pooled over a corpus's files (``bench.asr_stream_bench.WER``); files
whose reference is empty (non-speech) are left out of WER.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from audio.io import SAMPLE_RATE

from bench.asr_stream_bench import JFK, WER, _rel, default_files, machine, reference_for
from bench.inputs import audio_files
from bench.stats import rnd as _r

SR = SAMPLE_RATE  # Hz
HERE = Path(__file__).resolve().parent
HELDOUT = HERE / "data" / "stream_speech_heldout"
DECODERS = {"greedy": 1, "beam5": 5}


def shifted(audio: np.ndarray, s: float) -> np.ndarray:
    """``audio`` (float32, 16 kHz, (n,)) after ``s`` seconds of zeros: the same sound, every 30 s window of an
    offline decode starting ``s`` seconds earlier in it."""
    return np.concatenate([np.zeros(int(round(s * SR)), np.float32), np.asarray(audio, np.float32)])


def corpus_of(p: Path) -> str:
    """The corpus a file belongs to: its folder, or the folder above a ``nonspeech`` folder (repository-relative)."""
    d = p.parent.parent if p.parent.name == "nonspeech" else p.parent
    return _rel(d)


def default_inputs() -> list[Path]:
    """Both streaming corpora (bench/data/stream_speech and stream_speech_heldout, with their non-speech files)
    and jfk.flac."""
    held = sorted(HELDOUT.glob("*.flac")) + sorted((HELDOUT / "nonspeech").glob("*.flac"))
    return [p for p in default_files() if p != JFK] + held + [JFK]


def summarize(rows: list[dict], shifts: list[float], W: WER) -> dict:
    """Pooled WERs of ``rows`` (per-file entries of :func:`run`)."""
    speech = [r for r in rows if r["ref"]]
    b5 = [r["text"]["beam5"]["0"] for r in speech]
    refs = [r["ref"] for r in speech]
    out = {"files": len(rows), "speech_files": len(speech), "ref_words": sum(len(W.norm(x).split()) for x in refs)}
    if not speech:
        return out
    for dec in DECODERS:
        base_vs_b5 = W.wer(b5, [r["text"][dec]["0"] for r in speech])
        base_vs_ref = W.wer(refs, [r["text"][dec]["0"] for r in speech])
        by_shift = {}
        for s in shifts:
            hyp = [r["text"][dec][str(s)] for r in speech]
            vb, vr = W.wer(b5, hyp), W.wer(refs, hyp)
            by_shift[str(s)] = {"wer_vs_beam5": vb, "wer_vs_ref": vr,
                                "delta_vs_unshifted_vs_beam5": _r(vb - base_vs_b5, 4),
                                "delta_vs_unshifted_vs_ref": _r(vr - base_vs_ref, 4)}
        vbs = [v["wer_vs_beam5"] for v in by_shift.values()]
        out[dec] = {"wer_vs_beam5": base_vs_b5, "wer_vs_ref": base_vs_ref, "shifted": by_shift,
                    "shifted_wer_vs_beam5_min": min(vbs), "shifted_wer_vs_beam5_max": max(vbs),
                    "shifted_wer_vs_beam5_mean": _r(float(np.mean(vbs)), 4)}
    return out


def run(files: list[Path], shifts: list[float], fw, refs_in: dict, log=lambda *x: None) -> tuple[list, dict]:
    """Transcribe every file unshifted and at every shift with each decoder of :data:`DECODERS`. Returns (per-file
    rows, per-corpus summaries)."""
    from audio.io import load_audio

    W = WER()
    rows = []
    for p in files:
        a = load_audio(p)
        ref = reference_for(p, refs_in)
        t0 = time.perf_counter()
        text = {}
        for dec, beam in DECODERS.items():
            fw.beam_size = beam
            text[dec] = {"0": fw.transcribe_text(a)}
            for s in shifts:
                text[dec][str(s)] = fw.transcribe_text(shifted(a, s))
        row = {"file": _rel(p), "corpus": corpus_of(p), "duration_s": _r(len(a) / SR, 2), "ref": ref, "text": text,
               "seconds": _r(time.perf_counter() - t0, 1)}
        if ref:
            row["wer_vs_beam5"] = {dec: {k: W.wer(text["beam5"]["0"], v) for k, v in t.items()}
                                   for dec, t in text.items()}
        rows.append(row)
        log(f"asr-offline: {p.name} ({row['duration_s']} s) in {row['seconds']} s"
            + (f": greedy vs beam 5 {row['wer_vs_beam5']['greedy']}" if ref else ""))
    corpora = {}
    for c in dict.fromkeys(r["corpus"] for r in rows):
        corpora[c] = summarize([r for r in rows if r["corpus"] == c], shifts, W)
    return rows, corpora


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="specvoice bench asr-offline", description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", help="audio files or folders (default: both streaming corpora + jfk.flac)")
    ap.add_argument("--shifts", type=float, nargs="+", default=[0.05, 0.1, 0.2, 0.5],
                    help="seconds of silence put before the audio (default 0.05 0.1 0.2 0.5)")
    ap.add_argument("--refs", help="JSON {file name or path: reference text} (default: refs.json next to each file)")
    ap.add_argument("--out", default=str(HERE / "results" / "asr_offline_shift.json"))
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="override a setting (asr.model_role, asr.compute_type, asr.cpu_threads, ...)")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)

    import ctranslate2
    import faster_whisper

    from audio.io import AudioError
    from engine.config import ConfigError, load_config
    from engine.runtime import Runtime
    from engine.asr.faster_whisper_backend import FasterWhisperBackend

    if any(s <= 0 or s > 10 for s in a.shifts):
        print("asr-offline: every shift must be in (0, 10] seconds", file=sys.stderr)
        return 2
    try:
        cfg = load_config(None, sets=a.set)
    except ConfigError as e:
        print(f"asr-offline: {e}", file=sys.stderr)
        return 2
    try:
        files = audio_files(a.files, "asr-offline") if a.files else default_inputs()
    except SystemExit as e:  # its message names the missing input
        print(e, file=sys.stderr)
        return 2
    refs_in = json.loads(Path(a.refs).read_text()) if a.refs else {}
    log = (lambda *x: None) if a.quiet else (lambda *x: print(*x, file=sys.stderr, flush=True))
    t_run = time.monotonic()
    rt = Runtime(cfg, progress=not a.quiet)
    fw = FasterWhisperBackend(rt.model(cfg.asr.model_role).path, device=cfg.asr.device,
                              compute_type=cfg.asr.compute_type, cpu_threads=cfg.asr.cpu_threads,
                              language=cfg.asr.language)
    try:
        rows, corpora = run(files, list(a.shifts), fw, refs_in, log)
    except AudioError as e:  # a file that cannot be decoded: nothing is written
        print(f"asr-offline: {e}", file=sys.stderr)
        return 2
    out = {
        "config": {"shifts_s": list(a.shifts), "decoders": {k: f"faster-whisper beam_size={v}" for k, v in
                                                             DECODERS.items()},
                   "model_role": cfg.asr.model_role, "compute_type": cfg.asr.compute_type,
                   "machine": machine(),
                   "versions": {"ctranslate2": ctranslate2.__version__, "faster_whisper": faster_whisper.__version__},
                   "wall_s": _r(time.monotonic() - t_run, 1)},
        "per_corpus": corpora,
        "per_file": rows,
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1, ensure_ascii=False))
    print(f"{'corpus':34s} {'decoder':7s} {'vs b5':>6s} " + " ".join(f"{'+' + str(s) + ' s':>7s}" for s in a.shifts)
          + f" {'vs text':>7s}")
    for c, s in corpora.items():
        for dec in (d for d in DECODERS if d in s):  # a corpus of non-speech files has no WER
            d = s[dec]
            print(f"{c:34s} {dec:7s} {d['wer_vs_beam5']:6.4f} "
                  + " ".join(f"{d['shifted'][str(x)]['wer_vs_beam5']:7.4f}" for x in a.shifts)
                  + f" {d['wer_vs_ref']:7.4f}")
    print(f"→ {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
