"""Events: small immutable records flowing from the engines through queues.

The CLI prints them, the GUI renders them, the benchmarks count them. Times: ``t`` fields are audio time in
seconds since the source started; ``wall`` fields are ``time.monotonic()`` seconds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


def now() -> float:
    return time.monotonic()


@dataclass(frozen=True)
class Word:
    """A transcribed word with audio-time bounds (seconds). ``text`` keeps Whisper's leading space."""

    start: float
    end: float
    text: str


@dataclass(frozen=True)
class SpeechStarted:
    utterance: int
    t: float
    wall: float = field(default_factory=now)


@dataclass(frozen=True)
class SpeechEnded:
    """VAD end of speech. ``t``: the utterance's end (audio seconds, the VAD's pad after the last speech sample
    included: what the ASR hears); ``wall``: when the audio of the last speech sample was available — when the user
    stopped speaking, the clock every end-of-speech latency starts from; ``decided_wall`` when
    the end of the turn was decided (the VAD's silence or end-of-turn rule; None = not known), so
    ``decided_wall - wall`` is the turn decision's wait (seconds)."""

    utterance: int
    t: float
    wall: float = field(default_factory=now)
    decided_wall: float | None = None


@dataclass(frozen=True)
class TurnDecision:
    """End-of-turn model's verdict at a pause (``duplex.end_of_turn = "smart_turn"``): ``p_complete`` in [0, 1];
    the turn ends at ``t`` (audio seconds) when it reaches ``duplex.turn_threshold``."""

    utterance: int
    t: float
    p_complete: float
    wall: float = field(default_factory=now)


#: what a speculative stage may take from a partial (:meth:`PartialTranscript.source`)
PARTIAL_SOURCES = ("hypothesis", "partial")


@dataclass(frozen=True)
class PartialTranscript:
    """One streaming update: ``committed`` text (LocalAgreement-2's; stable but for a trim of a long utterance's
    buffer, where the words that leave it take their final text) + ``tentative`` tail (may change);
    ``hypothesis``: the text the final transcript would have if speech ended now
    (:attr:`engine.asr.online_processor.OnlineASRProcessor.hypothesis`; "" when not given)."""

    utterance: int
    committed: str
    tentative: str
    t_audio: float  # audio time covered by this update, seconds
    compute_s: float  # compute time of the update, seconds
    wall: float = field(default_factory=now)
    hypothesis: str = ""
    language: str = ""  # ISO 639-1 code the update was decoded in ("" when the backend does not say)

    @property
    def text(self) -> str:
        return (self.committed + self.tentative).strip()

    def source(self, kind: str) -> str:
        """The text a speculative stage (PredGen, the live caption) works on: ``"hypothesis"`` — the final
        transcript if speech ended now (:attr:`hypothesis`, or :attr:`text` when there is none) — or ``"partial"``
        — :attr:`text`, the partial as shown.

        Raises:
            ValueError: another ``kind``.
        """
        if kind == "hypothesis":
            return self.hypothesis.strip() or self.text
        if kind == "partial":
            return self.text
        raise ValueError(f"a partial's source is one of {PARTIAL_SOURCES}, got {kind!r}")


@dataclass(frozen=True)
class CommittedWords:
    utterance: int
    words: tuple[Word, ...]
    wall: float = field(default_factory=now)


@dataclass(frozen=True)
class FinalTranscript:
    """The utterance's final text, after end of speech. ``language``: the ISO 639-1 code it was decoded in (with
    ``asr.language = "auto"`` the language identified for this utterance; "" when the backend does not say)."""

    utterance: int
    text: str
    words: tuple[Word, ...]
    t_start: float
    t_end: float
    wall: float = field(default_factory=now)
    language: str = ""


@dataclass(frozen=True)
class RevisedTranscript:
    """A second pass re-decoded consecutive utterances in one window, with each other's audio as context (as an
    offline decode does), and their text changed: ``texts[i]`` is now the text of utterance ``utterances[i]``
    (possibly "" when its words moved to a neighbour). It replaces those utterances' final (or earlier revised)
    text in a transcript, a journal and an export; what was already done with the old text (an answer, a caption)
    is not redone.

    ``words``: every word of the revised utterances, audio times (seconds); ``t_start``/``t_end``: the audio span
    of the revised utterances (seconds); ``language``: ISO 639-1 code of the decode ("" when not known)."""

    utterances: tuple[int, ...]
    texts: tuple[str, ...]
    words: tuple[Word, ...]
    t_start: float
    t_end: float
    language: str = ""
    wall: float = field(default_factory=now)

    @property
    def text(self) -> str:
        """The revised utterances' text, joined."""
        return " ".join(t for t in self.texts if t)


@dataclass(frozen=True)
class AnswerDelta:
    """Newly generated answer text (a detokenised piece)."""

    utterance: int
    text: str
    wall: float = field(default_factory=now)


@dataclass(frozen=True)
class AnswerSentence:
    """A complete answer sentence, as sent to TTS."""

    utterance: int
    index: int
    text: str
    wall: float = field(default_factory=now)


@dataclass(frozen=True)
class AnswerAudio:
    """Synthesised audio of one sentence: float32 (n,) at ``sample_rate`` Hz."""

    utterance: int
    index: int
    samples: object
    sample_rate: int
    wall: float = field(default_factory=now)


@dataclass(frozen=True)
class AnswerDone:
    utterance: int
    text: str
    interrupted: bool = False
    wall: float = field(default_factory=now)


@dataclass(frozen=True)
class Caption:
    """A live caption: source text and its translation, each split into a stable part and a masked tail
    (display-only mask-k hides the tail; the AR baseline has an empty tail)."""

    utterance: int
    source: str
    translation_stable: str
    translation_tail: str
    final: bool
    compute_s: float
    source_stable: str = ""  # the ASR's committed words (LocalAgreement-2); the rest of ``source`` may change
    wall: float = field(default_factory=now)

    @property
    def translation(self) -> str:
        return (self.translation_stable + self.translation_tail).strip()

    @property
    def source_tail(self) -> str:
        return self.source[len(self.source_stable):] if self.source.startswith(self.source_stable) else self.source


@dataclass(frozen=True)
class Error:
    """A recoverable error reported by a worker (one line, for the user)."""

    where: str
    message: str
    wall: float = field(default_factory=now)


# -- session events: what the session engine (engine/session.py) reports besides the stages' own records ---------
@dataclass(frozen=True)
class AsrMetrics:
    """Speech recognition's speed: ``rtf`` (compute s per audio s so far; None before any audio) and, after a
    final transcript, ``eos_to_final_s`` (end of speech → that final, s) of ``utterance``."""

    rtf: float | None
    utterance: int | None = None
    eos_to_final_s: float | None = None
    wall: float = field(default_factory=now)


@dataclass(frozen=True)
class SpokenAnswerMetrics:
    """One answered turn, timed from the end of the user's speech (s): ``ttfs_s`` to the first sentence's text,
    ``first_audio_s`` to its audio; ``nfetfs``: LLM forward passes after the end of speech to the first sentence
    (None for the cascade, which drafted nothing); ``presynth_used``: PredGen's pre-synthesised first sentence was
    played; ``accepted_tokens``: draft tokens the final verification kept; ``tokens_per_s``: LLM decode speed."""

    utterance: int
    ttfs_s: float | None
    first_audio_s: float | None
    nfetfs: int | None
    presynth_used: bool
    accepted_tokens: int
    tokens_per_s: float | None
    wall: float = field(default_factory=now)


#: how an utterance's turn ended (:attr:`TurnMetrics.by`)
TURN_ENDS = ("model", "silence", "released")


@dataclass(frozen=True)
class TurnMetrics:
    """An end-of-turn decision of ``utterance`` at audio time ``t`` (s) by ``rule`` (``duplex.end_of_turn`` or
    "push_to_talk"): ``p_complete`` (Smart Turn's probability, None when not asked), ``complete`` (the turn is
    over), ``final`` (no later decision for this utterance); at the end of speech ``by`` says what ended it (one
    of :data:`TURN_ENDS`) and ``silence_s`` the silence that ends a turn by itself (s)."""

    utterance: int
    rule: str
    t: float
    p_complete: float | None
    complete: bool
    final: bool
    by: str = ""
    silence_s: float | None = None
    wall: float = field(default_factory=now)


@dataclass(frozen=True)
class CaptionMetrics:
    """A live caption's translation stream so far: normalised erasure ``ne`` (erased words per final word),
    ``acceptance`` (accepted / drafted tokens, A/D), ``accepted_share`` (accepted / output tokens, A/O),
    ``tokens_per_s`` (output tokens per compute second)."""

    utterance: int
    ne: float
    acceptance: float
    accepted_share: float
    tokens_per_s: float
    wall: float = field(default_factory=now)


@dataclass(frozen=True)
class InputLevel:
    """The input's level for a meter: 4 × the block's RMS, clipped to [0, 1]."""

    level: float


#: who is talking (:attr:`Speakers.who`)
SPEAKERS = ("", "user", "assistant", "both")


@dataclass(frozen=True)
class Speakers:
    """Who is talking now, one of :data:`SPEAKERS` (reported on change)."""

    who: str
    wall: float = field(default_factory=now)


@dataclass(frozen=True)
class BargeIn:
    """The user spoke over the answer at audio time ``t`` (s) and it stopped; ``path`` is the detector that heard
    them ("vad" | "double_talk" | "")."""

    t: float
    path: str
    wall: float = field(default_factory=now)


@dataclass(frozen=True)
class EchoCancelling:
    """Whether the session's input is echo-cancelled against the answer's playback (once, when it starts)."""

    on: bool


@dataclass(frozen=True)
class Status:
    """A one-line status message for the user (not an error)."""

    text: str
    wall: float = field(default_factory=now)


@dataclass(frozen=True)
class AnswerSaved:
    """Answer audio written to ``path`` (a WAV, ``seconds`` long); ``utterance`` is None for a whole session's."""

    utterance: int | None
    path: str
    seconds: float
    wall: float = field(default_factory=now)


#: hands-free with a wake phrase: the session's state (:attr:`WakeState.state`, :mod:`engine.answer.wake`)
WAKE_STATES = ("listening", "conversation")


@dataclass(frozen=True)
class WakeState:
    """Hands-free with a wake phrase (``duplex.wake_phrase``): ``state`` "listening" — only an utterance that
    starts with ``phrase`` is answered — or "conversation" — utterances are taken without it until
    ``duplex.follow_up_s`` after the answer stopped. Reported when the session starts and on each change."""

    state: str
    phrase: str
    wall: float = field(default_factory=now)

    @property
    def text(self) -> str:
        """The status line: "listening for '<phrase>'" or "in conversation"."""
        return f"listening for '{self.phrase}'" if self.state == "listening" else "in conversation"
