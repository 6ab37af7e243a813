"""Make partial-transcript streams (PredGen's simulated-inputs format) from real streaming ASR.

Each prompt (default: MT-Bench first turns) is synthesised with the embedded Piper voice, resampled to 16 kHz, and
played at real-time pace through the streaming ASR (VAD + Whisper + LocalAgreement-2), exactly as a user's speech
would be. Every partial transcript is recorded with its wall-clock time since the audio started; the last entry is
the final transcript at the moment it was final. Output:

    {"<full prompt>": [["<partial text>", <seconds since start>], ..., ["<final transcript>", <s>]], ...}

Run: ``python -m bench.make_partial_streams --n 10 --out bench/data/mtbench_asr_partials.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np


def stream_for(text: str, tts, rt, cfg, realtime: bool = True) -> list[list]:
    from audio.io import resample
    from audio.sources import ArraySource
    from engine.events import FinalTranscript, PartialTranscript

    audio = resample(tts.synthesize(text), tts.sample_rate, 16000)
    audio = np.concatenate([np.zeros(4800, np.float32), audio])
    entries: list[list] = []
    finals: list[str] = []
    t0 = time.monotonic()

    def emit(ev):
        now = round(time.monotonic() - t0, 3)
        if isinstance(ev, PartialTranscript) and ev.text:
            entries.append([" ".join(finals + [ev.text]).strip(), now])
        elif isinstance(ev, FinalTranscript) and ev.text:
            finals.append(ev.text)
            entries.append([" ".join(finals).strip(), now])

    st = rt.transcriber(ArraySource(audio, cfg.audio.block_s, realtime=realtime, trailing_silence_s=1.0), emit)
    st.run()
    if entries:
        entries[-1][0] = " ".join(finals).strip() or entries[-1][0]
    return entries


def main(argv=None) -> int:
    from bench.predgen_bench import load_prompts
    from engine.config import load_config
    from engine.runtime import Runtime

    p = argparse.ArgumentParser(prog="make_partial_streams", description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", default="mtbench")
    p.add_argument("--n", type=int, default=10)
    p.add_argument("--fast", action="store_true", help="do not play at real-time pace (times are then compute-bound)")
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--out", default="bench/data/mtbench_asr_partials.json")
    args = p.parse_args(argv)
    cfg = load_config(None, None, args.set)
    rt = Runtime(cfg)
    tts = rt.tts()
    out: dict[str, list] = {}
    for i, q in enumerate(load_prompts(args.prompts, args.n)):
        out[q] = stream_for(q, tts, rt, cfg, realtime=not args.fast)
        print(f"{i + 1}: {len(out[q])} partials; final: {out[q][-1][0] if out[q] else ''}", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
