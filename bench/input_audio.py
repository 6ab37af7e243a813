"""A benchmark's inputs decoded before any is played, so that a bad file is found before minutes of real-time
playback."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Hashable, Mapping, TypeVar

import numpy as np

K = TypeVar("K", bound=Hashable)


def decode_all(sources: Mapping[K, str | Path], prog: str = "", skip_bad: bool = False) -> dict[K, np.ndarray] | None:
    """Each source decoded to float32 mono samples at 16 kHz (:func:`audio.io.load_audio`), under its key, in order.

    Args:
        sources: key → audio file.
        prog: the benchmark's name, which starts the error line.
        skip_bad: leave out a file that cannot be decoded, saying so on stderr ("skipped FILE: why"), and go on.

    Returns:
        {key: samples}; None when a file cannot be decoded and ``skip_bad`` is off ("PROG: why" on stderr, the
        message naming the file), so that the benchmark stops before playing anything.
    """
    from audio.io import AudioError, load_audio

    out: dict[K, np.ndarray] = {}
    for key, path in sources.items():
        try:
            out[key] = load_audio(path)
        except AudioError as e:
            if not skip_bad:
                print(f"{prog}: {e}", file=sys.stderr)
                return None
            print(f"skipped {path}: {e}", file=sys.stderr)
    return out
