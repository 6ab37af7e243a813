"""Acoustic echo cancellation for the microphone path: WebRTC's audio processing module (AEC3, noise suppression,
high-pass filter, gain control) through ``livekit.rtc.AudioProcessingModule`` (pip ``livekit``, Apache-2.0).

The APM works on 10 ms int16 frames. :class:`EchoCanceller` runs it at 16 kHz (160 samples a frame): the far end
(what the loudspeaker plays, any rate, resampled to 16 kHz) goes to ``process_reverse_stream``, the microphone to
``process_stream``; the delay between the two (output latency + input latency, ms) is given with
``set_stream_delay_ms`` and AEC3's own delay estimator refines it.

Without the ``livekit`` package the canceller is a no-op that passes the microphone through unchanged;
``EchoCanceller.available`` is False and ``EchoCanceller.reason`` says why.
"""

from __future__ import annotations

import threading
import numpy as np

SR = 16000  # processing rate, Hz
FRAME = SR // 100  # 10 ms, samples


def apm_available() -> tuple[bool, str]:
    """(True, "") when ``livekit.rtc.AudioProcessingModule`` can be imported, else (False, the reason)."""
    try:
        from livekit.rtc import AudioProcessingModule  # noqa: F401
    except Exception as e:  # ImportError, or the native FFI library failing to load
        return False, f"echo cancellation off: livekit is not usable ({type(e).__name__}: {e}); pip install livekit"
    return True, ""


def _to_int16(x: np.ndarray) -> np.ndarray:
    return (np.clip(x, -1.0, 1.0) * 32767.0).round().astype(np.int16)


class EchoCanceller:
    """Streaming WebRTC APM over 16 kHz float32 mono.

    Args:
        delay_ms: initial stream delay (far-end frame handed to :meth:`process_far` → its echo in the microphone
            block handed to :meth:`process_near`), ms. AEC3 estimates the residual itself.
        echo_cancellation, noise_suppression, high_pass_filter, auto_gain_control: the APM stages to enable.

    Attributes:
        available: False when livekit is missing (then :meth:`process_near` returns its input unchanged).
        reason: why it is unavailable ("" when available).

    Thread safety: :meth:`process_far` (playback thread) and :meth:`process_near` (capture thread) may be called
    from different threads; both take an internal lock.
    """

    def __init__(self, delay_ms: float = 50.0, echo_cancellation: bool = True, noise_suppression: bool = False,
                 high_pass_filter: bool = True, auto_gain_control: bool = False):
        self.available, self.reason = apm_available()
        self.lock = threading.Lock()
        self.far_buf = np.zeros(0, np.float32)
        self.near_buf = np.zeros(0, np.float32)
        self.delay_ms = int(round(delay_ms))
        self.input_latency_ms = 0.0  # capture-side latency added to the playback's output latency, ms
        self.apm = None
        self._rs: dict[int, object] = {}
        if self.available:
            from livekit.rtc import AudioProcessingModule

            self.apm = AudioProcessingModule(echo_cancellation=echo_cancellation,
                                             noise_suppression=noise_suppression,
                                             high_pass_filter=high_pass_filter,
                                             auto_gain_control=auto_gain_control)
            self.apm.set_stream_delay_ms(self.delay_ms)

    def set_delay_ms(self, delay_ms: float) -> None:
        """Stream delay hint, ms (playback output latency + capture input latency + any buffering between)."""
        self.delay_ms = int(round(max(0.0, delay_ms)))
        if self.apm is not None:
            with self.lock:
                self.apm.set_stream_delay_ms(self.delay_ms)

    def on_played(self, samples: np.ndarray, sample_rate: int, latency_s: float) -> None:
        """Far-end sink for ``audio.playback.Player.reference``: feeds the block as played and sets the stream
        delay to the measured output latency (s) + ``input_latency_ms`` (the capture side's latency, ms)."""
        d = latency_s * 1000.0 + self.input_latency_ms
        if abs(d - self.delay_ms) >= 5.0:
            self.set_delay_ms(d)
        self.process_far(samples, sample_rate)

    @staticmethod
    def _frame(samples_i16: np.ndarray):
        from livekit.rtc import AudioFrame

        return AudioFrame(samples_i16.tobytes(), SR, 1, FRAME)

    def process_far(self, samples: np.ndarray, sample_rate: int = SR) -> None:
        """Far-end reference: float32 mono samples at ``sample_rate`` Hz exactly as the loudspeaker plays them
        (in play order, without gaps; silence included). Complete 10 ms frames go to the APM at once."""
        if self.apm is None:
            return
        x = np.asarray(samples, np.float32).reshape(-1)
        if sample_rate != SR:
            from .io import Resampler

            rs = self._rs.get(sample_rate)
            if rs is None:
                rs = self._rs[sample_rate] = Resampler(sample_rate, 1, SR)
            x = rs(x)
        with self.lock:
            self.far_buf = np.concatenate([self.far_buf, x])
            n = len(self.far_buf) // FRAME
            for i in range(n):
                self.apm.process_reverse_stream(self._frame(_to_int16(self.far_buf[i * FRAME:(i + 1) * FRAME])))
            self.far_buf = self.far_buf[n * FRAME:]

    def process_near(self, samples: np.ndarray) -> np.ndarray:
        """Microphone samples (float32 mono, 16 kHz, any length) → the cleaned samples of the complete 10 ms frames
        now available (float32, a multiple of 160 long; the rest waits for the next call, so the output lags the
        input by < 10 ms). Without livekit the input is returned unchanged.

        Raises:
            RuntimeError: the APM rejected a frame.
        """
        x = np.asarray(samples, np.float32).reshape(-1)
        if self.apm is None:
            return x
        with self.lock:
            self.near_buf = np.concatenate([self.near_buf, x])
            n = len(self.near_buf) // FRAME
            out = np.empty(n * FRAME, np.float32)
            for i in range(n):
                f = self._frame(_to_int16(self.near_buf[i * FRAME:(i + 1) * FRAME]))
                self.apm.set_stream_delay_ms(self.delay_ms)  # WebRTC wants it before every capture frame
                self.apm.process_stream(f)
                out[i * FRAME:(i + 1) * FRAME] = np.frombuffer(f.data, np.int16).astype(np.float32) / 32768.0
            self.near_buf = self.near_buf[n * FRAME:]
        return out

    def process_duplex(self, far: np.ndarray, near: np.ndarray) -> np.ndarray:
        """Offline / lock-step use: ``far`` and ``near`` are 16 kHz float32 of equal length, sample-aligned in
        capture time (``near[i]`` captured when ``far[i]`` was handed to the output). Interleaves 10 ms far and
        near frames as a real-time duplex loop would; returns the cleaned near signal (length rounded down to a
        multiple of 160 samples).

        Raises:
            ValueError: lengths differ.
        """
        if len(far) != len(near):
            raise ValueError(f"far ({len(far)}) and near ({len(near)}) lengths differ")
        if self.apm is None:
            return np.asarray(near, np.float32)[: len(near) // FRAME * FRAME]
        n = len(near) // FRAME
        out = np.empty(n * FRAME, np.float32)
        fi = _to_int16(np.asarray(far, np.float32))
        ni = _to_int16(np.asarray(near, np.float32))
        with self.lock:
            for i in range(n):
                s = slice(i * FRAME, (i + 1) * FRAME)
                self.apm.process_reverse_stream(self._frame(fi[s]))
                f = self._frame(ni[s])
                self.apm.set_stream_delay_ms(self.delay_ms)
                self.apm.process_stream(f)
                out[s] = np.frombuffer(f.data, np.int16).astype(np.float32) / 32768.0
        return out


def erle_db(raw: np.ndarray, cleaned: np.ndarray) -> float:
    """Echo return loss enhancement, dB: 10·log10(energy(raw) / energy(cleaned)) over the common length."""
    n = min(len(raw), len(cleaned))
    e_raw = float(np.sum(np.asarray(raw[:n], np.float64) ** 2))
    e_out = float(np.sum(np.asarray(cleaned[:n], np.float64) ** 2))
    return 10.0 * np.log10((e_raw + 1e-12) / (e_out + 1e-12))


class BargeInDetector:
    """User speech over the assistant's voice: a Silero VAD (``audio.vad.StreamingVAD``, short minimum speech) on
    the echo-cancelled microphone, armed only while the far end is audible (a non-silent reference within the last
    ``hold_s``), so what it hears is speech the reference does not explain.

    Args:
        vad_path: Silero VAD ONNX file (role ``vad``).
        on_barge_in: called (from the capture thread) with the audio time (s) of the detection.
        min_speech_s: speech needed to fire, s (0.1 s: p90 detection latency ≈ 0.27 s in ``bench duplex``).
        threshold: Silero speech probability threshold.
        hold_s: the detector stays armed this long after the last audible far-end frame, s (echo tail).
    """

    def __init__(self, vad_path, on_barge_in, min_speech_s: float = 0.1, threshold: float = 0.5,
                 hold_s: float = 0.5):
        from .vad import StreamingVAD

        self.vad = StreamingVAD(vad_path, threshold=threshold, min_speech_s=min_speech_s)
        self.on_barge_in = on_barge_in
        self.hold = hold_s
        self.far_active_until = -1.0  # audio time (s) until which the far end counts as audible
        self.last: float | None = None  # audio time of the latest barge-in

    def far_level(self, samples: np.ndarray, t_now: float) -> None:
        """Note a far-end block (float32, any rate) played at about ``t_now`` (microphone audio time, s)."""
        if len(samples) and float(np.max(np.abs(samples))) > 1e-3:
            self.far_active_until = t_now + self.hold

    def __call__(self, cleaned: np.ndarray, t_end: float) -> bool:
        """Feed a cleaned microphone block ending at audio time ``t_end`` (s); True when a barge-in fired in it."""
        events = self.vad(cleaned)
        if t_end > self.far_active_until:
            return False
        if any(e.kind == "start" for e in events):
            self.last = t_end
            self.on_barge_in(t_end)
            return True
        return False


class EchoCancelledSource:
    """Wraps an ``audio.sources.AudioSource``: yields its blocks with the samples echo-cancelled (what the VAD and
    the ASR then see). Hand ``on_played`` to the player (``player.reference = src.on_played``) so the far end
    reaches the canceller; optionally a :class:`BargeInDetector` watches the cleaned stream.

    Args:
        source: the microphone (or any 16 kHz) source.
        aec: the :class:`EchoCanceller`.
        barge_in: optional :class:`BargeInDetector`.

    Blocks keep their length when it is a multiple of 160 samples (the 0.1 s default blocks are); otherwise the
    cleaned audio lags by < 10 ms. Other attributes (``realtime``, ``dropped_s``, ``name``…) are the source's.
    """

    def __init__(self, source, aec: EchoCanceller, barge_in: BargeInDetector | None = None):
        self.source = source
        self.aec = aec
        self.barge_in = barge_in
        self.t = 0.0  # audio time of the next cleaned sample, s

    def __getattr__(self, name):
        return getattr(self.source, name)

    def on_played(self, samples: np.ndarray, sample_rate: int, latency_s: float) -> None:
        """``Player.reference`` sink: far end to the canceller (and the barge-in detector's arming)."""
        self.aec.on_played(samples, sample_rate, latency_s)
        if self.barge_in is not None:
            self.barge_in.far_level(samples, self.t + latency_s)

    def close(self) -> None:
        self.source.close()

    def __iter__(self):
        from .sources import AudioBlock

        for block in self.source:
            out = self.aec.process_near(block.samples)
            if not len(out):
                continue
            t0 = self.t
            self.t += len(out) / SR
            if self.barge_in is not None:
                self.barge_in(out, self.t)
            yield AudioBlock(out, t0, block.wall)
