"""Build the engines from a :class:`engine.config.Config` (models load once, lazily, and are shared).

The CLI, the GUI and the benchmarks all construct models here, so a role means the same file everywhere;
:func:`build_assistant` and :func:`build_translator` build the answer and caption stages for both front ends.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from dataclasses import dataclass, field

from engine.config import Config
from engine.models import ResolvedModel, resolve


@dataclass
class LoadTimes:
    seconds: dict[str, float] = field(default_factory=dict)


class Runtime:
    """Lazily loaded, thread-safe model holders for one configuration."""

    def __init__(self, cfg: Config, progress: bool = True):
        self.cfg = cfg
        self.progress = progress
        self._lock = threading.RLock()
        self._cache: dict[str, object] = {}
        self.resolved: dict[str, ResolvedModel] = {}
        self.load_times = LoadTimes()
        from engine.devices import check_explicit

        check_explicit(cfg)  # a stage set to "cuda" on a machine without one fails here, before any model loads
        self._devices: dict[str, dict] | None = None

    def model(self, role: str) -> ResolvedModel:
        with self._lock:
            if role not in self.resolved:
                self.resolved[role] = resolve(role, self.cfg, progress=self.progress)
            return self.resolved[role]

    def _get(self, key: str, build):
        with self._lock:
            if key not in self._cache:
                t0 = time.perf_counter()
                self._cache[key] = build()
                self.load_times.seconds[key] = round(time.perf_counter() - t0, 3)
            return self._cache[key]

    def asr_backend(self):
        """The streaming ASR backend for ``cfg.asr.method``: "ssd" (CTC self-speculative, engine.asr.ctc_self_speculative),
        "specasr" (engine.asr.draft_model_speculative), "ar" (greedy on CTranslate2, the same window and guards as "ssd") or "ar_torch"
        (plain greedy on SSD's torch decoder); "auto" runs the method :func:`engine.devices.asr_method` picks for the
        device the ASR runs on."""
        a = self.cfg.asr
        if a.method == "auto":
            from engine.devices import asr_method

            a = dataclasses.replace(a, method=asr_method(self.cfg))
        if a.method == "ssd" and not self.whisper_ssd().head_matches():
            # the CTC draft head belongs to the encoder it was trained on (Whisper base); another ASR model
            # (e.g. tiny.en for speed) has no draft, so it decodes with plain AR
            import logging

            logging.getLogger(__name__).warning("no CTC head for %s: SSD falls back to AR decoding", a.model_role)
            a = dataclasses.replace(a, method="ar")
        if a.method in ("ar", "ssd") and (a.method == "ar" or a.ssd_engine == "ct2"):
            def build_ct2():
                from engine.asr.ctc_self_speculative import SSDCT2Backend
                from engine.asr.whisper_ar import WhisperARBackend

                if a.method == "ssd":
                    return SSDCT2Backend(self.whisper_ssd(), a.tau_ctc, a.tau_slm, window=self.window_policy(),
                                         guard=self.decode_guard(), beam_size=a.beam_size)
                return WhisperARBackend(self.whisper_ssd(), window=self.window_policy(), guard=self.decode_guard(),
                                        beam_size=a.beam_size, final_beam_size=a.final_beam_size)

            key = f"asr:{a.method}:ct2:{a.model_role}:{a.tau_ctc}:{a.tau_slm}:{a.beam_size}:{a.final_beam_size}"
            return self._get(f"{key}:{self.window_policy()}:{self.decode_guard()}", build_ct2)
        if a.method in ("ssd", "ar_torch"):
            def build_ssd():
                from engine.asr.ctc_self_speculative import SSDBackend

                return SSDBackend(self.whisper_ssd(), a.tau_ctc, a.tau_slm, method=a.method, rejoin=a.ssd_rejoin,
                                  guard=self.decode_guard())

            return self._get(f"asr:{a.method}:{a.model_role}:{a.tau_ctc}:{a.tau_slm}:{a.ssd_rejoin}:{a.ssd_engine}",
                             build_ssd)
        if a.method == "specasr":
            def build_spec():
                from engine.asr.draft_model_speculative import SpecASRBackend

                return SpecASRBackend(self.whisper_ssd(), self.whisper_ssd("asr_draft"),
                                      threshold=a.specasr_threshold, max_draft=a.specasr_max_draft,
                                      tree=a.specasr_tree, guard=self.decode_guard())

            return self._get(f"asr:specasr:{a.specasr_threshold}:{a.specasr_max_draft}:{a.specasr_tree}:"
                             f"{self.window_policy()}:{self.decode_guard()}", build_spec)
        raise ValueError(f"unknown ASR method {a.method!r} (available: ssd, specasr, ar, ar_torch)")

    def transcriber(self, source, emit, use_vad: bool = True, verdict=None, turn_cfg: Config | None = None,
                    prompt_hint=None):
        """The streaming transcriber (capture → VAD → streaming ASR) over ``source`` with this configuration's
        backend, VAD and update policy: what ``transcribe``/``assist``/``caption``, the GUI and the benchmarks
        all run. ``emit`` receives the :mod:`engine.core.events` events (from the ASR thread); ``use_vad=False``: the
        whole stream is one utterance (push-to-talk); ``verdict``: the end-of-turn verdicts of ``duplex.end_of_turn =
        llm`` (:meth:`vad`); ``turn_cfg``: the configuration whose [vad] and [duplex] sections end the turns (default
        this runtime's: a session passes its own); ``prompt_hint``: text for the end of each new utterance's prompt
        (:class:`engine.asr.transcriber.StreamingTranscriber`; a listening wake gate's
        :meth:`engine.answer.wake.WakeGate.prompt_hint`)."""
        from engine.asr.language_id import SessionLanguage
        from engine.asr.transcriber import StreamingTranscriber

        a = self.cfg.asr
        lang = SessionLanguage(a) if a.language == "auto" else None
        return StreamingTranscriber(source, self.asr_backend(), self.vad(verdict, turn_cfg) if use_vad else None, emit, a,
                                    session_language=lang,
                                    revise_backend=self.revise_backend if a.revise_max_s > 0 else None,
                                    prompt_hint=prompt_hint)

    def revise_backend(self):
        """The second pass's decoder (``asr.revise_max_s``): greedy AR on the padded 30 s window, as an offline
        decode runs it (``asr.revise_timestamps``: faster-whisper's own timestamped decoding; off: the live decoder
        without timestamp tokens), with this configuration's guards, on a model instance of its own (the second pass
        runs on its own low-priority thread: the live decodes are never queued behind it). Built on the calling
        thread."""
        a = self.cfg.asr

        def build():
            from engine.asr.whisper_ssd import WhisperSSD
            from engine.asr.faster_whisper_backend import FasterWhisperBackend
            from engine.asr.whisper_ar import WhisperARBackend
            from engine.asr.window import WindowPolicy
            from engine.devices import asr_device, device_setting, load_on

            path = self.model(a.model_role).path
            if a.revise_timestamps or a.revise_mode == "offline":
                return load_on("asr", device_setting(self.cfg, "asr"), asr_device(self.cfg), lambda dev: (
                    FasterWhisperBackend(path, device=dev, compute_type=a.compute_type, cpu_threads=a.cpu_threads,
                                         language=a.language, guard=self.decode_guard())))[0]
            padded = WindowPolicy("padded")
            m, _ = load_on("asr", device_setting(self.cfg, "asr"), asr_device(self.cfg), lambda dev: (
                WhisperSSD(path, device=dev, compute_type=a.compute_type, cpu_threads=a.cpu_threads,
                           language=a.language, window=padded, lid_head=a.language_head)))
            return WhisperARBackend(m, window=padded, guard=self.decode_guard(), final_beam_size=1)

        return self._get(f"asr:revise:{a.model_role}:{a.language}:{a.revise_timestamps or a.revise_mode == 'offline'}:"
                         f"{self.decode_guard()}", build)

    def window_policy(self):
        """The encoder window of ``asr.encoder_window`` / ``encoder_margin_s`` / ``encoder_min_s``."""
        from engine.asr.window import WindowPolicy

        a = self.cfg.asr
        return WindowPolicy(a.encoder_window, a.encoder_margin_s, a.encoder_min_s)

    def decode_guard(self):
        """The decode guards of the ``asr.guard_*`` settings."""
        from engine.asr.window import DecodeGuard

        a = self.cfg.asr
        return DecodeGuard(a.guard_tokens_per_s, a.guard_tokens_base, a.guard_compression_ratio, a.guard_logprob,
                           a.guard_no_speech)

    def whisper_ssd(self, role: str | None = None):
        """Encoder (CTranslate2), CTC head and torch decoder of the ASR model role (shared by ssd/ar_torch/specasr);
        ``role="asr_draft"`` gives SpecASR's draft. On :func:`engine.devices.asr_device`'s device; with
        ``asr.device=auto`` a load on CUDA that raises is done on the CPU (:func:`engine.devices.load_on`)."""
        a = self.cfg.asr
        role = role or a.model_role

        def build():
            from engine.asr.whisper_ssd import WhisperSSD
            from engine.devices import asr_device, device_setting, load_on

            path = self.model(role).path
            return load_on("asr", device_setting(self.cfg, "asr"), asr_device(self.cfg), lambda dev: (
                WhisperSSD(path, device=dev, compute_type=a.compute_type, cpu_threads=a.cpu_threads,
                           language=a.language, window=self.window_policy(), lid_head=a.language_head)))[0]

        return self._get(f"whisper_ssd:{role}", build)

    def torch_whisper(self, role: str):
        """A torch Whisper (decoder control) of ``role``, where torch's answer for ``asr.device`` puts it."""

        def build():
            from engine.asr.whisper_torch import TorchWhisper
            from engine.devices import device_setting, load_on, resolve_device

            path, s = self.model(role).path, device_setting(self.cfg, "asr")
            return load_on("asr", s, resolve_device(s, "asr", "torch"),
                           lambda dev: TorchWhisper(path, device=dev))[0]

        return self._get(f"torch_whisper:{role}", build)

    def vad(self, verdict=None, turn_cfg: Config | None = None):
        """A fresh streaming VAD (it carries LSTM state). ``duplex.end_of_turn = "smart_turn"``: at each 0.2 s pause
        Smart Turn v3.2 decides whether the turn is complete; ``duplex.turn_max_silence_s`` of silence always ends it.
        ``"llm"`` with a ``verdict`` (:class:`engine.answer.turn.EndOfTurnVerdicts`, fed by PredGen): a silence of
        ``duplex.turn_pause_s`` ends a turn the LLM finds complete (p ≥ ``duplex.eot_threshold``), one of
        ``duplex.turn_max_silence_s`` a turn it finds incomplete, one of ``duplex.eot_wait_s`` a turn not judged yet;
        without a verdict (no PredGen: the cascade, captions) the VAD's silence alone decides. ``turn_cfg``: the
        configuration whose [vad] and [duplex] sections apply (default this runtime's).
        """
        from audio.vad import StreamingVAD

        c = turn_cfg or self.cfg
        v, d = c.vad, c.duplex
        if d.end_of_turn == "llm" and verdict is not None:
            return StreamingVAD(self.model("vad").path, threshold=v.threshold, min_silence_s=d.turn_max_silence_s,
                                min_speech_s=v.min_speech_s, speech_pad_s=v.speech_pad_s, pause_s=d.turn_pause_s,
                                verdict=verdict, turn_threshold=d.eot_threshold,
                                unknown_silence_s=d.eot_wait_s, **self._vad_fallback())
        if d.end_of_turn == "smart_turn":
            td = self.turn_detector()
            return StreamingVAD(self.model("vad").path, threshold=v.threshold, min_silence_s=d.turn_max_silence_s,
                                min_speech_s=v.min_speech_s, speech_pad_s=v.speech_pad_s, pause_s=d.turn_pause_s,
                                turn_hook=td.complete_probability, turn_threshold=d.turn_threshold,
                                **self._vad_fallback())
        return StreamingVAD(self.model("vad").path, threshold=v.threshold, min_silence_s=v.min_silence_s,
                            min_speech_s=v.min_speech_s, speech_pad_s=v.speech_pad_s, **self._vad_fallback())

    def _vad_fallback(self) -> dict:
        """The VAD's clear-sound fallback settings (``vad.fallback_threshold`` and the noise floor's) and its
        near-talker gate (``vad.near_snr_db``, 0 = off)."""
        v = self.cfg.vad
        return {"fallback_threshold": v.fallback_threshold, "fallback_snr_db": v.fallback_snr_db,
                "noise_rise_db_s": v.noise_rise_db_s, "near_snr_db": v.near_snr_db or None}

    def turn_detector(self):
        """The Smart Turn v3.2 end-of-turn model (assets/smart_turn, onnxruntime)."""
        from audio.turn import TurnDetector
        from engine.core.cpu import int8_gemm_saturates

        d = self.cfg.duplex
        return self._get(f"turn:{d.turn_threshold}", lambda: TurnDetector(threshold=d.turn_threshold,
                                                                          exact_int8=int8_gemm_saturates()))

    def echo_source(self, source, on_barge_in=None):
        """Wrap a microphone source with WebRTC echo cancellation (``duplex.echo_cancellation``).

        Returns:
            (source whose blocks are echo-cancelled, sink to set as the player's ``reference``), or (source, None)
            when it is off or livekit is unavailable (logged). ``on_barge_in(t)`` is called when echo-cancelled
            speech starts while the speaker plays.
        """
        import logging

        from audio.aec import BargeInDetector, EchoCancelledSource, EchoCanceller

        d = self.cfg.duplex
        if not d.echo_cancellation:
            return source, None
        aec = EchoCanceller(delay_ms=d.input_latency_ms, noise_suppression=d.noise_suppression)
        if not aec.available:
            logging.getLogger(__name__).warning(aec.reason)
            return source, None
        aec.input_latency_ms = d.input_latency_ms
        bi = None if on_barge_in is None else BargeInDetector(self.model("vad").path, on_barge_in,
                                                              min_speech_s=d.barge_in_min_speech_s,
                                                              threshold=d.barge_in_threshold)
        src = EchoCancelledSource(source, aec, bi)
        return src, src.on_played

    def llm(self, role: str | None = None, instance: str = "main", n_ctx: int | None = None):
        """A llama.cpp context on the role's GGUF. Another ``instance`` (e.g. "judge") is a second context on the
        same file: the weights are mmap-shared, only its KV cache is new."""
        role = role or self.cfg.llm.model_role
        c = self.cfg.llm
        if c.backend == "remote":
            def build_remote():
                from engine.models import ModelError
                from engine.llm.remote import RemoteLM

                tok = c.tokenizer or None
                if tok is None:
                    try:
                        tok = str(self.model(role).path)
                    except ModelError:
                        tok = None  # the server's tokenisation endpoints
                return RemoteLM(c.base_url, model=c.model or None, tokenizer=tok, api=c.remote_api,
                                api_key_env=c.api_key_env or None, n_ctx=n_ctx or c.n_ctx,
                                top_n=max(c.remote_top_n, c.predgen_top_k), timeout_s=c.remote_timeout_s,
                                retries=c.remote_retries,
                                require_prompt_logprobs=not (c.answer_method == "cascade"
                                                             and self.cfg.caption.method == "ar"))

            return self._get(f"llm:remote:{role}:{instance}", build_remote)

        def build():
            from engine.devices import device_setting, llm_placement

            c = self.cfg.llm
            # llama.cpp (offloaded when its build can), or torch bf16 on a GPU llama.cpp cannot use (engine/devices.py)
            p = llm_placement(device_setting(self.cfg, "llm"), c.n_gpu_layers)
            m = self.model(role)
            if p.backend == "torch":
                from engine.llm.torch_lm import TorchCausalLM

                return TorchCausalLM(m.path, device=p.device, dtype=p.dtype, n_ctx=n_ctx or c.n_ctx,
                                     cache_dir=self.cfg.cache_dir())
            from engine.llm.llama_cpp_lm import LlamaCppLM

            return LlamaCppLM(m.path, n_ctx=n_ctx or c.n_ctx, n_threads=c.n_threads, n_gpu_layers=p.n_gpu_layers)

        return self._get(f"llm:{role}:{instance}", build)

    def tts(self, settings=None):
        """The answer voice: Piper (``tts.engine = "piper"``) or the codec TTS (``"codec"``), built once per
        setting and kept. ``settings``: a :class:`engine.config.TtsConfig` to build from (default: this runtime's;
        a benchmark passes each method's, so both voices run in one process).

        Raises:
            ValueError: an unknown ``tts.engine``.
            ModelError, ModelLoadError: the voice cannot be loaded.
        """
        t = settings if settings is not None else self.cfg.tts
        if t.engine == "codec":
            def build_codec():
                from engine.devices import load_on, resolve_device, resolve_method
                from engine.synthesis.codec_tts import CodecTTS

                setting = getattr(t, "device", "auto")
                dev = resolve_device(setting, "tts")
                m = self.model("tts_voice")  # this runtime's voice (--model, models.dir), not a fresh config's
                # tts.codec_method = auto: the sampler the committed results pick on the codec LM's device
                tc = dataclasses.replace(t, codec_method=resolve_method("tts.codec_method", t.codec_method, dev))
                voice = CodecTTS(tc, cache_dir=self.cfg.cache_dir(), voice_model=m.path, voice_config=m.config)
                # the codec LM in torch on CUDA; on the CPU its ONNX Runtime sessions
                _, dev = load_on("tts", setting, dev, voice.voice.to)
                voice.method = resolve_method("tts.codec_method", t.codec_method, dev)  # a load that fell back
                return voice

            return self._get(f"tts:codec:{t.codec_method}:{t.theta}:{t.lookahead}:{t.temperature}:"
                             f"{getattr(t, 'device', 'auto')}", build_codec)
        if t.engine != "piper":
            raise ValueError(f"unknown TTS engine {t.engine!r} (piper, codec)")

        def build():
            from engine.synthesis.piper_tts import PiperTTS

            m = self.model("tts_voice")
            return PiperTTS(m.path, m.config, length_scale=t.length_scale)

        return self._get(f"tts:piper:{t.length_scale}", build)

    def voices(self, settings=None):
        """The answer voices by language (``tts.voices``, :class:`engine.synthesis.voices.VoiceSet`): English and an
        unknown language → :meth:`tts`; each language of ``tts.voices`` → its voice, resolved now (a hub id is
        fetched, Kokoro joined and checked) and loaded on its first answer, once per runtime; any other → None.
        ``settings``: a :class:`engine.config.TtsConfig` (default: this runtime's).

        Raises:
            ModelError: a voice of ``tts.voices`` cannot be resolved (one line naming it).
            ValueError: a malformed ``tts.voices`` (validated configurations never have one).
        """
        from engine.synthesis.voices import VoiceSet, load_voice, parse_voices, resolve_voice

        t = settings if settings is not None else self.cfg.tts
        english = self.tts(t)

        def load(v):
            return self._get(f"tts:voice:{v.language}:{v.spec}:{t.length_scale}", lambda: load_voice(v, t.length_scale))

        def build():
            specs = {lang: resolve_voice(lang, spec, self.cfg.cache_dir())
                     for lang, spec in parse_voices(t.voices).items()}
            return VoiceSet(english, specs, load)

        # keyed by the English voice itself: a set made for another engine or voice is not reused
        return self._get(f"tts:voices:{t.voices}:{t.length_scale}:{id(english)}", build)

    def voice_for(self, language: str, settings=None):
        """The voice that speaks ``language`` (ISO 639-1; "" = not known: the English voice), or None when
        ``tts.voices`` gives it none (:meth:`voices`)."""
        return self.voices(settings).voice(language)

    def reconfigured(self, cfg: Config) -> "Runtime":
        """The runtime for new settings ``cfg``: this one (with ``cfg``) when no model changes, else a new one that
        keeps every loaded model whose role, file and load settings are unchanged (the rest load on next use)."""
        old = self.cfg
        if cfg.models == old.models and cfg.asr.model_role == old.asr.model_role and cfg.llm == old.llm \
                and cfg.tts == old.tts and cfg.asr.compute_type == old.asr.compute_type:
            self.cfg = cfg
            return self
        rt = Runtime(cfg, progress=self.progress)
        same_asr = cfg.models == old.models and cfg.asr.model_role == old.asr.model_role \
            and cfg.asr.compute_type == old.asr.compute_type
        for key, obj in self._cache.items():
            if key.startswith("llm:") and cfg.models.llm_target == old.models.llm_target \
                    and cfg.llm.n_ctx == old.llm.n_ctx:
                rt._cache[key] = obj
            if key.startswith("tts:") and cfg.models.tts_voice == old.models.tts_voice \
                    and cfg.tts.length_scale == old.tts.length_scale:
                rt._cache[key] = obj
            if key.startswith(("asr:", "whisper_ssd:", "torch_whisper:")) and same_asr:
                rt._cache[key] = obj
        rt.resolved.update({r: m for r, m in self.resolved.items() if getattr(cfg.models, r) == getattr(old.models, r)})
        return rt

    def describe(self) -> dict:
        return {r: {"path": str(m.path), "source": m.source, "kind": m.kind} for r, m in self.resolved.items()}

    def devices(self) -> dict[str, dict]:
        """Where each stage runs (:func:`engine.devices.plan`: {"asr" | "llm" | "tts": {"setting", "device",
        "runs"}}), computed once; the reports print it.

        Raises:
            engine.devices.DeviceError: a stage set to "cuda" without a CUDA device.
        """
        if self._devices is None:
            from engine.devices import plan

            self._devices = plan(self.cfg)
        return self._devices


def build_assistant(cfg: Config, rt: Runtime, emit):
    """The answer stage per ``cfg.llm.answer_method``: the cascade :class:`engine.answer.assistant.Assistant` or the
    :class:`engine.answer.assistant.PredGenAssistant` (with a second "judge" context for the reflection verifier).

    Args:
        emit: receives the answer events (AnswerDelta, AnswerSentence, AnswerAudio, AnswerDone, Error).

    Raises:
        ConfigError: an unknown ``llm.answer_method``.
        ModelError, ModelLoadError: the LLM or the voice cannot be loaded.
    """
    from engine.answer.assistant import Assistant, PredGenAssistant
    from engine.config import ConfigError

    c = cfg.llm
    if c.answer_method not in ("cascade", "predgen"):
        raise ConfigError(f"llm.answer_method must be 'predgen' or 'cascade', got {c.answer_method!r}")
    lm, tts, voices = rt.llm(), rt.tts(cfg.tts), rt.voices(cfg.tts)
    if c.answer_method == "cascade":
        return Assistant(lm, tts, c.system_prompt, c.max_answer_tokens, emit=emit,
                         first_clause_words=cfg.tts.first_clause_words, voices=voices)
    judge = rt.llm(instance="judge", n_ctx=1024) if c.predgen_verifier == "reflection" else None
    return PredGenAssistant(lm, tts, c.system_prompt, c.max_answer_tokens, emit=emit, verifier=c.predgen_verifier,
                            top_k=c.predgen_top_k, beta=cfg.caption.beta, tokens_per_update=c.predgen_tokens_per_update,
                            judge_lm=judge, speculation_threads=c.predgen_speculation_threads,
                            first_clause_words=cfg.tts.first_clause_words, voices=voices)


def build_translator(cfg: Config, rt: Runtime, target: str, on_trigger=None):
    """The live translator per ``cfg.caption.method``: SSBD (previous translation as the draft) or the AR
    re-translation baseline, into ``target`` (a language code or name), wrapped in the caption fidelity guard
    (:func:`engine.translate.fidelity.guarded`; ``on_trigger(event)`` is told each re-translation), and translating sentence
    by sentence (:class:`engine.translate.sentence_translator.SentenceTranslator`) when ``caption.segment`` is "sentence".

    Raises:
        ConfigError: an unknown ``caption.method``.
        ModelError, ModelLoadError: the caption LLM cannot be loaded.
    """
    from engine.config import ConfigError
    from engine.translate.biased_retranslation import ARRetranslator, SSBDTranslator

    c = cfg.caption
    if c.method not in ("ssbd", "ar"):
        raise ConfigError(f"caption.method must be 'ssbd' or 'ar', got {c.method!r}")
    if c.segment not in ("sentence", "utterance"):
        raise ConfigError(f"caption.segment must be 'sentence' or 'utterance', got {c.segment!r}")
    from engine.translate.sentence_translator import SentenceTranslator
    from engine.translate.fidelity import guarded

    lm = rt.llm(c.model_role)
    if c.method == "ssbd":
        t = SSBDTranslator(lm, target, c.max_tokens, beta=c.beta, mask_k=c.mask_k, display_only=c.display_only_mask)
    else:
        t = ARRetranslator(lm, target, c.max_tokens, mask_k=c.mask_k if c.display_only_mask else 0)
    # every final caption passes the fidelity guard: one that answers instead of translating is re-translated
    t = guarded(t, on_trigger)
    return SentenceTranslator(t) if c.segment == "sentence" else t
