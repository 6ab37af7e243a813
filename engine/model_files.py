"""Model files on disk: the sha256 of a file, its check against a pinned digest, and joining and splitting parts.

A file that passed :func:`verify_file` gets a stamp ``<file>.verified`` (size, mtime, sha256), so later starts skip
the hash while the file is unchanged. Joins write a ``.partial`` file and rename it at the end, so no reader ever
sees half a file.

The errors of the model layer are defined here, the module every other model module builds on; import them, and
everything else, from :mod:`engine.models`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import BinaryIO, Iterator

from tqdm import tqdm

BLOCK = 8 << 20  # bytes read at a time: a few large reads keep the disk busy without holding a whole model in memory
PART_SUFFIX = ".part"  # a split file's parts: <file>.part001, <file>.part002, ... (three digits, in order)


class ModelError(RuntimeError):
    """A model role cannot be resolved to files on disk."""


class ChecksumError(ModelError):
    """A model file's sha256 does not match the pinned value."""


class ModelCheckError(ModelError):
    """A model file is present but cannot be opened as that model (truncated, corrupt, wrong format)."""


def _blocks(f: BinaryIO, bar: tqdm) -> Iterator[bytes]:
    """The rest of the open file ``f`` in blocks of at most :data:`BLOCK` bytes, each counted on ``bar``."""
    while b := f.read(BLOCK):
        bar.update(len(b))
        yield b


def sha256_file(path: Path, progress: bool = False, desc: str = "") -> str:
    """sha256 hex digest of a file, read in 8 MiB blocks (with a progress bar in bytes when ``progress``).

    Raises:
        OSError: the file cannot be read.
    """
    h = hashlib.sha256()
    size = path.stat().st_size
    with open(path, "rb") as f, tqdm(
        total=size, unit="B", unit_scale=True, desc=desc or f"sha256 {path.name}", disable=not progress, leave=False
    ) as bar:
        for b in _blocks(f, bar):
            h.update(b)
    return h.hexdigest()


def stamp_path(path: Path) -> Path:
    """The stamp of ``path`` that :func:`verify_file` writes: ``<file>.verified``."""
    return path.with_name(path.name + ".verified")


def _stamp_ok(path: Path, sha: str) -> bool:
    try:
        st = json.loads(stamp_path(path).read_text())
        s = path.stat()
        return st["sha256"] == sha and st["size"] == s.st_size and st["mtime_ns"] == s.st_mtime_ns
    except (OSError, ValueError, KeyError):
        return False


def _write_stamp(path: Path, sha: str) -> None:
    s = path.stat()
    try:
        stamp_path(path).write_text(json.dumps({"sha256": sha, "size": s.st_size, "mtime_ns": s.st_mtime_ns}))
    except OSError:
        pass  # read-only location (a bundled file inside site-packages): hash again next time


def verify_file(path: Path, sha256: str, size: int = 0, *, full: bool = False, progress: bool = True) -> None:
    """Check ``path`` against the pinned size (bytes; 0 = unchecked) and sha256 (hex). A file whose stamp matches
    its size and mtime is not hashed again unless ``full``.

    Raises:
        ChecksumError: size or digest differ; the message names the file, the expected and actual digest.
    """
    if size and path.stat().st_size != size:
        raise ChecksumError(
            f"checksum failed for {path}: size {path.stat().st_size:,} bytes, expected {size:,} "
            "(a part is missing or truncated)"
        )
    if not full and _stamp_ok(path, sha256):
        return
    got = sha256_file(path, progress=progress)
    if got != sha256:
        raise ChecksumError(f"checksum failed for {path}: sha256 {got}, expected {sha256}")
    _write_stamp(path, sha256)


def join_parts(parts: list[Path], out: Path, *, progress: bool = True) -> None:
    """Concatenate ``parts`` in order into ``out`` atomically (a ``.partial`` file renamed at the end; its name is
    the process's own, so processes resolving the same model at once each write whole files)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.name}.{os.getpid()}.partial")
    total = sum(p.stat().st_size for p in parts)
    with open(tmp, "wb") as w, tqdm(
        total=total, unit="B", unit_scale=True, desc=f"joining {out.name}", disable=not progress
    ) as bar:
        for p in parts:
            with open(p, "rb") as r:
                for b in _blocks(r, bar):
                    w.write(b)
    os.replace(tmp, out)


def part_key(p: Path) -> tuple:
    """Sort key of a package's part files: the last number in the name (part2 before part10), then the name."""
    nums = re.findall(r"\d+", p.name)
    return (int(nums[-1]) if nums else 0, p.name)


def split_parts(path: Path) -> list[Path]:
    """The parts ``<path>.part001 ...`` that :func:`split_file` wrote, in order (empty when there are none)."""
    return sorted(path.parent.glob(path.name + PART_SUFFIX + "[0-9][0-9][0-9]"))


def split_file(path: Path, part_bytes: int) -> list[Path]:
    """Split ``path`` into ``<path>.part001 ...`` of at most ``part_bytes`` bytes each and remove it (a file that fits
    stays whole). Returns the parts (or [path]).

    Raises:
        ValueError: part_bytes < 1, or more than 999 parts would be needed.
    """
    if part_bytes < 1:
        raise ValueError("part_bytes must be positive")
    size = path.stat().st_size
    if size <= part_bytes:
        return [path]
    n = -(-size // part_bytes)
    if n > 999:
        raise ValueError(f"{path}: {n} parts of {part_bytes} bytes; at most 999")
    parts = []
    with open(path, "rb") as r:
        for i in range(1, n + 1):
            part = path.with_name(f"{path.name}{PART_SUFFIX}{i:03d}")
            left = min(part_bytes, size - (i - 1) * part_bytes)
            with open(part, "wb") as w:
                while left:
                    b = r.read(min(left, BLOCK))
                    w.write(b)
                    left -= len(b)
            parts.append(part)
    path.unlink()
    return parts
