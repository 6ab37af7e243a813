"""Where stages run (engine/devices.py) and models from a folder (engine/models.py ``models.dir``), on the CPU.

The device rule is checked as it answers on this machine (no CUDA device: auto is the CPU, an explicit ``cuda`` one
line and exit 2) and, with the runtimes' probes replaced, as it answers on a GPU machine. The models folder is
written by ``python -m engine.models export`` from the installed packages and read back by the CLI.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine import devices
from engine.config import ConfigError, load_config
from engine.devices import DeviceError, cuda_visible, llm_placement, plan, resolve_device
from engine.models import (EMBEDDED, MANIFEST, ChecksumError, ModelError, export_models, join_folder, read_manifest,
                           resolve, sha256_file)

from .conftest import ROOT, run_cli

ERROR_LINE = "no CUDA device is visible"


@pytest.fixture
def no_cuda():
    if cuda_visible("ctranslate2")[0] or cuda_visible("torch", shortcut=False)[0]:
        pytest.skip("this machine has a CUDA device")


@pytest.fixture
def gpu_machine(monkeypatch):
    """The probes of a machine whose torch and CTranslate2 both see one CUDA device."""
    monkeypatch.setitem(devices.PROBES, "torch", lambda: (True, "NVIDIA Test GPU"))
    monkeypatch.setitem(devices.PROBES, "ctranslate2", lambda: (True, "1 CUDA device(s)"))


def _flip_byte(path: Path, offset: int = 4096) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))


# -- the device rule ---------------------------------------------------------------------------------------------
def test_auto_picks_the_cpu_without_cuda(no_cuda):
    for family in ("asr", "llm", "tts"):
        for backend in ("torch", "ctranslate2"):
            assert resolve_device("auto", family, backend) == "cpu"
            assert resolve_device("cpu", family, backend) == "cpu"
    p = llm_placement("auto", -1)
    assert (p.device, p.backend, p.n_gpu_layers) == ("cpu", "llama_cpp", 0)
    cfg = load_config(None, sets=["asr.method=specasr", "tts.engine=codec"])
    where = plan(cfg)
    assert {s: where[s]["device"] for s in where} == {"asr": "cpu", "llm": "cpu", "tts": "cpu"}
    assert "int8" in where["asr"]["runs"] and "float32" in where["asr"]["runs"]  # CT2 int8, torch decoder fp32
    assert "ONNX Runtime" in where["tts"]["runs"]


def test_explicit_cuda_without_a_device_is_one_clear_error(no_cuda):
    for family, backend in (("asr", "ctranslate2"), ("asr", "torch"), ("tts", "torch")):
        with pytest.raises(DeviceError) as e:
            resolve_device("cuda", family, backend)
        msg = str(e.value)
        assert msg.startswith(f"{family}.device=cuda but {ERROR_LINE}") and "\n" not in msg
        assert isinstance(e.value, ConfigError)  # every front end reports it as a configuration problem
    with pytest.raises(DeviceError, match=f"^llm.device=cuda but {ERROR_LINE}"):
        llm_placement("cuda")
    with pytest.raises(DeviceError, match="choose one of auto, cpu, cuda"):
        resolve_device("gpu", "asr")


def test_the_rule_on_a_gpu_machine(gpu_machine, monkeypatch):
    assert resolve_device("auto", "asr", "ctranslate2") == "cuda"
    assert resolve_device("cuda", "tts", "torch") == "cuda"
    assert resolve_device("cpu", "asr", "ctranslate2") == "cpu"
    # llama.cpp built without CUDA: the torch LLM in bfloat16 on the GPU
    monkeypatch.setattr(devices, "_llama_offload", lambda: False)
    p = llm_placement("auto", -1)
    assert (p.device, p.backend, p.dtype) == ("cuda", "torch", "bfloat16")
    # llama.cpp built with CUDA: every layer offloaded
    monkeypatch.setattr(devices, "_llama_offload", lambda: True)
    p = llm_placement("auto", -1)
    assert (p.device, p.backend, p.n_gpu_layers) == ("cuda", "llama_cpp", -1)
    assert llm_placement("cpu", -1).n_gpu_layers == 0  # llm.device=cpu keeps every layer on the CPU
    cfg = load_config(None, sets=["asr.method=ssd", "tts.engine=codec"])
    where = plan(cfg)
    assert {s: where[s]["device"] for s in where} == {"asr": "cuda", "llm": "cuda", "tts": "cuda"}
    assert "float16" in where["asr"]["runs"] and "torch" in where["tts"]["runs"]
    assert devices.ct2_compute_type("cuda", "int8") == "float16" and devices.ct2_compute_type("cpu") == "int8"
    # Piper has no GPU path: it stays on the CPU whatever the setting
    assert plan(load_config(None, sets=["tts.device=cuda"]))["tts"]["device"] == "cpu"


@pytest.mark.parametrize("family", ["asr", "llm", "tts"])
def test_cli_cuda_without_a_device_exits_2_in_one_line(no_cuda, tmp_path, family):
    r = run_cli(["models", "--roles", "vad", "--quiet", "--set", f"{family}.device=cuda", "--out", str(tmp_path)])
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"specvoice: error: {family}.device=cuda but {ERROR_LINE}")


def test_cli_transcribe_and_bench_all_on_cuda_without_a_device(no_cuda, tmp_path, jfk_path):
    r = run_cli(["transcribe", str(jfk_path), "--fast", "--set", "asr.device=cuda", "--out", str(tmp_path)])
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "asr.device=cuda" in r.stderr
    r = run_cli(["bench", "all", "--device", "cuda", "--out", str(tmp_path / "gpu")])
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [r.stderr.strip()] and ERROR_LINE in r.stderr
    assert not (tmp_path / "gpu").exists()  # nothing ran


def test_specvoice_models_says_where_each_stage_runs(no_cuda, tmp_path):
    r = run_cli(["models", "--roles", "vad", "--out", str(tmp_path)])
    assert r.returncode == 0, r.stderr
    rep = json.loads((tmp_path / "models-report.json").read_text())
    assert set(rep["devices"]) == {"asr", "llm", "tts"}
    assert rep["devices"]["llm"]["runs"] == "llama.cpp on the CPU"
    assert any(line.split("]")[-1].split()[:2] == ["asr", "cpu"] for line in r.stdout.splitlines())


# -- models from a folder ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    """Whisper base and the VAD exported whole (no parts) from the installed packages."""
    d = tmp_path_factory.mktemp("models")
    rep = export_models(d, ["asr_target", "vad"], split_mib=0, progress=False)
    assert set(rep["files"]) >= {"asr_target/model.bin", "asr_target/tokenizer.json", "vad.onnx"}
    return d


def _transcript(args, tmp: Path) -> dict:
    r = run_cli(["transcribe", *args, "--fast", "--quiet", "--out", str(tmp)])
    assert r.returncode == 0, r.stderr
    return json.loads((tmp / "transcribe-report.json").read_text())


def test_models_folder_loads_the_same_whisper(exported, tmp_path, jfk_path):
    manifest = read_manifest(exported)
    assert manifest["asr_target/model.bin"] == EMBEDDED["asr_target"].sha256
    for rel, digest in manifest.items():
        assert sha256_file(exported / rel) == digest
    from_dir = _transcript([str(jfk_path), "--models", str(exported)], tmp_path / "dir")
    assert from_dir["models"]["asr_target"] == {"path": str(exported / "asr_target"), "source": "dir",
                                                "kind": "ct2_whisper"}
    assert from_dir["models"]["vad"]["source"] == "dir"
    embedded = _transcript([str(jfk_path)], tmp_path / "pkg")
    assert embedded["models"]["asr_target"]["source"] == "embedded"
    assert from_dir["asr"]["text"] == embedded["asr"]["text"]
    assert "ask not what your country" in from_dir["asr"]["text"].lower().replace(".", "")


def test_a_role_missing_from_the_folder_comes_from_its_package(exported):
    cfg = load_config(None, sets=[f"models.dir={exported}"])
    assert resolve("asr_target", cfg, progress=False).source == "dir"
    assert resolve("asr_draft", cfg, progress=False).source == "embedded"
    with pytest.raises(ModelError, match="does not exist"):
        resolve("vad", load_config(None, sets=[f"models.dir={exported / 'nope'}"]), progress=False)


@pytest.mark.parametrize("damaged", ["asr_target/model.bin", "asr_target/tokenizer.json", "vad.onnx"])
def test_a_corrupted_file_in_the_folder_fails_its_checksum(exported, tmp_path, damaged):
    d = tmp_path / "models"
    shutil.copytree(exported, d)
    _flip_byte(d / damaged, offset=min(4096, (d / damaged).stat().st_size // 2))
    role = "vad" if damaged == "vad.onnx" else "asr_target"
    with pytest.raises(ChecksumError) as e:
        resolve(role, load_config(None, sets=[f"models.dir={d}"]), progress=False)
    assert f"checksum failed for {d / damaged}" in str(e.value)
    assert (d / damaged).exists()  # the user's file is named, never deleted
    r = run_cli(["models", "--roles", role, "--quiet", "--models", str(d), "--out", str(tmp_path / "out")])
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [r.stderr.strip()] and f"checksum failed for {d / damaged}" in r.stderr


def test_split_folder_is_refused_until_joined(tmp_path):
    d = tmp_path / "models"
    rep = export_models(d, ["asr_target"], split_mib=64, progress=False)
    assert rep["files"]["asr_target/model.bin"]["parts"] == 3
    parts = sorted((d / "asr_target").glob("model.bin.part*"))
    assert [p.name for p in parts] == ["model.bin.part001", "model.bin.part002", "model.bin.part003"]
    assert all(p.stat().st_size <= 64 << 20 for p in parts) and not (d / "asr_target" / "model.bin").exists()
    cfg = load_config(None, sets=[f"models.dir={d}"])
    with pytest.raises(ModelError, match="split into parts.*join.sh"):
        resolve("asr_target", cfg, progress=False)
    r = subprocess.run(["sh", str(d / "join.sh")], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert not list((d / "asr_target").glob("model.bin.part*"))
    m = resolve("asr_target", cfg, verify="full", progress=False)
    assert m.source == "dir" and sha256_file(Path(m.path) / "model.bin") == EMBEDDED["asr_target"].sha256


def test_join_refuses_a_damaged_part_and_keeps_the_parts(tmp_path):
    d = tmp_path / "models"
    export_models(d, ["vad"], split_mib=1, progress=False)  # 1.2 MB: two parts
    parts = sorted(d.glob("vad.onnx.part*"))
    assert len(parts) == 2
    _flip_byte(parts[1], offset=10)
    with pytest.raises(ChecksumError, match="joined from 2 parts"):
        join_folder(d, progress=False)
    assert sorted(d.glob("vad.onnx.part*")) == parts and not (d / "vad.onnx").exists()
    r = subprocess.run(["sh", str(d / "join.sh")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "does not match SHA256SUMS" in r.stderr


def test_export_cli_and_a_folder_without_manifest(tmp_path):
    d = tmp_path / "models"
    r = subprocess.run([sys.executable, "-m", "engine.models", "export", str(d), "--roles", "vad", "--quiet"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "vad.onnx" in r.stdout and (d / "join.sh").exists() and (d / MANIFEST).exists()
    (d / MANIFEST).unlink()
    with pytest.raises(ModelError, match=f"has no {MANIFEST}"):
        resolve("vad", load_config(None, sets=[f"models.dir={d}"]), progress=False)
    r = subprocess.run([sys.executable, "-m", "engine.models", "export", str(d), "--roles", "nope"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "unknown model role 'nope'" in r.stderr


# -- the GPU suite, run on the CPU -----------------------------------------------------------------------------
def test_verify_cost_curve_on_the_cpu(no_cuda, tmp_path):
    out = tmp_path / "verify_cost.json"
    r = run_cli(["bench", "verify-cost", "--only", "whisper", "--ks", "1", "4", "--repeats", "1",
                 "--set", "asr.device=cpu", "--out", str(out)])
    assert r.returncode == 0, r.stderr
    rep = json.loads(out.read_text())
    w = rep["whisper"]
    assert (w["device"], w["dtype"]) == ("cpu", "float32") and w["context_tokens"] > 20
    assert [row["tokens"] for row in w["curve"]] == [1, 4]
    assert w["curve"][0]["steps"] == 1.0 and w["curve"][1]["ms"] > 0
    assert rep["devices"]["asr"]["device"] == "cpu" and "llm" not in rep


def test_gpu_suite_lists_its_jobs_and_never_files_cpu_numbers_as_gpu(tmp_path):
    r = run_cli(["bench", "all", "--device", "cpu", "--tiny", "--dry-run"])
    assert r.returncode == 0, r.stderr
    names = [line.split()[0] for line in r.stdout.splitlines() if "→" in line]
    assert names == ["gpu-asr", "gpu-verify-cost", "gpu-predgen", "gpu-ssbd", "gpu-voice"]
    assert "bench/results" not in r.stdout and "out/gpu-suite/cpu-tiny" in r.stdout
    r = run_cli(["bench", "all", "--tiny"])
    assert r.returncode == 2 and "--tiny needs --device" in r.stderr
    # --models reaches every benchmark (it is taken off their own options); a missing folder is one line
    r = run_cli(["bench", "all", "--device", "cpu", "--tiny", "--dry-run", "--models", str(tmp_path)])
    assert r.returncode == 0, r.stderr
    r = run_cli(["bench", "verify-cost", "--models", str(tmp_path / "nope")])
    assert r.returncode == 2 and r.stderr.strip() == f"specvoice: error: --models {tmp_path / 'nope'}: no such folder"


# -- the LLM backends the rule picks -----------------------------------------------------------------------------
def _tiny_qwen():
    """A tiny random Qwen2: these checks are of the adapter's bookkeeping, not of a model."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)

    class Tok:
        def encode(self, text, **kw):
            return [ord(c) % 64 for c in text]

        def decode(self, ids):
            return "".join(chr(65 + i % 26) for i in ids)

    return Qwen2ForCausalLM(cfg), Tok()


def test_torch_lm_dtype_context_and_device(no_cuda):
    import numpy as np
    import torch

    from engine.llm.torch_lm import TorchCausalLM

    model, tok = _tiny_qwen()
    lm = TorchCausalLM(model, tok, device="cpu", dtype="bfloat16", n_ctx=6)
    assert lm.device == "cpu" and lm.dtype == torch.bfloat16
    rows = lm.eval([1, 2, 3, 4])
    assert rows.dtype == np.float32 and rows.shape == (4, 64)  # host float32 whatever the weights' dtype
    with pytest.raises(ValueError, match="context window of 6 tokens"):
        lm.eval([5, 6, 7])
    assert lm.n_past == 4
    with pytest.raises(DeviceError, match="^llm.device=cuda"):
        TorchCausalLM(model, tok, device="cuda")


def test_runtime_builds_the_torch_llm_where_the_rule_says(monkeypatch, small_gguf, tmp_path):
    """Where llama.cpp cannot use the GPU the runtime builds TorchCausalLM on the same GGUF, converted once and kept
    in the cache; played here on the CPU (the placement the rule gives on a GPU machine, the device swapped for the
    CPU)."""
    import numpy as np

    from engine.llm.torch_lm import TorchCausalLM
    from engine.runtime import Runtime

    monkeypatch.setattr(devices, "llm_placement",
                        lambda setting, n: devices.LlmPlacement("cpu", "torch", 0, "bfloat16", "torch test"))
    cfg = load_config(None, {"llm_draft": str(small_gguf)}, [f"models.cache_dir={tmp_path}"])
    lm = Runtime(cfg, progress=False).llm("llm_draft", n_ctx=512)
    assert isinstance(lm, TorchCausalLM) and lm.n_ctx == 512 and str(lm.dtype) == "torch.bfloat16"
    ids = lm.tokenize("The capital of France is")
    rows = lm.eval(ids)
    assert lm.detokenize(rows[-1:].argmax(-1).tolist()).strip().startswith("Paris")
    assert (tmp_path / "torch_gguf" / f"{small_gguf.stem}-bfloat16" / "source.json").exists()
    again = Runtime(cfg, progress=False).llm("llm_draft", n_ctx=512)  # read back from the cache, not converted
    assert again.tokenize("The capital of France is") == ids
    np.testing.assert_array_equal(again.eval(ids), rows)


def test_the_cpu_is_read_from_cpuinfo_in_one_place(tmp_path):
    """engine.core.cpu reads /proc/cpuinfo: every processor's flags, the model name, and from the flags whether
    onnxruntime's uint8 × int8 kernel saturates (x86 without VNNI, or flags unknown; never on Arm)."""
    from engine.core.cpu import cpu_flags, cpu_model, int8_gemm_saturates

    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Processor\n"
                    "flags\t\t: fpu sse2 avx2\n\nprocessor\t: 1\nmodel name\t: Intel(R) Xeon(R) Processor\n"
                    "flags\t\t: fpu avx2 avx512_vnni\n")
    missing = tmp_path / "missing"
    assert cpu_flags(info) == {"fpu", "sse2", "avx2", "avx512_vnni"} and cpu_flags(missing) == frozenset()
    assert cpu_model(info) == "Intel(R) Xeon(R) Processor" and cpu_model(missing) == ""
    assert not int8_gemm_saturates(info, machine="x86_64")
    plain = tmp_path / "plain"
    plain.write_text("flags\t\t: fpu sse2 avx2\n")
    assert int8_gemm_saturates(plain, machine="x86_64") and int8_gemm_saturates(missing, machine="AMD64")
    assert not int8_gemm_saturates(plain, machine="aarch64") and not int8_gemm_saturates(missing, machine="arm64")
    assert isinstance(cpu_flags(), frozenset) and isinstance(cpu_model(), str)  # this machine's, whatever it is
