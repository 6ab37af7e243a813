"""Decode any audio file to 16 kHz mono float32, resample arrays, write WAVs.

Decoding and resampling use PyAV (FFmpeg), as faster-whisper does (``faster_whisper.audio.decode_audio``); any
container, codec, sample rate or channel count is accepted and downmixed to mono.

Raises:
    AudioError: the file is missing, unreadable, not audio, or holds no samples.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

SAMPLE_RATE = 16000  # Hz, what every engine consumes


class AudioError(ValueError):
    """Audio input that cannot be used; the message is one line meant for the user."""


def load_audio(path: str | Path, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """Decode ``path`` to float32 mono samples in [-1, 1] at ``sample_rate`` Hz.

    Returns:
        float32 array of shape (n_samples,).

    Raises:
        AudioError: missing file, a directory, undecodable or non-audio data, no audio stream, or zero samples;
            the message is one line naming the file.
    """
    import av
    from faster_whisper.audio import decode_audio

    p = Path(path)
    if not p.exists():
        raise AudioError(f"audio file not found: {p}")
    if p.is_dir():
        raise AudioError(f"expected an audio file, got a directory: {p}")
    if p.stat().st_size == 0:
        raise AudioError(f"audio file is empty (0 bytes): {p}")
    try:
        audio = decode_audio(str(p), sampling_rate=sample_rate)
    except av.error.FFmpegError as e:
        reason = getattr(e, "strerror", None) or str(e)
        raise AudioError(f"not a readable audio file (damaged, or not audio): {p} ({reason})") from None
    except (IndexError, StopIteration):  # the container holds no audio stream
        raise AudioError(f"no audio stream in {p}") from None
    except MemoryError:
        raise AudioError(f"audio file too long to decode in memory: {p}") from None
    except Exception as e:  # PyAV raises a zoo of errors for garbage input
        raise AudioError(f"not a readable audio file: {p} ({type(e).__name__}: {' '.join(str(e).split())})") \
            from None
    if audio.size == 0:
        raise AudioError(f"no audio samples in {p} (zero-length stream)")
    return np.ascontiguousarray(audio, dtype=np.float32)


class Resampler:
    """Streaming resampler/downmixer (PyAV's libswresample) from ``in_rate`` Hz × ``channels`` to mono ``out_rate``.

    ``__call__(block)`` takes float32 (n,) or (n, channels) and returns float32 (m,) — state is kept between
    blocks so there are no seams. ``flush()`` returns what is left at the end.
    """

    def __init__(self, in_rate: int, channels: int = 1, out_rate: int = SAMPLE_RATE):
        import av

        if in_rate <= 0:
            raise AudioError(f"invalid sample rate {in_rate} Hz")
        self.in_rate, self.channels, self.out_rate = int(in_rate), int(channels), int(out_rate)
        self.passthrough = self.in_rate == self.out_rate and self.channels == 1
        self._av = av
        self._r = av.AudioResampler(format="flt", layout="mono", rate=self.out_rate)
        self._layout = "mono" if self.channels == 1 else "stereo" if self.channels == 2 else f"{self.channels}c"

    def __call__(self, block: np.ndarray) -> np.ndarray:
        block = np.asarray(block, dtype=np.float32)
        if block.ndim == 1:
            block = block[:, None]
        if self.passthrough:
            return block[:, 0].copy()
        if block.shape[1] > 2 and self._layout not in ("mono", "stereo"):
            block = block.mean(axis=1, keepdims=True)  # uncommon layouts: downmix first
            layout = "mono"
        else:
            layout = self._layout
        frame = self._av.AudioFrame.from_ndarray(np.ascontiguousarray(block.reshape(1, -1)), format="flt", layout=layout)
        frame.sample_rate = self.in_rate
        return self._collect(self._r.resample(frame))

    def flush(self) -> np.ndarray:
        if self.passthrough:
            return np.zeros(0, np.float32)
        return self._collect(self._r.resample(None))

    @staticmethod
    def _collect(frames) -> np.ndarray:
        if not frames:
            return np.zeros(0, np.float32)
        return np.concatenate([f.to_ndarray().reshape(-1) for f in frames]).astype(np.float32)


def resample(audio: np.ndarray, in_rate: int, out_rate: int = SAMPLE_RATE) -> np.ndarray:
    """Resample a whole float32 array (n,) or (n, channels) to mono ``out_rate``."""
    channels = 1 if np.ndim(audio) == 1 else np.shape(audio)[1]
    r = Resampler(in_rate, channels, out_rate)
    out = r(audio)
    return np.concatenate([out, r.flush()])


def mu_law(a: np.ndarray, mu: int = 255) -> np.ndarray:
    """8-bit μ-law (G.711-style) encode and decode: float samples in [-1, 1] (clipped), shape (n,), → float32 (n,) on
    256 levels, what a telephone line's codec leaves of them."""
    x = np.clip(a, -1.0, 1.0)
    y = np.sign(x) * np.log1p(mu * np.abs(x)) / np.log1p(mu)
    q = np.round((y + 1) / 2 * mu) / mu * 2 - 1  # 256 levels
    return (np.sign(q) * np.expm1(np.abs(q) * np.log1p(mu)) / mu).astype(np.float32)


def write_wav(path: str | Path, audio: np.ndarray, sample_rate: int) -> Path:
    """Write float32 (n,) samples as 16-bit PCM WAV (soundfile); returns the path."""
    import soundfile as sf

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    sf.write(str(p), np.clip(np.asarray(audio, dtype=np.float32), -1, 1), int(sample_rate), subtype="PCM_16")
    return p
