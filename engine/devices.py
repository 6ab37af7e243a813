"""Where each stage runs: one device rule for the three stage families, ``asr``, ``llm`` and ``tts``.

Each family has a setting ``<family>.device`` = ``"auto" | "cpu" | "cuda"`` (read with :func:`device_setting`):

    * ``"cpu"`` — the CPU, whatever the machine has;
    * ``"auto"`` — CUDA when the runtime that runs the stage sees a CUDA device (torch: ``torch.cuda.is_available()``;
      CTranslate2: ``ctranslate2.get_cuda_device_count() > 0``), else the CPU;
    * ``"cuda"`` — CUDA; without a visible CUDA device :func:`resolve_device` raises :class:`DeviceError` (one line,
      naming the setting), which the command line prints as one line and exits 2 with.

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
imported), torch's own answer decides the torch stages.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from engine.config import ConfigError

SETTINGS = ("auto", "cpu", "cuda")
FAMILIES = ("asr", "llm", "tts")
BACKENDS = ("torch", "ctranslate2")


class DeviceError(ConfigError):
    """A stage's device setting cannot be satisfied (``cuda`` without a visible CUDA device, an unknown value).
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
    return True, f"{n} CUDA device(s)"


def _visible_note() -> str:
    v = os.environ.get("CUDA_VISIBLE_DEVICES")
    return f"; CUDA_VISIBLE_DEVICES={v!r}" if v is not None else ""


# backend → probe() → (CUDA device visible, what was seen or why not). Tests replace entries to play a GPU machine.
PROBES = {"torch": _torch_cuda, "ctranslate2": _ct2_cuda}


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


def resolve_device(setting: str, family: str, backend: str = "torch") -> str:
    """The device a stage of ``family`` runs on, by the rule of the module docstring.

    Args:
        setting: "auto", "cpu" or "cuda" (the value of ``<family>.device``).
        family: "asr", "llm" or "tts" (names the setting in an error).
        backend: the runtime that will run it: "torch" or "ctranslate2".

    Returns:
        "cpu" or "cuda".

    Raises:
        DeviceError: ``setting`` is "cuda" and no CUDA device is visible to ``backend``, or ``setting`` or ``family``
            is unknown. The message is one line: ``asr.device=cuda but no CUDA device is visible (...)``.
    """
    if family not in FAMILIES:
        raise DeviceError(f"unknown stage family {family!r} ({', '.join(FAMILIES)})")
    if setting not in SETTINGS:
        raise DeviceError(f"{family}.device = {setting!r}: choose one of {', '.join(SETTINGS)}")
    if setting == "cpu":
        return "cpu"
    seen, why = cuda_visible(backend, shortcut=setting == "auto")  # "cuda": the runtime's own answer, and reason
    if seen:
        return "cuda"
    if setting == "cuda":
        raise DeviceError(f"{family}.device=cuda but no CUDA device is visible ({why}); "
                          f"set {family}.device=auto or cpu")
    return "cpu"


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


def check_explicit(cfg) -> None:
    """Fail now for a family set to "cuda" that cannot run there (no model is loaded; "auto" and "cpu" import
    nothing).

    Raises:
        DeviceError: the first such family, in asr, llm, tts order.
    """
    if device_setting(cfg, "asr") == "cuda":
        resolve_device("cuda", "asr", "ctranslate2")
    if device_setting(cfg, "llm") == "cuda" and getattr(cfg.llm, "backend", "local") != "remote":
        llm_placement("cuda", cfg.llm.n_gpu_layers)
    if device_setting(cfg, "tts") == "cuda":
        resolve_device("cuda", "tts", "torch")


ASR_TORCH_METHODS = ("ssd", "specasr", "ar_torch")


def plan(cfg) -> dict[str, dict]:
    """Where each stage of ``cfg`` runs, without loading a model: what the latency report and ``specvoice models``
    print.

    Returns:
        {"asr" | "llm" | "tts": {"setting", "device", "runs"}} ("runs": one line naming the runtime and precision;
        "llm" adds "backend" and "n_gpu_layers").

    Raises:
        DeviceError: a family set to "cuda" without a CUDA device.
    """
    a = cfg.asr
    out: dict[str, dict] = {}
    s = device_setting(cfg, "asr")
    dev = resolve_device(s, "asr", "ctranslate2")
    runs = f"CTranslate2 Whisper {ct2_compute_type(dev, a.compute_type)} on {dev.upper()}"
    if a.method in ASR_TORCH_METHODS:
        tdev = resolve_device("cuda" if dev == "cuda" else "cpu", "asr", "torch")
        runs += f"; torch Whisper decoder {torch_dtype_name(tdev, 'asr')} on {tdev.upper()}"
    out["asr"] = {"setting": s, "device": dev, "runs": runs}
    s = device_setting(cfg, "llm")
    if getattr(cfg.llm, "backend", "local") == "remote":
        out["llm"] = {"setting": s, "device": "remote", "runs": f"LLM server at {cfg.llm.base_url}"}
    else:
        p = llm_placement(s, cfg.llm.n_gpu_layers)
        out["llm"] = {"setting": s, "device": p.device, "runs": p.runs, "backend": p.backend,
                      "n_gpu_layers": p.n_gpu_layers}
    s = device_setting(cfg, "tts")
    dev = resolve_device(s, "tts", "torch")
    if cfg.tts.engine == "codec":
        runs = ("codec LM in torch float32 on CUDA" if dev == "cuda" else "codec LM on ONNX Runtime, CPU")
    else:
        runs = "Piper on ONNX Runtime, CPU"
    out["tts"] = {"setting": s, "device": dev if cfg.tts.engine == "codec" else "cpu", "runs": runs}
    return out

