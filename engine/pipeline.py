"""The queues between the streaming pipeline's threads (capture → VAD → streaming ASR → the session's consumers,
:mod:`engine.session`), and the ASR's catch-up report (:class:`Backlog`).

Threads:
    * capture: iterates the :class:`audio.sources.AudioSource`, runs the VAD on each block and enqueues blocks and
      speech boundaries. It does nothing slow, so the microphone is never blocked by the engines.
    * ASR (``engine.asr.transcriber.StreamingTranscriber.run``): drains everything queued, then re-decodes the
      current utterance if at least ``min_chunk_s`` of new audio arrived (computation-aware, as whisper_streaming);
      at end of speech it finishes the utterance and emits :class:`FinalTranscript`.
    * revise (``asr.revise_max_s`` > 0, a real-time source): the second pass
      (:class:`engine.asr.second_pass.SecondPass`) re-decodes consecutive finished utterances together, between
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
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from engine.core.events import PartialTranscript


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
