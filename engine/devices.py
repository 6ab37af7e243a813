"""Where each stage runs: one device rule for the three stage families, ``asr``, ``llm`` and ``tts``.

Each family has a setting ``<family>.device`` = ``"auto" | "cpu" | "cuda"`` (read with :func:`device_setting`):

    * ``"cpu"`` — the CPU, whatever the machine has;
    * ``"auto"`` — CUDA when the runtime that runs the stage sees a CUDA device (torch: ``torch.cuda.is_available()``;
      CTranslate2: ``ctranslate2.get_cuda_device_count() > 0``) and can use it (:func:`cuda_works`: torch runs a
      float32 matmul through cuBLAS; CTranslate2 copies and converts a tensor on the device and loads its cuBLAS),
      else the CPU. A runtime that sees a device it cannot use is told in one warning line (``asr.device=auto:
      CTranslate2 sees 1 CUDA device but cannot use it (libcublas.so.12 not found); running on the CPU``), as is a
      model whose load on CUDA raises (:func:`load_on`); the stage then runs on the CPU;
    * ``"cuda"`` — CUDA; without a CUDA device the runtime sees and can use, :func:`resolve_device` raises
      :class:`DeviceError` (one line, naming the setting), which the command line prints as one line and exits 2
      with.

The method settings ``asr.method`` and ``tts.codec_method`` take ``"auto"`` too: the method the committed results
show fastest on the device the stage runs on (:data:`GPU_METHOD`, :data:`CPU_METHOD`, :func:`resolve_method`).

What runs where (:func:`plan` reports it; :mod:`engine.runtime` builds it):

    * asr: CTranslate2 Whisper (encoder and the live decoder), float16 on CUDA and ``asr.compute_type`` (int8) on the
      CPU; the torch Whisper that CTC-SSD, SpecASR and ``ar_torch`` verify with (and the CTC head), float16 on CUDA,
      float32 on the CPU.
    * llm: llama.cpp with every layer offloaded (``n_gpu_layers = -1``) when its build has GPU offload
      (``llama_cpp.llama_supports_gpu_offload()``); on a CUDA machine whose llama.cpp was built without it,
      :class:`engine.llm.torch_lm.TorchCausalLM` on the same GGUF (dequantised by transformers) in bfloat16; on the
      CPU, llama.cpp. An LLM server (``llm.backend = remote``) runs where the server runs.
    * tts: the codec LM (``tts.engine = codec``) in torch on CUDA, on ONNX Runtime on the CPU; Piper (ONNX Runtime)
      always on the CPU (its VITS decoder is not autoregressive and runs faster than real time there).

"auto" asks CTranslate2 first where a stage could also run on torch: it answers without importing torch, so a
machine without a CUDA device never imports torch just to learn that; where it counts a device (or torch is already
imported), torch's own answer decides the torch stages. Each runtime's use probe (:data:`WORKS`) runs once per
process, and only where that runtime sees a device.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from engine.config import ConfigError

_T = TypeVar("_T")
log = logging.getLogger(__name__)

SETTINGS = ("auto", "cpu", "cuda")
FAMILIES = ("asr", "llm", "tts")
BACKENDS = ("torch", "ctranslate2")


class DeviceError(ConfigError):
    """A stage's device setting cannot be satisfied (``cuda`` without a CUDA device its runtime sees and can use, an
    unknown value).
    A :class:`engine.config.ConfigError`, so every front end reports it as a configuration problem."""


def _torch_cuda() -> tuple[bool, str]:
    try:
        import torch
    except ImportError:
        return False, "torch is not installed"
    if torch.version.cuda is None:
        return False, f"torch {torch.__version__} was built without CUDA"
    if not torch.cuda.is_available():
        return False, f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees none{_visible_note()}"
    return True, torch.cuda.get_device_name(0)


def _ct2_cuda() -> tuple[bool, str]:
    try:
        import ctranslate2
    except ImportError:
        return False, "CTranslate2 is not installed"
    try:
        n = ctranslate2.get_cuda_device_count()
    except Exception as e:  # a CUDA runtime that cannot start: the same as none
        return False, f"CTranslate2 cannot query CUDA ({type(e).__name__})"
    if n <= 0:
        return False, f"CTranslate2 {ctranslate2.__version__} counts 0 CUDA devices{_visible_note()}"
    return True, f"{n} CUDA device" + ("s" if n > 1 else "")


def _visible_note() -> str:
    v = os.environ.get("CUDA_VISIBLE_DEVICES")
    return f"; CUDA_VISIBLE_DEVICES={v!r}" if v is not None else ""


def _one_line(e: BaseException, limit: int = 160) -> str:
    """An exception as one short line: its first line of text (a missing shared library as "NAME not found")."""
    text = (str(e).strip().splitlines() or [""])[0].strip()
    if "cannot open shared object file" in text:
        return text.split(":", 1)[0].strip() + " not found"
    text = text or type(e).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


@functools.cache
def _torch_works() -> tuple[bool, str]:
    """Whether torch can compute on its CUDA device: an 8×8 float32 matmul (cuBLAS) on ``cuda``, synchronised and
    checked against the CPU's. Run once per process. Returns (works, what ran or why not, one line)."""
    try:
        import torch

        a = torch.arange(64, dtype=torch.float32).reshape(8, 8) / 64
        want = float((a @ a).sum())
        d = a.to("cuda")
        got = float((d @ d).sum())
        torch.cuda.synchronize()
    except Exception as e:  # a missing or broken CUDA library, a device the build has no kernels for, ...
        return False, _one_line(e)
    if abs(got - want) > 1e-3 * abs(want):
        return False, f"a float32 matmul on CUDA gave {got:g} instead of {want:g}"
    return True, "a float32 matmul ran on CUDA"


def _ct2_cublas() -> str:
    """The cuBLAS library CTranslate2 loads at its first matrix product (4.x: CUDA 12; 3.x: CUDA 11)."""
    import ctranslate2

    cuda = "12" if int(ctranslate2.__version__.split(".")[0]) >= 4 else "11"
    return f"cublas64_{cuda}.dll" if sys.platform == "win32" else f"libcublas.so.{cuda}"


@functools.cache
def _ct2_works() -> tuple[bool, str]:
    """Whether CTranslate2 can compute on its CUDA device: a float32 tensor copied to ``cuda``, converted to float16
    and back there (the CUDA runtime and CTranslate2's kernels for this GPU) and copied back unchanged; then its cuBLAS
    loaded (CTranslate2 loads it lazily, at a model's first matrix product, so a missing one would otherwise fail
    only at the first decode). Run once per process. Returns (works, what ran or why not, one line)."""
    try:
        import ctranslate2
        import numpy as np

        x = np.arange(8, dtype=np.float32).reshape(2, 4)
        sv = ctranslate2.StorageView.from_array(x).to_device(ctranslate2.Device.cuda)
        sv = sv.to(ctranslate2.DataType.float16).to(ctranslate2.DataType.float32)
        back = np.array(sv.to_device(ctranslate2.Device.cpu))
        if not np.array_equal(back, x):
            return False, "a tensor copied through CUDA came back changed"
        lib = _ct2_cublas()
        ctypes.CDLL(lib)
    except Exception as e:
        return False, _one_line(e)
    return True, f"a tensor ran through CUDA and {lib} loaded"


# backend → probe() → (CUDA device visible, what was seen or why not). Tests replace entries to play a GPU machine.
PROBES = {"torch": _torch_cuda, "ctranslate2": _ct2_cuda}
# backend → probe() → (the runtime can compute on its CUDA device, what ran or why not), asked only where PROBES
# says a device is visible. Tests replace entries to play a machine whose runtime sees a GPU it cannot use.
WORKS = {"torch": _torch_works, "ctranslate2": _ct2_works}
#: each backend's name in messages
RUNTIMES = {"torch": "torch", "ctranslate2": "CTranslate2"}
_REAL_PROBES, _REAL_WORKS = dict(PROBES), dict(WORKS)

# the warnings given (each once per process) and the families a failed CUDA load sent to the CPU (family → why)
_WARNED: set[str] = set()
_FELL_BACK: dict[str, str] = {}


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        log.warning(message)


def cuda_visible(backend: str = "torch", shortcut: bool = True) -> tuple[bool, str]:
    """Whether ``backend`` ("torch" or "ctranslate2") sees a CUDA device, and what it saw or why not (one line).

    For "torch" with ``shortcut``, CTranslate2 is asked first while torch is not imported yet (module docstring).

    Raises:
        ValueError: an unknown backend.
    """
    if backend not in PROBES:
        raise ValueError(f"unknown device backend {backend!r} ({', '.join(PROBES)})")
    if backend == "torch" and shortcut and "torch" not in sys.modules:
        seen, why = PROBES["ctranslate2"]()
        if not seen:
            return False, why
    return PROBES[backend]()


def cuda_works(backend: str = "torch") -> tuple[bool, str]:
    """Whether ``backend`` ("torch" or "ctranslate2") can compute on the CUDA device it sees (:data:`WORKS`; the real
    probes run once per process), and what ran or why not (one line). Ask it only where :func:`cuda_visible` says
    yes. A visibility probe a test replaced (a played GPU machine) is taken to work unless its :data:`WORKS` entry
    is replaced too: the real use probe would only report this machine's own CUDA.

    Raises:
        ValueError: an unknown backend.
    """
    if backend not in WORKS:
        raise ValueError(f"unknown device backend {backend!r} ({', '.join(WORKS)})")
    probe = WORKS[backend]
    if probe is _REAL_WORKS[backend] and PROBES[backend] is not _REAL_PROBES[backend]:
        return True, "a played GPU machine"
    return probe()


def resolve_device(setting: str, family: str, backend: str = "torch") -> str:
    """The device a stage of ``family`` runs on, by the rule of the module docstring.

    With "auto", a runtime that sees a CUDA device it cannot use (:func:`cuda_works`) gives the CPU and one warning
    line per process (logging, ``engine.devices``); so does a family whose model load on CUDA failed
    (:func:`load_on`).

    Args:
        setting: "auto", "cpu" or "cuda" (the value of ``<family>.device``).
        family: "asr", "llm" or "tts" (names the setting in an error).
        backend: the runtime that will run it: "torch" or "ctranslate2".

    Returns:
        "cpu" or "cuda".

    Raises:
        DeviceError: ``setting`` is "cuda" and ``backend`` sees no CUDA device or cannot use the one it sees, or
            ``setting`` or ``family`` is unknown. The message is one line: ``asr.device=cuda but no CUDA device is
            visible (...)``, ``asr.device=cuda but CTranslate2 cannot use its 1 CUDA device (...)``.
    """
    if family not in FAMILIES:
        raise DeviceError(f"unknown stage family {family!r} ({', '.join(FAMILIES)})")
    if setting not in SETTINGS:
        raise DeviceError(f"{family}.device = {setting!r}: choose one of {', '.join(SETTINGS)}")
    if setting == "cpu" or (setting == "auto" and family in _FELL_BACK):
        return "cpu"
    seen, what = cuda_visible(backend, shortcut=setting == "auto")  # "cuda": the runtime's own answer, and reason
    if not seen:
        if setting == "cuda":
            raise DeviceError(f"{family}.device=cuda but no CUDA device is visible ({what}); "
                              f"set {family}.device=auto or cpu")
        return "cpu"
    works, why = cuda_works(backend)
    if works:
        return "cuda"
    name = RUNTIMES[backend]
    if setting == "cuda":
        raise DeviceError(f"{family}.device=cuda but {name} cannot use its {what} ({why}); "
                          f"set {family}.device=auto or cpu")
    _warn_once(f"{family}.device=auto: {name} sees {what} but cannot use it ({why}); running on the CPU")
    return "cpu"


def load_on(family: str, setting: str, device: str, load: Callable[[str], _T]) -> tuple[_T, str]:
    """``load(device)``, and the device it loaded on. With ``setting`` "auto" and ``device`` "cuda", a load that
    raises (a CUDA library missing at load time, out of device memory, ...) is done again on the CPU after one
    warning line, and every later "auto" resolution of ``family`` in this process gives the CPU.

    Args:
        family: "asr", "llm" or "tts"; setting: its ``<family>.device``; device: the resolved "cpu" or "cuda".
        load: builds the model on the device it is given ("cpu" or "cuda").

    Returns:
        (what ``load`` returned, "cpu" or "cuda").

    Raises:
        Whatever ``load`` raises on the CPU, or on CUDA with ``setting`` "cuda". A ConfigError (a bad setting), an
        :class:`engine.model_files.ModelError` or a FileNotFoundError (a missing or damaged model) is never retried.
    """
    from engine.model_files import ModelError

    if device != "cuda" or setting != "auto":
        return load(device), device
    try:
        return load("cuda"), "cuda"
    except (ConfigError, ModelError, FileNotFoundError):
        raise
    except Exception as e:
        why = _one_line(e)
        _FELL_BACK[family] = why
        _warn_once(f"{family}.device=auto: loading on CUDA failed ({why}); running on the CPU")
    return load("cpu"), "cpu"


def device_setting(cfg, family: str) -> str:
    """``cfg.<family>.device``, "auto" where the configuration has no such setting."""
    return str(getattr(getattr(cfg, family, None), "device", "auto") or "auto")


def ct2_compute_type(device: str, compute_type: str = "int8") -> str:
    """CTranslate2's compute type on ``device``: int8 (the CPU default) becomes float16 on CUDA."""
    return "float16" if device == "cuda" and compute_type == "int8" else compute_type


def torch_dtype_name(device: str, family: str) -> str:
    """The torch dtype a family's torch models use on ``device``: float16 (Whisper, the CTranslate2 fp16 weights) or
    bfloat16 (the LLM) on CUDA, float32 on the CPU."""
    if device != "cuda":
        return "float32"
    return "bfloat16" if family == "llm" else "float16"


@dataclass(frozen=True)
class LlmPlacement:
    """How the local LLM runs.

    Attributes:
        device: "cpu" or "cuda".
        backend: "llama_cpp" or "torch" (:class:`engine.llm.torch_lm.TorchCausalLM`).
        n_gpu_layers: llama.cpp layers offloaded (0 on the CPU; -1 = all).
        dtype: the torch dtype name for the torch backend ("" for llama.cpp).
        runs: one line for reports.
    """

    device: str
    backend: str
    n_gpu_layers: int = 0
    dtype: str = ""
    runs: str = ""


def _llama_offload() -> bool:
    try:
        import llama_cpp
    except ImportError:
        return False
    return bool(llama_cpp.llama_supports_gpu_offload())


def llm_placement(setting: str = "auto", n_gpu_layers: int = -1) -> LlmPlacement:
    """Where the in-process LLM runs (module docstring): llama.cpp offloaded when its build can, else torch bf16 on
    CUDA, else llama.cpp on the CPU. :meth:`engine.runtime.Runtime.llm` builds the adapter it names.

    Args:
        setting: ``llm.device``; n_gpu_layers: ``llm.n_gpu_layers`` (-1 = all; 0 keeps llama.cpp on the CPU), used
            when llama.cpp offloads.

    Raises:
        DeviceError: "cuda" without a CUDA device that llama.cpp or torch can use.
    """
    if setting not in SETTINGS:
        raise DeviceError(f"llm.device = {setting!r}: choose one of {', '.join(SETTINGS)}")
    if setting == "cpu":
        return LlmPlacement("cpu", "llama_cpp", 0, "", "llama.cpp on the CPU")
    if _llama_offload():
        seen, why = cuda_visible("ctranslate2")
        if not seen:
            seen, why = cuda_visible("torch")
        if seen and n_gpu_layers != 0:
            layers = "all layers" if n_gpu_layers < 0 else f"{n_gpu_layers} layers"
            return LlmPlacement("cuda", "llama_cpp", n_gpu_layers, "", f"llama.cpp, {layers} on CUDA")
        if setting == "cuda" and not seen:
            raise DeviceError(f"llm.device=cuda but no CUDA device is visible ({why}); set llm.device=auto or cpu")
        return LlmPlacement("cpu", "llama_cpp", 0, "", "llama.cpp on the CPU" + (" (llm.n_gpu_layers = 0)" if seen
                                                                               else ""))
    if resolve_device(setting, "llm", "torch") == "cuda":
        return LlmPlacement("cuda", "torch", 0, "bfloat16",
                            "transformers (GGUF dequantised) bfloat16 on CUDA: llama.cpp was built without GPU offload")
    return LlmPlacement("cpu", "llama_cpp", 0, "", "llama.cpp on the CPU")


ASR_TORCH_METHODS = ("ssd", "specasr", "ar_torch")

# What "auto" picks for a method setting, by the device its stage runs on. Each value is decided by the committed
# results named beside it; None on CUDA = no GPU result for that stage yet: the CPU's choice.
#: on CUDA: asr.method — no committed GPU result for the streaming ASR yet (bench/results/gpu/<device>/ has no ASR
#: file), so AR; tts.codec_method — PCG, 1.25x target-only AR at lower CER on an NVIDIA H200 (rounds on the device
#: as CUDA graphs; bench/results/gpu/nvidia-h200/tts_graphs.json, "selection")
GPU_METHOD: dict[str, str | None] = {"asr.method": None, "tts.codec_method": "pcg"}
#: on the CPU: plain AR Whisper on CTranslate2 (bench/results/asr_stream.json: fastest on 2 cores at the same WER) and
#: target-only AR codec sampling (bench/results/tts.json: no speculative sampler clearly faster at the same CER)
CPU_METHOD: dict[str, str] = {"asr.method": "ar", "tts.codec_method": "ar"}


def resolve_method(key: str, value: str, device: str) -> str:
    """The method a method setting runs: ``value`` itself, or for "auto" the choice of :data:`GPU_METHOD` (``device``
    "cuda") or :data:`CPU_METHOD`.

    Args:
        key: "asr.method" or "tts.codec_method"; value: its setting; device: "cpu" or "cuda", where the stage runs.

    Raises:
        ValueError: ``value`` is "auto" and ``key`` has no automatic choice.
    """
    if value != "auto":
        return value
    if key not in CPU_METHOD:
        raise ValueError(f"{key} has no automatic choice ({', '.join(CPU_METHOD)} have)")
    return (GPU_METHOD.get(key) if device == "cuda" else None) or CPU_METHOD[key]


def method_label(value: str, resolved: str) -> str:
    """A method for reports: ``"auto → ar"`` where the setting was "auto", else the method (``"ssd"``)."""
    return f"{value} → {resolved}" if value != resolved else resolved


def asr_device(cfg) -> str:
    """Where the ASR of ``cfg`` runs: CTranslate2's answer for ``asr.device`` (:func:`resolve_device`); where that is
    CUDA and the method (resolved on CUDA) decodes with torch (:data:`ASR_TORCH_METHODS`), torch must be able to use
    CUDA too, else with "auto" the whole ASR runs on the CPU (one warning line).

    Returns:
        "cpu" or "cuda".

    Raises:
        DeviceError: ``asr.device=cuda`` and CTranslate2, or torch for a torch method, cannot run there.
    """
    s = device_setting(cfg, "asr")
    dev = resolve_device(s, "asr", "ctranslate2")
    method = resolve_method("asr.method", cfg.asr.method, dev)
    if dev != "cuda" or method not in ASR_TORCH_METHODS:
        return dev
    if s == "cuda":
        return resolve_device("cuda", "asr", "torch")
    seen, why = cuda_visible("torch", shortcut=False)
    if seen:
        seen, why = cuda_works("torch")
    if seen:
        return "cuda"
    _warn_once(f"asr.device=auto: asr.method={method} decodes with torch, which cannot use CUDA ({why}); "
               "running on the CPU")
    return "cpu"


def asr_method(cfg) -> str:
    """The ASR method ``cfg`` runs: ``asr.method``, or for "auto" the choice on :func:`asr_device`'s device.

    Raises:
        DeviceError: as :func:`asr_device`.
    """
    a = cfg.asr.method
    return a if a != "auto" else resolve_method("asr.method", a, asr_device(cfg))


def check_explicit(cfg) -> None:
    """Fail now for a family set to "cuda" that cannot run there (no model is loaded; "auto" and "cpu" import
    nothing).

    Raises:
        DeviceError: the first such family, in asr, llm, tts order.
    """
    if device_setting(cfg, "asr") == "cuda":
        asr_device(cfg)
    if device_setting(cfg, "llm") == "cuda" and getattr(cfg.llm, "backend", "local") != "remote":
        llm_placement("cuda", cfg.llm.n_gpu_layers)
    if device_setting(cfg, "tts") == "cuda":
        resolve_device("cuda", "tts", "torch")


def plan(cfg) -> dict[str, dict]:
    """Where each stage of ``cfg`` runs, without loading a model: what the latency report and ``specvoice models``
    print.

    Returns:
        {"asr" | "llm" | "tts": {"setting", "device", "runs"}} ("runs": one line naming the runtime, precision and
        method; "asr" adds "method" and, with the codec TTS, "tts" adds "codec_method": the method run, as
        :func:`method_label` writes it; "llm" adds "backend" and "n_gpu_layers").

    Raises:
        DeviceError: a family set to "cuda" that cannot run there.
    """
    a = cfg.asr
    out: dict[str, dict] = {}
    s = device_setting(cfg, "asr")
    dev = asr_device(cfg)
    method = resolve_method("asr.method", a.method, dev)
    runs = f"CTranslate2 Whisper {ct2_compute_type(dev, a.compute_type)} on {dev.upper()}"
    if method in ASR_TORCH_METHODS:
        runs += f"; torch Whisper decoder {torch_dtype_name(dev, 'asr')} on {dev.upper()}"
    label = method_label(a.method, method)
    out["asr"] = {"setting": s, "device": dev, "runs": f"{runs}; asr.method {label}", "method": label}
    s = device_setting(cfg, "llm")
    if getattr(cfg.llm, "backend", "local") == "remote":
        out["llm"] = {"setting": s, "device": "remote", "runs": f"LLM server at {cfg.llm.base_url}"}
    else:
        p = llm_placement(s, cfg.llm.n_gpu_layers)
        out["llm"] = {"setting": s, "device": p.device, "runs": p.runs, "backend": p.backend,
                      "n_gpu_layers": p.n_gpu_layers}
    s = device_setting(cfg, "tts")
    if cfg.tts.engine == "codec":
        dev = resolve_device(s, "tts", "torch")
        label = method_label(cfg.tts.codec_method, resolve_method("tts.codec_method", cfg.tts.codec_method, dev))
        runs = ("codec LM in torch float32 on CUDA" if dev == "cuda" else "codec LM on ONNX Runtime, CPU")
        out["tts"] = {"setting": s, "device": dev, "runs": f"{runs}; tts.codec_method {label}",
                      "codec_method": label}
    else:
        out["tts"] = {"setting": s, "device": "cpu", "runs": "Piper on ONNX Runtime, CPU"}
    return out
