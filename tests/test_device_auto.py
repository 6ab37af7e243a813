"""``*.device = auto`` takes CUDA only where the stage's runtime can use it, and ``asr.method`` /
``tts.codec_method = auto`` pick the method the committed results show fastest on that device (engine/devices.py).

A GPU machine is played by replacing the runtimes' probes: :data:`engine.devices.PROBES` (does the runtime see a
CUDA device) and :data:`engine.devices.WORKS` (can it compute there). The real use probes and the fallback of a load
that fails on CUDA are run as they answer on this machine, which has no CUDA device.
"""

import ctypes
import logging

import pytest

from engine import devices
from engine.config import Config, ConfigError, load_config
from engine.devices import (
    DeviceError,
    asr_device,
    asr_method,
    cuda_visible,
    plan,
    resolve_device,
    resolve_method,
)

CUBLAS = "libcublas.so.12 not found"
NO_KERNEL = "CUDA error: no kernel image is available for execution on the device"


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    """No warning given and no family sent to the CPU yet (both are kept per process)."""
    monkeypatch.setattr(devices, "_WARNED", set())
    monkeypatch.setattr(devices, "_FELL_BACK", {})
    monkeypatch.setattr(devices, "_llama_offload", lambda: False)  # the LLM's CUDA path is torch's


@pytest.fixture
def no_cuda():
    if cuda_visible("ctranslate2")[0] or cuda_visible("torch", shortcut=False)[0]:
        pytest.skip("this machine has a CUDA device")


def _play(monkeypatch, torch_works=(True, "a float32 matmul ran on CUDA"), ct2_works=(True, "ok")):
    """A machine whose torch and CTranslate2 both see one CUDA device, and can or cannot use it."""
    monkeypatch.setitem(devices.PROBES, "torch", lambda: (True, "NVIDIA Test GPU"))
    monkeypatch.setitem(devices.PROBES, "ctranslate2", lambda: (True, "1 CUDA device"))
    monkeypatch.setitem(devices.WORKS, "torch", lambda: torch_works)
    monkeypatch.setitem(devices.WORKS, "ctranslate2", lambda: ct2_works)


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "engine.devices" and r.levelno == logging.WARNING]


# -- the use probe -------------------------------------------------------------------------------------------------
def test_auto_on_a_gpu_its_runtime_cannot_use_is_the_cpu_and_one_warning_line(monkeypatch, caplog):
    _play(monkeypatch, torch_works=(False, NO_KERNEL), ct2_works=(False, CUBLAS))
    caplog.set_level(logging.WARNING, logger="engine.devices")
    for _ in range(3):  # asked again and again (the runtime asks per model): still one line
        assert resolve_device("auto", "asr", "ctranslate2") == "cpu"
    cannot = f"asr.device=auto: CTranslate2 sees 1 CUDA device but cannot use it ({CUBLAS}); running on the CPU"
    assert _warnings(caplog) == [cannot]
    where = plan(load_config(None, sets=["tts.engine=codec"]))
    assert {s: where[s]["device"] for s in where} == {"asr": "cpu", "llm": "cpu", "tts": "cpu"}
    lines = _warnings(caplog)
    assert lines[1:] == [f"{family}.device=auto: torch sees NVIDIA Test GPU but cannot use it ({NO_KERNEL}); "
                         "running on the CPU" for family in ("llm", "tts")]
    assert all("\n" not in line for line in lines)
    assert where["asr"]["method"] == "auto → ar" and "int8 on CPU" in where["asr"]["runs"]


def test_explicit_cuda_on_a_gpu_its_runtime_cannot_use_is_one_clear_error(monkeypatch):
    from engine.runtime import Runtime

    _play(monkeypatch, torch_works=(False, NO_KERNEL), ct2_works=(False, CUBLAS))
    with pytest.raises(DeviceError) as e:
        resolve_device("cuda", "asr", "ctranslate2")
    assert str(e.value) == (f"asr.device=cuda but CTranslate2 cannot use its 1 CUDA device ({CUBLAS}); "
                            "set asr.device=auto or cpu")
    with pytest.raises(DeviceError, match=rf"^tts.device=cuda but torch cannot use its NVIDIA Test GPU \({NO_KERNEL}"):
        resolve_device("cuda", "tts", "torch")
    with pytest.raises(DeviceError, match="^llm.device=cuda but torch cannot use"):
        devices.llm_placement("cuda")
    # the runtime fails before any model loads; every front end reports a ConfigError in one line
    for family in ("asr", "llm", "tts"):
        with pytest.raises(ConfigError, match=f"^{family}.device=cuda but "):
            Runtime(load_config(None, sets=[f"{family}.device=cuda"]), progress=False)


def test_auto_on_a_gpu_its_runtimes_can_use_is_cuda(monkeypatch, caplog):
    _play(monkeypatch)
    caplog.set_level(logging.WARNING, logger="engine.devices")
    where = plan(load_config(None, sets=["tts.engine=codec", "tts.codec_method=auto"]))
    assert {s: where[s]["device"] for s in where} == {"asr": "cuda", "llm": "cuda", "tts": "cuda"}
    assert "float16 on CUDA" in where["asr"]["runs"] and "torch float32 on CUDA" in where["tts"]["runs"]
    assert where["tts"]["codec_method"] == "auto → pcg"
    assert _warnings(caplog) == []


def test_a_played_gpu_machine_is_taken_to_work_unless_its_use_probe_is_played_too(monkeypatch):
    monkeypatch.setitem(devices.PROBES, "ctranslate2", lambda: (True, "1 CUDA device"))
    assert devices.cuda_works("ctranslate2") == (True, "a played GPU machine")
    monkeypatch.setitem(devices.WORKS, "ctranslate2", lambda: (False, CUBLAS))
    assert devices.cuda_works("ctranslate2") == (False, CUBLAS)
    with pytest.raises(ValueError, match="unknown device backend"):
        devices.cuda_works("tpu")


def test_the_real_use_probes_answer_in_one_line_once_per_process(no_cuda):
    for probe in (devices._ct2_works, devices._torch_works):
        works, why = probe()
        assert not works and why and "\n" not in why and len(why) <= 160
        assert probe() == (works, why) and probe.cache_info().hits >= 1  # run once, then remembered
    with pytest.raises(OSError) as e:  # what a missing cuBLAS looks like to the CTranslate2 probe
        ctypes.CDLL("libspecvoice-missing.so.12")
    assert devices._one_line(e.value) == "libspecvoice-missing.so.12 not found"


# -- a load on CUDA that raises ------------------------------------------------------------------------------------
def test_a_load_that_fails_on_cuda_falls_back_to_the_cpu_with_auto_only(caplog):
    caplog.set_level(logging.WARNING, logger="engine.devices")

    def load(dev):
        if dev == "cuda":
            raise RuntimeError("CUDA failed with error out of memory\nmore detail")
        return f"model on {dev}"

    with pytest.raises(RuntimeError, match="out of memory"):
        devices.load_on("tts", "cuda", "cuda", load)  # asked for CUDA: no silent fallback
    assert devices.load_on("tts", "auto", "cuda", load) == ("model on cpu", "cpu")
    fell_back = "tts.device=auto: loading on CUDA failed (CUDA failed with error out of memory); running on the CPU"
    assert _warnings(caplog) == [fell_back]
    assert resolve_device("auto", "tts", "torch") == "cpu"  # the family stays on the CPU for the process
    from engine.model_files import ModelError

    def missing(dev):
        raise ModelError("no such model")

    with pytest.raises(ModelError):  # a missing model is not a device problem: never retried
        devices.load_on("asr", "auto", "cuda", missing)
    assert "asr" not in devices._FELL_BACK


def test_whisper_that_cannot_load_on_cuda_loads_on_the_cpu(no_cuda, monkeypatch, caplog):
    """CTranslate2 played as seeing and using a GPU: the real Whisper load on CUDA fails on this machine, and the
    runtime loads it on the CPU and runs the default method there (AR)."""
    from engine.asr.whisper_ar import WhisperARBackend
    from engine.runtime import Runtime

    _play(monkeypatch)
    caplog.set_level(logging.WARNING, logger="engine.devices")
    cfg = load_config(None)
    rt = Runtime(cfg, progress=False)
    assert rt.whisper_ssd().device == "cpu"
    lines = _warnings(caplog)
    assert len(lines) == 1 and lines[0].startswith("asr.device=auto: loading on CUDA failed (")
    assert lines[0].endswith("); running on the CPU")
    assert isinstance(rt.asr_backend(), WhisperARBackend)
    assert rt.devices()["asr"]["device"] == "cpu" and rt.devices()["asr"]["method"] == "auto → ar"


# -- the automatic methods -----------------------------------------------------------------------------------------
def test_asr_method_auto_is_ar_on_the_cpu(no_cuda):
    cfg = Config()
    assert cfg.asr.method == "auto" and asr_device(cfg) == "cpu" and asr_method(cfg) == "ar"
    assert plan(cfg)["asr"]["method"] == "auto → ar"
    assert plan(load_config(None, sets=["asr.method=ssd"]))["asr"]["method"] == "ssd"  # a chosen method is kept
    assert resolve_method("tts.codec_method", "auto", "cpu") == "ar"


def test_asr_method_auto_on_cuda_is_the_tables_choice(monkeypatch):
    _play(monkeypatch)
    cfg = load_config(None)
    assert devices.GPU_METHOD["asr.method"] is None  # no GPU result for the streaming ASR yet: AR
    assert asr_method(cfg) == "ar" and plan(cfg)["asr"]["method"] == "auto → ar"
    monkeypatch.setitem(devices.GPU_METHOD, "asr.method", "ssd")  # a GPU result that shows SSD winning
    assert asr_method(cfg) == "ssd"
    where = plan(cfg)
    assert where["asr"]["method"] == "auto → ssd" and "torch Whisper decoder float16 on CUDA" in where["asr"]["runs"]
    assert resolve_method("tts.codec_method", "auto", "cuda") == devices.GPU_METHOD["tts.codec_method"] == "pcg"
    with pytest.raises(ValueError, match="no automatic choice"):
        resolve_method("caption.method", "auto", "cuda")


def test_a_torch_method_whose_torch_cannot_use_cuda_runs_the_asr_on_the_cpu(monkeypatch, caplog):
    _play(monkeypatch, torch_works=(False, NO_KERNEL))
    caplog.set_level(logging.WARNING, logger="engine.devices")
    assert asr_device(load_config(None, sets=["asr.method=ssd"])) == "cpu"
    torch_cannot = f"asr.device=auto: asr.method=ssd decodes with torch, which cannot use CUDA ({NO_KERNEL}); "
    assert _warnings(caplog) == [torch_cannot + "running on the CPU"]
    assert asr_device(load_config(None, sets=["asr.method=ar"])) == "cuda"  # CTranslate2 alone can
    with pytest.raises(DeviceError, match="^asr.device=cuda but torch cannot use"):
        asr_device(load_config(None, sets=["asr.method=ssd", "asr.device=cuda"]))


def test_the_method_settings_accept_auto_and_name_a_bad_value():
    assert load_config(None, sets=["asr.method=auto", "tts.codec_method=auto"]).asr.method == "auto"
    with pytest.raises(ConfigError) as e:
        load_config(None, sets=["asr.method=fastest"])
    assert str(e.value) == "asr.method: 'fastest' is not one of auto, ssd, specasr, ar, ar_torch"
    with pytest.raises(ConfigError, match=r"^tts.codec_method: 'fast' is not one of auto, pcg, sd, ssd, ar$"):
        load_config(None, sets=["tts.codec_method=fast"])
