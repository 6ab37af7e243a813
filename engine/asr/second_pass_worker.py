"""Running the second pass (:mod:`engine.asr.second_pass`) beside the live transcription of one stream: the audio it
may still decode is kept, and its decodes run either at once on the ASR thread (a source read as fast as it is
consumed: deterministic) or on a thread of their own, at a lower OS priority (nice +10), between utterances while
the process is otherwise idle (a real-time source: the live decodes, answers and captions are never queued behind
it).
"""

from __future__ import annotations

import collections
import os
import threading
import time
from typing import Callable

import numpy as np

from audio.io import SAMPLE_RATE
from audio.sources import AudioBlock, AudioSource
from engine.asr.backend import ASRBackend
from engine.asr.second_pass import PassJob, Revision, RevisionPass, SpokenUtterance
from engine.core.events import Error


class SecondPassWorker:
    """The second pass of one stream, driven by its transcriber.

    Thread safety: :attr:`lock` guards :attr:`second`, the kept audio, whether an utterance is open, the latest audio
    time and the end of the stream; every method takes it where it needs it. :meth:`run_once` and the revise thread
    decode outside it.

    Args:
        second: the second pass (its ``backend`` is set here before its first decode).
        backend: its decoder, or a function that builds it (called on the thread that runs the second pass, so a
            model's worker threads inherit that thread's priority).
        source: the stream's source (``recorded_s``, where it has one, is the end of a file: not the silence added
            after it).
        idle_cores: the revise thread runs a decode once the process used less CPU than this many cores over 0.3 s
            (``asr.revise_idle_cores``).
        emit: receives an :class:`engine.core.events.Error` when a decode fails or the decoder cannot be built.
        on_decoded: called with each decoded job and its :class:`Revision` (None: no text changed), from the thread
            that decoded it.
        stop: set when the session stops: the revise thread then decodes nothing more.
    """

    def __init__(self, second: RevisionPass, backend: ASRBackend | Callable[[], ASRBackend], source: AudioSource,
                 idle_cores: float, emit: Callable[[object], None],
                 on_decoded: Callable[[PassJob, Revision | None], None], stop: threading.Event):
        self.second = second
        self._backend = backend
        self.source = source
        self.idle_cores = idle_cores
        self.emit = emit
        self.on_decoded = on_decoded
        self._stop = stop
        self._history: collections.deque[AudioBlock] = collections.deque()  # audio the second pass may decode
        self._cpu_mark: tuple[float, float] | None = None
        self.lock = threading.Condition()  # guards second, _history, _speaking, _audio_t, _eof (revise thread)
        self._speaking = False  # an utterance is open
        self._audio_t = 0.0  # audio time of the latest block, seconds
        self._eof = False
        self._thread: threading.Thread | None = None

    # -- the transcriber's side (the ASR thread) --------------------------------------------------------------
    def keep(self, block: AudioBlock, utterance_start: float | None) -> None:
        """Keep ``block`` for the second pass, and the audio from the start of its chain (or of the utterance being
        spoken, which started at the audio time ``utterance_start``, seconds; None: none is) on; at most 120 s."""
        with self.lock:
            self._history.append(block)
            self._audio_t = block.t_end
            keep_from = self.second.earliest
            if keep_from is None:
                keep_from = utterance_start - 1.0 if utterance_start is not None else block.t_end - 1.0
            keep_from = max(keep_from - 1.0, block.t_end - 120.0)
            while self._history and self._history[0].t_end < keep_from:
                self._history.popleft()

    def utterance_started(self) -> None:
        """An utterance opened: the revise thread runs nothing until it ends."""
        with self.lock:
            self._speaking = True

    def utterance_ended(self, u: SpokenUtterance, whole: bool) -> None:
        """Utterance ``u`` is final (``whole``: its text was one decode of all its audio): the second pass takes it,
        and the process's idleness is measured from now on."""
        with self.lock:
            self.second.add(u, whole=whole)
            self._speaking = False
            self._cpu_mark = None  # idle is measured from now on
            self.lock.notify_all()

    def run_once(self) -> None:
        """One second-pass decode on the calling thread (the ASR thread of a source read as fast as it is consumed),
        if one is due."""
        self.backend()
        with self.lock:
            job = self.second.take()
            audio, t0 = self._window_audio(job)
        if job is None:
            return
        self._decode_and_apply(job, audio, t0)

    def start(self) -> None:
        """Start the revise thread (a real-time source)."""
        self._thread = threading.Thread(target=self._run, name="revise", daemon=True)
        self._thread.start()

    def finish(self) -> None:
        """The stream ended: the revise thread decodes what is still due (nothing after ``stop``), and is joined."""
        if self._thread is None:
            return
        with self.lock:
            self._eof = True
            self.lock.notify_all()
        self._thread.join()

    # -- decoding ---------------------------------------------------------------------------------------------
    def backend(self) -> ASRBackend:
        """The second pass's decoder, built on first use by the calling thread."""
        if self.second.backend is None:
            b = self._backend
            self.second.backend = b if hasattr(b, "transcribe") else b()
        return self.second.backend

    def _idle(self) -> bool:
        """Whether the second pass may run now: when the process used less than ``idle_cores`` of CPU over the last
        0.3 s or more (measured from the revise thread, which is itself idle then)."""
        now, cpu = time.monotonic(), time.process_time()
        if self._cpu_mark is None or now - self._cpu_mark[0] > 2.0:
            self._cpu_mark = (now, cpu)
            return False
        t0, c0 = self._cpu_mark
        if now - t0 < 0.3:
            return False
        self._cpu_mark = (now, cpu)
        return (cpu - c0) / (now - t0) < self.idle_cores

    def _decode_and_apply(self, job: PassJob, audio: np.ndarray, t0: float) -> None:
        """Decode one second-pass job (outside the lock: it takes a decode's time) and apply its text; a failed
        decode changes no text and is reported as an :class:`Error` event."""
        try:
            res = self.second.decode(job, audio, t0)
        except Exception as e:
            res = None
            self.emit(Error("asr", f"transcript revision failed: {type(e).__name__}: {e}"))
        with self.lock:
            rev = self.second.apply(job, res)
        self.on_decoded(job, rev)

    def _window_audio(self, job: PassJob | None) -> tuple[np.ndarray, float]:
        """The kept audio of ``job``'s window (float32 16 kHz), up to its ``audio_end`` (an offline window also hears
        the audio after it), and its start (audio time, seconds); called with the lock held."""
        if job is None:
            return np.zeros(0, np.float32), 0.0
        end = job.audio_end
        blocks = [b for b in self._history if b.t_end > job.window[0] and b.t_start < end]
        if not blocks:
            return np.zeros(0, np.float32), job.window[0]
        audio, t0 = np.concatenate([b.samples for b in blocks]), blocks[0].t_start
        recorded = getattr(self.source, "recorded_s", None)  # a file's end: not the silence added after it
        if recorded is not None and t0 + len(audio) / SAMPLE_RATE > recorded:
            audio = audio[: max(0, int(round((recorded - t0) * SAMPLE_RATE)))]
        return audio, t0

    def _run(self) -> None:
        """The revise thread (a real-time source): waits until a decode is due (a chain is complete, or an offline
        window's audio has been heard), no utterance is open and the process is idle, then decodes it at nice +10 on
        the second pass's own decoder; at the end of the source it decodes what is still due (not after ``stop``)."""
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
        except (AttributeError, OSError):
            pass
        try:
            self.backend()  # built here: its model's threads inherit this thread's priority
        except Exception as e:
            self.emit(Error("asr", f"transcript revision unavailable: {type(e).__name__}: {e}"))
            return
        while True:
            with self.lock:
                eof = self._eof
                if eof and self._stop.is_set():
                    return  # stopped: the session ends now, with the text it has
                due = self.second.due(None) if eof else (not self._speaking and self.second.due(self._audio_t))
                if not due:
                    if eof:
                        return
                    self.lock.wait(0.1)
                    continue
            if not eof and not self._idle():
                time.sleep(0.05)
                continue
            with self.lock:
                if self._speaking and not self._eof:
                    continue  # speech started meanwhile: the chain waits
                job = self.second.take()
                audio, t0 = self._window_audio(job)
            if job is None:
                continue
            self._decode_and_apply(job, audio, t0)
            self._cpu_mark = None
