"""A models folder: every model role's files in one directory, to carry to a machine without the model packages.

The folder's layout (:data:`DIR_LAYOUT`), its ``SHA256SUMS`` manifest and how roles are looked up in it are described
in :mod:`engine.models`, the entry point: :func:`engine.models.resolve` looks in the folder of :func:`models_dir`
first. :func:`export_models` writes a folder from the installed packages (``python -m engine.models export DIR``),
:func:`join_folder` joins its split files (``python -m engine.models join DIR``).

Raises:
    ModelError: no manifest, a role still split into parts, a listed file missing, an unknown role.
    ChecksumError: a file differs from its pinned or manifest digest.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from engine.config import ROLES, Config
from engine.model_files import (PART_SUFFIX, ChecksumError, ModelError, join_parts, sha256_file, split_file,
                                split_parts, verify_file)
from engine.model_roles import EMBEDDED, ResolvedModel, resolve_embedded

MODELS_DIR_ENV = "SPECVOICE_MODELS_DIR"
MANIFEST = "SHA256SUMS"
#: role → its place in a models folder: a directory (CTranslate2 Whisper) or a file
DIR_LAYOUT: dict[str, str] = {"asr_target": "asr_target", "asr_draft": "asr_draft", "llm_target": "llm_target.gguf",
                              "llm_draft": "llm_draft.gguf", "tts_voice": "tts_voice.onnx", "vad": "vad.onnx"}


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
    """Every file of ``role`` in a models folder (main file first): its main file and what the manifest lists with
    it."""
    main, rel = _main_rel(role), DIR_LAYOUT[role]
    if EMBEDDED[role].kind == "ct2_whisper":
        others = sorted(r for r in manifest if r.startswith(rel + "/") and r != main)
    else:
        others = [rel + ".json"] if EMBEDDED[role].kind == "piper" else []
    return [main, *others]


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
    """Resolve ``role`` from the models folder ``d`` (layout in :mod:`engine.models`), or None when the folder does
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
        if split_parts(main):
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
            raise ModelError(f"model for {role}: {f} is missing"
                             + (" (join its parts first)" if split_parts(f) else ""))
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
  grep "  $rel\\$" SHA256SUMS | $sum -c - ||
    { echo "join.sh: $rel does not match SHA256SUMS (a part is missing or damaged)" >&2; exit 1; }
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
    """Write the models folder ``out`` (layout in :mod:`engine.models`) from the installed model packages: each
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
        voice_json = old.with_name(old.name + ".json")
        for stale in [old, *split_parts(old), voice_json, *split_parts(voice_json)]:
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
        parts = split_parts(whole)
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
