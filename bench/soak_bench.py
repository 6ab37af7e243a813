"""Soak benchmark: an hour of speech through the live transcription pipeline, watching memory, queues and latency.

Real speech files (default: the streaming corpus bench/data/stream_speech — dialogues, monologue, questions — and
tests/data/jfk.flac) are played one after another with 1–4 s of silence between them, cycling until
``--minutes`` of audio have been fed. The audio is paced at ``--speed`` × real time (default 2: on two cores the
length-scaled streaming ASR computes about a third of real time, so it still keeps up and every latency is a
live one; ``--speed 1`` for strict real time). Blocks are generated on the fly: the benchmark itself holds no hour
of audio.

The pipeline is :meth:`engine.runtime.Runtime.transcriber` — the one ``specvoice transcribe`` runs. Every 5 s of
wall time a sampler records the process RSS (MiB), the capture → ASR queue depth (seconds of audio waiting), the
audio time fed and the audio time transcribed. Reported per ``--window-min`` minutes of audio: end of speech →
final transcript p50/p90/max in wall seconds and × speed (audio seconds, comparable with real-time runs),
utterances, ASR compute ÷ audio, max queue depth; overall: RSS after the first 5 min of audio and its growth after
that, dropped audio (the pipeline's own count), Backlog events, errors.

Run: ``specvoice bench soak [FILES...] --minutes 60 [--speed 2] --out bench/results/soak.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import threading
import time
from pathlib import Path

import numpy as np

from audio.io import SAMPLE_RATE

from bench.stats import pct, rnd
from engine.session_report import asr_method_label

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SR = SAMPLE_RATE  # Hz


def rss_mib() -> float:
    """Resident set size of this process, MiB (Linux /proc; 0 where unavailable)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20
    except (OSError, ValueError, IndexError):
        return 0.0


def default_files() -> list[Path]:
    c = HERE / "data" / "stream_speech"
    return sorted(c.glob("dialogue_*.flac")) + sorted(c.glob("monologue*.flac")) + sorted(c.glob("questions_*.flac")) \
        + [ROOT / "tests" / "data" / "jfk.flac"]


class SoakSource:
    """An :class:`audio.sources.AudioSource` cycling over ``clips`` (float32 16 kHz arrays) with 1–4 s of silence
    between them until ``total_s`` seconds, paced at ``speed`` × real time; blocks of ``block_s`` seconds."""

    name = "soak"

    def __init__(self, clips: list[np.ndarray], total_s: float, speed: float = 2.0, block_s: float = 0.1,
                 seed: int = 0):
        if not clips:
            raise ValueError("no audio to play")
        self.clips, self.total_s, self.speed = clips, float(total_s), float(speed)
        self.block = int(block_s * SR)
        self.realtime = True
        self.fed_s = 0.0
        self._rng = random.Random(seed)
        self._stop = threading.Event()

    def close(self) -> None:
        self._stop.set()

    def _stream(self):
        i = 0
        while True:
            yield self.clips[i % len(self.clips)]
            yield np.zeros(int(self._rng.uniform(1.0, 4.0) * SR), np.float32)
            i += 1

    def __iter__(self):
        from audio.sources import AudioBlock

        t0 = time.monotonic()
        pos = 0
        n_total = int(self.total_s * SR)
        for piece in self._stream():
            for j in range(0, len(piece), self.block):
                if self._stop.is_set() or pos >= n_total:
                    return
                chunk = piece[j: j + self.block]
                due = t0 + (pos + len(chunk)) / SR / self.speed
                delay = due - time.monotonic()
                if delay > 0 and self._stop.wait(delay):
                    return
                yield AudioBlock(chunk, pos / SR, time.monotonic())
                pos += len(chunk)
                self.fed_s = pos / SR


def main(argv=None) -> int:
    from audio.io import AudioError, load_audio
    from engine.config import load_config
    from engine.core.events import Error, FinalTranscript, SpeechEnded
    from engine.pipeline import Backlog
    from engine.runtime import Runtime

    p = argparse.ArgumentParser(prog="specvoice bench soak", description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="*", help="speech files to cycle over (WAV/FLAC)")
    p.add_argument("--minutes", type=float, default=60.0, help="minutes of audio to feed")
    p.add_argument("--speed", type=float, default=2.0, help="pace, × real time")
    p.add_argument("--window-min", type=float, default=10.0, help="report window, minutes of audio")
    p.add_argument("--config")
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--out", default="bench/results/soak.json")
    args = p.parse_args(argv)
    if args.speed <= 0 or args.minutes <= 0:
        raise SystemExit("soak: --speed and --minutes must be positive")
    clips = []
    for f in [Path(x) for x in args.files] or default_files():
        try:
            clips.append(load_audio(f))
        except AudioError as e:
            raise SystemExit(f"soak: {e}") from None
    cfg = load_config(args.config, None, args.set)
    rt = Runtime(cfg, progress=True)
    rt.asr_backend(), rt.vad()
    src = SoakSource(clips, args.minutes * 60, args.speed, cfg.audio.block_s)
    utt: dict[int, dict] = {}
    backlogs: list[dict] = []
    errors: list[str] = []

    def emit(ev) -> None:
        if isinstance(ev, SpeechEnded):
            utt.setdefault(ev.utterance, {})["eos"] = ev.wall
        elif isinstance(ev, FinalTranscript):
            d = utt.setdefault(ev.utterance, {})
            d.update(final=ev.wall, t_end=ev.t_end, words=len(ev.text.split()))
        elif isinstance(ev, Backlog):
            backlogs.append({"behind_s": round(ev.behind_s, 2), "caught_up": ev.caught_up, "audio_t": src.fed_s})
        elif isinstance(ev, Error):
            errors.append(f"{ev.where}: {ev.message}")

    st = rt.transcriber(src, emit)
    samples: list[dict] = []
    done = threading.Event()
    t0 = time.monotonic()

    def sampler() -> None:
        while not done.wait(5.0):
            samples.append({"wall_s": round(time.monotonic() - t0, 1), "audio_fed_s": round(src.fed_s, 1),
                            "audio_done_s": round(st.stats.audio_s, 1), "rss_mib": round(rss_mib(), 1),
                            "queue_s": round(st.q.seconds, 2), "asr_compute_s": round(st.stats.asr_compute_s, 1)})
            if len(samples) % 12 == 0:
                s = samples[-1]
                print(f"{s['audio_fed_s'] / 60:5.1f} min fed, RSS {s['rss_mib']:.0f} MiB, queue {s['queue_s']:.1f} s",
                      flush=True)

    th = threading.Thread(target=sampler, daemon=True)
    th.start()
    samples.append({"wall_s": 0.0, "audio_fed_s": 0.0, "audio_done_s": 0.0, "rss_mib": round(rss_mib(), 1),
                    "queue_s": 0.0, "asr_compute_s": 0.0})
    stats = st.run()
    done.set()
    th.join()
    win = args.window_min * 60
    windows = []
    n_win = int(np.ceil(args.minutes * 60 / win))
    for w in range(n_win):
        lo, hi = w * win, (w + 1) * win
        lat = [d["final"] - d["eos"] for d in utt.values()
               if "final" in d and "eos" in d and lo <= d.get("t_end", -1) < hi]
        ss = [s for s in samples if lo <= s["audio_fed_s"] < hi]
        comp = [s["asr_compute_s"] for s in ss]
        windows.append({
            "audio_min": [round(lo / 60, 1), round(hi / 60, 1)], "utterances": len(lat),
            "eos_to_final_s_p50": pct(lat, 50), "eos_to_final_s_p90": pct(lat, 90),
            "eos_to_final_s_max": rnd(max(lat)) if lat else None,
            "eos_to_final_audio_s_p90": rnd(pct(lat, 90, 6) * args.speed) if lat else None,
            "compute_per_audio": round((comp[-1] - comp[0]) / max(1e-9, ss[-1]["audio_fed_s"] - ss[0]["audio_fed_s"]), 3)
            if len(ss) > 1 else None,
            "queue_s_max": max((s["queue_s"] for s in ss), default=None),
            "rss_mib_max": max((s["rss_mib"] for s in ss), default=None)})
    after5 = [s["rss_mib"] for s in samples if s["audio_fed_s"] >= 300]
    first, last = windows[0], windows[-1]
    report = {
        "benchmark": "soak", "minutes": args.minutes, "speed": args.speed, "files": [str(f) for f in args.files] or
        [str(f) for f in default_files()], "asr_method": asr_method_label(cfg), "audio_fed_s": round(src.fed_s, 1),
        "audio_transcribed_s": round(stats.audio_s, 1), "dropped_audio_s": stats.dropped_audio_s,
        "wall_s": round(time.monotonic() - t0, 1), "asr_compute_per_audio": round(stats.rtf, 3),
        "utterances": len(stats.utterances), "rss_mib_at_5min": after5[0] if after5 else None,
        "rss_growth_after_5min_mib": round(max(after5) - after5[0], 1) if after5 else None,
        "p90_last_minus_first_window_s": round(last["eos_to_final_s_p90"] - first["eos_to_final_s_p90"], 3)
        if last["eos_to_final_s_p90"] is not None and first["eos_to_final_s_p90"] is not None else None,
        "max_backlog_s": round(stats.max_backlog_s, 2), "backlog_events": backlogs, "errors": errors[:50],
        "windows": windows, "samples": samples}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(json.dumps({k: v for k, v in report.items() if k not in ("samples", "windows")}, indent=1))
    for w in windows:
        print(w)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
