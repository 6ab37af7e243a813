"""The streaming ASR backend protocol: what the streaming policy (:mod:`engine.asr.online_processor`) and the second
pass (:mod:`engine.asr.second_pass`) call, the result they get, and the optional features a backend declares.

A backend is anything with ``name`` and ``transcribe(audio, prompt) -> BackendResult`` (plain AR, CTC self-speculative
decoding, SpecASR, faster-whisper), so a speculative decoder replaces plain AR decoding without touching the policy.
Anything more it accepts it declares with ``supports_*`` class attributes (:class:`ASRBackend`); a backend that
declares none is called with the audio and the prompt only.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar, Protocol, Sequence

import numpy as np

from engine.core.events import Word


@dataclass(frozen=True)
class BackendResult:
    """``words``: word timestamps relative to the start of the transcribed audio (seconds);
    ``segment_ends``: ends of Whisper segments (seconds); ``stats``: backend counters (tokens, forwards, ...)."""

    words: list[Word]
    segment_ends: list[float]
    stats: dict


@dataclass
class UpdateStats:
    """One decode of the streaming policy: its wall time ``compute_s`` and audio ``audio_s`` (seconds), the number of
    words it ``committed``, and the backend's ``stats`` (with ``abandoned``, ``whole`` or ``own_audio`` where the
    policy marks the decode so)."""

    compute_s: float
    audio_s: float
    committed: int
    stats: dict


class DecodeAbandoned(Exception):
    """A decode given ``abandon`` (a backend's ``transcribe``) stopped after its encoder pass because ``abandon()``
    said its result is no longer wanted (a streaming update the VAD's pause is about to supersede)."""


class LanguageChooser(Protocol):
    """The ``language`` a caller may pass a backend instead of an ISO 639-1 code (``asr.language = "auto"``): called
    once per decoded window with the window's language identification, it names the language to decode in
    (:class:`engine.asr.language_id.SessionLanguage`, :class:`engine.asr.language_id.LanguageChoice`).

    ``prompt_language`` (optional attribute): the language the caller's prompt text is in; a window decoded in another
    one is decoded without the prompt (prompted in one language, Whisper translates speech in another into it)."""

    def __call__(self, probs: Sequence[tuple[str, float]], audio_s: float,
                 whisper_probs: Sequence[tuple[str, float]] | None = None) -> str:
        """``probs``: (ISO 639-1 code, probability) pairs, most probable first (Whisper's identification fused with
        the language-ID head's); ``audio_s``: the window's audio, seconds; ``whisper_probs``: Whisper's own
        identification in the same form (None: not known). Returns the code to decode in."""
        ...


class ASRBackend(Protocol):
    """A streaming decoder of float32 16 kHz audio.

    It may also have ``transcribe_final(audio, prompt="", ...)`` (same result) for the decodes that give an
    utterance's final text; :class:`engine.asr.online_processor.OnlineASRProcessor` then calls it at a VAD pause and
    at the end of speech (e.g. beam search there while the partials stay greedy).

    The keyword arguments ``transcribe`` (and ``transcribe_final``) accept beyond ``audio`` and ``prompt`` are
    declared by these class attributes (absent = False, the argument is never passed):

    * ``supports_language``: ``language``, an ISO 639-1 code or a :class:`LanguageChooser`;
    * ``supports_prefix``: ``prefix``, text forced as the first words of the decode (not returned);
    * ``supports_padded_retry``: ``padded_retry=False`` asks not to redo a decode that fails the guards on the
      padded 30 s window;
    * ``supports_abandon``: ``abandon`` (``transcribe`` only), a callable checked after the encoder pass; True
      raises :class:`DecodeAbandoned`;
    * ``supports_draft``: ``transcribe_final``'s ``draft``, the text the caller expects (verified exactly).
    """

    name: str
    supports_language: ClassVar[bool] = False
    supports_prefix: ClassVar[bool] = False
    supports_padded_retry: ClassVar[bool] = False
    supports_abandon: ClassVar[bool] = False
    supports_draft: ClassVar[bool] = False

    def transcribe(self, audio: np.ndarray, prompt: str = "") -> BackendResult:
        """Transcribe float32 16 kHz audio (n,) (≤ 30 s is the efficient case); ``prompt`` is previous text."""
        ...


class WindowASRBackend(Protocol):
    """A backend that decodes a stream as offline long-form Whisper does, one 30 s window at a time from a seek
    position (:class:`engine.asr.offline_window_pass.OfflineWindowPass`;
    :meth:`engine.asr.faster_whisper_backend.FasterWhisperBackend.transcribe_window` documents the arguments and the
    ``stats`` it returns)."""

    def transcribe_window(self, audio: np.ndarray, prompt_tokens: Sequence[int] = (), language: str | None = None,
                          last: bool = False) -> BackendResult:
        ...

    def encode_prompt(self, text: str) -> list[int]:
        """The token ids of ``text`` as a window's prompt (the text before the stream)."""
        ...


@dataclass(frozen=True)
class BackendCapabilities:
    """The optional ``transcribe`` arguments a backend declares (:class:`ASRBackend`'s ``supports_*``)."""

    language: bool = False
    prefix: bool = False
    padded_retry: bool = False
    abandon: bool = False
    draft: bool = False

    @classmethod
    def of(cls, backend: object) -> "BackendCapabilities":
        """What ``backend`` declares; a backend (or a wrapper forwarding attributes to one) that declares nothing
        takes only ``audio`` and ``prompt``."""
        return cls(**{f.name: bool(getattr(backend, f"supports_{f.name}", False)) for f in fields(cls)})
