"""Streaming Silero VAD (v6 ONNX, as shipped in faster-whisper) over 16 kHz blocks.

The ONNX session is faster-whisper's ``SileroVADModel``; the model consumes 512-sample chunks (32 ms) with 64
samples of left context and an LSTM state (h, c) carried from chunk to chunk. The end-pointing state machine is
Silero's ``VADIterator``: speech starts when p ≥ threshold, ends after ``min_silence_s`` with p < threshold − 0.15.

Undecided Silero (band-limited or synthetic speech): on telephone-band audio (300–3400 Hz, μ-law) Silero's p over
speech mostly lies between 0.3 and 0.5, so its threshold alone drops whole turns (bench conversation, telephone
condition). A chunk whose energy stands ``fallback_snr_db`` above the stream's noise floor counts as speech when p ≥
``fallback_threshold`` (lower than ``threshold``), both to open an utterance (after ``min_speech_s`` of such chunks)
and to hold it; below ``fallback_threshold`` Silero's own rule decides (no second hysteresis band under it: a
reverberant tail keeps its energy while p falls, and is not held once p is under ``fallback_threshold``). The noise
floor is a minimum tracker of the chunk energy (it follows a quieter chunk at once and rises by at most
``noise_rise_db_s`` per second, the simplest form of Martin's minimum statistics), so stationary noise and hum raise
the floor with them and do not pass the energy gate; babble alone is speech to Silero with or without the fallback.

Near-talker gate (``near_snr_db``): Silero hears speech near or far, so background babble (other talkers in a
café or a meeting room) holds an utterance open for as long as it lasts, up to the transcriber's longest utterance,
and the user's turn never ends. The gate first asks whether the background itself is speech: a running mean of
Silero's p over the floor-level chunks (within ``BACKGROUND_MARGIN_DB`` of the noise floor: silence, hum or noise in
a quiet room, babble in a crowded one) turns it on while it is ≥ ``BACKGROUND_SPEECH_ON``; quiet rooms, reverberation or
telephone lines leave it off, and the rules above decide alone. While it is on, the background level is the 10th
percentile of the chunk energies of the last ``BACKGROUND_S`` (quantile-based noise estimation, Stahl, Fischer &
Bippus, ICASSP 2000: steadier than the minimum tracker, which sits on a babble's momentary dips), and a chunk is
speech only when its level (mean power over ``NEAR_WINDOW_S``) stands ``near_snr_db`` above it, silence once it is
``NEAR_HYSTERESIS_DB`` further down; a level between holds an open utterance (hysteresis, as Silero's own p band).
``min_silence_s``, the pauses and the end-of-turn hook then end the near talker's turns as in quiet. Level gates of
this kind are what voice-agent frameworks use against background voices (pipecat's ``VADParams.min_volume``, an
absolute loudness); this one is relative to the measured background, so it needs no calibration to the microphone.

End of turn (optional ``turn_hook``, e.g. :class:`audio.turn.TurnDetector` — Smart Turn v3.2): at the "pause" event
(a short silence) the hook scores the utterance so far; when its "complete" probability is ≥ ``turn_threshold`` the
utterance ends right there, otherwise it ends after ``min_silence_s`` (then set long, e.g. 2–3 s) unless speech
resumes. Without a hook the behaviour is unchanged. An asynchronous ``verdict`` (a transcript-based judgement that
arrives while the silence goes on, e.g. the answering LLM's end-of-turn probability) sets the silence that ends the
utterance instead: the pause when complete, ``min_silence_s`` when not, ``unknown_silence_s`` until it comes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from audio.io import SAMPLE_RATE

CHUNK = 512  # samples at 16 kHz
CONTEXT = 64
# The near-talker gate (module docstring); values chosen on development sets (python -m bench.make_conversation
# --seed 7, 8 and 9, babble condition), never on the committed test set.
BACKGROUND_MARGIN_DB = 3.0  # a chunk within this many dB of the noise floor is floor-level sound (the background)
BACKGROUND_SPEECH_RATE = 0.03  # weight of each floor-level chunk's p in the running background-speech estimate
BACKGROUND_SPEECH_ON = 0.5  # the gate is on while that estimate is at least this
BACKGROUND_S = 5.0  # the background level is a quantile of the chunk energies of the last this many seconds ...
BACKGROUND_QUANTILE = 10.0  # ... this percentile of them (quantile-based noise estimation)
NEAR_WINDOW_S = 0.25  # the chunk level the gate compares is the mean power over this much audio (a syllable)
NEAR_HYSTERESIS_DB = 1.0  # an utterance is held down to this far under vad.near_snr_db


@dataclass(frozen=True)
class VadEvent:
    """A speech boundary. ``kind`` is "start", "pause" (silence began inside speech and has lasted the pad: the
    utterance ends at ``t`` unless speech resumes within ``min_silence_s``) or "end"; ``t`` is the audio time in
    seconds (start includes the pre-roll pad, clipped at the previous utterance's end so that two utterances never
    share audio; pause and end are the last speech sample plus the pad). With a
    ``turn_hook``, a "turn" event (same ``t`` as its pause, ``p`` = complete probability) follows each pause; an
    "end" at the same time follows it when the turn is judged complete."""

    kind: str
    t: float
    p: float | None = None  # "turn" events only: the end-of-turn model's probability that the turn is complete
    #: "end" events only: the last speech sample's time (seconds, no pad) — when the user stopped speaking
    speech_end: float | None = None


class StreamingVAD:
    """Feed float32 16 kHz blocks of any length; get speech start/end events and per-chunk probabilities.

    Args:
        model_path: Silero VAD ONNX file (role ``vad``).
        threshold: speech probability threshold.
        min_silence_s: silence that ends an utterance, seconds.
        min_speech_s: shorter speech bursts are dropped (no start event is emitted for them), seconds.
        speech_pad_s: padding added before the start and after the end, seconds.
        sample_rate: the blocks' rate, Hz; only :data:`audio.io.SAMPLE_RATE` (16 kHz) is accepted.
        pause_s: silence after which a "pause" event is raised, seconds (default: ``speech_pad_s``).
        turn_hook: ``f(audio) -> probability`` that the turn is complete, called at each pause with the float32
            16 kHz audio of the utterance (from its start, pad included, to now; at most ``turn_context_s``);
            None = no end-of-turn model.
        turn_threshold: a pause ends the utterance when the hook's probability is ≥ this.
        turn_context_s: audio handed to the hook, at most, seconds (Smart Turn reads 8 s).
        verdict: ``f(t) -> probability or None`` that the turn is complete, judged on a transcript covering the
            speech before audio time ``t`` (seconds: the start of the silence in progress), or None while no such
            verdict exists; asked from the pause on, at every chunk of the silence until one comes (it is computed
            elsewhere, e.g. by the answering LLM, and may arrive late). ≥ ``turn_threshold``: the utterance ends at
            once (at the pause); below: after ``min_silence_s``; none yet: after ``unknown_silence_s``.
        unknown_silence_s: with ``verdict``, the silence that ends an utterance no verdict has judged yet, seconds
            (default ``min_silence_s``).
        fallback_threshold: speech probability from which a chunk with clear energy counts as speech; None or ≥
            ``threshold`` = no fallback (Silero's threshold alone; the runtime passes ``vad.fallback_threshold``).
        fallback_snr_db: energy above the tracked noise floor that makes a chunk's energy clear, dB.
        noise_rise_db_s: how fast the noise floor may rise, dB per second.
        near_snr_db: the near-talker gate (module docstring): while the background is itself speech, a chunk
            is speech only when its level stands this many dB above the background level; None = no gate (the
            runtime passes ``vad.near_snr_db``, with 0 as None).

    Raises:
        ValueError: another ``sample_rate``.
    """

    def __init__(self, model_path: str | Path, threshold: float = 0.5, min_silence_s: float = 0.6,
                 min_speech_s: float = 0.25, speech_pad_s: float = 0.2, sample_rate: int = SAMPLE_RATE,
                 pause_s: float | None = None, turn_hook: Callable[[np.ndarray], float] | None = None,
                 turn_threshold: float = 0.5, turn_context_s: float = 8.0, fallback_threshold: float | None = None,
                 fallback_snr_db: float = 15.0, noise_rise_db_s: float = 3.0, near_snr_db: float | None = None,
                 verdict: Callable[[float], float | None] | None = None, unknown_silence_s: float | None = None):
        from faster_whisper.vad import SileroVADModel

        if sample_rate != SAMPLE_RATE:  # CHUNK and the model's state are for the engine's 16 kHz
            raise ValueError("StreamingVAD works on 16 kHz audio")
        self.session = SileroVADModel(str(model_path)).session
        self.threshold = threshold
        self.min_silence = int(min_silence_s * sample_rate)
        self.min_speech = int(min_speech_s * sample_rate)
        self.pad = int(speech_pad_s * sample_rate)
        # a "pause" event (a possible end of speech) once the silence has lasted this long (default: the pad, so
        # the audio up to the would-be end is available) — consumers can prepare the final transcript early
        self.pause = int((speech_pad_s if pause_s is None else pause_s) * sample_rate)
        self.sr = sample_rate
        self.turn_hook = turn_hook
        self.turn_threshold = turn_threshold
        self.turn_context = int(turn_context_s * sample_rate)
        self.verdict = verdict
        self.unknown_silence = int((min_silence_s if unknown_silence_s is None else unknown_silence_s) * sample_rate)
        self.fallback_threshold = threshold if fallback_threshold is None else min(fallback_threshold, threshold)
        self.fallback_snr_db = fallback_snr_db
        self.noise_rise = noise_rise_db_s * CHUNK / sample_rate  # dB per chunk
        self.near_snr_db = near_snr_db
        self.reset()

    def reset(self) -> None:
        self.h = np.zeros((1, 1, 128), np.float32)
        self.c = np.zeros((1, 1, 128), np.float32)
        self.context = np.zeros(CONTEXT, np.float32)
        self.pending = np.zeros(0, np.float32)
        self.n = 0  # samples consumed (chunk-aligned)
        self.in_speech = False
        self.candidate_start: int | None = None
        self.silence_start: int | None = None
        self.pause_sent = False
        self.last_prob = 0.0
        self.history: deque[np.ndarray] = deque()  # recent chunks, kept only with a turn hook
        self.utt_start = 0  # first sample of the current utterance (pad included)
        self.last_end = 0  # sample at which the previous utterance ended (pad included)
        self.last_turn: VadEvent | None = None  # the latest "turn" decision
        self.verdict_p: float | None = None  # the verdict on the silence in progress (``verdict``), once known
        self.noise_floor_db: float | None = None  # tracked minimum of the chunk energy (None before the first chunk)
        self.background_speech = 0.0  # running mean of p over floor-level chunks: is the background itself speech?
        self.background_db: float | None = None  # the background level while the gate is on (dB re full scale)
        self.recent_power: deque[float] = deque(maxlen=round(NEAR_WINDOW_S * self.sr / CHUNK))  # mean squares
        self.recent_db: deque[float] = deque(maxlen=round(BACKGROUND_S * self.sr / CHUNK))  # chunk energies, dB

    def probs(self, chunks: np.ndarray) -> np.ndarray:
        """Speech probability per 512-sample chunk; ``chunks`` (n, 512) consecutive; state is carried."""
        ctx = np.concatenate([self.context[None], chunks[:-1, -CONTEXT:]], 0)
        batch = np.concatenate([ctx, chunks], 1).astype(np.float32)
        out, self.h, self.c = self.session.run(None, {"input": batch, "h": self.h, "c": self.c})
        self.context = chunks[-1, -CONTEXT:].copy()
        return np.asarray(out).reshape(-1)

    def __call__(self, block: np.ndarray) -> list[VadEvent]:
        """Process a block; return the boundaries that became certain in it."""
        self.pending = np.concatenate([self.pending, np.asarray(block, np.float32)])
        n_chunks = len(self.pending) // CHUNK
        if n_chunks == 0:
            return []
        chunks = self.pending[: n_chunks * CHUNK].reshape(n_chunks, CHUNK)
        self.pending = self.pending[n_chunks * CHUNK :]
        events: list[VadEvent] = []
        if self.turn_hook is not None:
            self.history.extend(chunks)
            keep = (self.turn_context + self.pad) // CHUNK + 1
            while len(self.history) > keep:
                self.history.popleft()
        energy_db = 10.0 * np.log10(np.mean(chunks.astype(np.float64) ** 2, axis=1) + 1e-12)
        for i, p in enumerate(self.probs(chunks)):
            pos = self.n
            self.n += CHUNK
            self.last_prob = float(p)
            # clear sound that Silero is unsure of counts as speech (the fallback)
            clear_speech = self._clear_energy(float(energy_db[i])) and p >= self.fallback_threshold
            near, far = self._near_talker(float(energy_db[i]), float(p))
            # the gate's hysteresis: near opens an utterance, far closes it, a level between holds an open one
            if (p >= self.threshold or clear_speech) and (near or (self.in_speech and not far)):
                self.silence_start = None
                if not self.in_speech:
                    if self.candidate_start is None:
                        self.candidate_start = pos
                    if self.n - self.candidate_start >= self.min_speech:
                        self.in_speech = True
                        # the pad never reaches back into the previous utterance: after a short pause (an end of
                        # turn at a 0.2 s pause) the two would share audio and its words would be decoded twice
                        self.utt_start = max(0, self.last_end, self.candidate_start - self.pad)
                        events.append(VadEvent("start", self.utt_start / self.sr))
            elif p < self.threshold - 0.15 or far:
                if not self.in_speech:
                    self.candidate_start = None
                else:
                    if self.silence_start is None:
                        self.silence_start = pos
                        self.pause_sent = False
                        self.verdict_p = None
                    if not self.pause_sent and self.n - self.silence_start >= max(self.pause, CHUNK) \
                            and self.n - self.silence_start < self.min_silence:
                        self.pause_sent = True
                        events.append(VadEvent("pause", (self.silence_start + self.pad) / self.sr))
                        if self.turn_hook is not None and self._turn_complete(n_chunks - 1 - i, events):
                            continue
                    if self.verdict is not None and self._verdict_ends(events):
                        continue
                    if self.n - self.silence_start >= self.min_silence:
                        self._end_utterance(events)
        return events

    @property
    def silence_since(self) -> float | None:
        """Audio time (seconds) at which the silence inside the utterance in progress began, a silence that may yet
        become a "pause" or an "end"; None while speech goes on or outside an utterance."""
        if not self.in_speech or self.silence_start is None:
            return None
        return self.silence_start / self.sr

    def _clear_energy(self, energy_db: float) -> bool:
        """Update the noise floor with one chunk's energy (dB re full scale); True when the chunk stands
        ``fallback_snr_db`` or more above it."""
        floor = self.noise_floor_db
        floor = energy_db if floor is None else min(energy_db, floor + self.noise_rise)
        self.noise_floor_db = floor
        return energy_db - floor >= self.fallback_snr_db

    @property
    def near_gate(self) -> bool:
        """True while the near-talker gate is on: a gate was asked for and the background is speech to Silero."""
        return self.near_snr_db is not None and self.background_speech >= BACKGROUND_SPEECH_ON

    def _near_talker(self, energy_db: float, p: float) -> tuple[bool, bool]:
        """(near, far) for one chunk (its energy in dB re full scale, Silero's p), after :meth:`_clear_energy`
        updated the floor. near: the chunk's level (mean power over ``NEAR_WINDOW_S``) stands ``near_snr_db`` or more
        above the background level, which opens (or holds) an utterance; far: it is under ``near_snr_db -
        NEAR_HYSTERESIS_DB``, which counts as silence. Without the gate (none asked for, or a background that is not
        speech) every chunk is near and none is far: Silero's rule alone decides."""
        if self.near_snr_db is None:
            return True, False
        self.recent_power.append(10.0 ** (energy_db / 10.0))
        self.recent_db.append(energy_db)
        if energy_db - self.noise_floor_db < BACKGROUND_MARGIN_DB:
            self.background_speech += BACKGROUND_SPEECH_RATE * (p - self.background_speech)
        if not self.near_gate:
            self.background_db = None
            return True, False
        self.background_db = float(np.percentile(self.recent_db, BACKGROUND_QUANTILE))
        level = 10.0 * np.log10(np.mean(self.recent_power) + 1e-30) - self.background_db
        return level >= self.near_snr_db, level < self.near_snr_db - NEAR_HYSTERESIS_DB

    def _turn_complete(self, later: int, events: list[VadEvent]) -> bool:
        """Ask the hook about the utterance up to the current chunk (``later`` chunks of the history come after
        it); append the "turn" event and, when complete, the "end" event and close the utterance."""
        chunks = list(self.history)
        if later:
            chunks = chunks[:-later]
        audio = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
        n_utt = max(0, self.n - self.utt_start)
        audio = audio[-min(n_utt, self.turn_context):] if n_utt else audio[:0]
        p = float(self.turn_hook(audio))
        t = (self.silence_start + self.pad) / self.sr
        self.last_turn = VadEvent("turn", t, p)
        events.append(self.last_turn)
        if p < self.turn_threshold:
            return False
        self._end_utterance(events)
        return True

    def _verdict_ends(self, events: list[VadEvent]) -> bool:
        """The asynchronous end-of-turn rule (``verdict``): once the silence in progress has lasted the pause, ask
        for a verdict on the speech before it; a verdict ≥ ``turn_threshold`` ends the utterance at the pause,
        one below waits for ``min_silence_s`` (the longest pause), none yet waits for ``unknown_silence_s``. The
        first verdict on a silence is appended as a "turn" event; when the utterance ends here, the "end" event
        too. Returns whether it ended."""
        silence = self.n - self.silence_start
        if silence < max(self.pause, CHUNK):
            return False
        t = (self.silence_start + self.pad) / self.sr
        if self.verdict_p is None:
            p = self.verdict(self.silence_start / self.sr)
            if p is not None:
                self.verdict_p = float(p)
                self.last_turn = VadEvent("turn", t, self.verdict_p)
                events.append(self.last_turn)
        p = self.verdict_p
        need = self.unknown_silence if p is None else self.pause if p >= self.turn_threshold else self.min_silence
        if silence < need:
            return False
        self._end_utterance(events)
        return True

    def _end_utterance(self, events: list[VadEvent]) -> None:
        """Close the utterance at the silence's start plus the pad: append the "end" event."""
        self.last_end = self.silence_start + self.pad
        events.append(VadEvent("end", self.last_end / self.sr, speech_end=self.silence_start / self.sr))
        self.in_speech = False
        self.candidate_start = None
        self.silence_start = None

    def flush(self) -> list[VadEvent]:
        """End of stream: close an open utterance at the current time."""
        if self.in_speech:
            self.in_speech = False
            end = self.silence_start if self.silence_start is not None else self.n + len(self.pending)
            return [VadEvent("end", min(end + self.pad, self.n + len(self.pending)) / self.sr,
                             speech_end=end / self.sr)]
        return []
