"""The audio a benchmark plays: what a user names on its command line → the files, in a stable order."""

from __future__ import annotations

import glob
from pathlib import Path

AUDIO_SUFFIXES = (".wav", ".flac")


def audio_files(inputs: list[str | Path], prog: str) -> list[Path]:
    """Files as given; a folder → its .wav/.flac files, sorted; a pattern with ``*``/``?`` → its matches, sorted
    (job lists run without a shell). Raises SystemExit ("``prog``: …") for a missing path or a pattern that matches
    nothing."""
    out: list[Path] = []
    for s in inputs:
        p = Path(s)
        if any(c in str(s) for c in "*?"):
            hits = sorted(Path(x) for x in glob.glob(str(s)))
            if not hits:
                raise SystemExit(f"{prog}: nothing matches {s}")
            out += hits
        elif p.is_dir():
            out += sorted(q for q in p.iterdir() if q.suffix.lower() in AUDIO_SUFFIXES)
        elif p.exists():
            out.append(p)
        else:
            raise SystemExit(f"{prog}: no such file or folder: {p}")
    return out
