"""Generate the bad-input corpus: every kind of audio input a user can hand to ``specvoice``.

Speech cases are real speech (tests/data/jfk.flac, resampled and re-encoded). Run as a script to write the corpus
into a folder: ``python -m tests.make_bad_audio DIR [--long]``.

Each case is a :class:`Case`: ``expect`` is ``"speech"`` (the transcript must hold the speech), ``"quiet"`` (exit 0,
no or few words) or ``"error"`` (one error line, exit 2).
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))
JFK = ROOT / "tests" / "data" / "jfk.flac"
SR = 16000


@dataclass(frozen=True)
class Case:
    """One input: ``path`` (may not exist), what a run must give (``expect``) and whether it is slow."""

    name: str
    path: Path
    expect: str  # "speech" | "quiet" | "error"
    slow: bool = False


def _speech() -> np.ndarray:
    """jfk.flac (44.1 kHz stereo FLAC) as float32 mono 16 kHz."""
    from audio.io import load_audio

    return load_audio(JFK, SR)


def _resample(x: np.ndarray, rate: int) -> np.ndarray:
    """Band-limited resampling of 16 kHz ``x`` to ``rate`` Hz (PyAV's libswresample, as the app does)."""
    from audio.io import resample

    return resample(x, SR, rate)


def make_corpus(d: str | Path, long: bool = False) -> list[Case]:
    """Write every case into folder ``d`` (created). ``long=True`` adds 1 h of speech (slow)."""
    d = Path(d)
    d.mkdir(parents=True, exist_ok=True)
    speech = _speech()
    rng = np.random.default_rng(0)
    cases: list[Case] = []

    def wav(name: str, audio: np.ndarray, rate: int, subtype: str, expect: str, slow: bool = False) -> None:
        p = d / name
        sf.write(str(p), audio, rate, subtype=subtype)
        cases.append(Case(Path(name).stem, p, expect, slow))

    def raw(name: str, data: bytes, expect: str = "error") -> None:
        p = d / name
        p.write_bytes(data)
        cases.append(Case(Path(name).stem, p, expect))

    raw("empty_file", b"")
    raw("zero_bytes.wav", b"")
    good = d / "_good.wav"
    sf.write(str(good), speech, SR, subtype="PCM_16")
    raw("truncated_header.wav", good.read_bytes()[:30])
    raw("random_bytes.wav", rng.integers(0, 256, 64_000, dtype=np.uint8).tobytes())
    raw("text_file.wav", "This is not audio.\nJust a text file with a .wav name.\n".encode("utf-8"))
    good.unlink()
    wav("header_only.wav", np.zeros(0, np.float32), SR, "PCM_16", "error")
    wav("pcm_8bit.wav", speech, SR, "PCM_U8", "speech")
    wav("pcm_24bit.wav", speech, SR, "PCM_24", "speech")
    wav("float64.wav", speech.astype(np.float64), SR, "DOUBLE", "speech")
    wav("rate_8k.wav", _resample(speech, 8000), 8000, "PCM_16", "speech")
    wav("rate_96k.wav", _resample(speech, 96000), 96000, "PCM_16", "speech")
    six = np.zeros((len(speech), 6), np.float32)
    six[:, 0] = six[:, 1] = six[:, 2] = speech  # front left, right, centre: speech; the rest silent
    wav("six_channels.wav", six, SR, "PCM_16", "speech")
    wav("silence_10min.wav", np.zeros(SR * 600, np.float32), SR, "PCM_16", "quiet")
    wav("white_noise.wav", (rng.standard_normal(SR * 10) * 0.1).astype(np.float32), SR, "PCM_16", "quiet")
    nan = speech.astype(np.float32).copy()
    nan[SR * 4 : SR * 4 + 400] = np.nan
    wav("float_nan.wav", nan, SR, "FLOAT", "speech")
    wav("clipped.wav", np.clip(speech * 8.0, -1.0, 1.0), SR, "PCM_16", "speech")
    wav("façade 語.wav", speech, SR, "PCM_16", "speech")
    (d / "a_directory.wav").mkdir(exist_ok=True)
    cases.append(Case("directory", d / "a_directory.wav", "error"))
    cases.append(Case("missing", d / "does_not_exist.wav", "error"))
    if long:
        gap = np.zeros(SR, np.float32)
        reps = int(np.ceil(3600 / (len(speech) / SR + 1.0)))
        wav("speech_1h.flac", np.concatenate([np.concatenate([speech, gap])] * reps), SR, "PCM_16", "speech",
            slow=True)
    return cases


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir", help="output folder")
    p.add_argument("--long", action="store_true", help="also write 1 h of speech (about 110 MB)")
    a = p.parse_args(argv)
    for c in make_corpus(a.dir, a.long):
        size = c.path.stat().st_size if c.path.is_file() else "-"
        print(f"{c.name:20s} {c.expect:7s} {size!s:>12} {os.fspath(c.path)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
