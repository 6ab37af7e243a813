"""Word sequences of the streaming ASR: their text, the key two decodes' words are matched by, a word's middle."""

from __future__ import annotations

from typing import Sequence

from engine.core.events import Word


def join_words(words: Sequence[Word]) -> str:
    """The text of ``words`` (each word's text carries its leading space), stripped."""
    return "".join(w.text for w in words).strip()


def word_key(text: str) -> str:
    """A word for matching two decodes: lower case, letters and digits only."""
    return "".join(ch for ch in text.lower() if ch.isalnum())


def word_mid(w: Word) -> float:
    """The middle of a word (audio time, seconds): a word leaves the buffer at a trim by its middle."""
    return (w.start + w.end) / 2
