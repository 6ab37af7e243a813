"""Model layer: join split parts, verify sha256, refuse mismatches, local-path and env overrides."""

import shutil
from pathlib import Path

import pytest

from engine.config import Config, ConfigError, load_config
from engine.models import EMBEDDED, ChecksumError, ModelError, embedded_parts, resolve, resolve_embedded, sha256_file


def test_embedded_whisper_base_joined_and_verified(tmp_path):
    m = resolve_embedded("asr_target", tmp_path, progress=False)
    spec = EMBEDDED["asr_target"]
    joined = tmp_path / spec.joined_name
    assert m.path == joined.parent and joined.stat().st_size == spec.size
    assert sha256_file(joined) == spec.sha256
    for side in ("config.json", "tokenizer.json", "vocabulary.txt"):
        assert (joined.parent / side).exists()
    # a second resolve trusts the stamp and does not re-join (mtime unchanged)
    mtime = joined.stat().st_mtime_ns
    resolve_embedded("asr_target", tmp_path, progress=False)
    assert joined.stat().st_mtime_ns == mtime


def _fake_packages(tmp_path: Path, corrupt: str) -> Path:
    """Copies of the two real Whisper-base part packages under new module names, one part damaged."""
    root = tmp_path / "pkgs"
    for i, module in enumerate(EMBEDDED["asr_target"].packages, 1):
        src = Path(embedded_parts("asr_target")[i - 1]).parent.parent
        dst = root / f"fakewhisper_part{i}"
        shutil.copytree(src, dst)
    part2 = root / "fakewhisper_part2" / "data" / "model.bin.part2"
    if corrupt == "flip":
        with open(part2, "r+b") as f:
            f.seek(1000)
            b = f.read(1)
            f.seek(1000)
            f.write(bytes([b[0] ^ 0xFF]))
    elif corrupt == "truncate":
        with open(part2, "r+b") as f:
            f.truncate(part2.stat().st_size - 4096)
    return root


@pytest.mark.parametrize("corrupt", ["flip", "truncate"])
def test_corrupted_part_is_refused_with_the_file_named(tmp_path, monkeypatch, corrupt):
    import dataclasses

    root = _fake_packages(tmp_path, corrupt)
    monkeypatch.syspath_prepend(str(root))
    spec = EMBEDDED["asr_target"]
    fake = dataclasses.replace(spec, packages=("fakewhisper_part1", "fakewhisper_part2"))
    monkeypatch.setitem(EMBEDDED, "asr_target", fake)
    cache = tmp_path / "cache"
    with pytest.raises(ChecksumError) as e:
        resolve_embedded("asr_target", cache, progress=False)
    msg = str(e.value)
    assert "model.bin" in msg and "checksum failed" in msg
    # the bad join is not kept around
    assert not (cache / spec.joined_name).exists()


def test_missing_package_is_a_clear_error(monkeypatch):
    import dataclasses

    fake = dataclasses.replace(EMBEDDED["llm_draft"], packages=("no_such_model_pkg",), pip=("no-such-model-pkg==1",))
    monkeypatch.setitem(EMBEDDED, "llm_draft", fake)
    with pytest.raises(ModelError, match="no-such-model-pkg==1"):
        resolve("llm_draft", Config(), progress=False)


def test_local_path_and_env_override(tmp_path, monkeypatch):
    base = resolve("asr_target", Config(), progress=False)
    cfg = load_config(None, {"asr_target": str(base.path)})
    m = resolve("asr_target", cfg, progress=False)
    assert m.source == "path" and Path(m.path) == Path(base.path)
    monkeypatch.setenv("SPECVOICE_MODEL_LLM_DRAFT", str(tmp_path / "missing.gguf"))
    with pytest.raises(ModelError, match="does not exist"):
        resolve("llm_draft", load_config(None), progress=False)
    (tmp_path / "notwhisper").mkdir()
    with pytest.raises(ModelError, match="no model.bin"):
        resolve("asr_target", load_config(None, {"asr_target": str(tmp_path / "notwhisper")}), progress=False)


def test_hub_id_is_recognised_without_network(monkeypatch):
    """A hub id is fetched when resolved; offline that is one clear ModelError naming the id and the hub."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelError, match=r"asr_target: cannot fetch Systran/faster-whisper-base from the hub"):
        resolve("asr_target", load_config(None, {"asr_target": "Systran/faster-whisper-base"}), progress=False)


def test_config_file_and_bad_values(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text('[vad]\nmin_silence_s = 0.9\n[asr]\ntau_ctc = 3.0\n')
    cfg = load_config(p, None, ["caption.beta=0.3"])
    assert cfg.vad.min_silence_s == 0.9 and cfg.asr.tau_ctc == 3.0 and cfg.caption.beta == 0.3
    with pytest.raises(ConfigError, match="unknown config key"):
        load_config(None, None, ["vad.nope=1"])
    with pytest.raises(ConfigError, match="expected float"):
        load_config(None, None, ["vad.threshold=abc"])
    with pytest.raises(ConfigError, match="unknown model role"):
        load_config(None, {"llm_huge": "x"})
