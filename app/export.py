"""Conversation exports (TXT, SRT, VTT) rendered from the session journal (:mod:`engine.journal`).

Every format carries the same lines: what the user said (each utterance's latest revised text where the second pass
revised it; a line whose words all moved to a neighbour is left out), the assistant's answers (timed when they were
spoken), and captions (the source, revised where a revision exists, and its translation, in place of the plain
transcript of the same utterance). In SRT and VTT a session with answers labels its lines "You:" and "Assistant:"
(a transcript or caption session's cues are the plain text, as subtitles are); TXT labels every line.

One session (``session=ID``) is rendered on its own clock: seconds from the start of the audio it heard (the file,
the microphone). ``session=None`` renders every session on one continuous clock (each starts after the previous one
ended, see :func:`engine.journal.session_offsets`) so that cues never overlap. TXT starts each session with a header
line naming its source and VTT with a NOTE; SRT has no comments. Files are written as UTF-8.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.journal import read_journal, session_offsets

MIN_CUE_S = 2.0  # duration given to a cue without an end time, seconds
WORDS_PER_S = 2.5  # an answer journaled without its audio's times is shown as long as it takes to say it
WHO = {"user": "You", "assistant": "Assistant", "caption": "Caption"}
ALL = "all"  # ``specvoice export --session all``: every session of the journal


@dataclass
class Item:
    """One line of the conversation. ``kind``: "user", "assistant" or "caption"; times in seconds of the
    session's audio (``t_start``/``t_end``; an answer when it was spoken), plus the session's start on the
    continuous clock when several sessions are rendered."""

    kind: str
    text: str
    t_start: float
    t_end: float
    translation: str = ""
    utterance: int = -1
    session: str = ""
    language: str = ""  # a user line's ISO 639-1 code ("" when not known)


# -- sessions ---------------------------------------------------------------------------------------------------
def session_ids(records: list[dict]) -> list[str]:
    """The sessions of ``records``, in the order they started."""
    out: dict[str, None] = {}
    for r in records:
        sid = r.get("session")
        if isinstance(sid, str):
            out.setdefault(sid)
    return list(out)


def latest_session(records: list[dict]) -> str | None:
    """The session that started last (None: no session)."""
    ids = session_ids(records)
    return ids[-1] if ids else None


def pick_session(records: list[dict], which: str | None) -> str | None:
    """The ``session`` argument of the renderers for ``specvoice export --session which``: None (no option) → the
    latest session, :data:`ALL` → None (every session, one continuous clock), an id → that id.

    Raises:
        ValueError: no session in ``records``, or no session ``which``.
    """
    ids = session_ids(records)
    if not ids:
        raise ValueError("the journal has no session")
    if which == ALL:
        return None
    if which is None:
        return ids[-1]
    if which not in ids:
        raise ValueError(f"no session {which!r} (sessions: {', '.join(ids[-5:])}{' …' if len(ids) > 5 else ''}; "
                         f"or --session {ALL})")
    return which


def source_line(head: dict | None, sid: str, start: float | None = None) -> str:
    """What a session heard, in words, for a header: its id, command, source (a file or the microphone), start time,
    and where its clock starts (``start``: its start on the continuous clock; None: its own clock)."""
    head = head or {}
    source = str(head.get("input") or "an unknown source")
    what = f"session {sid} ({', '.join(str(head[k]) for k in ('command', 'started') if head.get(k))})"
    where = "times from its start" if start is None else f"it starts at {clock(start, '.')} on this export's clock"
    return f"{what}: {source}; {where}"


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


# -- the lines --------------------------------------------------------------------------------------------------
def items(records: list[dict], session: str | None = None) -> list[Item]:
    """The conversation lines of ``records``: of one ``session`` on its own clock, or (None, :data:`ALL`) of every
    session on the continuous clock. A user line shows its utterance's latest revised text (``revision`` records);
    one whose words all moved to a neighbour is left out. A caption's source shows the revised text too (its
    translation is the one made live). An answer without an end time lasts as long as it takes to say."""
    session = None if session == ALL else session
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
        key = (str(r.get("session", "")), utt)
        if r["type"] == "user" and isinstance(utt, int):
            text = revised.get(key, text)
            if not text.strip():
                continue
        elif r["type"] == "caption" and isinstance(utt, int) and revised.get(key, "").strip():
            text = revised[key]
        elif r["type"] == "assistant" and t1 <= t0:
            t1 = t0 + max(MIN_CUE_S, len(text.split()) / WORDS_PER_S)
        out.append(Item(r["type"], text, off + t0, off + t1, str(r.get("translation") or ""),
                        utt if isinstance(utt, int) else -1, str(r.get("session", "")), str(r.get("language") or "")))
    return out


def conversation(lines: list[Item]) -> list[Item]:
    """``lines`` as every format shows them: a caption stands for the plain transcript of the same utterance, and
    lines without text are left out."""
    captioned = {(it.session, it.utterance) for it in lines if it.kind == "caption" and it.utterance >= 0}
    return [it for it in lines if (it.text.strip() or it.translation.strip())
            and not (it.kind == "user" and (it.session, it.utterance) in captioned)]


def _cue_text(it: Item, labelled: bool) -> str:
    text = " ".join(it.text.split())
    if labelled and it.kind in ("user", "assistant"):
        text = f"{WHO[it.kind]}: {text}"
    translation = " ".join(it.translation.split())
    return "\n".join(x for x in (text, translation) if x)


def _cues(lines: list[Item]) -> list[tuple[float, float, str, str]]:
    """(start s, end s, text, session) of every line of :func:`conversation`, sorted; each ends no later than the
    next one starts."""
    lines = conversation(lines)
    talks = {it.session for it in lines if it.kind == "assistant"}  # sessions with answers: lines are labelled
    raw = sorted(((it.t_start, it.t_end, _cue_text(it, it.session in talks), it.session) for it in lines),
                 key=lambda c: c[0])
    out: list[tuple[float, float, str, str]] = []
    for i, (a, b, text, sid) in enumerate(raw):
        if out:
            a = max(a, out[-1][1])
        if b <= a:
            b = a + MIN_CUE_S
        if i + 1 < len(raw) and raw[i + 1][0] > a:
            b = min(b, raw[i + 1][0])
        out.append((a, max(b, a + 0.001), text, sid))
    return out


def cues(lines: list[Item]) -> list[tuple[float, float, str]]:
    """Subtitle cues (start s, end s, text) of ``lines``: user lines, answers and captions (source, then its
    translation on the next line); sorted, and each cue ends no later than the next one starts."""
    return [(a, b, text) for a, b, text, _ in _cues(lines)]


def _heads(records: list[dict], session: str | None) -> list[tuple[str, str]]:
    """(session id, header line) of each session rendered, in order."""
    session = None if session == ALL else session
    heads = {r["session"]: r for r in records if r.get("type") == "session" and "session" in r}
    offsets = session_offsets(records)
    ids = [session] if session is not None else session_ids(records)
    return [(sid, source_line(heads.get(sid), sid, None if session is not None else offsets.get(sid, 0.0)))
            for sid in ids]


# -- formats ----------------------------------------------------------------------------------------------------
def to_txt(records: list[dict], session: str | None = None) -> str:
    """The conversation as text: a ``# session …`` header line per session (its source and its clock), then one
    ``[hh:mm:ss.mmm] Who: text`` line per item (a caption's translation on the next line, after "→")."""
    lines = conversation(items(records, session))
    out = []
    for sid, head in _heads(records, session):
        out.append(f"# {head}")
        for it in lines:
            if it.session != sid:
                continue
            line = f"[{clock(it.t_start, '.')}] {WHO[it.kind]}: {' '.join(it.text.split())}"
            if it.translation:
                line += f"\n    → {' '.join(it.translation.split())}"
            out.append(line)
    return "\n".join(out) + "\n"


def to_srt(records: list[dict], session: str | None = None) -> str:
    """SubRip: numbered cues from 1, ``hh:mm:ss,mmm --> hh:mm:ss,mmm``, a blank line between cues."""
    blocks = [f"{i}\n{clock(a, ',')} --> {clock(b, ',')}\n{text}\n"
              for i, (a, b, text) in enumerate(cues(items(records, session)), 1)]
    return "\n".join(blocks)


def _vtt_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def to_vtt(records: list[dict], session: str | None = None) -> str:
    """WebVTT: the ``WEBVTT`` header, a NOTE naming each session's source before its cues, the cues (text escaped)."""
    all_cues = _cues(items(records, session))
    blocks = ["WEBVTT\n"]
    for sid, head in _heads(records, session):
        blocks.append(f"NOTE {_vtt_escape(head).replace('--', '—')}\n")
        blocks += [f"{clock(a, '.')} --> {clock(b, '.')}\n{_vtt_escape(text)}\n"
                   for a, b, text, s in all_cues if s == sid]
    return "\n".join(blocks)


RENDER = {".txt": to_txt, ".srt": to_srt, ".vtt": to_vtt}


def export(records: list[dict], path: str | Path, session: str | None = None) -> Path:
    """Write TXT, SRT or VTT (by the file's suffix) of ``session`` (None: every session) as UTF-8; returns the path.

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
    the items it holds, with revisions applied, and the exports of its sessions on one continuous clock (the app's
    sessions are the turns of one conversation).

    Args:
        path: the journal (JSONL; it need not exist yet).
        since_now: only the sessions that start after this object is made (a window's own conversation: the journal
            keeps every earlier run's too, which ``specvoice export --journal PATH --session all`` writes); False:
            every session.

    Raises:
        OSError: ``since_now`` and the journal exists but cannot be read.
    """

    def __init__(self, path: str | Path, since_now: bool = False):
        self.path = Path(path)
        self._earlier = frozenset(r.get("session") for r in read_journal(self.path)) if since_now else frozenset()

    def records(self) -> list[dict]:
        """The journal's records of the sessions this history holds, in order."""
        recs = read_journal(self.path)
        return [r for r in recs if r.get("session") not in self._earlier] if self._earlier else recs

    @property
    def items(self) -> list[Item]:
        return items(self.records())

    def to_txt(self) -> str:
        return to_txt(self.records())

    def to_srt(self) -> str:
        return to_srt(self.records())

    def to_vtt(self) -> str:
        return to_vtt(self.records())

    def export(self, path: str | Path) -> Path:
        """Write this history's sessions as TXT, SRT or VTT by the file's suffix (UTF-8).

        Raises:
            ValueError: another suffix; nothing said yet (no session).
            OSError: the file cannot be written.
        """
        recs = self.records()
        if not any(r["type"] == "session" or r.get("session") == "history" for r in recs):
            raise ValueError("nothing to export yet: no session in this window "
                             f"(`specvoice export FILE --journal {self.path} --session all` writes every earlier one)")
        return export(recs, path)


def clock(t: float, sep: str) -> str:
    """``hh:mm:ss<sep>mmm`` of ``t`` seconds (negative times print as 0)."""
    ms = int(round(max(0.0, t) * 1000))
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"
