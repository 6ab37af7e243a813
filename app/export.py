"""Transcript and caption exports (TXT, SRT, VTT) rendered from the session journal (:mod:`engine.journal`).

All sessions of a journal share one continuous clock (each starts after the previous one ended, see
:func:`engine.journal.session_offsets`), cues never overlap, and files are written as UTF-8. ``session=ID`` renders a
single session on its own clock (starting at 0) instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.journal import read_journal, session_offsets

MIN_CUE_S = 2.0  # duration given to a cue without an end time, seconds
WHO = {"user": "You", "assistant": "Assistant", "caption": "Caption"}


@dataclass
class Item:
    """One line of the conversation. ``kind``: "user", "assistant" or "caption"; times in seconds of the
    session's audio (``t_start``/``t_end``; an answer gets the end time of the words it answers)."""

    kind: str
    text: str
    t_start: float
    t_end: float
    translation: str = ""
    utterance: int = -1
    session: str = ""
    language: str = ""  # a user line's ISO 639-1 code ("" when not known)


def revised_texts(records: list[dict]) -> dict[tuple[str, int], str]:
    """The latest revised text of each (session, utterance) from the ``revision`` records (:mod:`engine.journal`)."""
    out: dict[tuple[str, int], str] = {}
    for r in records:
        if r.get("type") != "revision":
            continue
        us, ts = r.get("utterances"), r.get("texts")
        if isinstance(us, list) and isinstance(ts, list):
            for u, t in zip(us, ts):
                if isinstance(u, int) and isinstance(t, str):
                    out[(str(r.get("session", "")), u)] = t
    return out


def items(records: list[dict], session: str | None = None) -> list[Item]:
    """The conversation lines of ``records`` (of one ``session`` when given), times on the continuous clock (or on
    the session's own clock when ``session`` is given). A user line shows its utterance's latest revised text
    (``revision`` records); one whose words all moved to a neighbour is left out."""
    offsets = session_offsets(records)
    revised = revised_texts(records)
    out = []
    for r in records:
        if r.get("type") not in WHO or (session is not None and r.get("session") != session):
            continue
        off = 0.0 if session is not None else offsets.get(r.get("session"), 0.0)
        t0 = r.get("t_start")
        t1 = r.get("t_end")
        t0 = float(t0) if isinstance(t0, (int, float)) else float(t1) if isinstance(t1, (int, float)) else 0.0
        t1 = float(t1) if isinstance(t1, (int, float)) else t0
        utt = r.get("utterance")
        text = str(r.get("text", ""))
        if r["type"] == "user" and isinstance(utt, int):
            text = revised.get((str(r.get("session", "")), utt), text)
            if not text.strip():
                continue
        out.append(Item(r["type"], text, off + t0, off + t1, str(r.get("translation") or ""),
                        utt if isinstance(utt, int) else -1, str(r.get("session", ""))))
    return out


def cues(lines: list[Item]) -> list[tuple[float, float, str]]:
    """Subtitle cues (start s, end s, text) from the user and caption lines: a caption replaces the plain
    transcript of the same utterance; sorted, and each cue ends no later than the next one starts."""
    captioned = {(it.session, it.utterance) for it in lines if it.kind == "caption" and it.utterance >= 0}
    raw = []
    for it in lines:
        if it.kind == "assistant" or not it.text.strip():
            continue
        if it.kind == "user" and (it.session, it.utterance) in captioned:
            continue
        raw.append((it.t_start, it.t_end, it.text + (f"\n{it.translation}" if it.translation else "")))
    raw.sort(key=lambda c: c[0])
    out: list[tuple[float, float, str]] = []
    for i, (a, b, text) in enumerate(raw):
        if out:
            a = max(a, out[-1][1])
        if b <= a:
            b = a + MIN_CUE_S
        if i + 1 < len(raw) and raw[i + 1][0] > a:
            b = min(b, raw[i + 1][0])
        out.append((a, max(b, a + 0.001), text))
    return out


def to_txt(records: list[dict], session: str | None = None) -> str:
    """The conversation as text: one ``[hh:mm:ss.mmm] Who: text`` line per item, a header line per session."""
    lines = []
    heads = {r["session"]: r for r in records if r.get("type") == "session" and "session" in r}
    current = None
    for it in items(records, session):
        if it.session != current:
            current = it.session
            h = heads.get(current)
            if h is not None:
                what = " ".join(str(h[k]) for k in ("command", "input") if h.get(k))
                lines.append(f"# session {current}: {what} ({h.get('started', '')})")
        line = f"[{clock(it.t_start, '.')}] {WHO[it.kind]}: {it.text}"
        if it.translation:
            line += f"\n    → {it.translation}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def to_srt(records: list[dict], session: str | None = None) -> str:
    blocks = [f"{i}\n{clock(a, ',')} --> {clock(b, ',')}\n{text}\n"
              for i, (a, b, text) in enumerate(cues(items(records, session)), 1)]
    return "\n".join(blocks)


def to_vtt(records: list[dict], session: str | None = None) -> str:
    blocks = ["WEBVTT\n"] + [f"{clock(a, '.')} --> {clock(b, '.')}\n{text}\n"
                             for a, b, text in cues(items(records, session))]
    return "\n".join(blocks)


RENDER = {".txt": to_txt, ".srt": to_srt, ".vtt": to_vtt}


def export(records: list[dict], path: str | Path, session: str | None = None) -> Path:
    """Write TXT, SRT or VTT (by the file's suffix) as UTF-8; returns the path.

    Raises:
        ValueError: another suffix.
        OSError: the file cannot be written.
    """
    p = Path(path)
    render = RENDER.get(p.suffix.lower())
    if render is None:
        raise ValueError(f"export format must be .txt, .srt or .vtt, got {p.suffix.lower() or 'none'}")
    p.write_text(render(records, session), encoding="utf-8")
    return p


class History:
    """The desktop app's view of its journal at ``path`` (written by the session engine, :mod:`engine.journal`):
    the items it holds, with revisions applied, and the exports."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    @property
    def items(self) -> list[Item]:
        return items(read_journal(self.path))

    def to_txt(self) -> str:
        return to_txt(read_journal(self.path))

    def to_srt(self) -> str:
        return to_srt(read_journal(self.path))

    def to_vtt(self) -> str:
        return to_vtt(read_journal(self.path))

    def export(self, path: str | Path) -> Path:
        """Write the whole journal as TXT, SRT or VTT by the file's suffix (UTF-8).

        Raises:
            ValueError: another suffix.
            OSError: the file cannot be written.
        """
        return export(read_journal(self.path), path)


def clock(t: float, sep: str) -> str:
    """``hh:mm:ss<sep>mmm`` of ``t`` seconds (negative times print as 0)."""
    ms = int(round(max(0.0, t) * 1000))
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"
