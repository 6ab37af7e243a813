"""Conversation history on disk, and export as TXT, SRT and VTT.

The history is a JSON-lines file appended (and flushed) as each item happens, so a crash loses nothing said.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass
class Item:
    """One line of the conversation. ``kind``: "user", "assistant" or "caption"; times in seconds of the session's
    audio (``t_start``/``t_end``; the assistant's lines get the user's end time)."""

    kind: str
    text: str
    t_start: float
    t_end: float
    translation: str = ""
    wall: float = 0.0


class History:
    """Append-only conversation log (JSON lines) with TXT/SRT/VTT export."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.items: list[Item] = []
        if self.path.exists():
            for line in self.path.read_text().splitlines():
                try:
                    self.items.append(Item(**json.loads(line)))
                except (ValueError, TypeError):
                    continue  # a torn last line after a crash

    def add(self, item: Item) -> None:
        item.wall = item.wall or time.time()
        self.items.append(item)
        with open(self.path, "a") as f:
            f.write(json.dumps(asdict(item), ensure_ascii=False) + "\n")
            f.flush()

    def to_txt(self) -> str:
        out = []
        for it in self.items:
            who = {"user": "You", "assistant": "Assistant", "caption": "Caption"}.get(it.kind, it.kind)
            line = f"[{_clock(it.t_start, '.')}] {who}: {it.text}"
            if it.translation:
                line += f"\n    → {it.translation}"
            out.append(line)
        return "\n".join(out) + "\n"

    def _cues(self):
        for it in self.items:
            if it.kind == "assistant":
                continue
            end = it.t_end if it.t_end > it.t_start else it.t_start + 2.0
            text = it.text + (f"\n{it.translation}" if it.translation else "")
            yield it.t_start, end, text

    def to_srt(self) -> str:
        blocks = []
        for i, (a, b, text) in enumerate(self._cues(), 1):
            blocks.append(f"{i}\n{_clock(a, ',')} --> {_clock(b, ',')}\n{text}\n")
        return "\n".join(blocks)

    def to_vtt(self) -> str:
        blocks = ["WEBVTT\n"]
        for a, b, text in self._cues():
            blocks.append(f"{_clock(a, '.')} --> {_clock(b, '.')}\n{text}\n")
        return "\n".join(blocks)

    def export(self, path: str | Path) -> Path:
        """Write TXT, SRT or VTT by the file's suffix.

        Raises:
            ValueError: another suffix.
        """
        p = Path(path)
        fmt = p.suffix.lower()
        text = {".txt": self.to_txt, ".srt": self.to_srt, ".vtt": self.to_vtt}.get(fmt)
        if text is None:
            raise ValueError(f"export format must be .txt, .srt or .vtt, got {fmt or 'none'}")
        p.write_text(text())
        return p


def _clock(t: float, sep: str) -> str:
    ms = int(round(max(0.0, t) * 1000))
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"
