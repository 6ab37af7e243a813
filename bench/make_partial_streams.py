"""Make partial-transcript streams (PredGen's simulated-inputs format) from real streaming ASR.

Each prompt (default: MT-Bench first turns) is synthesised with the embedded Piper voice, resampled to 16 kHz, and
played at real-time pace through the streaming ASR (VAD + Whisper + LocalAgreement-2), exactly as a user's speech
would be. Every partial transcript is recorded with its wall-clock time since the audio started; the last entry is
the final transcript at the moment it was final. Output:

    {"<full prompt>": [["<partial text>", <seconds since start>], ..., ["<final transcript>", <s>]], ...}

Run: ``specvoice bench partial-streams bench/data/voice_questions --n 12 --out bench/data/voice_asr_partials.json``
(spoken files; ``python -m bench.make_speech --questions 12 --out bench/data`` makes them) or, with no files,
``--prompts mtbench`` synthesised on the fly.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np


def stream_for(text: str, tts, rt, cfg, realtime: bool = True) -> list[list]:
    """Synthesise ``text`` with ``tts`` and return its partial stream (see :func:`stream_for_audio`)."""
    from audio.io import resample

    audio = resample(tts.synthesize(text), tts.sample_rate, 16000)
    return stream_for_audio(np.concatenate([np.zeros(4800, np.float32), audio]), rt, cfg, realtime)


def stream_for_audio(audio: np.ndarray, rt, cfg, realtime: bool = True) -> list[list]:
    """Play float32 16 kHz mono ``audio`` through the streaming ASR (VAD, the configured method) and return
    [[partial transcript, seconds since the audio started], ..., [final transcript, seconds]]."""
    from audio.sources import ArraySource
    from engine.core.events import FinalTranscript, PartialTranscript

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
    p.add_argument("audio", nargs="*", help="spoken prompts (WAV/FLAC files or folders; a refs.json beside them "
                   "gives each file's prompt text) — default: synthesise --prompts with the Piper voice")
    p.add_argument("--prompts", default="mtbench")
    p.add_argument("--n", type=int, default=10)
    p.add_argument("--fast", action="store_true", help="do not play at real-time pace (times are then compute-bound)")
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--out", default="bench/data/mtbench_asr_partials.json")
    args = p.parse_args(argv)
    cfg = load_config(None, None, args.set)
    rt = Runtime(cfg)
    out: dict[str, list] = {}
    if args.audio:
        from audio.io import load_audio
        from bench.inputs import audio_files

        for i, f in enumerate(audio_files(args.audio, "make_partial_streams")[: args.n]):
            refs = f.parent / "refs.json"
            key = json.loads(refs.read_text()).get(f.name, f.name) if refs.exists() else f.name
            out[key] = stream_for_audio(load_audio(f), rt, cfg, realtime=not args.fast)
            print(f"{i + 1}: {f.name}: {len(out[key])} partials; final: {out[key][-1][0] if out[key] else ''}",
                  flush=True)
    else:
        tts = rt.tts()
        for i, q in enumerate(load_prompts(args.prompts, args.n)):
            out[q] = stream_for(q, tts, rt, cfg, realtime=not args.fast)
            print(f"{i + 1}: {len(out[q])} partials; final: {out[q][-1][0] if out[q] else ''}", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
