"""Audio sources: a file played at real-time pace or as fast as possible, and the microphone (sounddevice).

Every source yields :class:`AudioBlock` records of float32 16 kHz mono samples. The microphone callback only
copies into a bounded queue (it never waits on the engine): up to ``max_backlog_s`` seconds (default 600 s) of
audio wait there while the engine is busy, so a slow engine does not make capture drop audio; beyond that the
callback cannot keep a block and counts it in ``MicSource.dropped_s`` (the pipeline reports it).

Raises:
    AudioError: unreadable file, no input device, a device that cannot be opened.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from .io import SAMPLE_RATE, AudioError, Resampler, load_audio


@dataclass(frozen=True)
class AudioBlock:
    """``samples``: float32 (n,) at 16 kHz; ``t_start``: audio time of the first sample (s);
    ``wall``: time.monotonic() when the block became available."""

    samples: np.ndarray
    t_start: float
    wall: float

    @property
    def t_end(self) -> float:
        return self.t_start + len(self.samples) / SAMPLE_RATE


class AudioSource:
    """Iterable of :class:`AudioBlock`; ``close()`` stops it early (thread-safe)."""

    name = "source"

    def __init__(self) -> None:
        self._stop = threading.Event()

    def close(self) -> None:
        self._stop.set()

    def __iter__(self) -> Iterator[AudioBlock]:  # pragma: no cover - interface
        raise NotImplementedError


class ArraySource(AudioSource):
    """Blocks from an in-memory 16 kHz array, at real-time pace (``realtime=True``) or as fast as consumed."""

    def __init__(self, audio: np.ndarray, block_s: float = 0.1, realtime: bool = True, name: str = "array",
                 trailing_silence_s: float = 1.0):
        super().__init__()
        self.audio = np.asarray(audio, np.float32)
        # the recording's own length, seconds (the padding below is not part of it)
        self.recorded_s = len(self.audio) / SAMPLE_RATE
        if trailing_silence_s > 0:  # lets the VAD see the end of the last utterance, like a real pause
            self.audio = np.concatenate([self.audio, np.zeros(int(trailing_silence_s * SAMPLE_RATE), np.float32)])
        self.block = max(1, int(block_s * SAMPLE_RATE))
        self.realtime = realtime
        self.name = name
        self.duration = len(self.audio) / SAMPLE_RATE

    def __iter__(self) -> Iterator[AudioBlock]:
        t0 = time.monotonic()
        for i in range(0, len(self.audio), self.block):
            if self._stop.is_set():
                return
            chunk = self.audio[i : i + self.block]
            if self.realtime:
                due = t0 + (i + len(chunk)) / SAMPLE_RATE
                delay = due - time.monotonic()
                if delay > 0 and self._stop.wait(delay):
                    return
            yield AudioBlock(chunk, i / SAMPLE_RATE, time.monotonic())


class FileSource(ArraySource):
    """An audio file (any format/rate/channels, decoded and resampled to 16 kHz mono) played as a source.

    Raises:
        AudioError: see :func:`audio.io.load_audio`.
    """

    def __init__(self, path: str | Path, block_s: float = 0.1, realtime: bool = True, trailing_silence_s: float = 1.0):
        super().__init__(load_audio(path), block_s, realtime, name=str(path), trailing_silence_s=trailing_silence_s)
        self.path = Path(path)


def _devices(channels_key: str) -> list[dict]:
    try:
        import sounddevice as sd

        devs = sd.query_devices()
    except Exception:  # PortAudio missing or broken: no devices
        return []
    return [{"index": i, "name": d["name"], "channels": d[channels_key], "default_samplerate": d["default_samplerate"]}
            for i, d in enumerate(devs) if d[channels_key] > 0]


def input_devices() -> list[dict]:
    """Input devices known to PortAudio: [{"index", "name", "channels", "default_samplerate"}]; [] when none
    (or when PortAudio itself is missing)."""
    return _devices("max_input_channels")


def output_devices() -> list[dict]:
    """Output devices known to PortAudio (same records as :func:`input_devices`)."""
    return _devices("max_output_channels")


class MicSource(AudioSource):
    """The microphone through sounddevice. Opens at 16 kHz mono when the device allows, else at its native rate and
    resamples with PyAV. The PortAudio callback only enqueues; blocks are resampled on the consumer side.

    Args:
        device: index, name substring, or None/"" for the default input.
        block_s: seconds per block.
        max_backlog_s: audio the queue holds while the engine is busy, seconds.

    Raises:
        AudioError: no input device, or the device cannot be opened.
    """

    name = "microphone"

    def __init__(self, device: str | int | None = None, block_s: float = 0.1, max_backlog_s: float = 600.0):
        super().__init__()
        try:
            import sounddevice as sd
        except (ImportError, OSError) as e:
            raise AudioError(f"no microphone: sounddevice/PortAudio unavailable ({e})") from None
        if not input_devices():
            raise AudioError("no microphone: no audio input device found")
        self.sd = sd
        dev = None if device in (None, "") else (int(device) if str(device).isdigit() else device)
        try:
            info = sd.query_devices(dev, "input")
        except (ValueError, sd.PortAudioError) as e:
            raise AudioError(f"no microphone: input device {device!r} not usable ({e})") from None
        self.device = dev
        self.rate = SAMPLE_RATE
        try:
            sd.check_input_settings(device=dev, samplerate=SAMPLE_RATE, channels=1, dtype="float32")
        except Exception:
            self.rate = int(info["default_samplerate"])
        self.block_s = block_s
        self.q: queue.Queue = queue.Queue(maxsize=max(1, int(max_backlog_s / block_s)))
        self.overflows = 0  # PortAudio input overflows (the OS buffer, before this callback)
        self.dropped_s = 0.0  # audio the full queue could not take, seconds

    def _callback(self, indata, frames, time_info, status) -> None:
        if status and status.input_overflow:
            self.overflows += 1
        try:
            self.q.put_nowait(indata[:, 0].copy())
        except queue.Full:
            self.dropped_s += frames / self.rate

    def __iter__(self) -> Iterator[AudioBlock]:
        resampler = Resampler(self.rate, 1, SAMPLE_RATE)
        n_out = 0
        try:
            stream = self.sd.InputStream(device=self.device, samplerate=self.rate, channels=1, dtype="float32",
                                         blocksize=int(self.block_s * self.rate), callback=self._callback)
        except Exception as e:
            raise AudioError(f"cannot open microphone: {e}") from None
        with stream:
            while not self._stop.is_set():
                try:
                    raw = self.q.get(timeout=0.2)
                except queue.Empty:
                    continue
                out = resampler(raw)
                if len(out):
                    yield AudioBlock(out, n_out / SAMPLE_RATE, time.monotonic())
                    n_out += len(out)


class GatedSource(AudioSource):
    """Push-to-talk: passes the wrapped source's blocks until :meth:`release`, which ends the stream."""

    def __init__(self, inner: AudioSource):
        super().__init__()
        self.inner = inner
        self.name = inner.name
        self.gate = threading.Event()
        self.gate.set()

    def release(self) -> None:
        self.gate.clear()
        self.inner.close()

    def close(self) -> None:
        self.release()
        super().close()

    def __getattr__(self, name):  # what the transcriber reads of the source (realtime, dropped_s, barge_in)
        if name == "inner":  # not set yet: no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __iter__(self):
        for b in self.inner:
            if not self.gate.is_set():
                return
            yield b


class LevelSource(AudioSource):
    """Passes ``inner``'s blocks on, telling ``on_level`` each block's level for a meter (4 × its RMS, clipped to
    [0, 1]) from the thread that reads the source."""

    def __init__(self, inner: AudioSource, on_level: Callable[[float], None]):
        super().__init__()
        self.inner, self.name, self.on_level = inner, inner.name, on_level

    def __getattr__(self, name):  # what the transcriber reads of the source (realtime, dropped_s, barge_in)
        if name == "inner":  # not set yet: no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def close(self) -> None:
        self.inner.close()

    def __iter__(self):
        for b in self.inner:
            rms = float(np.sqrt(np.mean(b.samples ** 2))) if len(b.samples) else 0.0
            self.on_level(min(1.0, rms * 4))
            yield b
