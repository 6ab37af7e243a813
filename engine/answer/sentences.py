"""Text helpers: streaming sentence splitting for TTS."""

from __future__ import annotations

import re

_ABBREV = {"mr", "mrs", "ms", "dr", "prof", "st", "vs", "etc", "e.g", "i.e", "no", "fig", "approx", "jr", "sr"}
_BOUNDARY = re.compile(r"([.!?]+[\"')\]]*)(\s+)|(\n+)")
_CLAUSE = re.compile(r"([,;:]|\s[-–—])(\s+)")


class SentenceSplitter:
    """Feed streamed text; get complete sentences as soon as their boundary is certain.

    A boundary is ``.``, ``!``, ``?`` (with closing quotes/brackets) followed by whitespace, or a newline; not after
    a known abbreviation, a single capital (initials) or between digits ("3.5"). :meth:`flush` returns the rest.

    ``first_clause_words`` > 0: the *first* piece may also end at a clause boundary (``,``, ``;``, ``:`` or a
    dash, followed by whitespace; "1,000" is not one) once it has at least that many words, so a voice can start
    speaking before a long first sentence is complete (the "fast first fragment" of streaming TTS front-ends);
    every later piece is a whole sentence.
    """

    def __init__(self, min_chars: int = 2, first_clause_words: int = 0):
        self.buf = ""
        self.min_chars = min_chars
        self.first_clause_words = first_clause_words
        self.pieces = 0  # pieces returned so far

    def _first_clause(self) -> str | None:
        """The first clause of the buffer when it may end the first piece (see the class docstring), else None."""
        if self.pieces or self.first_clause_words <= 0:
            return None
        sentence_end = _BOUNDARY.search(self.buf)
        for m in _CLAUSE.finditer(self.buf):
            if sentence_end is not None and m.start() >= sentence_end.start():
                return None  # a whole sentence comes first
            cand = self.buf[: m.end(1)].strip()
            if len(cand.split()) >= self.first_clause_words:
                self.buf = self.buf[m.end():]
                return cand
        return None

    def push(self, text: str) -> list[str]:
        self.buf += text
        out: list[str] = []
        clause = self._first_clause()
        if clause is not None:
            out.append(clause)
            self.pieces += 1
        start = 0
        for m in _BOUNDARY.finditer(self.buf):
            end = m.end(1) if m.group(1) else m.start(3)
            candidate = self.buf[start:end].strip()
            if m.group(1):
                word = re.findall(r"([A-Za-z.]+)$", self.buf[start : m.start(1)])
                w = word[0].lower().rstrip(".") if word else ""
                if w in _ABBREV or (len(w) == 1 and w.isalpha() and m.group(1) == "."):
                    continue
            if len(candidate) >= self.min_chars:
                out.append(candidate)
                self.pieces += 1
                start = m.end()
        self.buf = self.buf[start:]
        return out

    def flush(self) -> list[str]:
        rest = self.buf.strip()
        self.buf = ""
        if rest:
            self.pieces += 1
        return [rest] if rest else []


def clean_for_speech(text: str) -> str:
    """Drop markdown that a voice should not read (``**``, ``#``, backticks, list bullets)."""
    text = re.sub(r"[*#`_]+", "", text)
    text = re.sub(r"^\s*[-•]\s+", "", text, flags=re.M)
    return text.strip()
