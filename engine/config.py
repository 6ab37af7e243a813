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

from engine.core.events import PARTIAL_SOURCES

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
    # "ar" (greedy, CTranslate2), "ssd" (CTC self-speculative), "specasr", "ar_torch"; the default is what
    # bench/results/asr_stream.json measured fastest on a 2-core CPU at the same WER (SSD verifies at a loss there)
    method: str = "ar"
    language: str = "en"
    min_chunk_s: float = 1.0  # minimum new audio before a re-decode (whisper_streaming's min-chunk-size)
    # trim the audio buffer at a committed sentence end past this length, seconds: every update of a long utterance
    # re-decodes the whole buffer, so the decode at its end is shorter (bench asr-stream: ar vs ar_trim15)
    buffer_trim_s: float = 8.0
    # faster-whisper pads VAD speech by 0.4 s: soft onsets start before the VAD is sure (bench asr-stream)
    pre_roll_s: float = 0.3  # audio before the VAD's start (its pad included) decoded too, seconds
    # > 0: the previous utterance's audio stays in the buffer as acoustic context after a shorter pause; off by
    # default: in dialogue it is often another voice, and it made the final text worse (bench asr-stream)
    context_gap_s: float = 0.0
    final_full: bool = True  # True: final text = the last decode of the whole utterance (False: LocalAgreement-2)
    # with final_full: the words that leave a trimmed buffer keep the text of the latest decode of the buffer, which
    # heard the audio after them (False: the words LocalAgreement-2 committed; bench asr-stream: ar_trim_committed)
    trim_latest: bool = True
    # after a trim the buffer keeps up to this much audio before the cut (from a word start), so the next decodes
    # hear the words before their first new word (a buffer that starts at a sentence end misheard the first words
    # after it); those words stay as they left (bench asr-stream: ar vs ar_no_overlap)
    trim_overlap_s: float = 2.0
    # > 0 (at least 9 s), with final_full: a trimmed utterance's final text is one exactly verified decode of its
    # audio since its last piece, and speech longer than this is finished in pieces while spoken
    # (engine/asr/streaming.py). 0 (default) = the words that left the buffer + the latest decode of the buffer:
    # the final comes sooner; whole-utterance decodes were no closer to offline beam 5 (bench asr-stream: ar_piece20)
    final_piece_s: float = 0.0
    beam_size: int = 1
    # beam width of the decode that gives an utterance's final text (at a VAD pause and at the end of speech); the
    # partials stay greedy. Plain AR (asr.method=ar) only: SSD and SpecASR verify against greedy decoding.
    # 5 gives a closer final text for more compute and a later final (bench asr-stream: ar_final_beam5 vs ar);
    # 1 = greedy (default)
    final_beam_size: int = 1
    compute_type: str = "int8"  # CTranslate2 compute type on CPU ("float16" on CUDA)
    device: str = "auto"  # "cpu", "cuda" or "auto"
    cpu_threads: int = 0  # 0 = all cores
    # Length-scaled encoding (engine/asr/window.py): the encoder sees the buffered audio plus a margin of
    # silence, not a 30 s window; "padded" = the 30 s window (the baseline, and the guards' fallback)
    encoder_window: str = "scaled"
    encoder_margin_s: float = 4.0  # silence after the audio, seconds
    encoder_min_s: float = 10.0  # shortest encoder window, seconds (a 10 s window costs 40 % of a 20 s one)
    # Decode guards (every method): token cap = guard_tokens_per_s * audio seconds + guard_tokens_base
    guard_tokens_per_s: float = 6.0
    guard_tokens_base: int = 24
    guard_compression_ratio: float = 2.4  # gzip compression ratio above which a decode is a loop
    guard_logprob: float = -1.0  # mean token log-prob below which a short-window decode is re-done padded
    guard_no_speech: float = 0.6  # no-speech probability above which (with a low log-prob) a window is silence
    # CTC self-speculative decoding (ctc_self_speculative_asr.txt, Table 1)
    tau_ctc: float = 0.7
    tau_slm: float = 0.2
    ssd_rejoin: bool = True  # re-join the CTC draft after an AR correction (paper footnote 1; torch engine)
    ssd_engine: str = "ct2"  # "ct2" (int8 CTranslate2 verify/continue, the live path) or "torch" (the protocol one)
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
    # LLM threads while the user speaks (0 = all): bench/results/voice.json; speculation yields to every ASR decode
    predgen_speculation_threads: int = 0
    predgen_top_k: int = 3
    predgen_tokens_per_update: int = 8
    # what PredGen answers while the user speaks: "hypothesis" (the final transcript if speech ended now) or
    # "partial" (the partial transcript as shown)
    predgen_source: str = "hypothesis"
    # an LLM server instead of in-process llama.cpp (engine/llm/remote/adapter.py; README "Use an LLM server")
    backend: str = "local"  # "local" | "remote"
    base_url: str = ""  # remote: http://host:port of vLLM / SGLang / llama_cpp.server
    model: str = ""  # remote: served model name ("" = the server's first)
    api_key_env: str = ""  # remote: name of the environment variable holding the API key (never the key itself)
    tokenizer: str = ""  # remote: the served model's tokenizer, .gguf or directory ("" = model_role's GGUF)
    remote_api: str = "auto"  # auto | openai | sglang
    remote_top_n: int = 5  # log-probs per position (≥ predgen_top_k; vLLM caps it at --max-logprobs)
    remote_timeout_s: float = 30.0
    remote_retries: int = 2


@dataclass(frozen=True)
class CaptionConfig:
    method: str = "ssbd"  # "ssbd" (previous output as the draft) or "ar" (re-translate from scratch)
    target_language: str = "German"
    model_role: str = "llm_target"
    max_tokens: int = 96
    # SSBD (ssbd_live_translation.txt Eq. 5)
    beta: float = 0.2
    mask_k: int = 5
    display_only_mask: bool = True
    # "utterance": the whole utterance is re-translated on each update (measured better: caption_segment.json);
    # "sentence": closed sentences are translated once and kept, only the open one is re-translated
    segment: str = "utterance"
    # what a partial update translates: "hypothesis" (the text the final transcript would have if speech ended now:
    # the final decode's corrections of earlier words are in the draft already) or "partial" (committed + tentative)
    source: str = "hypothesis"


@dataclass(frozen=True)
class TtsConfig:
    engine: str = "piper"  # "piper" or "codec" (the AR codec-token TTS, assets/codec_tts)
    length_scale: float = 1.0
    # the answer's first spoken piece may end at a clause (, ; : dash) once it has this many words (0 = a sentence)
    first_clause_words: int = 4
    # codec TTS sampler: "ar", "pcg" (pcg_tts.txt Algorithm 1), "sd" or "ssd" (constant bias 0.3); target-only is
    # the default: on ONNX Runtime it is the fastest at equal CER on 2 cores (bench/results/tts.json: PCG 0.87×)
    codec_method: str = "ar"
    # PCG (pcg_tts.txt Eq. 1, Algorithm 1)
    theta: float = 0.42
    lookahead: int = 3
    temperature: float = 0.2  # the paper samples LLaSA at 0.8; this small codec LM is intelligible only lower (card.md)


@dataclass(frozen=True)
class DuplexConfig:
    """Talking over the assistant with the speaker on (bench/results/duplex.json)."""

    echo_cancellation: bool = True  # WebRTC AEC3 (livekit APM) on the microphone while the speaker plays
    noise_suppression: bool = False  # WebRTC noise suppression on the microphone
    input_latency_ms: float = 100.0  # capture-side delay added to the player's measured output latency
    end_of_turn: str = "vad"  # "vad" (silence of vad.min_silence_s) | "smart_turn" (Smart Turn v3.2 at each pause)
    turn_threshold: float = 0.5
    turn_pause_s: float = 0.2  # silence after which Smart Turn is asked
    turn_max_silence_s: float = 2.0  # silence that always ends the turn (smart_turn)
    barge_in_min_speech_s: float = 0.1
    barge_in_threshold: float = 0.5


@dataclass(frozen=True)
class Config:
    models: ModelsConfig = field(default_factory=ModelsConfig)
    audio: AudioConfig = field(default_factory=AudioConfig)
    vad: VadConfig = field(default_factory=VadConfig)
    asr: AsrConfig = field(default_factory=AsrConfig)
    llm: LlmConfig = field(default_factory=LlmConfig)
    caption: CaptionConfig = field(default_factory=CaptionConfig)
    tts: TtsConfig = field(default_factory=TtsConfig)
    duplex: DuplexConfig = field(default_factory=DuplexConfig)

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
    validate(cfg)
    return cfg


# Label and tooltip (what it does, and its source) for every setting the GUI shows.
SETTINGS_HELP: dict[str, tuple[str, str]] = {
    "vad.threshold": ("VAD threshold", "Silero VAD speech probability above which audio counts as speech."),
    "vad.min_silence_s": ("End-of-speech silence (s)", "Silence that ends an utterance; shorter answers sooner, "
                          "longer tolerates pauses."),
    "vad.min_speech_s": ("Minimum speech (s)", "Shorter bursts of speech are ignored."),
    "vad.speech_pad_s": ("Speech padding (s)", "Audio kept before speech starts and after it ends."),
    "asr.method": ("ASR method", "ar = plain greedy Whisper decoding on CTranslate2 (default: fastest on a "
                   "CPU); ssd = CTC self-speculative decoding (ctc_self_speculative_asr.txt: the CTC "
                   "head on Whisper's encoder drafts, the decoder verifies); specasr = Whisper tiny.en drafts, base "
                   "verifies (specasr.txt); ar_torch = plain greedy on "
                   "the same torch decoder SSD uses (the baseline)."),
    "asr.model_role": ("ASR model", "asr_target = Whisper base (multilingual), asr_draft = Whisper tiny.en (faster)."),
    "asr.min_chunk_s": ("Minimum new audio per update (s)", "whisper_streaming's min-chunk-size: new audio needed "
                        "before the utterance is re-decoded (LocalAgreement-2 commit policy)."),
    "asr.buffer_trim_s": ("Buffer trim (s)", "A long utterance's audio buffer is cut at a committed sentence end once "
                          "it is longer than this: every update re-decodes the buffer, so a shorter buffer gives the "
                          "final text sooner (bench asr-stream: 8 s vs 15 s)."),
    "asr.pre_roll_s": ("ASR pre-roll (s)", "Audio before the VAD's speech start (after its padding) that the ASR "
                       "decodes too: soft onsets (\"th\", \"f\", \"h\") start before the VAD is sure. Never reaches "
                       "into the previous utterance."),
    "asr.context_gap_s": ("Acoustic context gap (s)", "When the previous utterance ended less than this ago, its "
                          "audio stays at the head of the buffer as acoustic context (its words are not emitted "
                          "again); 0 = every utterance is decoded on its own audio."),
    "asr.final_beam_size": ("Beam width of the final decode", "The decode that gives an utterance's final text (at "
                            "a pause and at the end of speech) uses beam search of this width; partials stay greedy. "
                            "1 = greedy. Plain AR only (SSD and SpecASR verify against greedy decoding)."),
    "asr.final_full": ("Final text from the whole utterance", "On: at the end of speech the words still in the "
                       "buffer come from the latest decode of the whole utterance (it sees all of it); off: "
                       "whisper_streaming's rule, the words LocalAgreement-2 committed from shorter prefixes."),
    "asr.trim_latest": ("Trimmed words from the latest decode", "With the final text from the whole utterance: the "
                        "words whose audio leaves the buffer of a long utterance keep the text of the latest decode "
                        "of the buffer (it heard the words after them); off: the words LocalAgreement-2 committed "
                        "from shorter prefixes."),
    "asr.trim_overlap_s": ("Trim overlap (s)", "A long utterance's buffer, trimmed at a sentence end, keeps up to "
                           "this much audio before the cut: the decodes after it hear the words before their "
                           "first new word (which are not emitted again). 0 = the buffer starts at the cut."),
    "asr.final_piece_s": ("Final decode piece (s)", "With the final text from the whole utterance: an utterance "
                          "longer than the buffer gets its final text from one decode of all of it (the streaming "
                          "text as a draft, verified exactly); speech longer than this is finished in pieces while "
                          "it is spoken (at least 9 s). 0 = committed words + the latest decode of the buffer (faster, less exact)."),
    "asr.encoder_window": ("Encoder window", "scaled = encode the buffered audio plus a margin of silence (cost "
                           "grows with the audio, whisper.cpp's audio_ctx idea); padded = always a 30 s window "
                           "(Whisper's training length, slow). Scaled decodes that fail a guard are redone padded."),
    "asr.encoder_margin_s": ("Encoder margin (s)", "Silence appended after the audio in a scaled window: Whisper "
                             "ends and punctuates better when it sees silence after the speech."),
    "asr.encoder_min_s": ("Shortest encoder window (s)", "Scaled windows are never shorter than this."),
    "asr.guard_tokens_per_s": ("Token cap per second", "Decode guard: at most this many tokens per second of "
                               "audio (plus a constant); a decode that hits the cap is a loop."),
    "asr.guard_tokens_base": ("Token cap constant", "Decode guard: tokens allowed on top of the per-second cap."),
    "asr.guard_compression_ratio": ("Loop guard: compression ratio", "A decode whose text compresses better than "
                                    "this (gzip) is a repetition loop (Whisper's own fallback rule)."),
    "asr.guard_logprob": ("Guard: mean log-prob", "A scaled-window decode below this mean token log-prob is redone "
                          "on the padded window (Whisper's log-prob threshold)."),
    "asr.guard_no_speech": ("Guard: no-speech probability", "With a low log-prob, a window above this no-speech "
                            "probability is silence and gives no words (Whisper's rule)."),
    "asr.tau_ctc": ("τ_CTC", "CTC self-speculative decoding (ctc_self_speculative_asr.txt, Eq. 3): accept the CTC "
                    "draft without the decoder if every frame entropy is below τ_CTC. Not used by the 'ar' method."),
    "asr.tau_slm": ("τ_SLM", "CTC self-speculative decoding (Eq. 5): accept the draft in one decoder pass if every "
                    "token probability exceeds τ_SLM. Presets (Table 1): high accuracy τ_CTC=0.7, τ_SLM=0.2; high RTFx "
                    "τ_CTC=3.0, τ_SLM=0.1."),
    "asr.ssd_engine": ("SSD decoder engine", "ct2 = verify (one align pass, which also gives the word times) and "
                        "continue on CTranslate2's int8 decoder, as faster-whisper runs; torch = the causal-LM "
                        "protocol implementation with KV-cache reuse and draft re-join (engine/asr/ctc_self_speculative.py)."),
    "asr.ssd_rejoin": ("SSD draft re-join", "After an AR correction (Eq. 6), re-join the rest of the CTC draft and "
                       "verify it in one pass (the paper's footnote 1); off = plain Eq. 6."),
    "asr.specasr_threshold": ("SpecASR truncation threshold", "SpecASR §IV-A: stop drafting where the draft's "
                              "normalised logit falls below this. Not used by the 'ar' method."),
    "asr.specasr_max_draft": ("SpecASR max draft length", "SpecASR §IV-A: longest draft (tokens)."),
    "asr.specasr_tree": ("SpecASR sparse tree", "SpecASR §IV-C: two-pass sparse token tree on/off."),
    "llm.answer_method": ("Answer method", "predgen = speculate on partial transcripts (PredGen, predgen.txt "
                          "Algorithm 1); cascade = answer only after you finish."),
    "llm.predgen_verifier": ("PredGen verifier", "greedy (lossless), top_k, reflection (LLM judge) or biased "
                             "(SSBD β) — predgen.txt §3.1."),
    "llm.predgen_top_k": ("PredGen top-k", "Top-k verifier: accept candidate tokens among the k most likely."),
    "llm.predgen_tokens_per_update": ("PredGen tokens per update", "Work budget of one speculative update while "
                                      "you speak (tokens); 0 = only pre-fill the partial prompt (cascade + "
                                      "incremental prefill)."),
    "llm.predgen_source": ("PredGen answers", "hypothesis = what the final transcript would be if you stopped "
                           "now (the final decode's corrections of earlier words are already in the candidate); "
                           "partial = the partial transcript as shown."),
    "llm.predgen_speculation_threads": ("PredGen speculation threads", "LLM threads for speculation while you "
                                        "speak (0 = all); it pauses during every ASR decode and runs at low "
                                        "priority, so the ASR is never delayed."),
    "llm.max_answer_tokens": ("Max answer tokens", "Longest answer, in tokens."),
    "caption.method": ("Caption method", "ssbd = previous translation as the draft (SSBD, "
                       "ssbd_live_translation.txt Algorithm 1); ar = re-translate from scratch."),
    "caption.beta": ("β (SSBD bias)", "SSBD Eq. 5: P' = (1−β)·P + β·onehot(draft). Higher = calmer captions and "
                     "faster, too high can lock in errors. 0 = unbiased self-speculation."),
    "caption.mask_k": ("mask-k (tokens)", "Hide (display-only) or trim (classic) the last k tokens of each "
                       "intermediate translation (Arivazhagan et al. 2020b; SSBD Table 4)."),
    "caption.display_only_mask": ("Display-only mask-k", "On: keep the last k tokens in the draft but hide them "
                                  "on screen (SSBD's proposal). Off: trim them from the draft (classic mask-k)."),
    "caption.segment": ("Translate by", "utterance = the whole utterance is re-translated on every update "
                        "(default); sentence = a finished sentence is translated once and kept, only the last one is "
                        "re-translated (steadier captions, but not sooner on two cores: see the README)."),
    "caption.source": ("Partial captions translate", "partial = the partial transcript (committed + tentative "
                       "words, as shown); hypothesis = what the final transcript would be if speech ended now, so "
                       "the final decode's corrections of earlier words are already in the draft."),
    "caption.target_language": ("Target language", "Language of the live translation, a code or English name: "
                                "de/German, fr/French, es/Spanish (few-shot framing and the fidelity guard's "
                                "language check), or it, pt, nl, zh, ja, ru, pl, tr (no language check)."),
    "tts.engine": ("TTS engine", "piper = the Piper voice (default); codec = the autoregressive codec-token TTS "
                   "trained here (assets/codec_tts), sampled with the codec method below."),
    "tts.codec_method": ("Codec TTS sampler", "pcg = speculative sampling with Principled Coarse-Graining "
                         "(pcg_tts.txt Algorithm 1); sd = standard speculative sampling; ssd = constant-bias "
                         "relaxation (0.3); ar = target only (default: fastest at equal CER on a CPU, see "
                         "the README)."),
    "tts.temperature": ("Codec TTS temperature", "Sampling temperature of the codec TTS (paper: 0.8 for LLaSA-8B; "
                        "this small model speaks most clearly at ≈ 0.2: assets/codec_tts/card.md)."),
    "tts.length_scale": ("Speech rate (length scale)", "Piper phoneme duration scale (> 1 slower)."),
    "tts.first_clause_words": ("First spoken piece (words)", "Start speaking the answer at its first clause "
                               "boundary (, ; : or a dash) once it has this many words, instead of waiting for the "
                               "whole first sentence; PredGen pre-synthesises that piece. 0 = whole sentence."),
    "tts.theta": ("PCG θ", "PCG Eq. 1: cosine-similarity threshold of acoustic similarity groups "
                  "(pcg_tts.txt; best 0.38–0.45). Used by the PCG codec TTS."),
    "tts.lookahead": ("PCG lookahead L_d", "PCG Algorithm 1: draft tokens per verification step."),
    "models.asr_target": ("Model: ASR target", "embedded, a local path, or a hub id."),
    "models.asr_draft": ("Model: ASR draft", "embedded, a local path, or a hub id."),
    "models.llm_target": ("Model: LLM target", "embedded, a .gguf path, or a hub id org/name:file.gguf."),
    "models.llm_draft": ("Model: LLM draft", "embedded, a .gguf path, or a hub id org/name:file.gguf."),
    "models.tts_voice": ("Model: TTS voice", "embedded, a Piper .onnx path, or a hub id."),
    "models.vad": ("Model: VAD", "embedded or a Silero VAD .onnx path."),
    "audio.input_device": ("Input device", "Microphone (name or index); empty = system default."),
    "audio.output_device": ("Output device", "Speaker (name or index); empty = default; 'none' = never play."),
    "llm.backend": ("LLM backend", "local = llama.cpp in this process; remote = an LLM server (vLLM, SGLang, "
                    "llama_cpp.server) at llm.base_url; PredGen/SSBD need its prompt log-probabilities."),
    "llm.base_url": ("LLM server URL", "http://host:port of the server (llm.backend = remote)."),
    "llm.model": ("Served model", "The model name on the server; empty = its first."),
    "llm.api_key_env": ("API key variable", "Name of the environment variable holding the server's API key; the "
                        "key itself is never stored or logged."),
    "llm.tokenizer": ("Server model tokenizer", "The served model's tokenizer (.gguf or directory), checked against "
                      "the server at connect time; empty = the local GGUF of llm.model_role."),
    "llm.remote_api": ("Server API", "auto-detect, OpenAI /v1/completions, or SGLang /generate."),
    "llm.remote_top_n": ("Log-probs per position", "Top-N log-probabilities the server returns per position "
                         "(greedy is exact when top-1 is returned; top-k needs k ≤ N)."),
    "llm.remote_timeout_s": ("Server time-out (s)", "Per request."),
    "llm.remote_retries": ("Server retries", "Retries with exponential back-off on connection errors and 5xx."),
    "duplex.echo_cancellation": ("Echo cancellation", "WebRTC AEC3 (livekit) removes the assistant's own voice from "
                                 "the microphone, with what the speaker plays as reference (microphone + speaker)."),
    "duplex.noise_suppression": ("Noise suppression", "WebRTC noise suppression on the microphone."),
    "duplex.input_latency_ms": ("Microphone latency (ms)", "Added to the speaker's measured latency as the echo "
                                "canceller's delay hint."),
    "duplex.end_of_turn": ("End of turn", "vad = a silence of vad.min_silence_s ends the turn; smart_turn = after a "
                           "short pause Smart Turn v3.2 (audio model) decides complete vs mid-sentence; a long "
                           "silence always ends it."),
    "duplex.turn_threshold": ("Turn-complete threshold", "Smart Turn probability at or above which a pause ends the "
                              "turn."),
    "duplex.turn_pause_s": ("Pause before asking (s)", "Silence after which Smart Turn is asked."),
    "duplex.turn_max_silence_s": ("Longest pause (s)", "Silence that always ends the turn (smart_turn)."),
    "duplex.barge_in_min_speech_s": ("Barge-in speech (s)", "Echo-cancelled speech needed to interrupt the "
                                     "assistant."),
    "duplex.barge_in_threshold": ("Barge-in threshold", "Speech probability for barge-in; lower reacts sooner but "
                                  "may trigger on residual echo."),
}

CHOICES: dict[str, tuple[str, ...]] = {
    "asr.method": ("ssd", "specasr", "ar", "ar_torch"),
    "asr.ssd_engine": ("ct2", "torch"),
    "asr.encoder_window": ("scaled", "padded"),
    "asr.model_role": ("asr_target", "asr_draft"),
    "llm.answer_method": ("predgen", "cascade"),
    "llm.predgen_verifier": ("greedy", "top_k", "reflection", "biased"),
    "caption.method": ("ssbd", "ar"),
    "caption.segment": ("sentence", "utterance"),
    "caption.source": PARTIAL_SOURCES,
    "llm.predgen_source": PARTIAL_SOURCES,
    "tts.engine": ("piper", "codec"),
    "tts.codec_method": ("pcg", "sd", "ssd", "ar"),
    "duplex.end_of_turn": ("vad", "smart_turn"),
    "llm.backend": ("local", "remote"),
    "llm.remote_api": ("auto", "openai", "sglang"),
}

RANGES: dict[str, tuple[float, float]] = {
    "vad.threshold": (0.05, 0.95), "vad.min_silence_s": (0.1, 5.0), "vad.min_speech_s": (0.0, 2.0),
    "vad.speech_pad_s": (0.0, 1.0), "asr.pre_roll_s": (0.0, 2.0), "asr.context_gap_s": (0.0, 30.0),
    "asr.min_chunk_s": (0.2, 5.0), "asr.buffer_trim_s": (3.0, 28.0), "asr.final_piece_s": (0.0, 27.0),
    "asr.trim_overlap_s": (0.0, 5.0),
    "asr.tau_ctc": (0.0, 10.0),
    "asr.encoder_margin_s": (0.0, 10.0), "asr.encoder_min_s": (1.0, 30.0), "asr.guard_tokens_per_s": (0.5, 20.0),
    "asr.guard_tokens_base": (4, 200), "asr.guard_compression_ratio": (1.5, 10.0), "asr.guard_logprob": (-10.0, 0.0),
    "asr.guard_no_speech": (0.0, 1.0), "asr.final_beam_size": (1, 10),
    "asr.tau_slm": (0.0, 1.0), "asr.specasr_threshold": (0.0, 1.0), "asr.specasr_max_draft": (1, 64),
    "llm.predgen_top_k": (1, 50), "llm.predgen_tokens_per_update": (0, 64), "llm.predgen_speculation_threads": (0, 64),
    "llm.max_answer_tokens": (8, 2048), "caption.beta": (0.0, 1.0), "caption.mask_k": (0, 20),
    "tts.length_scale": (0.5, 2.0), "tts.first_clause_words": (0, 40), "tts.theta": (0.0, 1.0), "tts.lookahead": (1, 16),
    "tts.temperature": (0.1, 2.0),
    "duplex.turn_threshold": (0.05, 0.95), "duplex.turn_pause_s": (0.1, 1.0), "duplex.turn_max_silence_s": (0.5, 5.0),
    "duplex.barge_in_min_speech_s": (0.03, 0.5), "duplex.barge_in_threshold": (0.1, 0.9),
    "duplex.input_latency_ms": (0.0, 500.0),
    "llm.remote_top_n": (2, 20), "llm.remote_timeout_s": (1.0, 600.0), "llm.remote_retries": (0, 10),
}


def validate(cfg: "Config") -> None:
    """Raise ConfigError for a value outside its range or choices (the settings panel shows the message)."""
    for key, (lo, hi) in RANGES.items():
        section, name = key.split(".")
        v = getattr(getattr(cfg, section), name)
        if not lo <= v <= hi:
            raise ConfigError(f"{key} = {v} is outside {lo}..{hi}")
    for key, options in CHOICES.items():
        section, name = key.split(".")
        v = getattr(getattr(cfg, section), name)
        if v not in options:
            raise ConfigError(f"{key} = {v!r}: choose one of {', '.join(options)}")
    if cfg.llm.backend == "remote" and not cfg.llm.base_url:
        raise ConfigError("llm.base_url is required with llm.backend = remote")
    from engine.translate.languages import LANGUAGES, language_code

    lang = cfg.caption.target_language
    if language_code(lang) in (None, "en"):
        raise ConfigError(f"caption.target_language = {lang!r}: choose a code or name of "
                          f"{', '.join(f'{c}/{n}' for c, n in LANGUAGES.items() if c != 'en')}")
