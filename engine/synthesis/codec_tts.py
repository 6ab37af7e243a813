"""The codec TTS: ``CodecTTS.synthesize(text) → float32 audio at 22.05 kHz``, codec tokens sampled by the codec LM
with target-only AR, standard speculative sampling, the SSD-style constant bias or PCG (Yanuka et al., "Principled
Coarse-Grained Acceptance for Speculative Decoding in Speech", 2025, arXiv:2511.13732, Algorithm 1).

:class:`CodecVoice` bundles the trained model (assets/codec_tts: the target and draft LM, the latent codec) with the
Piper voice's own parts it builds on (phonemiser, text encoder and duration predictor, generator);
:class:`CodecTTS` samples each sentence's codes with :mod:`engine.synthesis.coarse_grained_sampling` on the CPU, or
whole rounds on an accelerator with :mod:`engine.synthesis.device_sampling`, and renders them with the voice's
generator. ``tts.engine = codec`` selects it (engine/runtime.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from engine.config import TtsConfig, load_config
from engine.config import cache_dir as resolve_cache_dir
from engine.core import verify as V
from engine.models import resolve, sha256_file
from engine.synthesis.coarse_grained_sampling import (
    AcousticGroups,
    ar_generate,
    speculative_generate,
    uses_onnx,
)
from engine.synthesis.codec import LatentCodec
from engine.synthesis.codec_lm import (
    ASSET_DIR,
    code_embeddings,
    frame_conditioning,
    load_lm,
)
from engine.synthesis.vits_latent import VitsParts


class CodecVoice:
    """The trained codec TTS: target + draft LM, the latent codec, and the Piper voice's own parts it builds on
    (phonemiser, text encoder + duration predictor, generator).

    Args:
        path: assets/codec_tts (codec.npz, lm.safetensors, config.json); default ASSET_DIR.
        phonemizer: an object with Piper's ``phonemize(text) → [[phoneme]]`` and ``phonemes_to_ids(phonemes)``
            (a loaded ``piper.PiperVoice``), or None to load one from ``voice_model`` on first use.
        voice_model / voice_config: the Piper voice (.onnx, .onnx.json) the codec TTS was trained on; the caller
            resolves the paths.
        cache_dir: the cache folder; the voice's extracted sub-graphs go to ``<cache_dir>/codec_tts``
            (engine/synthesis/vits_latent.py). None: :func:`engine.config.cache_dir`.
        device: where the codec LM runs, "cpu" (ONNX Runtime sessions) or a torch device such as "cuda" (the torch
            module there); the caller decides (the voice reads no settings). The voice's prior and generator run
            on ONNX Runtime on the CPU.
        threads: ONNX Runtime threads of the voice's prior and generator.

    Raises:
        FileNotFoundError: the model files are missing. ValueError: ``voice_model`` is not the voice the codec TTS
            was trained on (its sha256 differs from config.json's ``voice_sha256``).
    """

    sample_rate = 22050

    def __init__(self, path: str | Path | None = None, phonemizer=None, voice_model: str | Path | None = None,
                 voice_config: str | Path | None = None, cache_dir: str | Path | None = None, device: str = "cpu",
                 threads: int = 1):
        self.path = Path(path or ASSET_DIR)
        self.lm = load_lm(self.path)
        self.config = json.loads((self.path / "config.json").read_text())
        self.codec = LatentCodec.load(self.path / "codec.npz")
        if voice_model is None:
            raise ValueError("CodecVoice needs the Piper voice_model it was trained on")
        sha = sha256_file(Path(voice_model))
        if self.config.get("voice_sha256") not in (None, sha):
            raise ValueError(f"{voice_model} (sha256 {sha[:12]}…) is not the voice this codec TTS was trained on "
                             f"({self.config['voice_sha256'][:12]}…)")
        inf = json.loads(Path(voice_config).read_text()).get("inference", {}) if voice_config else {}
        graphs = resolve_cache_dir(str(cache_dir or "")) / "codec_tts"
        self.parts = VitsParts(voice_model, graphs, inf.get("noise_scale", 0.667), inf.get("length_scale", 1.0),
                               inf.get("noise_w", 0.8), sha256=sha, threads=threads)
        self.phonemizer = phonemizer
        self.voice_model, self.voice_config = voice_model, voice_config
        self.device = "cpu"
        self.to(device)

    def to(self, device: str) -> CodecVoice:
        """Move the codec LM to ``device`` ("cpu", "cuda", "cuda:1", ...) in place; every later
        :class:`engine.synthesis.codec_lm_session.CodecLMSession` of it runs there. Returns self.

        Raises:
            RuntimeError: torch cannot use ``device`` (the caller resolves the device first).
        """
        self.lm.to(device)
        self.device = str(device)
        return self

    def phoneme_ids(self, text: str) -> list[np.ndarray]:
        """Per sentence, Piper's phoneme ids (int64; espeak-ng phonemes, BOS/EOS/pad as Piper uses them)."""
        if self.phonemizer is None:
            from piper import PiperVoice

            self.phonemizer = PiperVoice.load(str(self.voice_model),
                                              config_path=str(self.voice_config) if self.voice_config else None)
        v = self.phonemizer
        return [np.asarray(v.phonemes_to_ids(ph), np.int64) for ph in v.phonemize(text) if ph]

    def prior(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The voice's prior of one sentence: m_p, logs_p float32 (n, 192) and frames per id int64 (n,) (its own
        duration predictor, sampled with its noise_w)."""
        return self.parts.prior(ids)

    def conditioning(self, ids: np.ndarray) -> np.ndarray:
        """float32 (n_frames, 385) frame conditioning of one sentence (:func:`frame_conditioning` of :meth:`prior`)."""
        return frame_conditioning(*self.prior(ids))

    def decode(self, tokens) -> np.ndarray:
        """Codec tokens (T,) → float32 audio (256 T,) at 22.05 kHz."""
        return self.codec.decode(tokens, self.parts)

    def code_embeddings(self) -> np.ndarray:
        """Emb_q for PCG's Eq. 1 (:func:`code_embeddings` of this voice's LM and config)."""
        return code_embeddings(self.lm, self.config)


METHODS = ("ar", "sd", "ssd", "pcg")


class CodecTTS:
    """The codec TTS engine: ``synthesize(text) → float32 22.05 kHz``, sampling codec tokens with ``method``.

    Args:
        settings: the ``[tts]`` section: ``codec_method`` — "ar", "pcg", "sd" or "ssd" (constant bias 0.3), or
            "auto" (:func:`engine.devices.resolve_method` on the device the codec LM runs on) —,
            ``theta`` (PCG θ, Eq. 1), ``lookahead`` (L_d) and ``temperature`` (the sampling temperature; the
            shipped model was validated at 0.4, assets/codec_tts/card.md); None: the declared defaults.
        path: assets/codec_tts (see :class:`CodecVoice`); seed: RNG seed.
        phonemizer: a loaded Piper voice (its phonemiser).
        voice_model, voice_config: the Piper voice files (.onnx, .onnx.json) the caller resolved; None = the
            ``tts_voice`` of the configuration as loaded (:func:`engine.config.load_config`).
        cache_dir: where the groups (``<cache_dir>/asg``) and the voice's extracted sub-graphs
            (``<cache_dir>/codec_tts``) are cached; None: :func:`engine.config.cache_dir` ($SPECVOICE_CACHE or
            ~/.cache/specvoice).
        threads: ONNX Runtime threads of the codec LM (:class:`engine.synthesis.codec_lm_onnx.CodecLMRuntime`; 1
            leaves the second core to ASR and the LLM).

    Raises:
        FileNotFoundError: the model files are missing. ValueError: unknown method.
    """

    sample_rate = 22050

    def __init__(self, settings: TtsConfig | None = None, path: str | Path | None = None, seed: int = 0,
                 phonemizer=None, cache_dir: str | Path | None = None, threads: int = 1,
                 voice_model: str | Path | None = None, voice_config: str | Path | None = None):
        t = settings or TtsConfig()
        method, theta, lookahead, temperature = t.codec_method, t.theta, t.lookahead, t.temperature
        if method not in METHODS and method != "auto":
            raise ValueError(f"unknown codec TTS method {method!r} ({', '.join(METHODS)}, auto)")
        if voice_model is None:
            m = resolve("tts_voice", load_config())
            voice_model, voice_config = m.path, m.config
        self.cache_dir = resolve_cache_dir(str(cache_dir or ""))
        self.voice = CodecVoice(path, phonemizer, voice_model, voice_config, cache_dir=self.cache_dir,
                                threads=threads)
        self.lm, self.codec = self.voice.lm, self.voice.codec
        if method == "auto":
            from engine.devices import resolve_method

            method = resolve_method("tts.codec_method", method, "cpu" if uses_onnx(self.lm) else "cuda")
        self.method, self.theta, self.lookahead, self.temperature = method, theta, lookahead, temperature
        self.threads = threads
        self.rng = np.random.default_rng(seed)
        self.groups = self.groups_for(theta)
        self.last_stats: V.SpecStats | None = None
        self._device_samplers: dict = {}  # (method, θ, L_d, T) → DeviceRoundSampler, for an LM off the CPU

    def phoneme_ids(self, text: str) -> list[np.ndarray]:
        """Per sentence, Piper's phoneme ids (int64)."""
        return self.voice.phoneme_ids(text)

    def tokens(self, ids: np.ndarray, method: str | None = None, theta: float | None = None,
               cond: np.ndarray | None = None) -> tuple[np.ndarray, V.SpecStats]:
        """Codec tokens (int64 (n_frames,)) of one sentence's phoneme ids, and the sampler's counters.
        ``cond``: the frame conditioning to use instead of the voice's prior of ``ids`` (e.g. the teacher's own).

        Raises:
            ValueError: unknown method.
        """
        cond = self.voice.conditioning(ids) if cond is None else cond
        method = method or self.method
        if method not in METHODS and method != "auto":
            raise ValueError(f"unknown codec TTS method {method!r} ({', '.join(METHODS)}, auto)")
        if not uses_onnx(self.lm):  # on an accelerator: whole rounds on the device, replayed as CUDA graphs
            return self.device_sampler(method, theta).sample(cond, int(self.rng.integers(2**62)))
        if method == "ar":
            return ar_generate(self.lm, cond, self.rng, self.temperature, self.threads)
        if method == "pcg":
            G = self._groups_at(theta)
            acc = lambda x, p, q, rng: V.pcg_step(x, p, q, G, rng)  # noqa: E731
        elif method == "sd":
            acc = lambda x, p, q, rng: V.sd_step(x, p, q, rng)  # noqa: E731
        else:  # "ssd"
            acc = lambda x, p, q, rng: V.sd_step(x, p, q, rng, bias=0.3)  # noqa: E731
        return speculative_generate(self.lm, cond, self.rng, acc, self.lookahead, self.temperature, self.threads)

    def device_sampler(self, method: str, theta: float | None = None):
        """The :class:`engine.synthesis.device_sampling.DeviceRoundSampler` of ``method`` (and θ for PCG) at this
        engine's lookahead and temperature, built once and kept (its graphs are captured on first use)."""
        from engine.synthesis.device_sampling import DeviceRoundSampler

        theta = self.theta if theta is None else theta
        key = (method, theta if method == "pcg" else None, self.lookahead, self.temperature)
        if key not in self._device_samplers:
            G = self._groups_at(theta) if method == "pcg" else None
            self._device_samplers[key] = DeviceRoundSampler(self.lm, self.temperature, self.lookahead, method,
                                                            groups=G, bias=0.3)
        return self._device_samplers[key]

    def code_embeddings(self) -> np.ndarray:
        """Emb_q for Eq. 1 (:meth:`CodecVoice.code_embeddings`)."""
        return self.voice.code_embeddings()

    def _groups_at(self, theta: float | None) -> AcousticGroups:
        """This engine's groups for θ = None or its own θ, else :meth:`groups_for`."""
        return self.groups if theta is None or theta == self.theta else self.groups_for(theta)

    def groups_for(self, theta: float) -> AcousticGroups:
        """Eq. 1 groups from the target's code embeddings at θ (cached on disk)."""
        return AcousticGroups.cached(self.code_embeddings(), theta, self.cache_dir / "asg")

    def synthesize(self, text: str) -> np.ndarray:
        """float32 (n,) at 22.05 kHz; empty for text with nothing to say. ``last_stats`` holds the sampler's
        counters."""
        parts = []
        total = V.SpecStats()
        for ids in self.phoneme_ids(text):
            toks, st = self.tokens(ids)
            parts.append(self.voice.decode(toks))
            parts.append(np.zeros(int(0.15 * self.sample_rate), np.float32))
            total.add(st)
        self.last_stats = total
        return np.concatenate(parts) if parts else np.zeros(0, np.float32)
