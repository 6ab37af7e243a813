"""Length-scaled Whisper encoding, decode guards, and splitting of audio longer than one window.

Whisper's encoder is trained on 30 s windows (3000 mel frames → 1500 encoder frames), and faster-whisper pads
every input to that length; a streaming update over 3 s of buffered audio then pays for 30 s. The CTranslate2
encoder (and the torch port, by slicing ``embed_positions``) accepts fewer frames, so the cost follows the audio
(whisper.cpp's ``audio_ctx`` does the same). Whisper was never trained on short contexts, though: without silence
after the speech the decoder ends late, repeats or drops words. :class:`WindowPolicy` therefore encodes the
audio plus a *margin of silence* (default 4 s) and never less than ``min_s`` (the product's default is 10 s,
``asr.encoder_min_s``); :class:`DecodeGuard` checks every decode (token cap, repetition, compression ratio, mean
log-prob, no-speech probability) and the backend redoes a failed decode on the padded 30 s window and, if it had a
prompt, once more without it (Whisper can collapse under its prompt); a loop that survives that is cut at
its first repetition, never emitted. :func:`split_point` cuts audio longer than one window at its quietest
moment so nothing is truncated.

Units: audio is float32 mono at 16 kHz; mel frames are 10 ms (160 samples); encoder frames 20 ms.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from audio.io import SAMPLE_RATE

HOP = 160  # samples per mel frame (10 ms)
MAX_FRAMES = 3000  # mel frames in Whisper's 30 s window
MAX_WINDOW_S = MAX_FRAMES * HOP / SAMPLE_RATE  # 30.0


@dataclass(frozen=True)
class WindowPolicy:
    """How many mel frames the encoder sees for ``n`` samples of audio.

    Attributes:
        mode: "scaled" (audio + margin, at least ``min_s``, rounded up to ``bucket_s``) or "padded" (always 30 s).
        margin_s: seconds of silence after the audio (scaled mode).
        min_s: shortest window, seconds (scaled mode; ≥ 2 s keeps clear of the 80-encoder-frame case).
        bucket_s: window lengths are rounded up to a multiple of this (seconds).
        max_audio_s: the longest audio one window decodes; longer audio is split (:func:`split_point`), seconds.
    """

    mode: str = "scaled"
    margin_s: float = 4.0
    min_s: float = 10.0
    bucket_s: float = 0.5
    max_audio_s: float = 28.0

    def __post_init__(self):
        if self.mode not in ("scaled", "padded"):
            raise ValueError(f"encoder window mode must be 'scaled' or 'padded', not {self.mode!r}")

    def n_frames(self, n_samples: int) -> int:
        """Mel frames (even, ≤ 3000) for ``n_samples`` of audio; 3000 in padded mode.

        Raises:
            ValueError: more audio than one 30 s window holds.
        """
        if n_samples > MAX_FRAMES * HOP:
            raise ValueError(f"{n_samples / SAMPLE_RATE:.1f} s of audio do not fit one 30 s encoder window")
        if self.mode == "padded":
            return MAX_FRAMES
        seconds = max(n_samples / SAMPLE_RATE + self.margin_s, self.min_s, 2.0)
        seconds = math.ceil(seconds / self.bucket_s - 1e-9) * self.bucket_s
        frames = int(round(seconds * SAMPLE_RATE / HOP))
        frames += frames % 2
        if frames == 160:  # 80 encoder frames: a known bad case of some Whisper builds
            frames = 162
        return min(MAX_FRAMES, frames)


def log_mel(feature_extractor, audio: np.ndarray, n_frames: int) -> np.ndarray:
    """Whisper log-mel features of ``audio`` followed by zeros, exactly ``n_frames`` frames.

    The frames that hold audio equal those of the 30 s padded window (the log-mel floor is taken from the maximum,
    which silence does not change), so a scaled window differs from the padded one only in its length.

    Args:
        feature_extractor: faster-whisper ``FeatureExtractor``.
        audio: float32 (n,) at 16 kHz, n ≤ n_frames * 160.
        n_frames: mel frames (10 ms each).

    Returns:
        float32 (n_mels, n_frames).

    Raises:
        ValueError: the audio is longer than the window.
    """
    audio = np.asarray(audio, np.float32)
    if len(audio) > n_frames * HOP:
        raise ValueError(f"{len(audio)} samples do not fit {n_frames} mel frames")
    feats = feature_extractor(audio, padding=n_frames * HOP - len(audio))
    return np.ascontiguousarray(feats[:, :n_frames], dtype=np.float32)


def compression_ratio(text: str) -> float:
    """gzip compression ratio of the UTF-8 text (Whisper's repetition test: > 2.4 means a loop)."""
    b = text.encode("utf-8")
    return len(b) / len(zlib.compress(b)) if b else 0.0


def loop_start(tokens: Sequence, min_repeats: int = 3, min_span: int = 10, max_period: int = 24) -> int | None:
    """Index where a repetition loop starts, or None.

    A loop is a block of ``p`` tokens (1 ≤ p ≤ ``max_period``) repeated at least ``min_repeats`` times in a row and
    covering at least ``min_span`` tokens (so "no, no, no" is speech, "Yeah. Yeah. Yeah. Yeah. Yeah." is a loop).
    The index returned is the start of the second copy: ``tokens[:i]`` keeps the first occurrence.

    Args:
        tokens: token ids or words.
    """
    n = len(tokens)
    best: int | None = None
    for p in range(1, min(max_period, n // min_repeats) + 1):
        run = 0  # consecutive i with tokens[i] == tokens[i + p]
        for i in range(n - p):
            if tokens[i] == tokens[i + p]:
                run += 1
                covered = run + p  # tokens in the repeated stretch
                if covered >= p * min_repeats and covered >= min_span:
                    start = i - run + 1
                    cut = start + p
                    if best is None or cut < best:
                        best = cut
                    break
            else:
                run = 0
    return best


def tail_repeat(tokens: Sequence, min_period: int = 4) -> int | None:
    """Index where an exact repeat of the preceding block of ≥ ``min_period`` tokens ends the sequence (the
    decoder said the last phrase twice: "And so my fellow Americans. And so my fellow Americans."), or None.
    ``tokens[:i]`` keeps the first copy."""
    n = len(tokens)
    for p in range(min_period, n // 2 + 1):
        if list(tokens[n - 2 * p : n - p]) == list(tokens[n - p :]):
            return n - p
    return None


@dataclass(frozen=True)
class GuardVerdict:
    """``ok``: the decode may be emitted; ``reason``: "" or the first failed check ("cap", "loop",
    "compression", "logprob", "no_speech")."""

    ok: bool
    reason: str = ""


@dataclass(frozen=True)
class DecodeGuard:
    """Checks on every decode of every method (SSD, SpecASR, AR).

    Attributes:
        tokens_per_s, tokens_base: token cap = tokens_per_s · audio seconds + tokens_base.
        compression_ratio: gzip ratio above which a text is a loop (Whisper: 2.4), tested from 40 characters.
        logprob: mean token log-prob below which the decode is unreliable (Whisper: −1.0).
        no_speech: no-speech probability above which a low-log-prob window is silence (Whisper: 0.6).
    """

    tokens_per_s: float = 6.0
    tokens_base: int = 24
    compression_ratio: float = 2.4
    logprob: float = -1.0
    no_speech: float = 0.6

    def token_cap(self, audio_s: float) -> int:
        """Most text tokens a decode of ``audio_s`` seconds may produce (≤ 220: Whisper's 448-token context)."""
        return int(min(220, self.tokens_per_s * max(audio_s, 0.0) + self.tokens_base))

    def check(self, tokens: Sequence[int], text: str, audio_s: float, avg_logprob: float | None = None,
              no_speech_prob: float | None = None) -> GuardVerdict:
        """Whether a decode of ``audio_s`` seconds may be emitted (the order of the checks is the reason's)."""
        if no_speech_prob is not None and avg_logprob is not None and no_speech_prob > self.no_speech \
                and avg_logprob < self.logprob:
            return GuardVerdict(False, "no_speech")
        if len(tokens) >= self.token_cap(audio_s):
            return GuardVerdict(False, "cap")
        if loop_start(list(tokens)) is not None or loop_start(text.split(), min_span=6) is not None \
                or tail_repeat(list(tokens)) is not None:
            return GuardVerdict(False, "loop")
        if len(text) >= 40 and compression_ratio(text) > self.compression_ratio:
            return GuardVerdict(False, "compression")
        if avg_logprob is not None and avg_logprob < self.logprob:
            return GuardVerdict(False, "logprob")
        return GuardVerdict(True)

    def cut(self, tokens: Sequence[int], audio_s: float) -> list[int]:
        """The last resort: ``tokens`` without their loop (first occurrence kept) and within the token cap."""
        out = list(tokens)
        i = loop_start(out)
        if i is not None:
            out = out[:i]
        j = tail_repeat(out)
        if j is not None:
            out = out[:j]
        return out[: self.token_cap(audio_s)]


def split_point(audio: np.ndarray, max_s: float, min_s: float | None = None, frame_s: float = 0.1) -> int:
    """Where to cut audio longer than one window: the start of the quietest ``frame_s`` frame between ``min_s``
    (default 60 % of ``max_s``) and ``max_s`` seconds (a pause, or the softest moment of continuous speech).

    Returns:
        the cut, in samples (0 < cut ≤ max_s · SAMPLE_RATE).
    """
    min_s = 0.6 * max_s if min_s is None else min_s
    hop = int(frame_s * SAMPLE_RATE)
    lo, hi = int(min_s * SAMPLE_RATE), min(len(audio), int(max_s * SAMPLE_RATE))
    if hi - lo < hop:
        return max(1, hi)
    seg = np.asarray(audio[lo:hi], np.float32)
    n = len(seg) // hop
    energy = (seg[: n * hop].reshape(n, hop) ** 2).mean(axis=1)
    return lo + int(np.argmin(energy)) * hop + hop // 2


def skipped_regions(audio: np.ndarray, words: Sequence, min_gap_s: float = 1.0, min_speech_s: float = 0.5,
                    max_word_s: float = 1.5, frame_s: float = 0.05,
                    rel_level: float = 0.3) -> list[tuple[float, float, int | None]]:
    """Stretches of a window with speech energy but no decoded word: Whisper sometimes skips a sentence.

    A stretch is the audio before the first word, between two consecutive words or after the last word, at least
    ``min_gap_s`` long; or one word that the alignment stretched over more than ``max_word_s`` (the skipped
    speech is then inside it). It counts if it holds ≥ ``min_speech_s`` seconds of frames louder than
    ``rel_level`` × the window's 90th-percentile frame RMS.

    Args:
        audio: float32 (n,) at 16 kHz; words: objects with ``start``/``end`` in seconds from the window start.

    Returns:
        (start_s, end_s, index) triples in time order; ``index`` is the stretched word's index, or None for a gap.
    """
    hop = int(frame_s * SAMPLE_RATE)
    n = len(audio) // hop
    if n == 0:
        return []
    rms = np.sqrt((np.asarray(audio[: n * hop], np.float32).reshape(n, hop) ** 2).mean(axis=1))
    level = rel_level * float(np.percentile(rms, 90))
    if level <= 1e-4:
        return []
    loud = rms > level

    def speechy(a: float, b: float) -> bool:
        i, j = int(a / frame_s), min(n, int(np.ceil(b / frame_s)))
        return loud[i:j].sum() * frame_s >= min_speech_s

    out: list[tuple[float, float, int | None]] = []
    prev_end = 0.0
    for k, w in enumerate(words):
        a, b = float(w.start), float(w.end)
        if a - prev_end >= min_gap_s and speechy(prev_end, a):
            out.append((prev_end, a, None))
        if b - a > max_word_s and speechy(a, b):
            out.append((a, b, k))
        prev_end = max(prev_end, b)
    end = len(audio) / SAMPLE_RATE
    if end - prev_end >= min_gap_s and speechy(prev_end, end):
        out.append((prev_end, end, None))
    return out


def quietest_word_boundary(audio: np.ndarray, t0: float, words: Sequence, earliest: float, span_s: float,
                           min_tail_s: float, frame_s: float = 0.1) -> float | None:
    """The quietest boundary between two consecutive ``words`` (a decode's words, audio times in seconds) to cut
    ``audio`` at: the one of least mean energy over the ``frame_s`` seconds around it (a decode's word times can be
    off; a gap between words is quiet) between ``span_s`` and ``min_tail_s`` seconds before the audio's end, else
    the quietest anywhere after ``earliest`` + 0.1 s and at least 0.2 s before the end.

    Args:
        audio: float32 16 kHz samples, (n,), starting at the audio time ``t0`` (seconds).
        words: objects with ``start`` and ``end`` (seconds), in order.
        earliest: audio time (seconds) no cut may come before (plus 0.1 s).

    Returns:
        the boundary's audio time (seconds), or None when no boundary qualifies.
    """
    end = t0 + len(audio) / SAMPLE_RATE
    bounds = [min(a.end, b.start) if b.start > a.start else a.end for a, b in zip(words, words[1:])]
    bounds = [t for t in bounds if earliest + 0.1 <= t <= end - 0.2]
    near = [t for t in bounds if end - span_s <= t <= end - min_tail_s]
    half = int(frame_s * SAMPLE_RATE / 2)

    def energy(t: float) -> float:
        i = int(round((t - t0) * SAMPLE_RATE))
        seg = audio[max(0, i - half): i + half]
        return float(np.mean(seg.astype(np.float64) ** 2)) if len(seg) else np.inf

    return min(near or bounds, key=energy) if near or bounds else None
