"""One typed configuration tree for specvoice, each setting declared once.

Every setting is one field of the frozen dataclasses below, declared with :func:`setting`: its default, label, help
text, unit, range (numbers) and choices (a fixed set) live in the field's metadata. Everything else is generated
from that declaration: the TOML loader, the environment variables, ``--set`` parsing and its messages, validation,
``python -m engine.config`` (the list of every setting) and the desktop app's settings dialog (``app.settings``).
A threshold has exactly one name from the paper to the GUI: the field name here (``tau_ctc``, ``tau_slm``,
``beta``, ``mask_k``, ``theta`` ...).

Sources, lowest to highest precedence (:func:`load_config`):
    1. the defaults below;
    2. a TOML file (``--config FILE``, else ``$SPECVOICE_CONFIG``, else ``~/.config/specvoice/config.toml``
       when it exists), whose tables mirror the dataclasses: ``[asr] model_role = "asr_draft"``;
    3. environment variables: ``SPECVOICE_<SECTION>_<KEY>`` for any setting (``SPECVOICE_ASR_LANGUAGE=de``,
       :func:`env_name`), and ``SPECVOICE_MODEL_<ROLE>`` for the model of a role;
    4. CLI flags (``--model ROLE=SPEC``, ``--set section.key=value``);
    5. the desktop app's dialog edits (``edits``): each applied on its own, a bad one reported and skipped.

Raises:
    ConfigError: an unknown section/key or a value of the wrong type, range or choice; its message is one line
    that starts with the setting's ``section.key``.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from audio.io import SAMPLE_RATE
from engine.core.events import PARTIAL_SOURCES
from engine.translate.languages import LANGUAGES, WHISPER_NAMES, language_code

ROLES = ("asr_target", "asr_draft", "llm_target", "llm_draft", "tts_voice", "vad")

#: ``auto | cpu | cuda``: where a stage runs; auto = CUDA where the stage's runtime can use it, else the CPU
#: (engine.devices)
DEVICES = ("auto", "cpu", "cuda")

#: the language codes of the multilingual Whisper models (tokenizer order: most training data first; no ``yue``,
#: which the shipped base model has no token for)
WHISPER_LANGUAGES = tuple(WHISPER_NAMES)

#: CTranslate2 compute types (``ctranslate2.get_supported_compute_types`` names, plus auto/default)
COMPUTE_TYPES = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32",
                 "auto", "default")

_TARGET_CODES = tuple(LANGUAGES)  # English too: captions translate from the language the speaker spoke


class ConfigError(ValueError):
    """A configuration value is unknown or invalid (the message is one line, naming the setting)."""


def setting(default: Any, *, label: str, help: str, unit: str = "", range: tuple[float, float] | None = None,
            choices: tuple[Any, ...] | None = None, alias: Callable[[str], Any] | None = None,
            accepts: str = "") -> Any:
    """Declare one setting: a ``dataclasses.field`` whose metadata is the setting's whole description.

    Args:
        default: the default value; its type (bool, int, float or str) is the setting's type.
        label: short name for the settings dialog ("End-of-speech silence").
        help: what it does and where it comes from (paper, benchmark), one or more sentences.
        unit: unit of a number ("s", "ms", "Hz", "tokens", ...), shown after the label; "" = none.
        range: inclusive ``(lo, hi)`` of a number.
        choices: the values a fixed-set setting accepts.
        alias: maps a given value to the choice it denotes (``"German"`` → ``"de"``); None if it denotes none.
            The value is kept as given.
        accepts: the accepted values in words ("a code or English name of de/German, ..."), for the error
            message and the list of settings; "" = "one of" the choices.

    Returns:
        A ``dataclasses.Field`` for a frozen dataclass.
    """
    meta = {"label": label, "help": help, "unit": unit, "range": range,
            "choices": tuple(choices) if choices is not None else None, "alias": alias, "accepts": accepts}
    return field(default=default, metadata=meta)


def section(cls: type, title: str) -> Any:
    """A section of :class:`Config` (a table of the TOML file, a group of the settings dialog)."""
    return field(default_factory=cls, metadata={"title": title})


@dataclass(frozen=True)
class Setting:
    """What :func:`setting` declared for one field, with its key (``section.name``) and type."""

    key: str
    section: str
    name: str
    type: type
    default: Any
    label: str
    help: str
    unit: str
    range: tuple[float, float] | None
    choices: tuple[Any, ...] | None
    alias: Callable[[str], Any] | None
    accepts: str

    @property
    def env(self) -> str:
        """The environment variable that sets it (``SPECVOICE_ASR_LANGUAGE``)."""
        return env_name(self.key)

    def coerce(self, value: Any) -> Any:
        """``value`` (TOML value, environment / ``--set`` / QSettings text, widget value) as this setting's type.

        Raises:
            ConfigError: a value that is not of the type ("vad.threshold: expected float, got 'loud'").
        """
        typ = self.type
        bad = ConfigError(f"{self.key}: expected {typ.__name__}, got {value!r}")
        if typ is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, int) and value in (0, 1):
                return bool(value)
            if isinstance(value, str):
                if value.strip().lower() in ("1", "true", "yes", "on"):
                    return True
                if value.strip().lower() in ("0", "false", "no", "off"):
                    return False
            raise bad
        if typ is int:
            if isinstance(value, bool):
                raise bad
            if isinstance(value, int):
                return value
            if isinstance(value, float) and value.is_integer():
                return int(value)
            if isinstance(value, str):
                try:
                    return int(value.strip())
                except ValueError:
                    try:  # "40.0" from a store that wrote a float
                        f = float(value)
                    except ValueError:
                        raise bad from None
                    if f.is_integer():
                        return int(f)
            raise bad
        if typ is float:
            if isinstance(value, bool):
                raise bad
            if isinstance(value, (int, float)):
                v = float(value)
            elif isinstance(value, str):
                try:
                    v = float(value.strip())
                except ValueError:
                    raise bad from None
            else:
                raise bad
            if not math.isfinite(v):
                raise bad
            return v
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)  # a TOML number for a text setting (``input_device = 3``)
        raise bad

    def check(self, value: Any) -> None:
        """Raise ConfigError unless ``value`` (already of this setting's type) is in its range / choices."""
        if self.range is not None:
            lo, hi = self.range
            if not lo <= value <= hi:
                unit = f" {self.unit}" if self.unit else ""
                raise ConfigError(f"{self.key}: {value} is outside {_num(lo)}..{_num(hi)}{unit}")
        if self.choices is not None:
            denoted = self.alias(value) if self.alias is not None and isinstance(value, str) else value
            if denoted not in self.choices:
                what = self.accepts or "one of " + ", ".join(str(c) for c in self.choices)
                raise ConfigError(f"{self.key}: {value!r} is not {what}")

    def parse(self, value: Any) -> Any:
        """:meth:`coerce` then :meth:`check`. Raises ConfigError."""
        v = self.coerce(value)
        self.check(v)
        return v

    def describe(self) -> str:
        """One line: ``key (type, default …, range/choices, unit): help``."""
        parts = [self.type.__name__, f"default {self.default!r}"]
        if self.range is not None:
            parts.append(f"{_num(self.range[0])}..{_num(self.range[1])}")
        if self.choices is not None:
            parts.append(self.accepts or "one of " + "|".join(str(c) for c in self.choices))
        if self.unit:
            parts.append(self.unit)
        return f"{self.key} ({', '.join(parts)}): {self.help}"


def cache_dir(configured: str = "") -> Path:
    """The folder for joined, downloaded and training-data files: ``configured`` (``models.cache_dir``) when set,
    else ``$SPECVOICE_CACHE`` when set and non-empty, else ``~/.cache/specvoice``; ``~`` is expanded.

    The one place that resolves it, so the runtime, the training scripts and the TTS code agree on the folder.
    The folder is not created.
    """
    d = configured or os.environ.get("SPECVOICE_CACHE") or "~/.cache/specvoice"
    return Path(d).expanduser()


def _num(x: float) -> str:
    return f"{x:g}"


def env_name(key: str) -> str:
    """``asr.language`` → ``SPECVOICE_ASR_LANGUAGE`` (the environment variable of a setting)."""
    return "SPECVOICE_" + key.replace(".", "_").upper()


# -- the settings ------------------------------------------------------------------------------------------------
_MODEL_HELP = "embedded (the pinned package), a local path, or a hub id"


@dataclass(frozen=True)
class ModelsConfig:
    """Where each model role comes from: ``"embedded"`` (the pinned PyPI package), a local path, or a
    hub id (``org/name`` for CTranslate2 Whisper; ``org/name:file.gguf`` for GGUF)."""

    asr_target: str = setting("embedded", label="ASR target model",
                              help=f"Whisper of the asr_target role (default base, multilingual): {_MODEL_HELP} "
                                   "(org/name, CTranslate2).")
    asr_draft: str = setting("embedded", label="ASR draft model",
                             help=f"Whisper of the asr_draft role (default tiny.en): {_MODEL_HELP} "
                                  "(org/name, CTranslate2).")
    llm_target: str = setting("embedded", label="LLM target model",
                              help="The answering LLM (default Qwen2.5-Coder-1.5B-Instruct): embedded, a .gguf path, "
                                   "or a hub id org/name:file.gguf.")
    llm_draft: str = setting("embedded", label="LLM draft model",
                             help="The small LLM (default Qwen2.5-Coder-0.5B-Instruct): embedded, a .gguf path, or a "
                                  "hub id org/name:file.gguf.")
    tts_voice: str = setting("embedded", label="TTS voice",
                             help=f"The Piper voice (default en_US-joe-medium): {_MODEL_HELP} (a Piper .onnx path).")
    vad: str = setting("embedded", label="VAD model", help="Silero VAD: embedded or a Silero VAD .onnx path.")
    cache_dir: str = setting("", label="Model cache folder",
                             help="Where joined and downloaded model files are kept; empty = $SPECVOICE_CACHE or "
                                  "~/.cache/specvoice.")
    dir: str = setting("", label="Model folder",
                       help="A folder holding the model files, used instead of the pinned packages (an offline GPU "
                            "machine without them); empty = none.")


@dataclass(frozen=True)
class AudioConfig:
    sample_rate: int = setting(SAMPLE_RATE, label="Sample rate", unit="Hz", choices=(SAMPLE_RATE,),
                               help="The rate every engine consumes; inputs are resampled to it.")
    block_s: float = setting(0.1, label="Audio block", unit="s", range=(0.02, 1.0),
                             help="Seconds per microphone / file block: the pace of the live loop.")
    input_device: str = setting("", label="Input device", help="Microphone (name or index); empty = system default.")
    output_device: str = setting("", label="Output device",
                                 help="Speaker (name or index); empty = system default; 'none' = never play.")


@dataclass(frozen=True)
class VadConfig:
    threshold: float = setting(0.5, label="VAD threshold", range=(0.05, 0.95),
                               help="Silero VAD speech probability above which audio counts as speech.")
    min_silence_s: float = setting(0.6, label="End-of-speech silence", unit="s", range=(0.1, 5.0),
                                   help="Silence that ends an utterance; shorter answers sooner, longer tolerates "
                                        "pauses.")
    min_speech_s: float = setting(0.25, label="Minimum speech", unit="s", range=(0.0, 2.0),
                                  help="Shorter bursts of speech are ignored.")
    speech_pad_s: float = setting(0.2, label="Speech padding", unit="s", range=(0.0, 1.0),
                                  help="Audio kept before speech starts and after it ends.")
    # telephone-band speech: Silero's p mostly 0.3-0.5 (bench conversation, telephone condition)
    fallback_threshold: float = setting(0.3, label="VAD threshold for clear sound", range=(0.05, 0.95),
                                        help="A 32 ms chunk whose energy stands vad.fallback_snr_db above the noise "
                                             "floor counts as speech from this Silero probability on (band-limited "
                                             "or synthetic speech that Silero is unsure of); ≥ vad.threshold = off.")
    fallback_snr_db: float = setting(15.0, label="Clear sound above the noise floor", unit="dB", range=(0.0, 60.0),
                                     help="Energy above the tracked noise floor that makes a chunk clear sound for "
                                          "vad.fallback_threshold.")
    noise_rise_db_s: float = setting(3.0, label="Noise floor rise", unit="dB/s", range=(0.1, 30.0),
                                     help="How fast the VAD's noise floor (a minimum tracker of the chunk energy) "
                                          "may rise: a steady noise is followed within seconds, speech is not.")
    # Silero hears other talkers as speech, so in babble a turn would never end; the default is the largest margin
    # that loses none of the near talker's speech against the same speech in quiet (development conversations,
    # python -m bench.make_conversation --seed 7, 8, 9)
    near_snr_db: float = setting(6.0, label="Near talker above background speech", unit="dB", range=(0.0, 30.0),
                                 help="While the background is itself speech (babble, other talkers), a chunk counts "
                                      "as the user's speech only when its level stands this far above the "
                                      "background's; 0 = off.")


@dataclass(frozen=True)
class AsrConfig:
    model_role: str = setting("asr_target", label="ASR model", choices=("asr_target", "asr_draft"),
                              help="asr_target = Whisper base (multilingual), asr_draft = Whisper tiny.en (faster).")
    # auto: on the CPU ar, what bench/results/asr_stream.json measured fastest on a 2-core CPU at the same WER (SSD
    # verifies at a loss there); on CUDA the choice of engine.devices.GPU_METHOD (the committed GPU results)
    method: str = setting("auto", label="ASR method", choices=("auto", "ssd", "specasr", "ar", "ar_torch"),
                          help="auto = the method the committed results show fastest where the ASR runs (default: ar "
                               "on the CPU; on CUDA engine.devices.GPU_METHOD, ar until a GPU result shows a "
                               "speculative method winning); ar = plain greedy Whisper decoding on CTranslate2; ssd = "
                               "CTC self-speculative decoding (ctc_self_speculative_asr.txt: the CTC head on "
                               "Whisper's encoder drafts, the decoder verifies); specasr = Whisper tiny.en drafts, "
                               "base verifies (specasr.txt); ar_torch = plain greedy on the same torch decoder SSD "
                               "uses (the baseline).")
    # en, not auto: with the language identified, some short or noisy English utterances of the generated
    # conversation are heard (and transcribed) as another language, and its English WER rises (bench language-english)
    language: str = setting("en", label="Spoken language", choices=("auto",) + WHISPER_LANGUAGES,
                            help="The language Whisper transcribes (a Whisper language code); auto = detect it. "
                                 "Ignored by an English-only model (tiny.en).")
    # every update re-decodes the buffer; the final's decode comes at the pause whatever the chunk, so fewer updates
    # leave the CPU free for it: less compute and a lower final p90 at the same WER in real time on development
    # conversations (bench conversation --data, other seeds; methods ar_chunk100, ar_chunk150), the first partial
    # about 0.2 s later than at 1 s
    min_chunk_s: float = setting(1.25, label="Minimum new audio per update", unit="s", range=(0.2, 5.0),
                                 help="whisper_streaming's min-chunk-size: new audio needed before the utterance is "
                                      "re-decoded (LocalAgreement-2 commit policy).")
    # every update of a long utterance re-decodes the whole buffer, so the decode at its end is shorter (bench
    # asr-stream: ar vs ar_trim15)
    buffer_trim_s: float = setting(8.0, label="Buffer trim", unit="s", range=(3.0, 28.0),
                                   help="A long utterance's audio buffer is cut at a committed sentence end once it "
                                        "is longer than this: every update re-decodes the buffer, so a shorter buffer "
                                        "gives the final text sooner (bench asr-stream: 8 s vs 15 s).")
    # faster-whisper pads VAD speech by 0.4 s: soft onsets start before the VAD is sure (bench asr-stream)
    pre_roll_s: float = setting(0.3, label="ASR pre-roll", unit="s", range=(0.0, 2.0),
                                help="Audio before the VAD's speech start (after its padding) that the ASR decodes "
                                     "too: soft onsets (\"th\", \"f\", \"h\") start before the VAD is sure. Never "
                                     "reaches into the previous utterance.")
    # a sentence cut by a hesitation pause is decoded with the audio of its first half: closer to offline Whisper on
    # conversational speech (bench conversation on a development set of other seeds), English corpora unchanged
    # (bench asr-stream)
    context_gap_s: float = setting(3.0, label="Acoustic context gap", unit="s", range=(0.0, 30.0),
                                   help="When the previous utterance ended less than this ago, its audio stays at "
                                        "the head of the buffer as acoustic context (its words are not emitted "
                                        "again); 0 = every utterance is decoded on its own audio. Not used with "
                                        "language auto (each utterance's language is identified on its own audio).")
    # no closer to offline Whisper than dropping the context's words by time on development conversations (better
    # against the text, worse against offline beam 5, and not on every seed): off by default
    context_prefix: bool = setting(False, label="Context text as a forced prefix",
                                   help="With acoustic context: the previous utterance's text is forced as the "
                                        "first words of every decode that hears its audio, and the decode goes on "
                                        "after them (as in one long-form window); off: the decodes transcribe the "
                                        "context again and its words are dropped by their times.")
    # DTW word times are least reliable at the edge of a pause, where the committed words end; their text is not
    align_final: bool = setting(True, label="Final words after the committed text",
                                help="A final decode that hears words already committed (the acoustic context, or "
                                     "a finished piece) keeps the words after their text where it holds them; off: "
                                     "the words timed after the committed end (word times are least reliable at that "
                                     "edge).")
    # Whisper, decoding the previous utterance's audio with the new, can write the context's words again and time
    # them over the new audio (babble, reverb), where no time or tail rule drops them
    context_repeat_words: int = setting(3, label="Context written again: words", unit="words", range=(0, 20),
                                        help="With acoustic context: a final whose words open with at least this "
                                             "many of the previous utterance's words in a row (the context decoded "
                                             "again) is decoded again on the utterance's own audio; 0 = off.")
    final_full: bool = setting(True, label="Final text from the whole utterance",
                               help="On: at the end of speech the words still in the buffer come from the latest "
                                    "decode of the whole utterance (it sees all of it); off: whisper_streaming's "
                                    "rule, the words LocalAgreement-2 committed from shorter prefixes.")
    # bench asr-stream: ar_trim_committed
    trim_latest: bool = setting(True, label="Trimmed words from the latest decode",
                                help="With the final text from the whole utterance: the words whose audio leaves the "
                                     "buffer of a long utterance keep the text of the latest decode of the buffer "
                                     "(it heard the words after them); off: the words LocalAgreement-2 committed "
                                     "from shorter prefixes.")
    # a buffer that starts at a sentence end misheard the first words after it (bench asr-stream: ar vs
    # ar_no_overlap)
    trim_overlap_s: float = setting(2.0, label="Trim overlap", unit="s", range=(0.0, 5.0),
                                    help="A long utterance's buffer, trimmed at a sentence end, keeps up to this much "
                                         "audio before the cut: the decodes after it hear the words before their "
                                         "first new word (which are not emitted again). 0 = the buffer starts at "
                                         "the cut.")
    # whole-utterance decodes were no closer to offline beam 5 (bench asr-stream: ar_piece20), so 0 is the default
    final_piece_s: float = setting(0.0, label="Final decode piece", unit="s", range=(0.0, 27.0),
                                   help="With the final text from the whole utterance: an utterance longer than the "
                                        "buffer gets its final text from one decode of all of it (the streaming text "
                                        "as a draft, verified exactly); speech longer than this is finished in "
                                        "pieces while it is spoken (at least 9 s). 0 = committed words + the latest "
                                        "decode of the buffer (faster, less exact).")
    beam_size: int = setting(1, label="Beam width of the partials", range=(1, 10),
                             help="Beam width of the streaming decodes (1 = greedy). Plain AR only.")
    # greedy finals of noisy, reverberant and telephone-band conversation were far from offline greedy against the
    # text; a narrow beam on the final decode alone brings them close to it, within the final's latency and compute
    # bars (bench conversation: ar_final_greedy, ar_final_beam5 beside the default; on development conversations
    # beam 5 was no more accurate than 3, for more compute)
    final_beam_size: int = setting(3, label="Beam width of the final decode", range=(1, 10),
                                   help="The decode that gives an utterance's final text (at a pause and at the end "
                                        "of speech) uses beam search of this width; partials stay greedy. 1 = greedy. "
                                        "Plain AR only (SSD and SpecASR verify against greedy decoding).")
    compute_type: str = setting("int8", label="ASR compute type", choices=COMPUTE_TYPES,
                                help="CTranslate2 compute type of the Whisper weights: int8 on a CPU, float16 on "
                                     "CUDA.")
    device: str = setting("auto", label="ASR device", choices=DEVICES,
                          help="Where Whisper runs: auto = CUDA where its runtime can use it, else the CPU; cpu; cuda.")
    cpu_threads: int = setting(0, label="ASR CPU threads", range=(0, 256),
                               help="CPU threads of the Whisper decode; 0 = all cores.")
    # Length-scaled encoding (engine/asr/window.py)
    encoder_window: str = setting("scaled", label="Encoder window", choices=("scaled", "padded"),
                                  help="scaled = encode the buffered audio plus a margin of silence (cost grows with "
                                       "the audio, whisper.cpp's audio_ctx idea); padded = always a 30 s window "
                                       "(Whisper's training length, slow). Scaled decodes that fail a guard are "
                                       "redone padded.")
    encoder_margin_s: float = setting(4.0, label="Encoder margin", unit="s", range=(0.0, 10.0),
                                      help="Silence appended after the audio in a scaled window: Whisper ends and "
                                           "punctuates better when it sees silence after the speech.")
    # a 10 s window costs 40 % of a 20 s one
    encoder_min_s: float = setting(10.0, label="Shortest encoder window", unit="s", range=(1.0, 30.0),
                                   help="Scaled windows are never shorter than this.")
    # Decode guards (every method): token cap = guard_tokens_per_s * audio seconds + guard_tokens_base
    guard_tokens_per_s: float = setting(6.0, label="Token cap per second", unit="tokens/s", range=(0.5, 20.0),
                                        help="Decode guard: at most this many tokens per second of audio (plus a "
                                             "constant); a decode that hits the cap is a loop.")
    guard_tokens_base: int = setting(24, label="Token cap constant", unit="tokens", range=(4, 200),
                                     help="Decode guard: tokens allowed on top of the per-second cap.")
    guard_compression_ratio: float = setting(2.4, label="Loop guard: compression ratio", range=(1.5, 10.0),
                                             help="A decode whose text compresses better than this (gzip) is a "
                                                  "repetition loop (Whisper's own fallback rule).")
    guard_logprob: float = setting(-1.0, label="Guard: mean log-prob", range=(-10.0, 0.0),
                                   help="A scaled-window decode below this mean token log-prob is redone on the "
                                        "padded window (Whisper's log-prob threshold).")
    # a partial's doubtful decode commits nothing and is replaced by the next update: its padded 30 s re-decode
    # costs an encoder pass for text shown for a second (bench conversation --data on development conversations,
    # method ar_partial_retry: the same WER against beam 5 with more compute and a later final)
    partial_retry: bool = setting(False, label="Padded re-decode of partials",
                                  help="A streaming update's decode that fails the guards is redone on the padded "
                                       "30 s window (the final text's decode: asr.final_retry).")
    # the padded re-decode is a 30 s encoder pass (0.6-0.8 s on two cores) after the failed decode: with it, the
    # finals of telephone-band and noisy speech came over a second after the end of speech; without it some
    # utterances keep a worse decode, in clean speech too (bench conversation, method ar_final_retry beside the
    # default: the latency/accuracy trade is the user's to change)
    final_retry: bool = setting(False, label="Padded re-decode of final text",
                                help="The decode that gives an utterance's final text (at a VAD pause, at the end "
                                     "of speech) is redone on the padded 30 s window when it fails the guards: "
                                     "sometimes better text for a later final.")
    hold_at_silence: bool = setting(True, label="Hold updates in a silence",
                                    help="A streaming update that falls due while the VAD hears silence inside the "
                                         "utterance waits until speech resumes or the VAD's pause, whose decode gives "
                                         "the final text: the final is not held up by an update that ends in the "
                                         "same silence.")
    # a streaming update started just before the speech ended (0.3-0.7 s of decode on two cores) delayed the pause's
    # decode, and with it the final, for about a fifth of the utterances on development conversations
    yield_to_pause: bool = setting(True, label="Updates yield to the pause",
                                   help="With asr.hold_at_silence: an update waits while the VAD hears any silence "
                                        "inside the utterance (not only one its audio ends in), and one already "
                                        "running is abandoned after its encoder pass when the VAD hears a silence "
                                        "by then: the pause's decode, which gives the final text, does not wait "
                                        "for it. Off: only an update whose audio ends in the silence waits.")
    guard_no_speech: float = setting(0.6, label="Guard: no-speech probability", range=(0.0, 1.0),
                                     help="With a low log-prob, a window above this no-speech probability is silence "
                                          "and gives no words (Whisper's rule).")
    # CTC self-speculative decoding (ctc_self_speculative_asr.txt, Table 1)
    tau_ctc: float = setting(0.7, label="τ_CTC", range=(0.0, 10.0),
                             help="CTC self-speculative decoding (ctc_self_speculative_asr.txt, Eq. 3): accept the "
                                  "CTC draft without the decoder if every frame entropy is below τ_CTC. Not used by "
                                  "the 'ar' method.")
    tau_slm: float = setting(0.2, label="τ_SLM", range=(0.0, 1.0),
                             help="CTC self-speculative decoding (Eq. 5): accept the draft in one decoder pass if "
                                  "every token probability exceeds τ_SLM. Presets (Table 1): high accuracy "
                                  "τ_CTC=0.7, τ_SLM=0.2; high RTFx τ_CTC=3.0, τ_SLM=0.1.")
    ssd_rejoin: bool = setting(True, label="SSD draft re-join",
                               help="After an AR correction (Eq. 6), re-join the rest of the CTC draft and verify it "
                                    "in one pass (the paper's footnote 1; torch engine); off = plain Eq. 6.")
    ssd_engine: str = setting("ct2", label="SSD decoder engine", choices=("ct2", "torch"),
                              help="ct2 = verify (one align pass, which also gives the word times) and continue on "
                                   "CTranslate2's int8 decoder, as faster-whisper runs (the live path); torch = the "
                                   "causal-LM protocol implementation with KV-cache reuse and draft re-join "
                                   "(engine/asr/ctc_self_speculative.py).")
    # SpecASR (specasr.txt §IV-A)
    specasr_threshold: float = setting(0.4, label="SpecASR truncation threshold", range=(0.0, 1.0),
                                       help="SpecASR §IV-A: stop drafting where the draft's normalised logit falls "
                                            "below this. Not used by the 'ar' method.")
    specasr_max_draft: int = setting(24, label="SpecASR max draft length", unit="tokens", range=(1, 64),
                                     help="SpecASR §IV-A: longest draft.")
    specasr_tree: bool = setting(True, label="SpecASR sparse tree",
                                 help="SpecASR §IV-C: two-pass sparse token tree on/off.")
    # Second pass and language identification (engine/asr/offline_window_pass.py OfflineWindowPass,
    # engine/asr/second_pass.py SecondPass, engine/asr/language_id.py SessionLanguage)
    revise_max_s: float = setting(24.0, label="Second pass window", unit="s", range=(0.0, 28.0),
                                  help="Re-decode finished speech while the process is idle and revise its text (a "
                                       "RevisedTranscript event); 0 = off, else at least 4 s: with revise_mode = "
                                       "chains, the longest chain of utterances decoded in one window.")
    revise_mode: str = setting("offline", label="Second pass: windows", choices=("offline", "chains"),
                               help="offline = the stream re-decoded in consecutive 30 s windows exactly as offline "
                                    "Whisper moves through a recording (each window once its audio has been heard; "
                                    "revisions come up to about 30 s after the speech); chains = consecutive "
                                    "utterances decoded together once a pause completes them (sooner, further from "
                                    "an offline decode).")
    # decoded without timestamps, whole development conversations came out 1.5x further from offline beam 5 than
    # Whisper's own timestamped decode of the same audio (which is what offline greedy runs)
    revise_timestamps: bool = setting(True, label="Second pass: Whisper's timestamped decoding",
                                      help="revise_mode = chains: the second pass decodes its chains as offline "
                                           "Whisper does (faster-whisper: timestamp tokens, word timestamps); off: "
                                           "the live decoder's way (no timestamp tokens, the current text verified "
                                           "as a draft: cheaper, further from an offline decode).")
    revise_gap_s: float = setting(2.0, label="Second pass: longest pause", unit="s", range=(0.1, 10.0),
                                  help="revise_mode = chains: longest pause between two utterances the second pass "
                                       "decodes together.")
    # 8 s revised development conversations closer to offline Whisper than 4 s, against beam 5 and the text
    revise_context_s: float = setting(8.0, label="Second pass: acoustic context", unit="s", range=(0.0, 20.0),
                                      help="revise_mode = chains: a chain cut by the window length: the next "
                                           "window starts up to this much audio before its first utterance, from a "
                                           "word start (those words are context, never revised).")
    revise_idle_cores: float = setting(0.5, label="Second pass: idle below", unit="cores", range=(0.05, 16.0),
                                       help="The second pass waits until the process used less CPU than this over "
                                            "0.3 s (no answer or caption being computed).")
    language_switch_p: float = setting(0.8, label="Language switch probability", range=(0.5, 1.0),
                                       help="asr.language=auto: probability another language needs to switch the "
                                            "language an utterance is decoded in.")
    language_switch_min_s: float = setting(1.5, label="Language switch: shortest audio", unit="s", range=(0.0, 10.0),
                                           help="asr.language=auto: shortest audio whose language identification "
                                                "may switch it (a short \"okay\" never does).")
    language_agree_p: float = setting(0.6, label="Language agreement probability", range=(0.3, 1.0),
                                      help="asr.language=auto: two consecutive utterances most probably in the same "
                                           "other language (at least this probability) switch the session to it.")
    languages: str = setting("", label="Languages spoken",
                             help="asr.language=auto: the languages to identify among, Whisper codes separated by "
                                  "commas (e.g. en,fr); empty = every language Whisper knows. Naming the languages "
                                  "the speakers use keeps a short or unsure utterance from being heard as another.")
    language_memory: float = setting(0.5, label="Language memory", range=(0.0, 0.95),
                                     help="asr.language=auto: weight of the earlier utterances' language "
                                          "identification, per utterance of age, when a window's own is unsure; "
                                          "0 = each window alone.")
    # Whisper base names a 2–4 s synthetic utterance differently from one window to the next; the utterance's
    # windows together name it right more often than its last window alone (development language-ID sets)
    language_pool: bool = setting(True, label="Language ID over the whole utterance",
                                  help="asr.language=auto: an utterance's language is identified from all its "
                                       "decodes so far (a geometric mean of the windows' probabilities, weighted by "
                                       "their seconds of audio), not from the latest window alone.")
    # Whisper base is confidently wrong on many 2–4 s utterances that the head names right, so the head weighs more
    # than Whisper; but the head was trained on synthetic voices only and is less sure of natural speech (real German
    # read aloud: head p(de) 0.1–0.7), where weight 3 lets it outvote Whisper's p(de) 0.99 and weight 2 does not. On a
    # development set (bench conversation --data, another seed) weight 2 named every language-ID clip and every
    # English utterance right, weight 3 missed two clips
    language_head: float = setting(2.0, label="Language-ID head weight", range=(0.0, 5.0),
                                   help="asr.language=auto: Whisper's language identification is multiplied by the "
                                        "trained language-ID head's on the same encoder output raised to this power "
                                        "(assets/lid_head; engine/asr/language_head.py); 0 = Whisper's alone.")


_LLM_ROLES = ("llm_target", "llm_draft")


@dataclass(frozen=True)
class LlmConfig:
    model_role: str = setting("llm_target", label="Answer model", choices=_LLM_ROLES,
                              help="llm_target = Qwen2.5-Coder-1.5B-Instruct; llm_draft = the 0.5B model (faster).")
    n_ctx: int = setting(4096, label="Context length", unit="tokens", range=(512, 131072),
                         help="llama.cpp context window of the answering LLM.")
    n_threads: int = setting(0, label="LLM CPU threads", range=(0, 256), help="llama.cpp threads; 0 = all cores.")
    n_gpu_layers: int = setting(-1, label="LLM layers on the GPU", range=(-1, 1000),
                                help="Layers offloaded when llama.cpp was built with CUDA/Metal (-1 = all); ignored "
                                     "on a CPU build.")
    device: str = setting("auto", label="LLM device", choices=DEVICES,
                          help="Where the LLM runs: auto = CUDA where its runtime can use it, else the CPU; cpu; cuda.")
    max_answer_tokens: int = setting(256, label="Longest answer", unit="tokens", range=(8, 2048),
                                     help="Longest answer.")
    system_prompt: str = setting(
        "You are specvoice, a helpful offline voice assistant. Answer in plain spoken English, "
        "briefly (two or three sentences), without markdown, lists or code.",
        label="System prompt", help="The instruction the answering LLM gets before the conversation.")
    answer_method: str = setting("predgen", label="Answer method", choices=("predgen", "cascade"),
                                 help="predgen = speculate on partial transcripts (PredGen, predgen.txt Algorithm 1); "
                                      "cascade = answer only after you finish.")
    # PredGen (predgen.txt)
    predgen_verifier: str = setting("greedy", label="PredGen verifier",
                                    choices=("greedy", "top_k", "reflection", "biased"),
                                    help="greedy (lossless), top_k, reflection (LLM judge) or biased (SSBD β) — "
                                         "predgen.txt §3.1.")
    # bench/results/voice.json; speculation yields to every ASR decode
    predgen_speculation_threads: int = setting(0, label="PredGen speculation threads", range=(0, 64),
                                               help="LLM threads for speculation while you speak (0 = all); it pauses "
                                                    "during every ASR decode and runs at low priority, so the ASR is "
                                                    "never delayed.")
    predgen_top_k: int = setting(3, label="PredGen top-k", range=(1, 50),
                                 help="Top-k verifier: accept candidate tokens among the k most likely.")
    predgen_tokens_per_update: int = setting(8, label="PredGen work per update", unit="tokens", range=(0, 64),
                                             help="Work budget of one speculative update while you speak; 0 = only "
                                                  "pre-fill the partial prompt (cascade + incremental prefill).")
    predgen_source: str = setting("hypothesis", label="PredGen answers", choices=PARTIAL_SOURCES,
                                  help="hypothesis = what the final transcript would be if you stopped now (the final "
                                       "decode's corrections of earlier words are already in the candidate); "
                                       "partial = the partial transcript as shown.")
    # an LLM server instead of in-process llama.cpp (engine/llm/remote/adapter.py; README "Use an LLM server")
    backend: str = setting("local", label="LLM backend", choices=("local", "remote"),
                           help="local = llama.cpp in this process; remote = an LLM server (vLLM, SGLang, "
                                "llama_cpp.server) at llm.base_url; PredGen/SSBD need its prompt log-probabilities.")
    base_url: str = setting("", label="LLM server URL",
                            help="http://host:port of the server (required with llm.backend = remote).")
    model: str = setting("", label="Served model", help="The model name on the server; empty = its first.")
    api_key_env: str = setting("", label="API key variable",
                               help="Name of the environment variable holding the server's API key; the key itself "
                                    "is never stored or logged.")
    tokenizer: str = setting("", label="Server model tokenizer",
                             help="The served model's tokenizer (.gguf or directory), checked against the server at "
                                  "connect time; empty = the local GGUF of llm.model_role.")
    remote_api: str = setting("auto", label="Server API", choices=("auto", "openai", "sglang"),
                              help="auto-detect, OpenAI /v1/completions, or SGLang /generate.")
    remote_top_n: int = setting(5, label="Log-probs per position", range=(2, 20),
                                help="Top-N log-probabilities the server returns per position (greedy is exact when "
                                     "top-1 is returned; top-k needs k ≤ N; vLLM caps it at --max-logprobs).")
    remote_timeout_s: float = setting(30.0, label="Server time-out", unit="s", range=(1.0, 600.0),
                                      help="Time-out of one request to the server.")
    remote_retries: int = setting(2, label="Server retries", range=(0, 10),
                                  help="Retries with exponential back-off on connection errors and 5xx.")


def _target_alias(value: str) -> str | None:
    return language_code(value)


@dataclass(frozen=True)
class CaptionConfig:
    method: str = setting("ssbd", label="Caption method", choices=("ssbd", "ar"),
                          help="ssbd = previous translation as the draft (SSBD, ssbd_live_translation.txt Algorithm "
                               "1); ar = re-translate from scratch.")
    target_language: str = setting(
        "German", label="Target language", choices=_TARGET_CODES, alias=_target_alias,
        accepts="a code or English name of " + ", ".join(f"{c}/{LANGUAGES[c]}" for c in _TARGET_CODES),
        help="Language of the live translation, a code or English name: de/German, fr/French, es/Spanish (few-shot "
             "framing and the fidelity guard's language check), en/English (from the detected language under "
             "asr.language = auto; language check), or it, pt, nl, zh, ja, ru, pl, tr (no language check).")
    model_role: str = setting("llm_target", label="Caption model", choices=_LLM_ROLES,
                              help="The LLM that translates: llm_target (1.5B) or llm_draft (0.5B, faster).")
    max_tokens: int = setting(96, label="Max caption tokens", unit="tokens", range=(8, 1024),
                              help="Longest translation of one update.")
    # SSBD (ssbd_live_translation.txt Eq. 5)
    beta: float = setting(0.2, label="β (SSBD bias)", range=(0.0, 1.0),
                          help="SSBD Eq. 5: P' = (1−β)·P + β·onehot(draft). Higher = calmer captions and faster, too "
                               "high can lock in errors. 0 = unbiased self-speculation.")
    mask_k: int = setting(5, label="mask-k", unit="tokens", range=(0, 20),
                          help="Hide (display-only) or trim (classic) the last k tokens of each intermediate "
                               "translation (Arivazhagan et al. 2020b; SSBD Table 4).")
    display_only_mask: bool = setting(True, label="Display-only mask-k",
                                      help="On: keep the last k tokens in the draft but hide them on screen (SSBD's "
                                           "proposal). Off: trim them from the draft (classic mask-k).")
    # utterance was measured better: bench/results/caption_segment.json
    segment: str = setting("utterance", label="Translate by", choices=("sentence", "utterance"),
                           help="utterance = the whole utterance is re-translated on every update (default); "
                                "sentence = a finished sentence is translated once and kept, only the last one is "
                                "re-translated (steadier captions, but not sooner on two cores: see the README).")
    source: str = setting("hypothesis", label="Partial captions translate", choices=PARTIAL_SOURCES,
                          help="hypothesis = what the final transcript would be if speech ended now, so the final "
                               "decode's corrections of earlier words are already in the draft; partial = the "
                               "partial transcript (committed + tentative words, as shown).")


@dataclass(frozen=True)
class TtsConfig:
    engine: str = setting("piper", label="TTS engine", choices=("piper", "codec"),
                          help="piper = the Piper voice (default); codec = the autoregressive codec-token TTS trained "
                               "here (assets/codec_tts), sampled with the codec method below.")
    device: str = setting("auto", label="TTS device", choices=DEVICES,
                          help="Where speech synthesis runs: auto = CUDA where its runtime can use it, else the "
                               "CPU; cpu; cuda.")
    voices: str = setting("", label="Voices per language",
                          help="Extra voices, language=voice pairs separated by commas (fr=/path/fr.onnx,de=HUB_ID): "
                               "a Piper .onnx path or a hub id. English uses models.tts_voice (the embedded "
                               "voice). An answer is spoken only by a voice of its language; with none it is shown "
                               "and journalled, not spoken.")
    length_scale: float = setting(1.0, label="Speech rate (length scale)", range=(0.5, 2.0),
                                  help="Piper phoneme duration scale (> 1 slower).")
    first_clause_words: int = setting(4, label="First spoken piece", unit="words", range=(0, 40),
                                      help="Start speaking the answer at its first clause boundary (, ; : or a dash) "
                                           "once it has this many words, instead of waiting for the whole first "
                                           "sentence; PredGen pre-synthesises that piece. 0 = whole sentence.")
    # auto = target-only on the CPU: on ONNX Runtime on 2 cores no speculative sampler is clearly faster at the same
    # intelligibility (bench/results/tts.json); auto resolves by where the codec LM runs (engine.devices.resolve_method)
    codec_method: str = setting("auto", label="Codec TTS sampler", choices=("auto", "pcg", "sd", "ssd", "ar"),
                                help="pcg = speculative sampling with Principled Coarse-Graining (pcg_tts.txt "
                                     "Algorithm 1); sd = standard speculative sampling; ssd = constant-bias "
                                     "relaxation (0.3); ar = target only (fastest at equal CER on a CPU, "
                                     "see the README); auto (default) = pcg where the codec LM runs on CUDA (1.25x target-only "
                                     "on an H200: bench/results/gpu/nvidia-h200/tts_graphs.json), ar on the CPU.")
    # PCG (pcg_tts.txt Eq. 1, Algorithm 1)
    # θ and L_d chosen on validation sentences for the shipped codec LM (bench/results/tts.json "selection")
    theta: float = setting(0.42, label="PCG θ", range=(0.0, 1.0),
                           help="PCG Eq. 1: cosine-similarity threshold of acoustic similarity groups (pcg_tts.txt: "
                                "0.38–0.45 for LLaSA; 0.42 for this codec LM's 2048 codes, chosen on validation). "
                                "Used by the PCG codec TTS.")
    lookahead: int = setting(3, label="PCG lookahead L_d", unit="tokens", range=(1, 16),
                             help="PCG Algorithm 1: draft tokens per verification step (3: chosen on validation).")
    # the paper samples LLaSA at 0.8; this codec LM's temperature was chosen on validation CER (card.md)
    temperature: float = setting(0.4, label="Codec TTS temperature", range=(0.1, 2.0),
                                 help="Sampling temperature of the codec TTS (paper: 0.8 for LLaSA-8B; this model "
                                      "was calibrated at 0.4, the highest within one CER point of the best on "
                                      "validation: assets/codec_tts/card.md).")


@dataclass(frozen=True)
class DuplexConfig:
    """Talking over the assistant with the speaker on (bench/results/duplex.json)."""

    echo_cancellation: bool = setting(True, label="Echo cancellation",
                                      help="WebRTC AEC3 (livekit) removes the assistant's own voice from the "
                                           "microphone, with what the speaker plays as reference (microphone + "
                                           "speaker).")
    noise_suppression: bool = setting(False, label="Noise suppression",
                                      help="WebRTC noise suppression on the microphone.")
    input_latency_ms: float = setting(100.0, label="Microphone latency", unit="ms", range=(0.0, 500.0),
                                      help="Capture-side delay added to the speaker's measured output latency as the "
                                           "echo canceller's delay hint.")
    end_of_turn: str = setting("vad", label="End of turn", choices=("vad", "smart_turn", "llm"),
                               help="vad = a silence of vad.min_silence_s ends the turn; smart_turn = after a short "
                                    "pause Smart Turn v3.2 (audio model) decides complete vs mid-sentence; llm = the "
                                    "answering LLM's probability of the end-of-turn token after the hypothesis "
                                    "(read from PredGen's pre-fill, no extra pass) sets the silence that ends the "
                                    "turn: duplex.turn_pause_s when complete-sounding, duplex.turn_max_silence_s "
                                    "when not, duplex.eot_wait_s while not judged yet.")
    # eot_threshold and eot_wait_s: chosen on development turns (bench/results/duplex_turn.json "eot_selection")
    eot_threshold: float = setting(0.9, label="LLM turn-complete threshold", range=(0.01, 0.99),
                                   help="duplex.end_of_turn = llm: probability of the LLM's end-of-turn token after "
                                        "the user's words at or above which the turn sounds complete.")
    eot_wait_s: float = setting(1.4, label="Wait for the LLM's verdict", unit="s", range=(0.2, 5.0),
                                help="duplex.end_of_turn = llm: silence that ends a turn the LLM has not judged yet "
                                     "(its verdict comes after the pause's decode and one LLM pass).")
    turn_threshold: float = setting(0.5, label="Turn-complete threshold", range=(0.05, 0.95),
                                    help="Smart Turn probability at or above which a pause ends the turn.")
    turn_pause_s: float = setting(0.2, label="Pause before asking", unit="s", range=(0.1, 1.0),
                                  help="Silence after which Smart Turn is asked.")
    turn_max_silence_s: float = setting(2.0, label="Longest pause", unit="s", range=(0.5, 5.0),
                                        help="Silence that always ends the turn (smart_turn).")
    wake_phrase: str = setting("", label="Wake phrase",
                               help="Hands-free: only an utterance that starts with this phrase is answered (any "
                                    "words, no training; matched on the streaming transcript); the phrase is cut "
                                    "from what the LLM sees. Empty = every utterance is answered.")
    wake_prompt: bool = setting(True, label="Wake phrase in the ASR prompt",
                                help="While listening for the wake phrase, each new utterance is decoded with the "
                                     "phrase as Whisper's previous text, so a made-up name is heard and spelt as "
                                     "typed.")
    follow_up_s: float = setting(8.0, label="Follow-up window", unit="s", range=(0.0, 120.0),
                                 help="With a wake phrase: after an answer, an utterance starting within this many "
                                      "seconds is answered without the phrase (0 = always say the phrase).")
    barge_in_min_speech_s: float = setting(0.1, label="Barge-in speech", unit="s", range=(0.03, 0.5),
                                           help="Echo-cancelled speech needed to interrupt the assistant.")
    barge_in_threshold: float = setting(0.5, label="Barge-in threshold", range=(0.1, 0.9),
                                        help="Speech probability for barge-in; lower reacts sooner but may trigger on "
                                             "residual echo.")


@dataclass(frozen=True)
class Config:
    # in the settings dialog's order: what a user tunes first
    vad: VadConfig = section(VadConfig, "Voice activity")
    asr: AsrConfig = section(AsrConfig, "Speech recognition")
    llm: LlmConfig = section(LlmConfig, "Answer (LLM, PredGen)")
    caption: CaptionConfig = section(CaptionConfig, "Live caption (SSBD)")
    tts: TtsConfig = section(TtsConfig, "Speech synthesis (TTS, PCG)")
    duplex: DuplexConfig = section(DuplexConfig, "Talking over the answer (duplex)")
    models: ModelsConfig = section(ModelsConfig, "Models")
    audio: AudioConfig = section(AudioConfig, "Devices")

    def cache_dir(self) -> Path:
        """The cache folder of this configuration (:func:`cache_dir` of ``models.cache_dir``)."""
        return cache_dir(self.models.cache_dir)

    def get(self, key: str) -> Any:
        """The value of ``section.name``. Raises ConfigError for an unknown key."""
        s = lookup(key)
        return getattr(getattr(self, s.section), s.name)

    def with_overrides(self, overrides: Mapping[str, Mapping[str, Any]]) -> "Config":
        """Return a copy with ``{section: {key: value}}`` applied, values coerced to the field's type (ranges and
        choices are checked by :func:`validate`).

        Raises:
            ConfigError: unknown section or key, or a value that is not of the field's type.
        """
        cfg = self
        for sec, values in overrides.items():
            if sec not in SECTIONS:
                raise ConfigError(f"unknown config section [{sec}] (sections: {', '.join(SECTIONS)})")
            if not isinstance(values, Mapping):
                raise ConfigError(f"[{sec}] must be a table of settings, got {values!r}")
            changes = {name: lookup(f"{sec}.{name}").coerce(value) for name, value in values.items()}
            cfg = replace(cfg, **{sec: replace(getattr(cfg, sec), **changes)})
        return cfg

    def with_value(self, key: str, value: Any) -> "Config":
        """A copy with one setting ``section.name`` parsed from ``value`` and checked. Raises ConfigError."""
        s = lookup(key)
        v = s.parse(value)
        return replace(self, **{s.section: replace(getattr(self, s.section), **{s.name: v})})

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _collect() -> dict[str, Setting]:
    out: dict[str, Setting] = {}
    for sec in fields(Config):
        cls = sec.default_factory
        defaults = cls()
        for f in fields(cls):
            m = f.metadata
            default = getattr(defaults, f.name)
            out[f"{sec.name}.{f.name}"] = Setting(
                key=f"{sec.name}.{f.name}", section=sec.name, name=f.name, type=type(default), default=default,
                label=m.get("label", ""), help=m.get("help", ""), unit=m.get("unit", ""), range=m.get("range"),
                choices=m.get("choices"), alias=m.get("alias"), accepts=m.get("accepts", ""))
    return out


#: every setting, ``section.name`` → :class:`Setting`, in declaration order
SETTINGS: dict[str, Setting] = _collect()
#: the sections of :class:`Config`, in order, and their titles
SECTIONS: tuple[str, ...] = tuple(f.name for f in fields(Config))
TITLES: dict[str, str] = {f.name: f.metadata["title"] for f in fields(Config)}


def lookup(key: str) -> Setting:
    """The :class:`Setting` of ``section.name``.

    Raises:
        ConfigError: an unknown section or key (the message lists what the section has).
    """
    s = SETTINGS.get(key)
    if s is not None:
        return s
    sec = key.split(".", 1)[0]
    if sec not in SECTIONS:
        raise ConfigError(f"{key}: unknown config section [{sec}] (sections: {', '.join(SECTIONS)})")
    names = ", ".join(k.split(".", 1)[1] for k in SETTINGS if k.startswith(sec + "."))
    raise ConfigError(f"{key}: unknown config key ({sec} has: {names})")


def spoken_languages(value: str) -> tuple[str, ...]:
    """``asr.languages`` as a tuple of codes (lower case, blanks dropped; empty = every language)."""
    return tuple(c.strip().lower() for c in value.split(",") if c.strip())


def parse_voices(value: str) -> dict[str, str]:
    """``tts.voices`` → ``{language: voice spec}`` (languages lower case, blanks around items dropped).

    Raises:
        ValueError: a malformed value; the one-line message names the bad item (``tts.voices: ...``).
    """
    out: dict[str, str] = {}
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        lang, eq, spec = (s.strip() for s in item.partition("="))
        lang = lang.lower()
        if not eq or not lang or not spec:
            raise ValueError(f"tts.voices: {item!r} is not a language=voice pair (e.g. fr=/path/fr_FR-voice.onnx)")
        if lang not in WHISPER_LANGUAGES:
            raise ValueError(f"tts.voices: {lang!r} is not a Whisper language code (e.g. fr, de, es)")
        if lang == "en":
            raise ValueError("tts.voices: English is spoken by models.tts_voice; set that instead of en=")
        if lang in out:
            raise ValueError(f"tts.voices: {lang} is given twice")
        out[lang] = spec
    return out


def check_combination(cfg: Config) -> list[tuple[tuple[str, ...], str]]:
    """Rules between settings: ``[(keys, message), ...]`` for each broken one; ``keys`` are the settings involved,
    the one the user should change first."""
    out = []
    unknown = [c for c in spoken_languages(cfg.asr.languages) if c not in WHISPER_LANGUAGES]
    if unknown:
        out.append((("asr.languages",), f"asr.languages: {', '.join(map(repr, unknown))} is not a Whisper language "
                                        "code (e.g. en, fr, de, es)"))
    try:
        parse_voices(cfg.tts.voices)
    except ValueError as e:
        out.append((("tts.voices",), str(e)))
    if cfg.llm.backend == "remote" and not cfg.llm.base_url:
        out.append((("llm.base_url", "llm.backend"), "llm.base_url: required with llm.backend = remote"))
    return out


def problems(cfg: Config) -> dict[str, str]:
    """Every invalid value of ``cfg``: ``{key: one-line message}`` (empty when valid)."""
    out: dict[str, str] = {}
    for key, s in SETTINGS.items():
        try:
            s.check(cfg.get(key))
        except ConfigError as e:
            out[key] = str(e)
    for keys, msg in check_combination(cfg):
        out.setdefault(keys[0], msg)
    return out


def validate(cfg: Config) -> None:
    """Raise ConfigError (one line, the first problem) for a value outside its range or choices, or a broken rule
    between settings (the settings dialog shows every problem beside its field)."""
    bad = problems(cfg)
    if bad:
        raise ConfigError(next(iter(bad.values())))


def default_config_path() -> Path | None:
    p = os.environ.get("SPECVOICE_CONFIG")
    if p:
        return Path(p)
    p2 = Path("~/.config/specvoice/config.toml").expanduser()
    return p2 if p2.exists() else None


def environment_overrides(environ: Mapping[str, str] | None = None) -> dict[str, dict[str, str]]:
    """The settings the environment sets: ``SPECVOICE_<SECTION>_<KEY>`` for each setting, and
    ``SPECVOICE_MODEL_<ROLE>`` (the model of a role), as ``{section: {key: text}}``."""
    env = os.environ if environ is None else environ
    out: dict[str, dict[str, str]] = {}
    for role in ROLES:
        v = env.get(f"SPECVOICE_MODEL_{role.upper()}")
        if v:
            out.setdefault("models", {})[role] = v
    for key, s in SETTINGS.items():
        v = env.get(s.env)
        if v is not None:
            out.setdefault(s.section, {})[s.name] = v
    return out


def parse_set(item: str) -> tuple[str, str]:
    """``"section.key=value"`` (a ``--set``) → ``(key, value text)``.

    Raises:
        ConfigError: not of the form section.key=value, or an unknown key.
    """
    k, eq, v = item.partition("=")
    if not eq or "." not in k:
        raise ConfigError(f"--set expects section.key=value, got {item!r}")
    key = k.strip()
    lookup(key)
    return key, v


def load_config(
    path: str | Path | None = None,
    model_overrides: dict[str, str] | None = None,
    sets: list[str] | None = None,
    edits: Mapping[str, Any] | None = None,
    on_rejected: Callable[[str, str], None] | None = None,
) -> Config:
    """Build the configuration from defaults, TOML file, environment, CLI overrides and the app's dialog edits.

    The CLI and the desktop app both build their configuration here, so the same file and environment give the
    same settings.

    Args:
        path: a TOML file; None = ``default_config_path()``.
        model_overrides: ``{role: spec}`` from ``--model ROLE=SPEC``.
        sets: ``["section.key=value", ...]`` from ``--set``.
        edits: ``{"section.key": value}`` applied last (the desktop app's stored dialog edits); each is checked on
            its own and one that is unknown or invalid is skipped (the rest still apply).
        on_rejected: called ``(key, message)`` for each skipped edit; None = raise ConfigError instead.

    Raises:
        ConfigError: unreadable TOML, unknown keys, bad values or roles (one line naming the setting).
    """
    cfg = Config()
    path = Path(path) if path else default_config_path()
    if path is not None:
        try:
            data = tomllib.loads(Path(path).read_text())
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
            raise ConfigError(f"cannot read config file {path}: {e}") from None
        cfg = cfg.with_overrides(data)
    env = environment_overrides()
    if env:
        cfg = cfg.with_overrides(env)
    if model_overrides:
        bad = set(model_overrides) - set(ROLES)
        if bad:
            raise ConfigError(f"unknown model role(s) {sorted(bad)}; roles are {', '.join(ROLES)}")
        cfg = cfg.with_overrides({"models": model_overrides})
    for item in sets or []:
        key, value = parse_set(item)
        cfg = cfg.with_overrides({key.split(".")[0]: {key.split(".", 1)[1]: value}})
    validate(cfg)
    if edits:
        cfg = apply_edits(cfg, edits, on_rejected)
    return cfg


def apply_edits(cfg: Config, edits: Mapping[str, Any],
                on_rejected: Callable[[str, str], None] | None = None) -> Config:
    """``cfg`` with ``{"section.key": value}`` applied one by one; an unknown or invalid one is skipped and
    reported through ``on_rejected(key, message)`` (None: raise ConfigError). An edit that breaks a rule between
    settings (:func:`check_combination`) is skipped as well (of the edits the rule involves, the latest first).

    Raises:
        ConfigError: with ``on_rejected`` None, the first refused edit; or ``cfg`` itself breaks a rule.
    """
    base = cfg
    kept: dict[str, Any] = {}
    for key, value in edits.items():
        try:
            cfg = cfg.with_value(key, value)
        except ConfigError as e:
            if on_rejected is None:
                raise
            on_rejected(key, str(e))
            continue
        kept[key] = value
    while broken := check_combination(cfg):
        keys, msg = broken[0]
        culprit = next((k for k in reversed(kept) if k in keys), None)
        if culprit is None or on_rejected is None:
            raise ConfigError(msg)
        on_rejected(culprit, msg)
        del kept[culprit]
        cfg = base
        for key, value in kept.items():
            cfg = cfg.with_value(key, value)
    return cfg


def describe_settings() -> str:
    """Every setting, one line each, by section (``python -m engine.config``)."""
    lines = []
    for sec in SECTIONS:
        lines.append(f"[{sec}]  {TITLES[sec]}")
        lines += ["  " + s.describe() for s in SETTINGS.values() if s.section == sec]
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    print(describe_settings())
