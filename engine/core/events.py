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
    """VAD end of speech. ``wall`` is when the audio holding the end of speech was available."""

    utterance: int
    t: float
    wall: float = field(default_factory=now)


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
    (:attr:`engine.asr.streaming.OnlineASRProcessor.hypothesis`; "" when not given)."""

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
