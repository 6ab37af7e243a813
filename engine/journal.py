"""The session journal: what a session said and heard, on disk before it is shown.

One JSON object per line (UTF-8), appended, flushed and fsynced per record, so killing the process (even with
SIGKILL) loses nothing that had been printed or displayed; a torn last line is skipped when reading. Sessions are
never truncated or rewritten: each run appends its own records after the earlier sessions'.

Records (``type``):
    * ``session`` — a session starts: ``command``, ``input`` (the file it heard, or ``microphone``), ``started``
      (ISO local time). Every time of the session's records is on its own audio's clock: seconds since its source
      (that file, that microphone) started.
    * ``user`` — a final transcript: ``utterance``, ``text``, ``t_start``/``t_end`` (audio seconds since the
      session's source started), ``latency_s`` (end of speech → final transcript, s, or null), and ``language``
      (ISO 639-1 code it was decoded in) when known.
    * ``revision`` — the second pass revised final transcripts (``RevisedTranscript``): ``utterances`` and
      ``texts`` (each utterance's new text, "" when its words moved to a neighbour), ``t_start``/``t_end`` (the
      audio span decoded), ``language`` when known. The exports show the revised text.
    * ``answer_sentence`` — one sentence of the answer as it went to the voice: ``utterance``, ``index``, ``text``.
    * ``assistant`` — the whole answer: ``utterance``, ``text``, ``interrupted``, ``t_start``/``t_end`` — when it
      was spoken on the session's clock (its first audio: the end of the question's speech plus the measured end of
      speech → first audio; its end: plus the audio played), or the end of the question when no audio played.
    * ``caption`` — a final caption: ``utterance``, ``text`` (source), ``translation``, ``t_start``/``t_end``.
    * ``error`` — an error shown to the user: ``where``, ``message``.
    * ``session_end`` — ``audio_s`` (audio seconds the session consumed) and ``status``.
Every record carries ``session`` (the session id) and ``wall`` (Unix time, s).

An export (:mod:`app.export`) of one session keeps its clock. An export of several sessions puts them on one
continuous clock: a session starts :data:`SESSION_GAP_S` after the end of the previous one (its ``audio_s``, or its
last record's ``t_end`` when it was killed), so cues of different sessions never overlap.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from pathlib import Path

from engine.core.events import (AnswerDone, AnswerSentence, Caption, Error, FinalTranscript, RevisedTranscript,
                                SpeechEnded)

SESSION_GAP_S = 1.0  # clock gap between consecutive sessions in the exports, seconds


def default_journal_path() -> Path:
    """The desktop app's journal: ``$SPECVOICE_JOURNAL``, else ``$XDG_DATA_HOME/specvoice/history.jsonl``
    (``~/.local/share/specvoice/history.jsonl``)."""
    env = os.environ.get("SPECVOICE_JOURNAL")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "specvoice" / "history.jsonl"


def read_journal(path: str | Path) -> list[dict]:
    """All complete records of the journal at ``path``, in order ([] when it does not exist).

    Lines that are not a JSON object with a ``type`` (a torn last line after a crash) are skipped.

    Raises:
        OSError: the file exists but cannot be read.
    """
    p = Path(path)
    if not p.exists():
        return []
    out = []
    with open(p, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and "type" not in rec and "kind" in rec:  # the earlier history format
                rec = {**rec, "type": rec["kind"], "session": "history"}
            if isinstance(rec, dict) and "type" in rec:
                out.append(rec)
    return out


def session_offsets(records: list[dict]) -> dict[str, float]:
    """Start of each session on the journal's continuous clock (seconds), by session id.

    A session starts :data:`SESSION_GAP_S` after the end of the previous one; the first starts at 0.
    """
    return _clock(records)[0]


def _clock(records: list[dict]) -> tuple[dict[str, float], float]:
    """(start of each session, start of the next session) on the continuous clock, seconds."""
    order: list[str] = []
    end: dict[str, float] = {}
    for r in records:
        sid = r.get("session")
        if sid is None:
            continue
        if sid not in end:
            order.append(sid)
            end[sid] = 0.0
        for key in ("t_end", "t_start", "audio_s"):
            v = r.get(key)
            if isinstance(v, (int, float)):
                end[sid] = max(end[sid], float(v))
    offsets: dict[str, float] = {}
    t = 0.0
    for sid in order:
        offsets[sid] = t
        t += end[sid] + SESSION_GAP_S
    return offsets, t


class Journal:
    """Append-only JSONL journal at ``path`` (thread-safe; the parent folder is created).

    Raises:
        OSError: the folder or file cannot be created or written (from :meth:`start` and :meth:`Session.write`).
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.Lock()

    def start(self, command: str, input: str = "", **meta) -> "Session":
        """Open a new session, appending its ``session`` record. Returns the :class:`Session`.

        ``offset_s`` of the session is its start on the continuous clock (after every earlier session).
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        offset = _clock(read_journal(self.path))[1]
        sid = time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]
        s = Session(self, sid, offset)
        s.write("session", command=command, input=input, started=time.strftime("%Y-%m-%dT%H:%M:%S"), **meta)
        return s

    def append(self, record: dict) -> None:
        """Append one record and make it durable (flush + fsync) before returning. A torn last line left by a
        killed process is ended first, so it cannot swallow this record."""
        line = (json.dumps(record, ensure_ascii=False, default=float) + "\n").encode("utf-8")
        with self._lock, open(self.path, "a+b") as f:
            if f.seek(0, os.SEEK_END) > 0:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    line = b"\n" + line
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def records(self) -> list[dict]:
        return read_journal(self.path)


class Session:
    """One session's writer. Its records' times are on the session's own audio clock; ``offset_s`` is only where
    the session would start on the continuous clock of an export of every session (s)."""

    def __init__(self, journal: Journal, session_id: str, offset_s: float):
        self.journal = journal
        self.id = session_id
        self.offset_s = offset_s
        self.ended = False

    def write(self, type: str, **fields) -> dict:
        """Append a record of ``type`` with ``fields`` (plus ``session`` and ``wall``); durable on return."""
        rec = {"type": type, "session": self.id, "wall": round(time.time(), 3), **fields}
        self.journal.append(rec)
        return rec

    def user(self, utterance: int, text: str, t_start: float, t_end: float, latency_s: float | None = None,
             language: str = "") -> dict:
        extra = {"language": language} if language else {}
        return self.write("user", utterance=utterance, text=text, t_start=_r(t_start), t_end=_r(t_end),
                          latency_s=_r(latency_s), **extra)

    def revision(self, utterances, texts, t_start: float | None = None, t_end: float | None = None,
                 language: str = "") -> dict:
        """Journal a ``RevisedTranscript``: ``utterances`` (indices) now read ``texts`` (same length).

        Raises:
            ValueError: ``utterances`` and ``texts`` differ in length.
        """
        utterances, texts = [int(u) for u in utterances], [str(t) for t in texts]
        if len(utterances) != len(texts):
            raise ValueError(f"{len(utterances)} utterances but {len(texts)} texts")
        extra = {"language": language} if language else {}
        return self.write("revision", utterances=utterances, texts=texts, t_start=_r(t_start), t_end=_r(t_end),
                          **extra)

    def answer_sentence(self, utterance: int, index: int, text: str) -> dict:
        return self.write("answer_sentence", utterance=utterance, index=index, text=text)

    def answer(self, utterance: int, text: str, interrupted: bool = False, t_start: float | None = None,
               t_end: float | None = None) -> dict:
        return self.write("assistant", utterance=utterance, text=text, interrupted=interrupted, t_start=_r(t_start),
                          t_end=_r(t_end))

    def caption(self, utterance: int, source: str, translation: str, t_start: float | None = None,
                t_end: float | None = None) -> dict:
        return self.write("caption", utterance=utterance, text=source, translation=translation, t_start=_r(t_start),
                          t_end=_r(t_end))

    def error(self, where: str, message: str) -> dict:
        return self.write("error", where=where, message=message)

    def end(self, audio_s: float | None = None, status: str = "ok") -> None:
        """Append the ``session_end`` record (once)."""
        if not self.ended:
            self.ended = True
            self.write("session_end", audio_s=_r(audio_s), status=status)


class JournalWriter:
    """What a session keeps of its events in the journal , written before they are shown:
    final transcripts with text (and their latency from the end of speech), revisions (an utterance whose final was
    empty gets its first "user" record from the revision, so that the exports show it), answer sentences, whole
    answers, final captions and errors. :meth:`note` is told every transcriber event first (on the ASR thread: the
    end of speech and each final's span, which the answer and caption records take); :meth:`write` journals one
    event (any thread; the journal serialises its appends).

    Args:
        journal: an :class:`engine.journal.Session` (None: :meth:`write` writes nothing).
    """

    def __init__(self, journal):
        self.journal = journal
        self.eos: dict[int, float] = {}  # utterance → wall time of its end of speech
        self.eos_t: dict[int, float] = {}  # utterance → audio time of its end of speech, s
        self.said: dict[int, list[float]] = {}  # utterance → [audio time its answer's first audio played, seconds]
        self.spans: dict[int, tuple[float, float]] = {}  # utterance → (t_start, t_end) of its final, audio s
        self._users: set[int] = set()  # utterances with a "user" record

    def note(self, ev) -> None:
        if isinstance(ev, SpeechEnded):
            self.eos[ev.utterance] = ev.wall
            self.eos_t[ev.utterance] = ev.t
        elif isinstance(ev, FinalTranscript):
            self.spans[ev.utterance] = (ev.t_start, ev.t_end)

    def spoken(self, utterance: int, seconds: float, wall: float) -> None:
        """``seconds`` of ``utterance``'s answer audio went to the player at ``wall`` (``time.monotonic``): the
        answer record is timed from its first audio (on the session's clock: the end of the question's speech plus
        the end of speech → this audio, as the latency report measures it) to the end of the audio played."""
        said = self.said.get(utterance)
        if said is None:
            e, t = self.eos.get(utterance), self.eos_t.get(utterance)
            if e is not None and t is not None:
                start = t + max(0.0, wall - e)
            else:
                start = self.spans.get(utterance, (0.0, 0.0))[1]
            said = self.said[utterance] = [start, 0.0]
        said[1] += max(0.0, float(seconds))

    def write(self, ev) -> None:
        """Journal ``ev`` if the journal keeps it (durable on return).

        Raises:
            OSError: the journal cannot be written.
        """
        j = self.journal
        if j is None:
            return
        if isinstance(ev, FinalTranscript) and ev.text:
            e = self.eos.get(ev.utterance)
            j.user(ev.utterance, ev.text, ev.t_start, ev.t_end, ev.wall - e if e else None, language=ev.language)
            self._users.add(ev.utterance)
        elif isinstance(ev, RevisedTranscript):
            for utt, text in zip(ev.utterances, ev.texts):
                if text and utt not in self._users:  # its final was empty: the revision gives it its first words
                    t0, t1 = self.spans.get(utt, (ev.t_start, ev.t_end))
                    j.user(utt, text, t0, t1, language=ev.language)
                    self._users.add(utt)
            j.revision(ev.utterances, ev.texts, ev.t_start, ev.t_end, ev.language)
        elif isinstance(ev, AnswerSentence):
            j.answer_sentence(ev.utterance, ev.index, ev.text)
        elif isinstance(ev, AnswerDone):
            said = self.said.get(ev.utterance)
            if said is not None:
                j.answer(ev.utterance, ev.text, ev.interrupted, said[0], said[0] + said[1])
            else:  # no audio played (interrupted first, or no voice): at the end of the question
                t = self.spans.get(ev.utterance, (None, None))[1]
                j.answer(ev.utterance, ev.text, ev.interrupted, t, t)
        elif isinstance(ev, Caption) and ev.final:
            t0, t1 = self.spans.get(ev.utterance, (None, None))
            j.caption(ev.utterance, ev.source, ev.translation, t0, t1)
        elif isinstance(ev, Error):
            j.error(ev.where, ev.message)


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(float(x), nd)
