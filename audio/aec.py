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
from collections import deque

import numpy as np

from audio.io import SAMPLE_RATE

SR = SAMPLE_RATE  # processing rate, Hz: the engine's
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
    """User speech over the assistant's voice, from the echo-cancelled microphone: a barge-in fires only on sound the
    far-end reference does not explain, and only while the far end is audible.

    Each 32 ms chunk (512 samples at 16 kHz) of the cleaned microphone is scored by the Silero VAD
    (``audio.vad.StreamingVAD.probs``, LSTM state carried). A barge-in fires on either path:

    * **VAD**: the speech probability stayed ≥ ``threshold`` for ``min_speech_s`` (whole chunks, 0.1 s → 4 chunks);
    * **double talk**, at the first chunk that has all of: probability ≥ ``low_threshold``; the canceller removed
      at most ``max_suppression_db`` of the raw microphone's energy (once AEC3 has converged it cuts echo alone by
      20–40 dB, while a near-end talker passes nearly unchanged); the cleaned chunk is ≥ ``min_snr_db`` above the
      cleaned stream's noise floor; and the detector has already heard ``warmup_s`` of audible far end in all.
      While AEC3 converges (the first 1–3 s of far end it ever hears, longer with a wrong delay hint) echo leaks
      through it in bursts that pass the energy checks, so only the VAD path can fire then.

    While AEC3 converges (the same ``warmup_s``) such a leak can also hold the VAD path's probability ≥ 0.5 for
    0.1 s. The VAD path then also needs, among its candidate's chunks, one the far end does not explain (else the
    candidate is dropped and the next chunk with p ≥ ``threshold`` starts a new one): a raw microphone chunk louder
    than the echo envelope (the loudest 10 ms of far end in the last ``explain_lag_s``, held with a
    ``reverb_decay_db_s`` decay) times the echo path's level ratio (the 90th percentile of raw level minus envelope
    over the chunks heard with a strong far end, learnt only from chunks it explains) by more than
    ``explain_margin_db``. The raw microphone holds the user on top of the echo, so a user well above the echo (a
    talker nearer the microphone than the loudspeaker) passes at once; one near the echo's level is heard only once
    the warm-up is over. Without raw samples the check is skipped.

    Why the second path: Silero needs 100–300 ms of a word before its probability reaches 0.5 (on the user's voice
    alone too: ``bench duplex``'s espeak voices, p90 ≈ 0.25–0.3 s), and AEC3's suppressor, which cuts the bands the
    echo dominates during double talk, lowers it further; the energy evidence is there from the first 32 ms.
    A barge-in is not retracted. After one, the detector re-arms once the probability stayed below
    ``max(0.05, min(threshold − 0.15, low_threshold − 0.1))`` for ``min_silence_s``. ``bench duplex`` measures it
    (row ``barge_dtd``).

    Args:
        vad_path: Silero VAD ONNX file (role ``vad``).
        on_barge_in: called (from the capture thread) with the audio time (s) of the detection: the end of the
            cleaned block in which it fired.
        min_speech_s: VAD path: speech (p ≥ ``threshold``) needed to fire, s (rounded up to whole chunks).
        threshold: VAD path: Silero probability threshold.
        hold_s: the detector stays armed this long after the last audible far-end frame, s (echo tail).
        low_threshold: double-talk path: Silero probability needed; 1.0 or more turns the path off.
        max_suppression_db: double-talk path: fails when the cleaned chunk is more than this many dB below the raw
            microphone chunk (the canceller explained most of it as echo). Skipped when no raw samples are given.
        min_snr_db: double-talk path: fails when the cleaned chunk is less than this many dB above the cleaned
            stream's noise floor (tracked per chunk: follows a drop at once, rises 0.05 dB a chunk).
        min_silence_s: silence after which a new barge-in can fire, s.
        warmup_s: double-talk path: audible far end (armed chunks, in all since the detector was made) needed
            before it can fire, s; the VAD path's echo-envelope check applies before it. One detector per
            canceller: both start together.
        explain_margin_db: the echo-envelope check's margin, dB; None turns the check off.
        explain_lag_s: the far end counted in the envelope: played up to this long before the chunk, s (the
            echo delay after the far end's play time may be anything up to it).
        reverb_decay_db_s: the envelope's decay, dB/s (75: an RT60 of 0.8 s).

    Attributes:
        last: audio time (s) of the latest barge-in, or None.
        last_path: "vad" or "double_talk": the path of the latest barge-in, or None.
        last_p: Silero probability of the latest chunk.
        armed: the far end was audible at the end of the latest block (a barge-in could fire there).
        speech_onset: audio time (s) at which the speech the detector is in began (the first chunk of its VAD
            candidate, or the double-talk chunk), or None when it is not in speech. Speech that began while the far
            end was audible is in speech only once it fired a barge-in; :class:`EchoGatedVAD` relies on that.
        speech_barged: the speech the detector is in fired a barge-in.
    """

    CHUNK = 512  # Silero chunk, samples at 16 kHz
    FLOOR_RISE_DB = 0.05  # noise-floor tracker: rise per chunk, dB
    STRONG_FAR_DB = -45.0  # far-end envelope (dBFS) above which a chunk teaches the echo path's level ratio
    HISTORY = 300  # strong-far-end chunks (9.6 s) whose level ratios are kept
    MIN_RATIOS = 8  # such chunks needed before the envelope check can say "unexplained"
    RATIO_PERCENTILE = 90  # the echo path's level ratio: this percentile of the ratios (the envelope is a max)

    def __init__(self, vad_path, on_barge_in, min_speech_s: float = 0.1, threshold: float = 0.5,
                 hold_s: float = 0.5, low_threshold: float = 0.15, max_suppression_db: float = 10.0,
                 min_snr_db: float = 25.0, min_silence_s: float = 0.6, warmup_s: float = 3.0,
                 explain_margin_db: float = 6.0, explain_lag_s: float = 0.3, reverb_decay_db_s: float = 75.0):
        from .vad import StreamingVAD

        self.vad = StreamingVAD(vad_path, threshold=threshold)  # its probs() only: the state machine is below
        self.on_barge_in = on_barge_in
        self.hold = hold_s
        self.threshold = threshold
        self.low_threshold = low_threshold
        self.max_suppression_db = max_suppression_db
        self.min_snr_db = min_snr_db
        self.min_speech = max(1, int(np.ceil(min_speech_s * SR / self.CHUNK - 1e-9)))  # chunks
        self.min_silence = max(1, int(np.ceil(min_silence_s * SR / self.CHUNK)))  # chunks
        self.warmup = int(np.ceil(warmup_s * SR / self.CHUNK))  # armed chunks
        self._armed_chunks = 0
        self.explain_margin_db = explain_margin_db
        self.explain_lag = explain_lag_s
        self.decay = reverb_decay_db_s * self.CHUNK / SR  # dB per chunk
        self._far: deque[tuple[float, float]] = deque()  # (start, microphone audio time s; mean square) per 10 ms
        self._env: float | None = None  # echo envelope of the latest chunk, dBFS of the far end
        self._ratios: deque[float] = deque(maxlen=self.HISTORY)  # raw mic dB − envelope dB, strong far end
        self._raw_floor: float | None = None
        self._unexplained = 0  # unexplained chunks in the VAD path's current candidate
        self.far_active_until = -1.0  # audio time (s) until which the far end counts as audible
        self.last: float | None = None  # audio time of the latest barge-in
        self.last_path: str | None = None
        self.last_p = 0.0
        self.armed = False  # the far end was audible at the end of the latest block
        self.speech_onset: float | None = None  # audio time (s) the current speech began (None: not in speech)
        self.speech_barged = False  # the current speech fired a barge-in
        self._clean = np.zeros(0, np.float32)
        self._raw: np.ndarray | None = np.zeros(0, np.float32)
        self._floor: float | None = None
        self._in_speech = False
        self._n = 0  # chunks scored
        self._cand: int | None = None  # VAD path: first chunk of the speech candidate
        self._silence = 0  # consecutive silent chunks while in speech

    def far_level(self, samples: np.ndarray, t_now: float, sample_rate: int = SR) -> None:
        """Note a far-end block (float32 mono at ``sample_rate`` Hz) whose first sample plays at about ``t_now``
        (microphone audio time, s): it arms the detector and its level per 10 ms is kept for the echo envelope."""
        x = np.asarray(samples, np.float32).reshape(-1)
        if len(x) and float(np.max(np.abs(x))) > 1e-3:
            self.far_active_until = t_now + self.hold
        if self._armed_chunks >= self.warmup or self.explain_margin_db is None:
            self._far.clear()
            return  # the echo envelope serves the warm-up only
        step = max(1, sample_rate // 100)
        for i in range(0, len(x) - step + 1, step):
            self._far.append((t_now + i / sample_rate, float(np.mean(np.square(x[i:i + step], dtype=np.float64)))))
        while self._far and self._far[0][0] < t_now - self.explain_lag - 1.0:
            self._far.popleft()

    def _explained(self, raw_db: float, t_chunk_end: float) -> bool:
        """Echo-envelope check of the raw microphone chunk (level ``raw_db``, dBFS) ending at ``t_chunk_end``
        (microphone audio time, s).

        The envelope is the loudest 10 ms of far end played in the ``explain_lag_s`` before the chunk (the echo
        delay is not known, so any delay up to that is allowed), held and decaying at ``reverb_decay_db_s`` (the
        room's tail). The echo path's level ratio is the 90th percentile of raw level − envelope over the chunks
        heard with a strong far end so far, the first ``MIN_RATIOS`` of them and then those it explained. False
        (unexplained) when the raw level exceeds envelope + ratio + ``explain_margin_db``, or when there is no far
        end worth the name in the envelope; True while the ratio is not known yet."""
        lo = t_chunk_end - self.CHUNK / SR - self.explain_lag
        far = max((e for t, e in self._far if lo <= t < t_chunk_end), default=0.0)
        far = 10.0 * float(np.log10(far + 1e-10))
        self._env = far if self._env is None else max(far, self._env - self.decay)
        env = self._env
        known = len(self._ratios) >= self.MIN_RATIOS
        explained = not known or raw_db <= env + float(np.percentile(self._ratios, self.RATIO_PERCENTILE)) + \
            self.explain_margin_db
        if explained and self._raw_floor is not None and env >= self.STRONG_FAR_DB and \
                raw_db >= self._raw_floor + 10.0:
            self._ratios.append(raw_db - env)  # learnt from the echo only: not from what it does not explain
        return explained and env >= self.STRONG_FAR_DB - 20.0

    @staticmethod
    def _db(x: np.ndarray) -> float:
        return 10.0 * float(np.log10(np.mean(np.asarray(x, np.float64) ** 2) + 1e-10))

    def __call__(self, cleaned: np.ndarray, t_end: float, raw: np.ndarray | None = None) -> bool:
        """Feed a cleaned microphone block (float32, 16 kHz) ending at audio time ``t_end`` (s), with the raw
        microphone samples it was cleaned from (same length, sample-aligned; None: the suppression part of the
        double-talk check is skipped). True when a barge-in fired in it (``on_barge_in`` was called)."""
        cleaned = np.asarray(cleaned, np.float32).reshape(-1)
        self._clean = np.concatenate([self._clean, cleaned])
        if raw is None or self._raw is None:
            self._raw = None
        else:
            raw = np.asarray(raw, np.float32).reshape(-1)
            if len(raw) != len(cleaned):
                raise ValueError(f"raw ({len(raw)}) and cleaned ({len(cleaned)}) lengths differ")
            self._raw = np.concatenate([self._raw, raw])
        n = len(self._clean) // self.CHUNK
        if n == 0:
            return False
        chunks = self._clean[: n * self.CHUNK].reshape(n, self.CHUNK)
        raws = None if self._raw is None else self._raw[: n * self.CHUNK].reshape(n, self.CHUNK)
        self._clean = self._clean[n * self.CHUNK:]
        if self._raw is not None:
            self._raw = self._raw[n * self.CHUNK:]
        fired = False
        armed = t_end <= self.far_active_until
        t_last = t_end - len(self._clean) / SR  # end of the last whole chunk
        for i, p in enumerate(self.vad.probs(chunks)):
            p = float(p)
            self.last_p = p
            ec = self._db(chunks[i])
            self._floor = ec if self._floor is None else min(ec, self._floor + self.FLOOR_RISE_DB)
            converging = self._armed_chunks < self.warmup
            explained = False
            if raws is not None and self.explain_margin_db is not None and converging:
                er = self._db(raws[i])
                self._raw_floor = er if self._raw_floor is None else min(er, self._raw_floor + self.FLOOR_RISE_DB)
                explained = self._explained(er, t_last - (n - 1 - i) * self.CHUNK / SR)
            double_talk = self._armed_chunks >= self.warmup and ec - self._floor >= self.min_snr_db and (
                raws is None or self._db(raws[i]) - ec <= self.max_suppression_db)
            if armed:
                self._armed_chunks += 1
            fast = p >= self.low_threshold and double_talk
            idx = self._n
            self._n += 1
            if not self._in_speech:
                # VAD path as audio.vad.StreamingVAD starts: a candidate from the first p ≥ threshold chunk, dropped
                # below threshold − 0.15, speech once it spans min_speech chunks
                if p >= self.threshold:
                    if self._cand is None:
                        self._cand, self._unexplained = idx, 0
                elif p < self.threshold - 0.15:
                    self._cand = None
                if self._cand is not None and not explained:
                    self._unexplained += 1
                vad = self._cand is not None and p >= self.threshold and idx + 1 - self._cand >= self.min_speech
                if vad and converging and armed and self.explain_margin_db is not None and self._unexplained == 0:
                    vad, self._cand = False, None  # while AEC3 converges: leaked echo, the far end explains it
                if vad or fast:
                    # onset: the first chunk of the VAD candidate, or this chunk for the double-talk path
                    first = self._cand if vad and self._cand is not None else idx
                    self.speech_onset = t_last - (n - i) * self.CHUNK / SR - (idx - first) * self.CHUNK / SR
                    self._in_speech, self._cand, self._silence = True, None, 0
                    self.speech_barged = armed
                    if armed and not fired:
                        fired = True
                        self.last_path = "vad" if vad else "double_talk"
            elif p >= self.threshold or fast:
                self._silence = 0
            elif p < max(0.05, min(self.threshold - 0.15, self.low_threshold - 0.1)):
                self._silence += 1
                if self._silence >= self.min_silence:
                    self._in_speech, self._silence, self.speech_onset, self.speech_barged = False, 0, None, False
        self.armed = armed
        if fired:
            self.last = t_end
            self.on_barge_in(t_end)
        return fired


class EchoGatedVAD:
    """The utterance VAD of an echo-cancelled microphone, steered by its :class:`BargeInDetector`: while the far end
    is audible, speech starts only once the detector has heard the user, and an utterance the user began by barging
    in starts where the detector heard them begin.

    Why, (1): the utterance VAD (``audio.vad.StreamingVAD`` on the cleaned microphone) knows nothing of the
    loudspeaker. While AEC3 converges (the first seconds of far end) the echo it leaks holds Silero near 0.5 (0.49
    measured in the app's talk-over test); a start there is a barge-in with none of the detector's echo checks — the
    answer stops, and the assistant's own words become a "user" utterance that is transcribed and answered. The
    detector scores the same cleaned chunks with the same Silero model, so after its warm-up it is in speech before
    the VAD starts (0.1 s against the VAD's 0.25 s); a start it has not confirmed is echo until shown otherwise.

    Why, (2): during double talk AEC3's suppressor cuts the user's first words along with the echo (until the
    barge-in has stopped playback and the room's echo has died away), so the VAD reaches 0.5 for 0.25 s only
    later — up to a word later, beyond the ASR's pre-roll: "Hold on, can you repeat…" was transcribed "Can you
    repeat…". The detector's double-talk path hears the user in the first 32 ms chunk.

    The rules, with ``onset`` the detector's speech onset (``speech_onset``) less the VAD's pad, never before the
    end of the VAD's previous utterance:

    * a "start" while the far end is audible (``detector.armed``) is held, with the events after it, until the
      detector is in speech (a barge-in, or speech that began with no far end): released at ``onset`` (the echo
      before the user's first word is not decoded as theirs; the user's first word is); the held "pause"/"turn"
      events are dropped (pauses in the echo) — or until the far end has gone quiet (``armed`` False) while the VAD
      still hears speech (p ≥ its threshold): released as it was, no echo explains it — or until the VAD ends the
      utterance, or the stream ends: it was echo, every held event is dropped (``dropped`` counts them);
    * a "start" while the far end is quiet, in speech that fired a barge-in (``detector.speech_barged``): moved back
      to ``onset`` when that is earlier;
    * everything else passes unchanged.

    Call it exactly like the VAD, on the same blocks, after the detector has scored them (``EchoCancelledSource``
    runs the detector before it yields a block). Other attributes are the wrapped VAD's.

    Args:
        vad: the utterance VAD (``audio.vad.StreamingVAD``).
        detector: the :class:`BargeInDetector` watching the same cleaned stream.

    Attributes:
        dropped: utterances dropped as echo.
        moved: starts moved to the detector's onset (earlier or later).
    """

    def __init__(self, vad, detector: BargeInDetector):
        self.vad = vad
        self.detector = detector
        self._held: list | None = None  # events of an unconfirmed utterance, its start first
        self.dropped = 0
        self.moved = 0

    def __getattr__(self, name):
        if name == "vad":  # not set yet (copy, pickle): no recursion through the line below
            raise AttributeError(name)
        return getattr(self.vad, name)

    def _onset(self) -> float | None:
        """The detector's speech onset less the VAD's pad, not before the VAD's previous utterance ended (s)."""
        if self.detector.speech_onset is None:
            return None
        floor = getattr(self.vad, "last_end", 0) / self.vad.sr
        return max(floor, self.detector.speech_onset - self.vad.pad / self.vad.sr)

    def _start_at(self, start, t: float | None):
        from dataclasses import replace

        if t is None or abs(t - start.t) < 1e-6:
            return start
        self.moved += 1
        self.vad.utt_start = int(round(t * self.vad.sr))  # the end-of-turn model reads the utterance from there
        return replace(start, t=t)

    def _confirm(self, out: list) -> None:
        """Release a held start the detector has confirmed (it is in speech: it heard the user)."""
        if self._held is not None and self.detector.speech_onset is not None:
            out.append(self._start_at(self._held[0], self._onset()))
            self._held = None

    def _gate(self, events: list) -> list:
        out: list = []
        self._confirm(out)  # the detector scored this block before the VAD: a confirmation in it comes first
        for ev in events:
            if self._held is not None:
                if ev.kind == "end":
                    self._held, self.dropped = None, self.dropped + 1
                else:
                    self._held.append(ev)
            elif ev.kind == "start" and self.detector.armed:
                self._held = [ev]
                self._confirm(out)
            elif ev.kind == "start" and self.detector.speech_barged:
                onset = self._onset()
                out.append(self._start_at(ev, onset if onset is not None and onset < ev.t else None))
            else:
                out.append(ev)
        if self._held is not None and not self.detector.armed and self.vad.last_prob >= self.vad.threshold:
            out.append(self._held[0])
            self._held = None
        return out

    def __call__(self, block: np.ndarray) -> list:
        """As ``StreamingVAD.__call__``: the boundaries that became certain in ``block``, starts steered as above."""
        return self._gate(self.vad(block))

    def flush(self) -> list:
        """End of stream: as ``StreamingVAD.flush``; an utterance still held is dropped (nothing confirmed it)."""
        return self._gate(self.vad.flush())


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
        self._raw_pending = np.zeros(0, np.float32)  # raw samples the canceller has not returned yet

    def __getattr__(self, name):
        return getattr(self.source, name)

    def on_played(self, samples: np.ndarray, sample_rate: int, latency_s: float) -> None:
        """``Player.reference`` sink: far end to the canceller (and the barge-in detector's arming)."""
        self.aec.on_played(samples, sample_rate, latency_s)
        if self.barge_in is not None:
            self.barge_in.far_level(samples, self.t + latency_s, sample_rate)

    def close(self) -> None:
        self.source.close()

    def __iter__(self):
        from .sources import AudioBlock

        for block in self.source:
            out = self.aec.process_near(block.samples)
            if not len(out):
                continue
            raw = self._raw_pending = np.concatenate([self._raw_pending, np.asarray(block.samples, np.float32)])
            self._raw_pending = raw[len(out):]  # the cleaned samples are the oldest buffered raw ones
            t0 = self.t
            self.t += len(out) / SR
            if self.barge_in is not None:
                self.barge_in(out, self.t, raw[:len(out)])
            yield AudioBlock(out, t0, block.wall)
