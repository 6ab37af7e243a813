"""One typed configuration tree for specvoice.

Defaults live in code (these frozen dataclasses); a TOML file, environment variables and CLI flags
override them, in that order. A threshold has exactly one name from the paper to the GUI: the
field name here (``tau_ctc``, ``tau_slm``, ``beta``, ``mask_k``, ``theta`` ...).

Sources, lowest to highest precedence:
    1. the defaults below;
    2. a TOML file (``--config FILE``, else ``$SPECVOICE_CONFIG``, else ``~/.config/specvoice/config.toml``
       when it exists), whose tables mirror the dataclasses: ``[asr] model_role = "asr_draft"``;
    3. environment variables ``SPECVOICE_MODEL_<ROLE>`` for the model of a role;
    4. CLI flags (``--model ROLE=SPEC``, ``--set section.key=value``).

Raises:
    ConfigError: an unknown section/key or a value of the wrong type or range.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

ROLES = ("asr_target", "asr_draft", "llm_target", "llm_draft", "tts_voice", "vad")


class ConfigError(ValueError):
    """A configuration value is unknown or invalid."""


@dataclass(frozen=True)
class ModelsConfig:
    """Where each model role comes from: ``"embedded"`` (the pinned PyPI package), a local path, or a
    hub id (``org/name`` for CTranslate2 Whisper; ``org/name:file.gguf`` for GGUF)."""

    asr_target: str = "embedded"
    asr_draft: str = "embedded"
    llm_target: str = "embedded"
    llm_draft: str = "embedded"
    tts_voice: str = "embedded"
    vad: str = "embedded"
    cache_dir: str = ""  # "" = $SPECVOICE_CACHE or ~/.cache/specvoice


@dataclass(frozen=True)
class AudioConfig:
    sample_rate: int = 16000  # Hz, the rate every engine consumes
    block_s: float = 0.1  # seconds per microphone / file block
    input_device: str = ""  # "" = system default; a name or index
    output_device: str = ""  # "" = system default; "none" = never play


@dataclass(frozen=True)
class VadConfig:
    threshold: float = 0.5  # Silero speech probability threshold
    min_silence_s: float = 0.6  # end-of-speech silence, seconds
    min_speech_s: float = 0.25  # shorter bursts are ignored, seconds
    speech_pad_s: float = 0.2  # audio kept before speech onset, seconds


@dataclass(frozen=True)
class AsrConfig:
    model_role: str = "asr_target"  # which Whisper role transcribes
    method: str = "ar"  # "ar" (faster-whisper greedy); speculative methods register here
    language: str = "en"
    min_chunk_s: float = 1.0  # minimum new audio before a re-decode (whisper_streaming's min-chunk-size)
    buffer_trim_s: float = 15.0  # trim the audio buffer at a committed segment end past this length
    beam_size: int = 1
    compute_type: str = "int8"  # CTranslate2 compute type on CPU ("float16" on CUDA)
    device: str = "auto"  # "cpu", "cuda" or "auto"
    cpu_threads: int = 0  # 0 = all cores
    # CTC self-speculative decoding (ctc_self_speculative_asr.txt, Table 1)
    tau_ctc: float = 0.7
    tau_slm: float = 0.2
    # SpecASR (specasr.txt §IV-A)
    specasr_threshold: float = 0.4
    specasr_max_draft: int = 24
    specasr_tree: bool = True


@dataclass(frozen=True)
class LlmConfig:
    model_role: str = "llm_target"
    n_ctx: int = 4096
    n_threads: int = 0  # 0 = all cores
    n_gpu_layers: int = -1  # offload all layers when llama.cpp was built with CUDA/Metal; ignored on CPU
    max_answer_tokens: int = 256
    system_prompt: str = (
        "You are specvoice, a helpful offline voice assistant. Answer in plain spoken English, "
        "briefly (two or three sentences), without markdown, lists or code."
    )
    answer_method: str = "predgen"  # "predgen" (speculate while the user speaks) or "cascade" (plain AR)
    # PredGen (predgen.txt)
    predgen_verifier: str = "greedy"  # greedy | top_k | reflection | biased
    predgen_speculation_threads: int = 1  # CPU threads for speculation while the user speaks (0 = all)
    predgen_top_k: int = 3
    predgen_tokens_per_update: int = 8


@dataclass(frozen=True)
class CaptionConfig:
    method: str = "ssbd"  # "ssbd" (previous output as the draft) or "ar" (re-translate from scratch)
    target_language: str = "German"
    model_role: str = "llm_target"
    max_tokens: int = 96
    # SSBD (ssbd_live_translation.txt Eq. 5)
    beta: float = 0.2
    mask_k: int = 3
    display_only_mask: bool = True


@dataclass(frozen=True)
class TtsConfig:
    engine: str = "piper"
    length_scale: float = 1.0
    # PCG (pcg_tts.txt Eq. 1, Algorithm 1)
    theta: float = 0.42
    lookahead: int = 3


@dataclass(frozen=True)
class Config:
    models: ModelsConfig = field(default_factory=ModelsConfig)
    audio: AudioConfig = field(default_factory=AudioConfig)
    vad: VadConfig = field(default_factory=VadConfig)
    asr: AsrConfig = field(default_factory=AsrConfig)
    llm: LlmConfig = field(default_factory=LlmConfig)
    caption: CaptionConfig = field(default_factory=CaptionConfig)
    tts: TtsConfig = field(default_factory=TtsConfig)

    def cache_dir(self) -> Path:
        d = self.models.cache_dir or os.environ.get("SPECVOICE_CACHE") or "~/.cache/specvoice"
        return Path(d).expanduser()

    def with_overrides(self, overrides: dict[str, dict[str, Any]]) -> "Config":
        """Return a copy with ``{section: {key: value}}`` applied (values coerced to the field type).

        Raises:
            ConfigError: unknown section or key, or a value that cannot be coerced.
        """
        cfg = self
        for section, values in overrides.items():
            if section not in {f.name for f in fields(Config)}:
                raise ConfigError(f"unknown config section [{section}]")
            sub = getattr(cfg, section)
            known = {f.name: f for f in fields(sub)}
            changes = {}
            for key, value in values.items():
                if key not in known:
                    raise ConfigError(f"unknown config key {section}.{key}")
                changes[key] = _coerce(getattr(sub, key), value, f"{section}.{key}")
            cfg = replace(cfg, **{section: replace(sub, **changes)})
        return cfg

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _coerce(default: Any, value: Any, name: str) -> Any:
    typ = type(default)
    try:
        if typ is bool:
            if isinstance(value, str):
                if value.lower() in ("1", "true", "yes", "on"):
                    return True
                if value.lower() in ("0", "false", "no", "off"):
                    return False
                raise ValueError(value)
            return bool(value)
        return typ(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name}: expected {typ.__name__}, got {value!r}") from None


def default_config_path() -> Path | None:
    p = os.environ.get("SPECVOICE_CONFIG")
    if p:
        return Path(p)
    p2 = Path("~/.config/specvoice/config.toml").expanduser()
    return p2 if p2.exists() else None


def load_config(
    path: str | Path | None = None,
    model_overrides: dict[str, str] | None = None,
    sets: list[str] | None = None,
) -> Config:
    """Build the configuration from defaults, TOML file, environment and CLI overrides.

    Args:
        path: a TOML file; None = ``default_config_path()``.
        model_overrides: ``{role: spec}`` from ``--model ROLE=SPEC``.
        sets: ``["section.key=value", ...]`` from ``--set``.

    Raises:
        ConfigError: unreadable TOML, unknown keys, bad values or roles.
    """
    cfg = Config()
    path = Path(path) if path else default_config_path()
    if path is not None:
        try:
            data = tomllib.loads(Path(path).read_text())
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise ConfigError(f"cannot read config file {path}: {e}") from None
        cfg = cfg.with_overrides(data)
    env_models = {}
    for role in ROLES:
        v = os.environ.get(f"SPECVOICE_MODEL_{role.upper()}")
        if v:
            env_models[role] = v
    if env_models:
        cfg = cfg.with_overrides({"models": env_models})
    if model_overrides:
        bad = set(model_overrides) - set(ROLES)
        if bad:
            raise ConfigError(f"unknown model role(s) {sorted(bad)}; roles are {', '.join(ROLES)}")
        cfg = cfg.with_overrides({"models": model_overrides})
    for item in sets or []:
        if "=" not in item or "." not in item.split("=", 1)[0]:
            raise ConfigError(f"--set expects section.key=value, got {item!r}")
        k, v = item.split("=", 1)
        section, key = k.split(".", 1)
        cfg = cfg.with_overrides({section: {key: v}})
    return cfg
