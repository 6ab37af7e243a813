"""The second pass: finished utterances decoded again with more of the audio around them, and their text revised
(``RevisedTranscript``; ``asr.revise_max_s`` > 0). The VAD's pauses cut speech into utterances, and each final is
decoded with little of the audio around it; the second pass hears it with its neighbours, as an offline decode
does, while the live partials and finals are not delayed by it.

:class:`RevisionPass` is the interface of its two modes (``asr.revise_mode``): :class:`SecondPass` ("chains":
consecutive utterances decoded together once a pause completes them) and
:class:`engine.asr.offline_window_pass.OfflineWindowPass` ("offline": the stream decoded in consecutive 30 s windows
as offline Whisper moves through a recording). Either gives each window's words back to the utterances they were
heard in (:func:`assign_words`) and reports what changed (:class:`Revision`).
"""

from __future__ import annotations

import difflib
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

from audio.io import SAMPLE_RATE
from engine.asr.backend import ASRBackend, BackendCapabilities, BackendResult
from engine.asr.words import join_words, word_key, word_mid
from engine.config import AsrConfig
from engine.core.events import Word


class PassJob(Protocol):
    """One second-pass decode, from :meth:`RevisionPass.take` to :meth:`RevisionPass.apply`."""

    window: tuple[float, float]  # the audio span it settles (audio time, seconds)
    compute_s: float  # the decode's wall time once decoded, seconds

    @property
    def audio_end(self) -> float:
        """The end of the audio the decode hears (audio time, seconds): the caller keeps and passes it up to there."""
        ...


class RevisionPass(ABC):
    """A second pass over one stream. The caller (:class:`engine.asr.transcriber.StreamingTranscriber`) gives it
    every final (:meth:`add`), asks whether a decode is due (:meth:`due`), takes it (:meth:`take`), runs it on the
    kept audio (:meth:`decode`, the only slow step: a caller on another thread holds its lock for the others only)
    and applies its result (:meth:`apply`), which revises the utterances' words in place.

    Attributes:
        backend: the decoder (None until the caller sets it, before the first decode).
        ready: the due decode waiting to be taken (None: none).
        runs: decodes run; revised: utterances whose text a decode changed; dropped: what revised nothing without
            being decoded or applied (a complete chain superseded before the CPU was idle, a window rejected as a
            loop); last_compute_s: wall time of the latest decode, seconds.
    """

    def __init__(self, backend) -> None:
        self.backend = backend
        self.ready = None
        self.runs = 0
        self.revised = 0
        self.dropped = 0
        self.last_compute_s = 0.0

    @abstractmethod
    def add(self, u: "SpokenUtterance", whole: bool = True) -> None:
        """A new final transcript ``u``; ``whole``: its text was one decode of all its audio."""

    @abstractmethod
    def due(self, now: float | None = None) -> bool:
        """Whether a decode is due at the audio time ``now`` (seconds; None = the end of the stream)."""

    @property
    @abstractmethod
    def earliest(self) -> float | None:
        """The earliest audio time (seconds) a decode may still hear (None: none pending): the caller keeps the
        audio from there on."""

    @property
    @abstractmethod
    def window(self) -> tuple[float, float] | None:
        """The audio span (seconds) the next decode settles; None when none is due."""

    @abstractmethod
    def take(self, language=None) -> PassJob | None:
        """The due decode (None: none is due); it is no longer due. ``language``: an ISO 639-1 code for it (None:
        the language of its utterances)."""

    @abstractmethod
    def decode(self, job: PassJob, audio: np.ndarray, t0: float) -> BackendResult | None:
        """The backend's decode of ``job`` from ``audio`` (float32 16 kHz, (n,), starting at the audio time ``t0``,
        seconds, up to :attr:`PassJob.audio_end`); None when that audio lacks most of it. Touches no state but the
        counters."""

    @abstractmethod
    def apply(self, job: PassJob, res: BackendResult | None) -> "Revision | None":
        """Give ``job``'s utterances the words of its decode ``res`` (None: it failed) and settle them. Returns what
        changed (None: nothing, or the decode was rejected)."""


def assign_words(old: Sequence[Sequence[Word]], new: Sequence[Word], bounds: Sequence[float]) -> list[int]:
    """Which utterance each word of a decode of several utterances belongs to.

    A new word that matches an old word (the same word in a matching block of at least two words of the two word
    sequences, difflib) belongs to that word's utterance: where the words around a boundary did not change, the
    boundary stays where the utterances' finals put it (word times are least reliable there, at the edge of a
    pause). Any other
    word goes by its time: the utterance ``k`` with ``bounds[k-1] ≤ middle < bounds[k]`` (``bounds``: audio times
    between consecutive utterances, seconds), kept between the utterances of the matched words around it.

    Args:
        old: each utterance's current words, in order.
        new: the decode's words (audio times, seconds).

    Returns:
        utterance positions (indices into ``old``), one per new word, non-decreasing.
    """
    labels = [k for k, ws in enumerate(old) for _ in ws]
    a = [word_key(w.text) for ws in old for w in ws]
    b = [word_key(w.text) for w in new]
    matched: list[int | None] = [None] * len(new)
    for blk in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks():
        if blk.size < 2:  # one common word ("you", "the") anchors nothing
            continue
        for i in range(blk.size):
            matched[blk.b + i] = labels[blk.a + i]
    out: list[int] = []
    for j, w in enumerate(new):
        k = matched[j]
        if k is None:
            k = sum(1 for x in bounds if word_mid(w) >= x)
            nxt = next((m for m in matched[j + 1:] if m is not None), None)
            if nxt is not None:
                k = min(k, nxt)
        out.append(max(k, out[-1]) if out else k)
    return out



@dataclass
class SpokenUtterance:
    """A finished utterance the second pass may revise: ``index``; its speech's audio span ``t_start``–``t_end``
    (seconds, the VAD's); its current ``words`` (audio times; the final's, or a revision's); ``language`` ("" when
    not known)."""

    index: int
    t_start: float
    t_end: float
    words: list[Word]
    language: str = ""

    @property
    def text(self) -> str:
        return join_words(self.words)


@dataclass(frozen=True)
class Revision:
    """What one second-pass decode changed: ``changed`` — (index, new text, new words) of each utterance whose
    text changed, in order; ``window`` — the audio span decoded (seconds; from the first of the new words where an
    utterance began in an earlier window); ``language`` of the decode ("" when not
    known); ``compute_s`` — its wall time (seconds); ``stats`` — the backend's."""

    changed: tuple[tuple[int, str, tuple[Word, ...]], ...]
    window: tuple[float, float]
    language: str
    compute_s: float
    stats: dict



class SecondPass(RevisionPass):
    """Finished utterances re-decoded together, with each other's audio, as an offline decode would hear them.

    The VAD's pauses cut speech into utterances, and each utterance's final text is decoded without the audio
    around it: a sentence cut by a hesitation pause comes out as two worse halves. The second pass gathers a
    *chain* of consecutive utterances (each starting at most ``gap_s`` seconds after the previous one ended, in one
    language, spanning at most ``max_s`` seconds) and decodes its audio in ONE window once the chain is complete
    (:meth:`run`: ``transcribe_final`` with the current text as the draft; greedy, guards and re-decodes as any
    final), prompted with the settled text before it. The decode's words go back to the utterances
    (:func:`assign_words`); utterances whose text changed are returned (:class:`Revision`).

    A chain is complete (:meth:`due`) when ``gap_s`` seconds of silence followed it (the next utterance could not
    join it), when the next utterance would make it longer than ``max_s`` (the next chain then gets up to ``left_s``
    seconds of its last utterance's audio, from a word start, as acoustic context only: its words there are the
    anchor, never revised, and the prompt ends before them), or at the end of the stream. One complete chain waits
    for its run (the caller runs it when the CPU is idle); if another completes first, the older is settled as it
    is. A chain is worth a run when it holds two utterances or more, has acoustic context, or holds one whose final
    text was not one decode of all of it (``whole=False``: a long utterance whose buffer was trimmed); an utterance
    longer than one window alone is decoded in pieces (the backend cuts them at the quietest moment). A decode that
    is doubtful (fails the guards) or loses more than a quarter of the words revises nothing.

    Each utterance is decoded about once more (a chain's audio once), in windows long enough to amortise the
    encoder's shortest window.

    Args:
        backend: an :class:`engine.asr.backend.ASRBackend` (its ``transcribe_final`` if it has one), or None until the
            caller sets :attr:`backend` before the first run.
        asr: the ``asr`` settings: ``revise_max_s`` (``max_s``, the longest chain, seconds of audio; at most 28: one
            encoder window), ``revise_gap_s`` (``gap_s``, the longest pause between two utterances of one chain,
            seconds) and ``revise_context_s`` (``left_s``, the acoustic context from the previous chain when the length
            limit cut it, seconds).
        context: text before the first utterance (the first prompt).
    """

    PAD_S = 0.3  # audio before the chain's first utterance and after its last one, seconds

    def __init__(self, backend: ASRBackend | None, asr: AsrConfig, context: str = ""):
        super().__init__(backend)
        self.max_s = min(float(asr.revise_max_s), 28.0)
        self.gap_s = float(asr.revise_gap_s)
        self.pad_s = self.PAD_S
        self.left_s = float(asr.revise_context_s)
        self.chain: list[SpokenUtterance] = []  # the open chain (it may grow)
        self._whole = True  # every utterance of the open chain was decoded whole
        self._left: SpokenUtterance | None = None  # the open chain's acoustic context (the cut chain's last)
        # a complete chain waiting for its run: (utterances, acoustic context)
        self.ready: tuple[list[SpokenUtterance], SpokenUtterance | None] | None = None
        self._settled: dict[int, str] = {}  # the settled utterances' text by index (a run may settle late)
        self._settled_language: dict[int, str] = {}  # ... and their language ("" when not known)
        self._context0 = context
        self.context_language = ""  # the language of the latest settled text ("" when not known)

    def add(self, u: SpokenUtterance, whole: bool = True) -> None:
        """A new final transcript. ``whole``: its text was one decode of all its audio."""
        c = self.chain
        if c:
            other_language = bool(u.language) and bool(c[-1].language) and u.language != c[-1].language
            if u.t_start - c[-1].t_end > self.gap_s or other_language:
                self._close()
            elif u.t_end - c[0].t_start + 2 * self.pad_s > self.max_s:
                last = c[-1]
                self._close()
                self._left = last  # its words are updated by the run of its chain
        if not u.words and not self.chain:  # nothing said (a cough, music): no chain starts at it
            self._left = None
            return
        self.chain.append(u)
        self._whole = self._whole and whole

    def _worth(self) -> bool:
        return len(self.chain) >= 2 or self._left is not None or (bool(self.chain) and not self._whole)

    def _close(self) -> None:
        """The open chain is complete: it waits for its run (or is settled when no run would change it)."""
        if self._worth():
            if self.ready is not None:
                self._settle(self.ready[0])
                self.dropped += 1
            self.ready = (self.chain, self._left)
        else:
            self._settle(self.chain)
        self.chain, self._whole, self._left = [], True, None

    def _settle(self, us: Sequence[SpokenUtterance]) -> None:
        for u in us:
            self._settled[u.index] = u.text
            self._settled_language[u.index] = u.language or ""
            if u.text:
                self.context_language = u.language or self.context_language
        while len(self._settled) > 64:  # the prompt needs the last 200 characters only
            i = min(self._settled)
            del self._settled[i], self._settled_language[i]

    @property
    def context(self) -> str:
        """The settled text (the next run's prompt), in the order it was spoken; last 400 characters."""
        return " ".join([self._context0] + [self._settled[i] for i in sorted(self._settled)]).strip()[-400:]

    def context_in(self, language: str) -> str:
        """The end of :attr:`context` spoken in ``language`` (ISO 639-1): the settled texts since the last one in
        another language (one whose language is not known counts as this one), and the first prompt only when no
        settled text is in another language; last 400 characters."""
        texts = []
        for i in sorted(self._settled, reverse=True):
            if self._settled_language.get(i, "") not in ("", language):
                break
            texts.append(self._settled[i])
        else:
            texts.append(self._context0)
        return " ".join(reversed(texts)).strip()[-400:]

    def due(self, now: float | None = None) -> bool:
        """Whether a run would decode something no decode has heard together yet: a complete chain waits, or the
        open one is complete at the audio time ``now`` (seconds; None = the end of the stream)."""
        if self.ready is not None:
            return True
        if not self.chain:
            return False
        if now is None or now - self.chain[-1].t_end >= self.gap_s:
            self._close()
            return self.ready is not None
        return False

    def closes(self, u: SpokenUtterance) -> bool:
        """Whether adding ``u`` would complete the open chain (its pause or length)."""
        c = self.chain
        return bool(c) and (u.t_start - c[-1].t_end > self.gap_s
                            or u.t_end - c[0].t_start + 2 * self.pad_s > self.max_s)

    @property
    def earliest(self) -> float | None:
        """The earliest audio time (seconds) a run may still decode (None: none pending): the caller keeps the
        audio from there on."""
        ts = []
        if self.ready is not None:
            ts.append(self.window[0])
        if self.chain:
            ts.append((self._left or self.chain[0]).t_start - self.pad_s)
        return min(ts) if ts else None

    @staticmethod
    def _left_words(left: SpokenUtterance | None, left_s: float) -> list[Word]:
        """The words of ``left`` a run hears as acoustic context (those starting within ``left_s`` of its end)."""
        return [] if left is None else [w for w in left.words if w.start >= left.t_end - left_s]

    @property
    def window(self) -> tuple[float, float] | None:
        """The audio span (seconds) the next run decodes; None when no chain is complete."""
        if self.ready is None:
            return None
        chain, left = self.ready
        lw = self._left_words(left, self.left_s)
        start = max(lw[0].start - 0.05, left.t_start) if lw else chain[0].t_start - self.pad_s
        return max(0.0, start), chain[-1].t_end + self.pad_s

    def run(self, audio: np.ndarray, t0: float, language=None) -> Revision | None:
        """Decode the complete chain: ``audio`` float32 16 kHz from the audio time ``t0`` (seconds), covering
        :attr:`window` (what it lacks at either end is not decoded). ``language``: passed to the backend (a code,
        or a callable that picks it; None: the chain's language when every utterance has one, else the backend's).
        Returns the utterances whose text changed (None: no chain complete, nothing changed, or a rejected
        decode). The chain's words are updated and it is settled. The same as :meth:`take`, :meth:`decode` and
        :meth:`apply` in a row (a caller on another thread holds its lock for the first and the last only)."""
        job = self.take(language)
        if job is None:
            return None
        return self.apply(job, self.decode(job, audio, t0))

    def take(self, language=None) -> "_PassJob | None":
        """The complete chain's decode to run (None: none is complete); it is no longer :attr:`ready`."""
        win = self.window
        if win is None:
            return None
        chain, left_u = self.ready
        self.ready = None
        left = self._left_words(left_u, self.left_s)
        prompt = self.context
        ctx_text = join_words(left)
        if ctx_text and prompt.endswith(ctx_text):  # the prompt is the text before the window's audio
            prompt = prompt[: -len(ctx_text)].rstrip()
        langs = {u.language for u in chain}
        if language is None and len(langs) == 1 and "" not in langs:
            language = next(iter(langs))
        if isinstance(language, str):
            # prompted with text in one language, Whisper translates speech in another into it: the prompt holds
            # the settled text in the chain's language only
            prompt = self.context_in(language)
            if ctx_text and prompt.endswith(ctx_text):
                prompt = prompt[: -len(ctx_text)].rstrip()
        return _PassJob(chain, left, win, prompt[-200:], join_words(left + [w for u in chain for w in u.words]),
                        language)

    def decode(self, job: "_PassJob", audio: np.ndarray, t0: float) -> BackendResult | None:
        """The backend's decode of ``job``'s window from ``audio`` (float32 16 kHz starting at the audio time ``t0``,
        seconds); None when that audio lacks most of it. Touches no state but the counters."""
        a, b = max(job.window[0], t0), min(job.window[1], t0 + len(audio) / SAMPLE_RATE)
        job.window = (a, b)
        seg = np.asarray(audio[int(round((a - t0) * SAMPLE_RATE)): int(round((b - t0) * SAMPLE_RATE))], np.float32)
        self.last_compute_s = 0.0
        if len(seg) < SAMPLE_RATE * 0.3:
            return None
        caps = BackendCapabilities.of(self.backend)
        fn = getattr(self.backend, "transcribe_final", None)
        kw = {}
        if fn is not None and job.draft and caps.draft:
            kw["draft"] = job.draft
        fn = fn or self.backend.transcribe
        if job.language is not None and caps.language:
            kw["language"] = job.language
        t_start = time.perf_counter()
        res = fn(seg, job.prompt, **kw)
        job.compute_s = self.last_compute_s = time.perf_counter() - t_start
        self.runs += 1
        return res

    def apply(self, job: "_PassJob", res: BackendResult | None) -> Revision | None:
        """Give ``job``'s chain the words of its decode ``res`` and settle it. Returns what changed (None: nothing,
        or the decode was rejected: missing, doubtful, or more than a quarter of the words lost)."""
        chain, left, language = job.chain, job.left, job.language
        if res is None:
            self._settle(chain)
            return None
        a = job.window[0]
        lang = res.stats.get("language") or (language if isinstance(language, str) else "") or chain[-1].language
        words = [Word(w.start + a, w.end + a, w.text) for w in res.words]
        old = [left] + [u.words for u in chain]
        if res.stats.get("doubtful") or len(words) < 0.75 * sum(len(ws) for ws in old):
            self._settle(chain)
            return None
        # the acoustic context's words were settled by the run before: a new word goes to the chain only once past
        # the middle of the pause after them (as between two utterances), not from the chain's padding on, where
        # the context's last words, decoded a second time, would be given to the first utterance as well
        first = chain[0].t_start - self.pad_s
        if left:
            first = min(chain[0].t_start, max(first, (max(w.end for w in left) + chain[0].t_start) / 2))
        ends = [first] + [(u.t_end + v.t_start) / 2 for u, v in zip(chain, chain[1:])]
        owner = assign_words(old, words, ends)
        new: list[list[Word]] = [[] for _ in chain]
        for w, k in zip(words, owner):
            if k > 0:  # 0: the acoustic context's words, which stay as they are
                new[k - 1].append(w)
        changed = []
        for u, ws in zip(chain, new):
            if " ".join(join_words(ws).split()) != " ".join(u.text.split()):
                changed.append((u.index, join_words(ws), tuple(ws)))
                self.revised += 1
            u.words = ws
            u.language = lang or u.language
        self._settle(chain)
        if not changed:
            return None
        return Revision(tuple(changed), job.window, lang or "", job.compute_s, dict(res.stats))




@dataclass
class _PassJob:
    """One second-pass decode: the chain, its acoustic context's words, the audio span (seconds), prompt, draft
    and language; ``compute_s`` once decoded."""

    chain: list[SpokenUtterance]
    left: list[Word]
    window: tuple[float, float]
    prompt: str
    draft: str
    language: object
    compute_s: float = 0.0

    @property
    def audio_end(self) -> float:
        """The decode hears the audio up to the end of its window (audio time, seconds)."""
        return self.window[1]
