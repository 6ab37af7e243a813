"""The GPU benchmark suite: ``specvoice bench all --device cuda`` (``--device cpu --tiny``: a check that it runs).

A subset of the README's benchmarks, sized to finish in about 8 minutes on one GPU, each speculative method beside
its AR baseline measured in the same run on the same device:

    * ``gpu-asr``: CTC-SSD (both presets of ctc_self_speculative_asr.txt Table 1, and with the draft re-join) and
      SpecASR (plain draft-model SD, adaptive drafting, draft recycling, the sparse token tree) vs AR greedy on the
      same torch Whisper decoder, with WER, on the 40 held-out synthesised utterances and jfk.flac;
    * ``gpu-verify-cost``: verification cost curves, 1 … 48 tokens, of the Whisper decoder and the LLM
      (bench/gpu_verify_cost.py);
    * ``gpu-predgen``: PredGen (greedy verifier) vs the cascade and the cascade with incremental prefill, on the voice
      benchmark's spoken-question partial streams;
    * ``gpu-ssbd``: SSBD (β = 0.2) vs AR re-translation, en→de, on the Multi30k sentences the caption corpus speaks,
      streamed lag-3.

Every stage runs on ``--device``: :meth:`Suite.start` writes a configuration file with ``asr.device``, ``llm.device``
and ``tts.device`` set to it (over the configuration file in effect, whose other settings are kept) and points
``$SPECVOICE_CONFIG`` at it, so each job's process, which loads its own configuration, runs there. The LLM is llama.cpp
with every layer offloaded when its build has CUDA, else transformers bfloat16 on the GPU (engine/devices.py).

Outputs: ``bench/results/gpu/<device>/`` (``<device>`` = the GPU's name as a slug, e.g. ``nvidia-h100-80gb-hbm3``)
with ``device.json`` (GPU, memory, torch/CUDA/CTranslate2/llama.cpp versions, where each stage ran) beside the job
JSONs. A CPU run writes to ``out/gpu-suite/cpu/`` unless ``--out`` says otherwise: CPU numbers are never filed as
GPU numbers. ``--device cuda`` on a machine without a visible CUDA device fails before any job, in one line.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = "{out}"  # bench/all.py's placeholder for the file a job writes (this module is imported by it, not the reverse)
VOICE_PARTIALS = "bench/data/voice_asr_partials.json"
GPU_RESULTS = ROOT / "bench" / "results" / "gpu"
CPU_OUT = ROOT / "out" / "gpu-suite" / "cpu"
ASR_METHODS = "ar,ar_ct2,ssd_acc,ssd_rtfx,ssd_acc_rejoin,sd8,adaptive,recycling,tree"


class SuiteError(RuntimeError):
    """The suite cannot run on the device asked for (one line)."""


def _bench(name: str, *args: str) -> tuple[str, ...]:
    return ("bench", name, *args, "--out", OUT)


def _job(name: str, output: str, argv: tuple[str, ...], estimate_s: int, about: str = "") -> dict:
    """One job as the keyword arguments of :class:`bench.all.Job`."""
    return {"name": name, "output": output, "argv": argv, "estimate_s": estimate_s, "about": about}


def jobs(tiny: bool = False) -> tuple[dict, ...]:
    """The suite's jobs, as :class:`bench.all.Job` keyword arguments. ``tiny``: the same jobs on the smallest inputs
    and the small LLM (a check that every job runs end to end on a CPU; its numbers measure nothing). Estimates are
    seconds on one H100-class GPU (tiny: on a 2-core CPU)."""
    if tiny:
        return (
            _job("gpu-asr", "asr.json", _bench("asr", "--methods", "ar,ssd_acc,sd8", "--limit", "2"), 60,
                about="tiny: AR vs CTC-SSD vs SpecASR SD on 2 utterances"),
            _job("gpu-verify-cost", "verify_cost.json",
                _bench("verify-cost", "--ks", "1", "4", "--repeats", "1", "--context", "32", "--role", "llm_draft"),
                40, about="tiny: 1- and 4-token passes, Whisper decoder and the 0.5B"),
            _job("gpu-predgen", "predgen_voice.json",
                _bench("predgen", "--stream", VOICE_PARTIALS, "--n", "1", "--methods", "cascade_prefill", "greedy",
                       "--max-tokens", "8", "--budget", "4", "--role", "llm_draft"), 90,
                about="tiny: PredGen vs cascade on one stream, the 0.5B, 8 answer tokens"),
            _job("gpu-ssbd", "ssbd_multi30k.json",
                _bench("ssbd", "--n", "1", "--betas", "0.0", "0.2", "--ks", "3", "--max-tokens", "16",
                       "--role", "llm_draft"), 60,
                about="tiny: SSBD vs AR re-translation on one sentence, the 0.5B"),
            _job("gpu-voice", "voice.json", _bench("voice", "--n", "1", "--methods", "cascade"), 120,
                about="tiny: voice to voice, one spoken question, the cascade"),
        )
    return (
        _job("gpu-asr", "asr.json", _bench("asr", "--methods", ASR_METHODS), 90,
            about="CTC-SSD and SpecASR vs AR greedy on the same torch Whisper decoder, WER, 41 inputs (held-out + jfk)"),
        _job("gpu-verify-cost", "verify_cost.json", _bench("verify-cost"), 60,
            about="verification cost curves 1…48 tokens: Whisper decoder (after jfk) and the 1.5B LLM (after 256 "
                  "tokens)"),
        _job("gpu-predgen", "predgen_voice.json",
            _bench("predgen", "--stream", VOICE_PARTIALS, "--n", "12", "--methods", "cascade_prefill", "greedy",
                   "--budget", "8", "--max-tokens", "48", "--top-k", "3"), 150,
            about="PredGen greedy vs cascade and cascade + incremental prefill, 12 spoken-question partial streams"),
        _job("gpu-ssbd", "ssbd_multi30k.json",
            _bench("ssbd", "--n", "15", "--betas", "0.0", "0.2", "--ks", "5", "--max-tokens", "96"), 150,
            about="SSBD (β 0.2) vs AR re-translation, Multi30k en→de streamed lag-3, 15 sentences"),
        _job("gpu-voice", "voice.json", _bench("voice", "--n", "6"), 120,
            about="voice to voice (end of speech → first audio), every stage on the device but Piper (CPU): "
                  "cascade, cascade + incremental prefill and PredGen on 6 spoken questions"),
    )


def slug(name: str) -> str:
    """A folder name for a device: lower case, runs of other characters as one '-' ("NVIDIA H100 80GB HBM3" →
    "nvidia-h100-80gb-hbm3")."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "device"


def machine_info() -> dict:
    """The machine a benchmark ran on, for its JSON: CPU, Python, and each runtime's version and what CUDA device it
    sees (none imported that is not installed)."""
    from bench.asr_stream_bench import machine

    info = machine()
    try:
        import torch

        info["torch"] = torch.__version__
        info["torch_cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            info["gpu"] = props.name
            info["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
            info["gpu_capability"] = f"{props.major}.{props.minor}"
    except ImportError:
        info["torch"] = None
    try:
        import ctranslate2

        info["ctranslate2"] = ctranslate2.__version__
        info["ctranslate2_cuda_devices"] = ctranslate2.get_cuda_device_count()
    except ImportError:
        info["ctranslate2"] = None
    try:
        import llama_cpp

        info["llama_cpp"] = llama_cpp.__version__
        info["llama_cpp_gpu_offload"] = bool(llama_cpp.llama_supports_gpu_offload())
    except ImportError:
        info["llama_cpp"] = None
    if shutil.which("nvidia-smi"):
        import subprocess

        try:
            r = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=20)
            info["nvidia_smi"] = r.stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            pass
    return info


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string is a valid TOML basic string
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def to_toml(data: dict[str, dict]) -> str:
    """``{section: {key: scalar}}`` as TOML (the shape of a specvoice configuration file)."""
    lines = []
    for section, values in data.items():
        lines.append(f"[{section}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in values.items()]
        lines.append("")
    return "\n".join(lines)


class Suite:
    """The suite on one device: its jobs, its output folder, the configuration its jobs run with.

    Args:
        device: "cuda" or "cpu".
        tiny: the tiny inputs (:func:`jobs`).

    Raises:
        SuiteError: an unknown device, or "cuda" where a stage cannot run on CUDA (no visible device: the message
            of :class:`engine.devices.DeviceError`), or an unreadable configuration file.
    """

    def __init__(self, device: str, tiny: bool = False):
        import tomllib

        from engine.config import ConfigError, default_config_path, load_config
        from engine.devices import check_explicit

        if device not in ("cuda", "cpu"):
            raise SuiteError(f"--device must be cuda or cpu, not {device!r}")
        self.device, self.tiny = device, tiny
        self.jobs = jobs(tiny)
        self.estimates_on = "a 2-core CPU" if tiny else "one H100-class GPU"  # what the jobs' estimate_s were sized for
        base = default_config_path()
        try:
            self.settings = tomllib.loads(base.read_text()) if base else {}
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise SuiteError(f"cannot read the configuration file {base}: {e}") from None
        for family in ("asr", "llm", "tts"):
            self.settings.setdefault(family, {})["device"] = device
        try:
            self.cfg = load_config(None, sets=[f"{f}.device={device}" for f in ("asr", "llm", "tts")])
            check_explicit(self.cfg)
        except ConfigError as e:  # DeviceError: "asr.device=cuda but no CUDA device is visible (...)"
            raise SuiteError(str(e)) from None
        if device == "cuda":
            from engine.devices import cuda_visible

            seen, name = cuda_visible("torch", shortcut=False)
            self.name = name if seen else "cuda"
            self.default_out = GPU_RESULTS / slug(self.name)
        else:
            self.name = "cpu"
            self.default_out = CPU_OUT
        if tiny:
            self.default_out = self.default_out.with_name(self.default_out.name + "-tiny")

    def start(self, out_dir: Path) -> Path:
        """Point ``$SPECVOICE_CONFIG`` (for this process and the jobs it starts) at the suite's configuration and write
        ``out_dir/device.json``. Returns the configuration file (removed when this process exits)."""
        from engine.devices import plan

        tmp = Path(tempfile.mkdtemp(prefix="specvoice-gpu-suite-"))
        atexit.register(shutil.rmtree, tmp, True)
        path = tmp / "config.toml"
        path.write_text(to_toml(self.settings), encoding="utf-8")
        os.environ["SPECVOICE_CONFIG"] = str(path)
        out_dir.mkdir(parents=True, exist_ok=True)
        info = {"device": self.device, "name": self.name, "tiny": self.tiny,
                "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
                # asr as the speculative methods run it: CTranslate2 encoder + the torch decoder they verify with
                "stages": plan(self.cfg.with_overrides({"asr": {"method": "ssd"}})),
                "settings": {f: self.settings[f] for f in ("asr", "llm", "tts")},
                "models_dir": os.environ.get("SPECVOICE_MODELS_DIR") or None, "machine": machine_info(),
                "jobs": {j["name"]: "specvoice " + " ".join(j["argv"]) for j in self.jobs}}
        (out_dir / "device.json").write_text(json.dumps(info, indent=1), encoding="utf-8")
        return path
