"""The streaming pipeline: capture → VAD → streaming ASR, and the consumers (assist, caption).

Threads:
    * capture: iterates the :class:`audio.sources.AudioSource`, runs the VAD on each block and enqueues blocks and
      speech boundaries. It does nothing slow, so the microphone is never blocked by the engines.
    * ASR (``StreamingTranscriber.run``): drains everything queued, then re-decodes the current utterance if at
      least ``min_chunk_s`` of new audio arrived (computation-aware, as whisper_streaming); at end of speech it
      finishes the utterance and emits :class:`FinalTranscript`.
    * revise (``asr.revise_max_s`` > 0, a real-time source): the second pass
      (:class:`engine.asr.streaming.SecondPass`) re-decodes consecutive finished utterances together, between
      utterances while the process is otherwise idle, on its own model instance at a lower OS priority (nice +10),
      so the live decodes are never queued behind it; it emits :class:`RevisedTranscript` for the utterances whose
      text changed. A file read as fast as it is consumed runs it on the ASR thread instead, at once (deterministic).
Consumers receive events through a callback; assist and caption run their LLM work on their own threads.

Queue policy (every queue is bounded):
    * audio (capture → ASR, :class:`AudioQueue`): holds at most ``max_backlog_s`` seconds of audio (default 600 s).
      Audio is never dropped: when ASR falls behind a real-time source it decodes everything queued in one pass
      (it catches up) and emits :class:`Backlog` events when the delay passes ``lag_warn_s`` and when it is back
      under half of it. A full queue makes the capture thread wait, which paces a file source; the microphone's
      own queue (``audio.sources.MicSource``) has the same capacity and reports what it could not keep.
    * events (engine → a front end, :class:`EventQueue`): stale partial transcripts may be dropped when the
      consumer falls behind (a newer partial supersedes them); final transcripts, answers, captions and errors
      are never dropped (the producer waits for room instead).
"""

from __future__ import annotations

import collections
import os
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from audio.sources import AudioBlock, AudioSource
from audio.vad import StreamingVAD

from engine.core.cpu import ASR
from engine.core.events import (CommittedWords, Error, FinalTranscript, PartialTranscript, RevisedTranscript,
                                SpeechEnded, SpeechStarted, TurnDecision)
from engine.asr.streaming import (ASRBackend, OfflineWindowPass, OnlineASRProcessor, SecondPass, SessionLanguage,
                                  SpokenUtterance, join_words)

SAMPLE_RATE = 16000


def _malloc_trim():
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc (macOS, Windows, musl): nothing to do
        return None


_TRIM = _malloc_trim()


def release_memory() -> None:
    """Give freed heap pages back to the OS (glibc ``malloc_trim``), called once per utterance: encoder windows of
    changing length otherwise leave the allocator's arenas fragmented and the process grows over a long session
    (bench/results/soak.json). A no-op elsewhere."""
    if _TRIM is not None:
        _TRIM(0)


@dataclass(frozen=True)
class Backlog:
    """ASR is ``behind_s`` seconds behind a real-time source (``caught_up=False``), or is back in step
    (``caught_up=True``). Nothing was dropped: the queued audio is decoded in one pass."""

    behind_s: float
    caught_up: bool
    wall: float = field(default_factory=time.monotonic)


class _WaitQueue:
    """A deque guarded by one condition variable: :meth:`get` waits for an item, every change wakes the waiters.
    Subclasses decide what fits (their ``put``) and what leaving means (:meth:`_pop`)."""

    def __init__(self) -> None:
        self._items: collections.deque = collections.deque()
        self._cv = threading.Condition()

    def __len__(self) -> int:
        with self._cv:
            return len(self._items)

    def get(self, timeout: float | None = None):
        """The oldest item. Raises queue.Empty after ``timeout`` s without one."""
        with self._cv:
            if not self._cv.wait_for(lambda: self._items, timeout):
                raise queue.Empty
            return self._pop()

    def get_nowait(self):
        """The oldest item. Raises queue.Empty when there is none."""
        with self._cv:
            if not self._items:
                raise queue.Empty
            return self._pop()

    def _pop(self):  # called with the lock held
        item = self._items.popleft()
        self._cv.notify_all()
        return item


class AudioQueue(_WaitQueue):
    """Bounded FIFO between the capture and the ASR threads, measured in seconds of audio.

    ``put`` waits while the queue holds ``capacity_s`` seconds (items without audio, e.g. VAD boundaries, always
    fit); ``get`` waits for an item. Thread-safe.
    """

    def __init__(self, capacity_s: float = 600.0):
        super().__init__()
        self.capacity_s = float(capacity_s)
        self._seconds = 0.0

    @property
    def seconds(self) -> float:
        """Audio waiting in the queue, seconds."""
        with self._cv:
            return self._seconds

    def put(self, item, seconds: float = 0.0, timeout: float | None = None) -> bool:
        """Append ``item`` holding ``seconds`` of audio. Returns False if it did not fit within ``timeout`` s."""
        with self._cv:
            if seconds > 0 and not self._cv.wait_for(lambda: self._seconds + seconds <= self.capacity_s
                                                     or not self._items, timeout):
                return False
            self._items.append((item, seconds))
            self._seconds += seconds
            self._cv.notify_all()
            return True

    def _pop(self):
        item, seconds = super()._pop()
        self._seconds = max(0.0, self._seconds - seconds)
        return item


class EventQueue(_WaitQueue):
    """Bounded queue of engine events from worker threads to one consumer (the CLI's printer, a GUI bridge).

    Policy: when ``maxsize`` events wait, the oldest waiting event that ``droppable(event)`` accepts (by default a
    :class:`engine.core.events.PartialTranscript`: a newer partial supersedes it) is dropped to make room; an event that
    is not droppable waits for room (finals, answers, captions and errors are never lost). After :meth:`close`
    (the consumer has stopped) ``put`` never waits and returns False.
    """

    def __init__(self, maxsize: int = 256, droppable: Callable[[object], bool] | None = None):
        if maxsize < 1:
            raise ValueError(f"maxsize must be >= 1, got {maxsize}")
        super().__init__()
        self.maxsize = maxsize
        self.droppable = droppable or (lambda ev: isinstance(ev, PartialTranscript))
        self.dropped = 0  # events dropped by the policy
        self._closed = False

    def put(self, ev) -> bool:
        """Enqueue ``ev`` by the policy above. Returns False when ``ev`` itself was dropped or the queue is closed."""
        with self._cv:
            while len(self._items) >= self.maxsize and not self._closed:
                victim = next((x for x in self._items if self.droppable(x)), None)
                if victim is not None:
                    self._items.remove(victim)
                    self.dropped += 1
                    break
                if self.droppable(ev):
                    self.dropped += 1
                    return False
                self._cv.wait(0.1)
            if self._closed:
                return False
            self._items.append(ev)
            self._cv.notify_all()
            return True

    def close(self) -> None:
        """The consumer is gone: wake and release every waiting producer."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()


@dataclass
class UtteranceRecord:
    """Timing of one utterance (``*_wall`` are time.monotonic seconds)."""

    index: int
    t_start: float
    t_end: float | None = None
    eos_wall: float | None = None  # when the audio at the end of speech was available
    vad_end_wall: float | None = None  # when the VAD decided the utterance ended
    final_wall: float | None = None
    text: str = ""
    updates: int = 0
    asr_compute_s: float = 0.0
    first_partial_wall: float | None = None
    language: str = ""  # ISO 639-1 code of the final decode ("" when the backend does not say)
    revised_text: str | None = None  # the second pass's text, when it changed the final's


@dataclass
class TranscriberStats:
    """Totals of one stream; ``max_backlog_s``: the longest ASR delay behind a real-time source (s);
    ``dropped_audio_s``: audio the source could not keep (s; only a microphone more than its queue behind)."""

    audio_s: float = 0.0
    asr_compute_s: float = 0.0
    updates: int = 0
    updates_abandoned: int = 0  # streaming updates stopped after their encoder pass in a silence (not in updates)
    utterances: list[UtteranceRecord] = field(default_factory=list)
    started_wall: float = 0.0
    ended_wall: float = 0.0
    max_backlog_s: float = 0.0
    dropped_audio_s: float = 0.0
    revisions: int = 0  # RevisedTranscript events
    revise_compute_s: float = 0.0  # second-pass decodes (counted in asr_compute_s too), seconds

    @property
    def rtf(self) -> float:
        """ASR compute seconds per second of audio."""
        return self.asr_compute_s / self.audio_s if self.audio_s else 0.0


class StreamingTranscriber:
    """Capture + VAD + LocalAgreement-2 streaming ASR over one source.

    Args:
        source: audio source (file, microphone).
        backend: ASR backend (plain AR or a speculative decoder).
        vad: a :class:`audio.vad.StreamingVAD`, or None to treat the whole stream as one utterance.
        emit: receives SpeechStarted, PartialTranscript, CommittedWords, SpeechEnded, FinalTranscript, Backlog,
            Error.
        min_chunk_s: minimum new audio per re-decode, seconds.
        max_backlog_s: capacity of the capture → ASR queue, seconds of audio.
        lag_warn_s: ASR delay behind a real-time source that emits :class:`Backlog`, seconds.
        context_prefix: the acoustic context's text is the forced prefix of the decodes that hear its audio
            (:class:`engine.asr.streaming.OnlineASRProcessor`); False = its words are dropped by time and n-gram.
        align_final: final decodes that hear committed words keep the words after the committed tail's text
            (:meth:`engine.asr.streaming.HypothesisBuffer.insert` ``align_text``); False = by time and n-gram.
        context_repeat_words: a final decoded with acoustic context whose words open with at least this many of
            the context's words in a row is decoded again on its own audio (``OnlineASRProcessor``); 0 = off.
        partial_retry: the decodes of streaming updates that fail the guards are redone on the padded window;
            False = not (``OnlineASRProcessor``).
        final_retry: the decodes that may give an utterance's final text (at a VAD pause, at the end of speech) are
            redone on the padded window when they fail the guards; False = never (``OnlineASRProcessor``).
        hold_at_silence: on a real-time source, a streaming update that falls due while its audio ends in a silence
            inside the utterance waits for speech to resume or for the VAD's "pause", whose decode up to the end of
            speech it would only delay (the final is then ready when the VAD confirms the end); False = updates run
            as due.
        yield_to_pause: with ``hold_at_silence``, an update waits while the VAD hears any silence inside the
            utterance (not only one its audio ends in), and a streaming update already running is abandoned after
            its encoder pass when the VAD hears a silence by then (the pause's decode supersedes it); False = only
            an update whose audio ends in the silence waits.
        session_language: ``asr.language = "auto"``: the session's language identification with hysteresis
            (:class:`engine.asr.streaming.SessionLanguage`); None = the backend's fixed language.
        revise_max_s: > 0: a second pass re-decodes finished utterances and emits :class:`RevisedTranscript`;
            0 = off. With ``revise_mode`` "chains", the longest chain of consecutive utterances decoded in one window
            (:class:`engine.asr.streaming.SecondPass`), seconds.
        revise_mode: "offline": the stream re-decoded in 30 s windows as offline Whisper moves through a recording
            (:class:`engine.asr.streaming.OfflineWindowPass`; needs a ``transcribe_window`` backend); "chains":
            chains of utterances a pause completes (:class:`engine.asr.streaming.SecondPass`).
        revise_gap_s: "chains": longest pause between two utterances the second pass decodes together, seconds.
        revise_context_s: "chains": acoustic context a second-pass window cut by its length gets from the previous
            one, seconds.
        revise_idle_cores: the second pass runs between utterances once the process used less CPU than this many
            cores over 0.3 s (an answer or a caption being computed is not slowed by it); a source that is not
            real time (a file read as fast as it is consumed) never waits.
        revise_backend: the second pass's decoder, or a function that builds it (called on the thread that runs
            the second pass, so a model's worker threads inherit its priority); default ``backend``. The runtime
            gives greedy AR on the padded 30 s window, as an offline decode, on a model instance of its own
            (:meth:`engine.runtime.Runtime.revise_backend`).
    """

    def __init__(self, source: AudioSource, backend: ASRBackend, vad: StreamingVAD | None,
                 emit: Callable[[object], None], min_chunk_s: float = 1.0, buffer_trim_s: float = 15.0,
                 max_utterance_s: float = 60.0, final_full: bool = True, max_backlog_s: float = 600.0,
                 lag_warn_s: float = 3.0, pre_roll_s: float = 0.3, context_gap_s: float = 0.0,
                 context_prefix: bool = False, align_final: bool = False, partial_retry: bool = True,
                 final_retry: bool = True, hold_at_silence: bool = False,
                 final_piece_s: float = 0.0, trim_latest: bool = True, trim_overlap_s: float = 0.0,
                 session_language: SessionLanguage | None = None, revise_max_s: float = 0.0,
                 revise_gap_s: float = 2.0, revise_idle_cores: float = 0.5, revise_context_s: float = 8.0,
                 revise_backend: ASRBackend | Callable[[], ASRBackend] | None = None, revise_mode: str = "chains",
                 context_repeat_words: int = 0, yield_to_pause: bool = False):
        self.source = source
        self.session_language = session_language
        if revise_mode not in ("offline", "chains"):
            raise ValueError(f"revise_mode must be 'offline' or 'chains', not {revise_mode!r}")
        self.second = None if revise_max_s <= 0 else (
            OfflineWindowPass(None) if revise_mode == "offline"
            else SecondPass(None, revise_max_s, revise_gap_s, left_s=revise_context_s))
        self._revise_backend = revise_backend or backend
        self.revise_idle_cores = revise_idle_cores
        self._history: collections.deque[AudioBlock] = collections.deque()  # audio the second pass may decode
        self._cpu_mark: tuple[float, float] | None = None
        self._rev = threading.Condition()  # guards second, _history, _speaking, _audio_t, _eof (revise thread)
        self._speaking = False  # an utterance is open
        self._audio_t = 0.0  # audio time of the latest block, seconds
        self._eof = False
        self.texts: dict[int, str] = {}  # each utterance's text, the second pass's revisions applied
        self.trim_overlap_s = trim_overlap_s  # audio before a trim's cut kept in the buffer, seconds
        self.final_full = final_full
        self.trim_latest = trim_latest
        self.final_piece_s = final_piece_s
        self.backend = backend
        self.vad = vad
        self.emit = emit
        self.min_chunk_s = min_chunk_s
        self.buffer_trim_s = buffer_trim_s
        self.max_utterance_s = max_utterance_s
        self.context_gap_s = context_gap_s  # keep the previous utterance as acoustic context after a shorter pause
        self.context_prefix = context_prefix  # ... and its text as the decodes' forced prefix
        self.align_final = align_final  # final decodes drop the committed words by their text where they hold them
        self.context_repeat_words = context_repeat_words  # a final that writes the context again: own audio
        self.partial_retry = partial_retry  # a partial's failed decode is redone on the padded window too
        self.final_retry = final_retry  # ... and a final text's
        self.hold_at_silence = hold_at_silence  # no update during a silence that may be the end of speech
        self.yield_to_pause = yield_to_pause  # ... any silence the VAD hears; a running update is abandoned in one
        self.pre_roll_s = pre_roll_s  # audio before the VAD start (and its pad) decoded too, seconds
        self._last_words: list = []
        self.q = AudioQueue(max_backlog_s)
        self.lag_warn_s = lag_warn_s
        self.realtime = bool(getattr(source, "realtime", True))  # a file fed "as fast as consumed" never lags
        self.stats = TranscriberStats()
        self.transcript: list[str] = []  # final text of each utterance, in order (never lost)
        self._stop = threading.Event()
        self.capture_error: Exception | None = None

    # -- capture thread ---------------------------------------------------------------------------------------
    def _put_audio(self, block: AudioBlock) -> None:
        seconds = len(block.samples) / SAMPLE_RATE
        while not self.q.put(("audio", block), seconds, timeout=0.1):
            if self._stop.is_set():
                return

    def _capture(self) -> None:
        dropped = 0.0
        try:
            for block in self.source:
                if self._stop.is_set():
                    break
                self._put_audio(block)
                lost = float(getattr(self.source, "dropped_s", 0.0))
                if lost > dropped:
                    dropped = self.stats.dropped_audio_s = lost
                    self.q.put(("lost", f"{lost:.1f} s of microphone audio could not be kept (speech recognition "
                                        "is too far behind)"))
                events = self.vad(block.samples) if self.vad is not None else []
                for ev in events:
                    self.q.put((ev.kind, ev.t, block, getattr(ev, "p", None)))
            if self.vad is not None:
                for ev in self.vad.flush():
                    self.q.put((ev.kind, ev.t, None))
        except Exception as e:  # the device vanished, a file broke mid-way: report, finish what we have
            self.capture_error = e
            self.q.put(("error", e))
        self.q.put(("eof",))

    def stop(self) -> None:
        self._stop.set()
        self.source.close()

    # -- ASR loop ---------------------------------------------------------------------------------------------
    def run(self) -> TranscriberStats:
        """Process the whole source (blocks until it ends or :meth:`stop`). Returns the stats."""
        self.stats.started_wall = time.monotonic()
        cap = threading.Thread(target=self._capture, name="capture", daemon=True)
        cap.start()
        ring: list[AudioBlock] = []  # recent audio for the pre-roll before a VAD start
        proc: OnlineASRProcessor | None = None
        rec: UtteranceRecord | None = None
        pending_new = 0.0
        utt_index = -1
        last_wall = time.monotonic()
        done = False
        pause_at: float | None = None
        if self.vad is None:
            utt_index, proc, rec = self._start(0, 0.0, [])
        lagging = False
        reviser = None
        if self.second is not None and self.realtime:
            reviser = threading.Thread(target=self._revise_worker, name="revise", daemon=True)
            reviser.start()
        while not done:
            items = [self.q.get()]
            while True:
                try:
                    items.append(self.q.get_nowait())
                except queue.Empty:
                    break
            if self.realtime:
                oldest = next((it[1].wall for it in items if it[0] == "audio"), None)
                if oldest is not None:
                    lag = time.monotonic() - oldest
                    self.stats.max_backlog_s = max(self.stats.max_backlog_s, lag)
                    if not lagging and lag > self.lag_warn_s:
                        lagging = True
                        self.emit(Backlog(lag, caught_up=False))
                    elif lagging and lag < self.lag_warn_s / 2:
                        lagging = False
                        self.emit(Backlog(lag, caught_up=True))
            for item in items:
                kind = item[0]
                if kind == "audio":
                    block: AudioBlock = item[1]
                    last_wall = block.wall
                    self.stats.audio_s = block.t_end
                    ring.append(block)
                    while ring and ring[-1].t_end - ring[0].t_start > self.buffer_trim_s + 3.0:
                        ring.pop(0)
                    if self.second is not None:
                        with self._rev:
                            self._keep_history(block, rec)
                    if proc is not None:
                        proc.insert_audio_chunk(block.samples)
                        pending_new += len(block.samples) / SAMPLE_RATE
                elif kind == "start" and proc is None:
                    if not self.realtime and self.second is not None:
                        while self.second.due(item[1]):  # a chain the silence before this start completed
                            self._revise()
                    utt_index, proc, rec = self._start(utt_index + 1, item[1], ring)
                    pending_new = proc.audio_end - rec.t_start
                elif kind == "turn" and rec is not None and len(item) > 3 and item[3] is not None:
                    self.emit(TurnDecision(rec.index, item[1], float(item[3])))
                elif kind == "pause" and proc is not None:
                    pause_at = item[1]  # a possible end of speech: decode up to it now, the final may be ready
                elif kind == "end" and proc is not None:
                    blk = item[2]
                    t_end = item[1]
                    rec.t_end = t_end
                    rec.vad_end_wall = time.monotonic() if blk is None else blk.wall
                    rec.eos_wall = rec.vad_end_wall if blk is None else blk.wall - max(0.0, blk.t_end - t_end)
                    self.emit(SpeechEnded(rec.index, t_end, rec.eos_wall))
                    self._finish(proc, rec, t_end)
                    proc, rec, pending_new, pause_at = None, None, 0.0, None
                    if not self.realtime and self.second is not None and self.second.ready is not None:
                        self._revise()  # a file read as fast as it is consumed: now, before the next utterance
                elif kind == "error":
                    self.emit(Error("audio", f"audio input failed: {item[1]}"))
                elif kind == "lost":
                    self.emit(Error("audio", item[1]))
                elif kind == "eof":
                    done = True
            if done and proc is not None:
                rec.t_end = proc.audio_end
                rec.eos_wall = rec.vad_end_wall = last_wall
                self.emit(SpeechEnded(rec.index, rec.t_end, rec.eos_wall))
                self._finish(proc, rec)
                proc = None
            if done and self.second is not None and not self.realtime and not self._stop.is_set():
                while self.second.due(None):  # the end of the stream completes the last chain
                    self._revise()
            if proc is not None and pause_at is not None:
                if (proc.decoded_until < pause_at - 1e-3 and proc.audio_end >= pause_at - 1e-3
                        and not proc.mostly_doubtful):  # a doubtful utterance keeps no new words at its end
                    pending_new = 0.0
                    self._update(proc, rec, until=pause_at)
                pause_at = None
            if proc is not None and pending_new >= self.min_chunk_s and not self._in_silence(proc.audio_end):
                pending_new = 0.0
                if not self._update(proc, rec):
                    pending_new = self.min_chunk_s  # abandoned in a silence: due again once speech resumes
                if proc.audio_end - rec.t_start > self.max_utterance_s:
                    # a run-on "utterance" (no pause): close it so the answer/caption paths are not starved, at a
                    # word boundary; its audio after the cut (from its buffer) starts the next utterance
                    cut = proc.run_on_cut()
                    rest = proc.audio[max(0, int(round((cut - proc.buffer_time_offset) * SAMPLE_RATE))):].copy()
                    rec.t_end = cut
                    rec.eos_wall = rec.vad_end_wall = time.monotonic()
                    self.emit(SpeechEnded(rec.index, rec.t_end, rec.eos_wall))
                    self._finish(proc, rec, cut, cut=True)
                    utt_index, proc, rec = self._start(utt_index + 1, cut, [], carry=rest)
                    pending_new = proc.audio_end - cut
        cap.join(timeout=1.0)
        if reviser is not None:
            with self._rev:
                self._eof = True
                self._rev.notify_all()
            reviser.join()  # after stop() it runs nothing more; at the end of a source it decodes what is due
        self.stats.ended_wall = time.monotonic()
        return self.stats

    def _in_silence(self, audio_end: float | None = None) -> bool:
        """``hold_at_silence`` on a real-time source: whether an update due now waits. It does while the audio this
        thread has (up to ``audio_end``, seconds) ends in a silence inside the utterance that the VAD (level with or
        ahead of this thread) still hears, and with ``yield_to_pause`` while the VAD hears any silence inside the
        utterance (this thread's audio may end just before it: the thread lags the capture while it decodes). An
        update decoded now would be superseded within the VAD's pause (0.2 s) by the pause's decode up to the end
        of speech, which would wait for it, and so would the final (an update of several seconds of audio takes
        0.3 to 1 s on a small CPU). Resumed speech, or the pause itself, lets the decode run. ``audio_end`` None:
        any silence (the abandonment check of a running update, :meth:`_update`). A source that is not real time
        is read ahead of this thread, so the VAD's state says nothing about its audio: never."""
        if not (self.hold_at_silence and self.realtime and self.vad is not None):
            return False
        since = self.vad.silence_since
        return since is not None and (self.yield_to_pause or audio_end is None or since <= audio_end + 1e-3)

    def _start(self, index: int, t_start: float, ring: list[AudioBlock], carry: np.ndarray | None = None):
        """Open utterance ``index`` at the audio time ``t_start`` (seconds) with its pre-roll (or acoustic context)
        from ``ring``; ``carry``: the rest of a run-on utterance cut at ``t_start`` (its audio from there on, float32
        16 kHz), which starts this one instead."""
        # Acoustic context: when the previous utterance ended moments ago, its audio stays at the head of the
        # buffer (its words count as committed), so Whisper decodes the new words in their long-form context. Not
        # under asr.language = "auto": the language of the window would be the previous utterance's, and a switch
        # of language after a short pause would be decoded in the old one.
        prev = self.stats.utterances[-1] if self.stats.utterances else None
        ctx_words: list = []
        t_buf = t_start
        if (carry is None and prev is not None and prev.t_end is not None and self.session_language is None
                and t_start - prev.t_end < self.context_gap_s
                and t_start - prev.t_start < self.buffer_trim_s and ring and ring[0].t_start <= prev.t_start):
            t_buf = prev.t_start
            ctx_words = list(self._last_words)
        elif self.pre_roll_s > 0 and ring:
            # soft onsets start before the VAD is sure: decode a little earlier, never into the previous utterance
            floor = max(ring[0].t_start, prev.t_end if prev is not None and prev.t_end is not None else 0.0)
            t_buf = max(floor, t_start - self.pre_roll_s)
        earlier = [t for t in self.texts.values() if t]  # the second pass's revisions are the better context
        earlier = earlier[:-1] if ctx_words else earlier
        context = " ".join(earlier)[-200:]
        proc = OnlineASRProcessor(self.backend, self.buffer_trim_s, context=context + " " if context else "",
                                  t_offset=t_buf, context_words=ctx_words,
                                  committed_until=ctx_words[-1].end if ctx_words else None,
                                  final_full=self.final_full, final_piece_s=self.final_piece_s,
                                  trim_latest=self.trim_latest, trim_overlap_s=self.trim_overlap_s,
                                  session_language=self.session_language, context_prefix=self.context_prefix,
                                  align_final=self.align_final, speech_start=t_start,
                                  partial_retry=self.partial_retry, final_retry=self.final_retry,
                                  context_repeat_words=self.context_repeat_words)
        t_start_utt, t_start = t_start, t_buf
        if carry is not None:
            proc.insert_audio_chunk(carry)
        for b in ring:  # pre-roll: audio from t_start on, already captured
            if b.t_end <= t_start:
                continue
            skip = max(0, int(round((t_start - b.t_start) * SAMPLE_RATE)))
            proc.insert_audio_chunk(b.samples[skip:])
        rec = UtteranceRecord(index=index, t_start=t_start_utt)
        self.stats.utterances.append(rec)
        if self.second is not None:
            with self._rev:
                self._speaking = True
        self.emit(SpeechStarted(index, t_start_utt))
        return index, proc, rec

    def _update(self, proc: OnlineASRProcessor, rec: UtteranceRecord, until: float | None = None) -> bool:
        """Re-decode ``proc``'s buffer (up to ``until``, audio time in seconds: the VAD's pause) and emit what it
        gives. A streaming update (``until`` None) under ``yield_to_pause`` is abandoned after its encoder pass
        when the VAD hears a silence by then (:meth:`_in_silence`). Returns False when it was abandoned."""
        n_before = len(proc.updates)
        abandon = self._in_silence if until is None and self.yield_to_pause else None
        try:
            with ASR.decoding():  # speculation waits for it (engine.core.cpu)
                new, tentative = proc.process_iter(until, abandon=abandon)
        except Exception as e:
            self.emit(Error("asr", f"transcription update failed: {type(e).__name__}: {e}"))
            return True
        done = proc.updates[n_before:]  # the update's decode, and the decode of a finished piece if one was due
        if not done:
            return True
        compute_s = sum(u.compute_s for u in done)
        rec.asr_compute_s += compute_s
        self.stats.asr_compute_s += compute_s
        if done[-1].stats.get("abandoned"):  # its encoder pass is compute spent; no text came of it
            self.stats.updates_abandoned += 1
            return False
        rec.updates += 1
        self.stats.updates += 1
        if new:
            self.emit(CommittedWords(rec.index, tuple(new)))
        if rec.first_partial_wall is None:
            rec.first_partial_wall = time.monotonic()
        self.emit(PartialTranscript(rec.index, join_words(proc.committed) + " ", join_words(tentative),
                                    proc.audio_end, compute_s, hypothesis=proc.hypothesis, language=proc.language))
        return True

    def _finish(self, proc: OnlineASRProcessor, rec: UtteranceRecord, speech_end: float | None = None,
                cut: bool = False) -> None:
        n_before = len(proc.updates)
        try:
            with ASR.decoding():
                proc.finish(speech_end, cut=cut)
        except Exception as e:
            self.emit(Error("asr", f"final transcription failed: {type(e).__name__}: {e}"))
        for u in proc.updates[n_before:]:
            rec.asr_compute_s += u.compute_s
            self.stats.asr_compute_s += u.compute_s
            self.stats.updates += 1
        rec.text = proc.text
        rec.language = proc.language
        self._last_words = list(proc.committed)
        release_memory()
        rec.final_wall = time.monotonic()
        if rec.text:
            self.transcript.append(rec.text)
        self.texts[rec.index] = rec.text
        self.emit(FinalTranscript(rec.index, rec.text, tuple(proc.committed), rec.t_start, rec.t_end or proc.audio_end,
                                  rec.final_wall, language=proc.language))
        if self.session_language is not None:
            self.session_language.end_utterance(proc.language or None, proc.language_probs,
                                                proc.language_whisper_probs)
        if self.second is not None:
            with self._rev:
                self.second.add(SpokenUtterance(rec.index, rec.t_start, rec.t_end or proc.audio_end,
                                                list(proc.committed), proc.language), whole=proc.decoded_whole)
                self._speaking = False
                self._cpu_mark = None  # idle is measured from now on
                self._rev.notify_all()

    # -- second pass ------------------------------------------------------------------------------------------
    def _keep_history(self, block: AudioBlock, rec: UtteranceRecord | None) -> None:
        """Keep ``block`` for the second pass, and the audio from the start of its chain (or of the utterance being
        spoken) on; at most 120 s."""
        self._history.append(block)
        self._audio_t = block.t_end
        keep_from = self.second.earliest
        if keep_from is None:
            keep_from = rec.t_start - 1.0 if rec is not None else block.t_end - 1.0
        keep_from = max(keep_from - 1.0, block.t_end - 120.0)
        while self._history and self._history[0].t_end < keep_from:
            self._history.popleft()

    def _idle(self) -> bool:
        """Whether the second pass may run now: when the process used less than ``revise_idle_cores`` of CPU over
        the last 0.3 s or more (measured from the revise thread, which is itself idle then)."""
        now, cpu = time.monotonic(), time.process_time()
        if self._cpu_mark is None or now - self._cpu_mark[0] > 2.0:
            self._cpu_mark = (now, cpu)
            return False
        t0, c0 = self._cpu_mark
        if now - t0 < 0.3:
            return False
        self._cpu_mark = (now, cpu)
        return (cpu - c0) / (now - t0) < self.revise_idle_cores

    def _backend_for_second_pass(self) -> ASRBackend:
        if self.second.backend is None:
            b = self._revise_backend
            self.second.backend = b if hasattr(b, "transcribe") else b()
        return self.second.backend

    def _revise(self) -> None:
        """One second-pass run on the ASR thread (a source read as fast as it is consumed)."""
        self._backend_for_second_pass()
        with self._rev:
            job = self.second.take()
            audio, t0 = self._window_audio(job)
        if job is None:
            return
        self._decode_and_apply(job, audio, t0)

    def _decode_and_apply(self, job, audio: np.ndarray, t0: float) -> None:
        """Decode one second-pass job (outside the lock: it takes a decode's time) and apply its text; a failed
        decode changes no text and is reported as an :class:`Error` event."""
        try:
            res = self.second.decode(job, audio, t0)
        except Exception as e:
            res = None
            self.emit(Error("asr", f"transcript revision failed: {type(e).__name__}: {e}"))
        with self._rev:
            rev = self.second.apply(job, res)
        self._revised(job, rev)

    def _window_audio(self, job) -> tuple[np.ndarray, float]:
        """The kept audio of ``job``'s window (float32 16 kHz) and its start (audio time, seconds); called with the
        lock held."""
        if job is None:
            return np.zeros(0, np.float32), 0.0
        end = getattr(job, "audio_end", job.window[1])  # an offline window also hears the audio after it
        blocks = [b for b in self._history if b.t_end > job.window[0] and b.t_start < end]
        if not blocks:
            return np.zeros(0, np.float32), job.window[0]
        audio, t0 = np.concatenate([b.samples for b in blocks]), blocks[0].t_start
        recorded = getattr(self.source, "recorded_s", None)  # a file's end: not the silence added after it
        if recorded is not None and t0 + len(audio) / SAMPLE_RATE > recorded:
            audio = audio[: max(0, int(round((recorded - t0) * SAMPLE_RATE)))]
        return audio, t0

    def _revise_worker(self) -> None:
        """The revise thread (a real-time source): waits until a decode is due (a chain is complete, or an offline
        window's audio has been heard), no utterance is open and the process is idle, then decodes it at nice +10 on
        the second pass's own decoder; at the end of the source it decodes what is still due (not after
        :meth:`stop`)."""
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
        except (AttributeError, OSError):
            pass
        try:
            self._backend_for_second_pass()  # built here: its model's threads inherit this thread's priority
        except Exception as e:
            self.emit(Error("asr", f"transcript revision unavailable: {type(e).__name__}: {e}"))
            return
        while True:
            with self._rev:
                eof = self._eof
                if eof and self._stop.is_set():
                    return  # stopped: the session ends now, with the text it has
                due = self.second.due(None) if eof else (not self._speaking and self.second.due(self._audio_t))
                if not due:
                    if eof:
                        return
                    self._rev.wait(0.1)
                    continue
            if not eof and not self._idle():
                time.sleep(0.05)
                continue
            with self._rev:
                if self._speaking and not self._eof:
                    continue  # speech started meanwhile: the chain waits
                job = self.second.take()
                audio, t0 = self._window_audio(job)
            if job is None:
                continue
            self._decode_and_apply(job, audio, t0)
            self._cpu_mark = None

    def _revised(self, job, rev) -> None:
        """Account for a second-pass run and emit its :class:`RevisedTranscript` if a text changed."""
        self.stats.revise_compute_s += job.compute_s
        self.stats.asr_compute_s += job.compute_s
        if rev is None:
            return
        by_index = {u.index: u for u in self.stats.utterances}
        for index, text, _ in rev.changed:
            self.texts[index] = text
            if index in by_index:
                by_index[index].revised_text = text
        self.stats.revisions += 1
        self.emit(RevisedTranscript(tuple(i for i, _, _ in rev.changed), tuple(t for _, t, _ in rev.changed),
                                    tuple(w for _, _, ws in rev.changed for w in ws), rev.window[0], rev.window[1],
                                    rev.language))
