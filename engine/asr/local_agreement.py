"""LocalAgreement-2 (Macháček et al., 2023, whisper_streaming ``whisper_online.py`` ``HypothesisBuffer``): the
longest common word prefix of the last two hypotheses of the same growing audio buffer is committed."""

from __future__ import annotations

from typing import Sequence

from engine.asr.words import word_key
from engine.core.events import Word


def _norm(w: str) -> str:
    """A word's text for the agreement of two hypotheses: without its surrounding blanks."""
    return w.strip()


class HypothesisBuffer:
    """LocalAgreement-2 (whisper_streaming ``HypothesisBuffer``): commit the longest common word prefix of the
    previous and the current hypothesis."""

    def __init__(self) -> None:
        self.committed_in_buffer: list[Word] = []
        self.buffer: list[Word] = []  # previous hypothesis, uncommitted part
        self.new: list[Word] = []
        self.last_committed_time = 0.0

    def insert(self, new: Sequence[Word], offset: float, align_text: bool = False) -> None:
        """Add a hypothesis (word times relative to the buffer, shifted by ``offset`` seconds); words that end
        before the last committed time are dropped, as are 1–5-grams repeating the committed tail.

        ``align_text``: when the hypothesis holds the committed tail itself (its last 2–4 words, ending within
        1 s of the last committed time), the words after that match are the new ones, whatever their times:
        a decode that re-hears the committed words (acoustic context) places the boundary word times of the
        alignment least well, and a new word timed a little before the committed end is not dropped."""
        shifted = [Word(w.start + offset, w.end + offset, w.text) for w in new]
        if align_text:
            i = self._after_committed_tail(shifted)
            if i is not None:
                self.new = shifted[i:]
                return
        self.new = [w for w in shifted if w.start > self.last_committed_time - 0.1]
        if self.new and abs(self.new[0].start - self.last_committed_time) < 1 and self.committed_in_buffer:
            cn, nn = len(self.committed_in_buffer), len(self.new)
            for i in range(1, min(cn, nn, 5) + 1):
                c = " ".join(_norm(self.committed_in_buffer[-j].text) for j in range(i, 0, -1))
                t = " ".join(_norm(self.new[j].text) for j in range(i))
                if c == t:
                    del self.new[:i]
                    break

    def _after_committed_tail(self, words: Sequence[Word]) -> int | None:
        """Index of the first word after the committed tail's match in ``words`` (the longest tail of 4…2
        words matched; of several matches, the one ending nearest the last committed time, and within 1 s of
        it), None when there is none."""
        tail = [word_key(w.text) for w in self.committed_in_buffer][-4:]
        keys = [word_key(w.text) for w in words]
        for k in range(len(tail), 1, -1):
            t = tail[-k:]
            if not all(t):
                continue
            hits = [i for i in range(k, len(keys) + 1) if keys[i - k : i] == t
                    and abs(words[i - 1].end - self.last_committed_time) < 1.0]
            if hits:
                return min(hits, key=lambda i: abs(words[i - 1].end - self.last_committed_time))
        return None

    def flush(self) -> list[Word]:
        """Commit the agreeing prefix of ``new`` and ``buffer``; ``new`` becomes the buffer."""
        commit: list[Word] = []
        while self.new and self.buffer and _norm(self.new[0].text) == _norm(self.buffer[0].text):
            w = self.new.pop(0)
            self.buffer.pop(0)
            commit.append(w)
            self.last_committed_time = w.end
        self.buffer = self.new
        self.new = []
        self.committed_in_buffer.extend(commit)
        return commit

    def pop_committed(self, t: float) -> None:
        """Forget the committed words that end by the audio time ``t`` (seconds): their audio left the buffer."""
        while self.committed_in_buffer and self.committed_in_buffer[0].end <= t:
            self.committed_in_buffer.pop(0)

    def complete(self) -> list[Word]:
        """The latest hypothesis's words not committed yet (the partial's tentative text)."""
        return list(self.buffer)


def repeated_context(words: Sequence[Word], context_words: Sequence[Word], min_words: int) -> int:
    """How many of ``words`` (an utterance's final words) open with the acoustic context's text written again: the
    length of their longest first run, of at least ``min_words`` words, found anywhere in ``context_words`` (compared
    by :func:`engine.asr.words.word_key`); 0 when they do not, or ``min_words`` ≤ 0 (the check is off). Whisper,
    decoding the context's audio and the new audio together, can write the context's words again and time them over
    the new audio, where they are not dropped as the context's."""
    n = min_words
    if n <= 0 or len(words) < n:
        return 0
    ctx = [word_key(w.text) for w in context_words]
    keys = [word_key(w.text) for w in words]
    if not all(keys[:n]):
        return 0
    best = 0
    for i in range(len(ctx)):
        k = 0
        while i + k < len(ctx) and k < len(keys) and ctx[i + k] == keys[k]:
            k += 1
        best = max(best, k)
    return best if best >= n else 0
