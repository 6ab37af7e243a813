"""Text helpers: streaming sentence splitting for TTS."""

from __future__ import annotations

import re

_ABBREV = {"mr", "mrs", "ms", "dr", "prof", "st", "vs", "etc", "e.g", "i.e", "no", "fig", "approx", "jr", "sr"}
_BOUNDARY = re.compile(r"([.!?]+[\"')\]]*)(\s+)|(\n+)")


class SentenceSplitter:
    """Feed streamed text; get complete sentences as soon as their boundary is certain.

    A boundary is ``.``, ``!``, ``?`` (with closing quotes/brackets) followed by whitespace, or a newline; not after
    a known abbreviation, a single capital (initials) or between digits ("3.5"). :meth:`flush` returns the rest.
    """

    def __init__(self, min_chars: int = 2):
        self.buf = ""
        self.min_chars = min_chars

    def push(self, text: str) -> list[str]:
        self.buf += text
        out: list[str] = []
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
                start = m.end()
        self.buf = self.buf[start:]
        return out

    def flush(self) -> list[str]:
        rest = self.buf.strip()
        self.buf = ""
        return [rest] if rest else []


def clean_for_speech(text: str) -> str:
    """Drop markdown that a voice should not read (``**``, ``#``, backticks, list bullets)."""
    text = re.sub(r"[*#`_]+", "", text)
    text = re.sub(r"^\s*[-•]\s+", "", text, flags=re.M)
    return text.strip()
