"""Regenerate assets/question.wav: the embedded spoken question used by `specvoice assist` with no argument.

Synthesised once with the embedded Piper voice (en_US-joe-medium, 22.05 kHz), resampled to 16 kHz mono with
PyAV, with 0.3 s of silence before and after. Run: python assets/make_question.py
"""

from pathlib import Path

import numpy as np

from audio.io import resample, write_wav
from engine.config import Config
from engine.runtime import Runtime

QUESTION = ("I work from home and my phone keeps distracting me. "
            "Can you give me a quick tip for staying focused?")


def main() -> None:
    tts = Runtime(Config()).tts()
    audio = resample(tts.synthesize(QUESTION), tts.sample_rate, 16000)
    pad = np.zeros(int(0.3 * 16000), np.float32)
    out = write_wav(Path(__file__).with_name("question.wav"), np.concatenate([pad, audio, pad]), 16000)
    Path(__file__).with_name("question.txt").write_text(QUESTION + "\n")
    print(out, len(audio) / 16000, "s")


if __name__ == "__main__":
    main()
