"""The second pass as offline Whisper decodes a recording (``asr.revise_mode = "offline"``, the default): the stream
decoded again in consecutive 30 s windows, each from the seek position the previous one's settled segments end at.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from audio.io import SAMPLE_RATE
from engine.asr.backend import BackendResult, WindowASRBackend
from engine.asr.second_pass import Revision, RevisionPass, SpokenUtterance, assign_words
from engine.asr.words import join_words
from engine.core.events import Word


LOOPED = ("cap", "loop", "compression")  # the guard's verdicts on a decode that loops: it revises nothing


class OfflineWindowPass(RevisionPass):
    """The second pass as offline Whisper decodes the recording: the stream re-decoded in consecutive 30 s windows,
    each starting where the previous one's settled segments end (its seek position) and conditioned on the tokens
    decoded before it, as faster-whisper's long-form transcription of the whole recording moves through it (greedy,
    temperature 0, timestamp tokens; :meth:`engine.asr.faster_whisper_backend.FasterWhisperBackend.transcribe_window`).
    Each window's words go back to the utterances they were heard in (:func:`assign_words`) and revise their text
    (:class:`Revision`).

    The VAD's pauses cut speech into utterances, and each utterance's final text is decoded without most of the
    audio around it; an offline decode hears up to 30 s of it, before and after each word. A window runs once all
    of its 30 s have been heard (plus ``margin_s``, so speech the VAD has not yet reported is not in it) and no
    utterance is open (the caller's rule), or at the end of the stream (the rest, in as many windows as it takes,
    each of at most 30 s and judged by the guard on its own; the one that reaches the end of the stream keeps every
    segment, and a rest under 0.3 s is not decoded): a revision comes about 30 s after the speech at most, and the
    live partials and finals are not delayed by it. Consecutive windows never hear the same audio twice: each starts
    where the words the previous one settled end. A window that overlaps no utterance is skipped (30 s of silence:
    offline Whisper hears nothing there either). Where the language changes (``asr.language = "auto"``), the window
    ends between the two utterances and the prompt restarts: prompted in one language, Whisper translates speech in
    another. A decode that loops (fails the guard's token cap, repetition or compression checks) is decoded once
    more without the prompt; if that loops too, it revises nothing (the utterances it heard keep their final
    text), and the prompt restarts after it.

    Args:
        backend: a :class:`engine.asr.backend.WindowASRBackend` (faster-whisper), or None until the
            caller sets :attr:`backend` before the first window.
        window_s: the window, seconds (Whisper's 30 s).
        margin_s: audio past a window's end heard before it runs, seconds.
        context: text before the stream (the first prompt).
    """

    def __init__(self, backend: WindowASRBackend | None, window_s: float = 30.0, margin_s: float = 1.0,
                 context: str = ""):
        super().__init__(backend)
        self.window_s = float(window_s)
        self.margin_s = float(margin_s)
        self.seek = 0.0  # audio time the next window starts at, seconds
        self.pending: list[SpokenUtterance] = []  # utterances no settled window has passed the end of yet
        self._new: dict[int, list[Word]] = {}  # the windows' words of each pending utterance so far
        self._keep: set[int] = set()  # pending utterances a rejected window heard: they keep their final text
        self._context0 = context
        self._tokens: list[int] | None = None  # token ids decoded so far (None: encode the context first)
        self._prompt_language = ""  # the language the prompt tokens are in ("" when not known)
        # (start, end, last, language, at the end of the stream) of the next window
        self.ready: tuple[float, float, bool, str, bool] | None = None

    def add(self, u: SpokenUtterance, whole: bool = True) -> None:
        """A new final transcript (``whole`` is not used: every utterance is decoded again)."""
        if u.t_end <= self.seek:  # the windows have passed it already (audio decoded before it was reported)
            return
        self.pending.append(u)
        self._new.setdefault(u.index, [])

    @property
    def earliest(self) -> float | None:
        """The earliest audio time (seconds) a window may still decode: the caller keeps the audio from there on."""
        return self.seek

    @property
    def window(self) -> tuple[float, float] | None:
        """The audio span (seconds) the next run decodes; None when none is due."""
        return None if self.ready is None else (self.ready[0], self.ready[1])

    def due(self, now: float | None = None) -> bool:
        """Whether a window is due at the audio time ``now`` (seconds; None = the end of the stream)."""
        if self.ready is not None:
            return True
        # 30 s without an utterance: offline Whisper's window there gives nothing; the next one starts after it
        while ((now is None or now - self.seek >= self.window_s + self.margin_s) and self.pending
               and not any(u.t_start < self.seek + self.window_s for u in self.pending)):
            self.seek += self.window_s
        if not self.pending:
            return False
        if now is not None and now - self.seek < self.window_s + self.margin_s:
            return False
        # one 30 s window, as offline Whisper decodes it, also at the end of the stream: the rest is decoded window
        # by window, each judged by the guard on its own (as one decode, the rest of a long utterance outgrew one
        # window's token cap and was rejected whole); the window that holds the end of every pending utterance
        # (the end of the stream) keeps every segment it decodes
        end = self.seek + self.window_s
        last = now is None and max(u.t_end for u in self.pending) <= end
        us = [u for u in self.pending if u.t_start < end]
        language = next((u.language for u in us if u.language), "")
        for a, b in zip(us, us[1:]):
            if a.language and b.language and a.language != b.language:
                end, last = (a.t_end + b.t_start) / 2, True  # the window ends where the language changes
                break
        self.ready = (self.seek, end, last, language, now is None)
        return True

    def _prompt(self, language: str) -> list[int]:
        """The prompt token ids of a window in ``language``: the tokens decoded before it (the context's at the
        start of the stream), none after a loop or where the language changed."""
        if self._tokens is not None and language and self._prompt_language and language != self._prompt_language:
            self._tokens = None
        if self._tokens is None:
            self._tokens = []
            if self.runs == 0 and self._context0.strip():
                self._tokens = self.backend.encode_prompt(self._context0)
        self._prompt_language = language or self._prompt_language
        return self._tokens[-223:]

    def take(self, language=None) -> "_WindowJob | None":
        """The due window's decode (None: none is due); it is no longer :attr:`ready`. ``language``: a code for the
        decode (None: the language of its utterances; a callable is not used here)."""
        if self.ready is None:
            return None
        start, end, last, lang, eos = self.ready
        self.ready = None
        if isinstance(language, str) and language:
            lang = language
        return _WindowJob((start, end), self._prompt(lang), lang, last, end if last else end + self.margin_s, eos)

    def decode(self, job: "_WindowJob", audio: np.ndarray, t0: float) -> BackendResult | None:
        """The backend's decode of ``job``'s window from ``audio`` (float32 16 kHz starting at the audio time ``t0``,
        seconds); None when that audio lacks most of it. A window before the end of the stream is given the audio
        after it too (up to ``margin_s``), as an offline decode computes a window's features from the whole
        recording: cut at the window's end, the last frames differ and Whisper may settle fewer segments. At the end
        of the stream, a window the audio ends in is the last (every segment kept), and one with less than 0.3 s of
        audio left gives no words (a window of nearly all padding: not a failed decode). A window that loops with
        its prompt is decoded again without it (``prompt_reset`` in the stats when that one is kept). Touches no
        state but the counters."""
        t_audio = t0 + len(audio) / SAMPLE_RATE
        if job.eos and t_audio <= job.window[1]:  # the stream ends inside the window: no window comes after it
            job.last = True
        w0 = job.window[0]
        a, b = max(w0, t0), min(job.window[1], t_audio)
        job.window = (a, b)
        upto = b if job.last else min(t_audio, b + self.margin_s)
        seg = np.asarray(audio[int(round((a - t0) * SAMPLE_RATE)): int(round((upto - t0) * SAMPLE_RATE))],
                         np.float32)
        self.last_compute_s = 0.0
        if (b - a) < 0.3:
            if job.eos and job.last and a <= w0 + 1e-6:
                # the end of the stream is under 0.3 s after the seek position: nothing is left to decode (Whisper
                # on a window that is nearly all padding writes text the audio does not hold); the utterances keep
                # the words the windows before gave them
                return BackendResult([], [], {"seek_s": b - a, "prompt_tokens": [], "guard": "", "tokens": 0})
            return None
        t_start = time.perf_counter()
        res = self.backend.transcribe_window(seg, job.prompt_tokens, job.language or None, last=job.last)
        if res.stats.get("guard") in LOOPED and job.prompt_tokens:
            # conditioned on the text before it, Whisper may write that text again instead of the audio (offline
            # Whisper stops conditioning on it after a window that needed its fallback): the window once more
            # without the prompt, kept if it passes the guard
            retry = self.backend.transcribe_window(seg, [], job.language or None, last=job.last)
            if retry.stats.get("guard") not in LOOPED:
                res = retry
                res.stats["prompt_reset"] = True
        job.compute_s = self.last_compute_s = time.perf_counter() - t_start
        self.runs += 1
        return res

    def apply(self, job: "_WindowJob", res: BackendResult | None) -> Revision | None:
        """Give the window's words to the utterances it heard, settle those it passed the end of, and move the seek
        position on. Returns the settled utterances whose text changed (None: none)."""
        a, end = job.window
        rejected = res is None or res.stats.get("guard") in LOOPED
        seek = end if (res is None or job.last) else min(end, a + float(res.stats.get("seek_s", end - a)))
        seek = max(seek, self.seek + 0.1)  # always forward
        us = [u for u in self.pending if u.t_start < seek]
        lang = ((res.stats.get("language") if res is not None else None) or job.language or "")
        if rejected:
            self._tokens = None  # the prompt restarts after a loop
            self._keep.update(u.index for u in us)  # these utterances keep their text
        else:
            words = [Word(w.start + a, w.end + a, w.text) for w in res.words]
            bounds = [(u.t_end + v.t_start) / 2 for u, v in zip(us, us[1:])]
            if us:
                for w, k in zip(words, assign_words([u.words for u in us], words, bounds)):
                    self._new[us[k].index].append(w)
            before = [] if res.stats.get("prompt_reset") else (self._tokens or [])
            self._tokens = before + list(res.stats.get("prompt_tokens", []))
            self._prompt_language = lang or self._prompt_language
        self.seek = seek
        changed = []
        for u in [u for u in self.pending if u.t_end <= seek or job.last and u.t_start < seek]:
            ws = self._new.pop(u.index, [])
            if u.index in self._keep:
                self._keep.discard(u.index)
                ws = list(u.words)
            if " ".join(join_words(ws).split()) != " ".join(u.text.split()):
                changed.append((u.index, join_words(ws), tuple(ws)))
                self.revised += 1
            u.words = ws
            u.language = lang or u.language
            self.pending.remove(u)
        if rejected and res is not None:
            self.dropped += 1
        if not changed:
            return None
        stats = {k: v for k, v in res.stats.items() if k != "prompt_tokens"} if res is not None else {}
        # an utterance that went on past a window has words from the window before too
        start = min([job.window[0]] + [w.start for _, _, ws in changed for w in ws])
        return Revision(tuple(changed), (start, job.window[1]), lang, job.compute_s, stats)




@dataclass
class _WindowJob:
    """One :class:`OfflineWindowPass` decode: the audio span it settles (seconds), prompt token ids, language,
    whether it is the end of the stream or of a language (every segment kept), the end of the audio it hears;
    ``compute_s`` once decoded."""

    window: tuple[float, float]
    prompt_tokens: list[int]
    language: str
    last: bool
    audio_end: float  # the decode hears the audio up to here (seconds): past the window's end unless ``last``
    eos: bool = False  # due at the end of the stream: the audio given is all there is
    compute_s: float = 0.0
