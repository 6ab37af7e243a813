"""Interruptible audio playback through sounddevice (PortAudio).

A :class:`Player` owns one output stream fed from a queue by the PortAudio callback, so ``play()`` never blocks
the caller and ``stop()`` (barge-in) silences it at the next callback (≤ one block). With no output device,
:func:`open_player` returns a :class:`NullPlayer` that only counts what it was given.

Far-end reference for echo cancellation (:mod:`audio.aec`): set ``player.reference`` to
``f(samples, sample_rate, latency_s)``; every output callback hands it exactly the block written to the device
(float32 mono, silence included, so the reference is gap-free) and the measured output latency (seconds from the
callback to the block reaching the DAC, PortAudio's ``outputBufferDacTime − currentTime``, else the stream's
reported latency). ``player.output_latency_s`` keeps the latest value.
"""

from __future__ import annotations

import queue
import threading
import time

import numpy as np


class NullPlayer:
    """No output device: accepts audio, plays nothing."""

    available = False

    def __init__(self) -> None:
        self.first_sample_wall: float | None = None
        self.reference = None  # nothing is played, so there is no echo to cancel
        self.output_latency_s = 0.0

    def play(self, samples: np.ndarray, sample_rate: int) -> None:
        if self.first_sample_wall is None and len(samples):
            self.first_sample_wall = time.monotonic()

    def stop(self) -> float:
        """Nothing is queued: 0.0 seconds dropped."""
        return 0.0

    def wait(self, timeout: float | None = None) -> None:
        pass

    def close(self) -> None:
        pass


class Player:
    """Plays float32 mono blocks at ``sample_rate`` Hz on ``device`` (None = default).

    Args:
        reference: optional ``f(samples, sample_rate, latency_s)`` called from the audio callback with each block
            as played (see the module docstring); may also be set later as ``player.reference``.

    Raises:
        RuntimeError: the output device cannot be opened.
    """

    available = True

    def __init__(self, sample_rate: int, device=None, block: int = 1024, reference=None):
        import sounddevice as sd

        self.sr = sample_rate
        self.q: queue.Queue = queue.Queue()
        self.buf = np.zeros(0, np.float32)
        self.idle = threading.Event()
        self.idle.set()
        self.first_sample_wall: float | None = None
        self.reference = reference
        self.output_latency_s = 0.0
        self.stream = sd.OutputStream(samplerate=sample_rate, channels=1, dtype="float32", device=device,
                                      blocksize=block, callback=self._cb)
        self.stream.start()

    def _cb(self, out, frames, time_info, status) -> None:
        while len(self.buf) < frames:
            try:
                self.buf = np.concatenate([self.buf, self.q.get_nowait()])
            except queue.Empty:
                break
        n = min(frames, len(self.buf))
        out[:n, 0] = self.buf[:n]
        out[n:, 0] = 0
        self.buf = self.buf[n:]
        if n and self.first_sample_wall is None:
            self.first_sample_wall = time.monotonic()
        if not len(self.buf) and self.q.empty():
            self.idle.set()
        ref = self.reference
        if ref is not None:
            try:
                lat = float(time_info.outputBufferDacTime - time_info.currentTime)
            except Exception:
                lat = 0.0
            if not 0.0 < lat < 1.0:
                lat = float(getattr(self.stream, "latency", 0.0) or 0.0)
            self.output_latency_s = lat
            try:
                ref(out[:, 0].copy(), self.sr, lat)
            except Exception:  # never let the reference consumer kill the audio callback
                self.reference = None

    def play(self, samples: np.ndarray, sample_rate: int) -> None:
        if sample_rate != self.sr:
            from .io import resample

            samples = resample(samples, sample_rate, self.sr)
        self.idle.clear()
        self.q.put(np.asarray(samples, np.float32))

    def stop(self) -> float:
        """Barge-in: drop everything queued. Returns the seconds of audio dropped (never played)."""
        dropped = len(self.buf)
        while not self.q.empty():
            try:
                dropped += len(self.q.get_nowait())
            except queue.Empty:
                break
        self.buf = np.zeros(0, np.float32)
        self.idle.set()
        return dropped / self.sr

    def wait(self, timeout: float | None = None) -> None:
        self.idle.wait(timeout)

    def close(self) -> None:
        self.stop()
        self.stream.stop()
        self.stream.close()


def open_player(sample_rate: int, device: str = "", reference=None) -> "Player | NullPlayer":
    """A :class:`Player` on the chosen output device, or a :class:`NullPlayer` when ``device == "none"``, no output
    device exists, or it cannot be opened."""
    if device == "none":
        return NullPlayer()
    from .sources import output_devices

    if not output_devices():
        return NullPlayer()
    try:
        dev = None if device in ("", None) else (int(device) if str(device).isdigit() else device)
        return Player(sample_rate, dev, reference=reference)
    except Exception:
        return NullPlayer()
