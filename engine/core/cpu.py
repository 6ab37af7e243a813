"""CPU sharing between the streaming ASR and speculation on two cores: the ASR always goes first.

Policy (measured by ``specvoice bench voice``, documented in the README):

1. every streaming-ASR decode runs inside :meth:`AsrPriority.decoding`;
2. speculative work (PredGen updates while the user speaks) calls :meth:`AsrPriority.wait_idle` before each LLM
   forward pass, so it never competes with a decode for the cores — it pauses between passes (one pass: one
   pre-fill chunk or one token, tens of milliseconds) and resumes when the decode is done;
3. speculation also runs at a lower OS priority (the answer thread at nice +10) with
   ``llm.predgen_speculation_threads`` LLM threads; the final answer, once the transcript is final, uses every core
   and does not wait.

One instance per process (:data:`ASR`): the ASR and the answer stage share the machine, not an object graph.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager


class AsrPriority:
    """Counts ASR decodes in flight; lets lower-priority work wait until there are none."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._active = 0
        self.waited_s = 0.0  # total time speculation spent waiting for the ASR, seconds

    @contextmanager
    def decoding(self):
        """Mark one ASR decode in flight for the duration of the ``with`` block."""
        with self._cv:
            self._active += 1
        try:
            yield
        finally:
            with self._cv:
                self._active -= 1
                if self._active == 0:
                    self._cv.notify_all()

    @property
    def busy(self) -> bool:
        return self._active > 0

    def wait_idle(self, timeout: float = 2.0, cancel: threading.Event | None = None) -> float:
        """Block while an ASR decode is in flight (at most ``timeout`` seconds, or until ``cancel`` is set; checked
        every 20 ms). Returns the seconds waited."""
        if not self._active:
            return 0.0
        t0 = time.monotonic()
        with self._cv:
            while self._active and time.monotonic() - t0 < timeout and not (cancel is not None and cancel.is_set()):
                self._cv.wait(0.02)
        waited = time.monotonic() - t0
        self.waited_s += waited
        return waited


ASR = AsrPriority()
