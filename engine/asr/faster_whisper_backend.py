"""Whisper's own long-form decoding (faster-whisper on CTranslate2) as a streaming backend: the second pass's decoder
(:class:`engine.asr.offline_window_pass.OfflineWindowPass` decodes the stream with it as offline Whisper does) and
the benchmarks' offline reference."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from audio.io import SAMPLE_RATE
from engine.asr.backend import ASRBackend, BackendResult, WindowASRBackend
from engine.asr.tokenizer import repair_model_tokenizer
from engine.core.events import Word


# Whisper's hallucination heuristics (openai-whisper ``transcribe``, faster-whisper ``generate_segments`` with
# ``hallucination_silence_threshold``): a word is anomalous when improbable, squeezed into a few frames or stretched
_PUNCTUATION = "\"'“¿([{-\"'.。,，!！?？:：”)]}、"
EDGE_S = 2.0  # Whisper's: a segment this close to its window's start or end has no speech on that side


def word_anomaly(w) -> float:
    """Whisper's anomaly score of one word (``probability``, ``start``/``end`` in seconds): +1 below probability
    0.15, +15 per second below 0.133 s long, +1 per second above 2 s."""
    d = w.end - w.start
    return (1.0 if w.probability < 0.15 else 0.0) + max(0.0, 0.133 - d) * 15 + max(0.0, d - 2.0)


def segment_anomalous(words) -> bool:
    """Whisper's test of a segment: its first 8 words (punctuation aside) score 3 or more, or about 1 each."""
    ws = [w for w in words if w.word.strip(" ") not in _PUNCTUATION][:8]
    score = sum(word_anomaly(w) for w in ws)
    return bool(ws) and (score >= 3 or score + 0.01 >= len(ws))


def unheard_segments(segments, frames_per_s: float, audio_s: float) -> list[bool]:
    """Which ``segments`` (faster-whisper's, with word timestamps; those of one call, in order) are hallucinations by
    Whisper's own rule (``hallucination_silence_threshold``, here :data:`EDGE_S`): an anomalous segment
    (:func:`segment_anomalous`) with no speech before it (a gap of more than :data:`EDGE_S` seconds since the last
    kept segment, or it starts within :data:`EDGE_S` of its window's start) and none after it (a gap of more than
    :data:`EDGE_S` to the next segment of its window, the next one anomalous too, or it ends within :data:`EDGE_S`
    of the end of the audio its window holds). Unlike Whisper, a window's end is where its audio ends (``audio_s``
    seconds after the start of the call at most), not 30 s after its start: the short last window of a recording,
    nearly all padding, is where Whisper writes a sentence from its prompt, aligned into its last frames."""
    out = [False] * len(segments)
    last_end = 0.0
    for i, s in enumerate(segments):
        if not s.words:
            continue
        offset = s.seek / frames_per_s
        window_end = min(offset + 30.0, audio_s)
        if segment_anomalous(s.words):
            nxt = next((t for t in segments[i + 1:] if t.words and t.seek == s.seek), None)
            before = s.start - last_end > EDGE_S or s.start - offset < EDGE_S
            after = ((nxt.start if nxt is not None else window_end) - s.end > EDGE_S
                     or (nxt is not None and segment_anomalous(nxt.words)) or window_end - s.end < EDGE_S)
            if before and after:
                out[i] = True
                continue
        last_end = s.end
    return out


class FasterWhisperBackend(ASRBackend, WindowASRBackend):
    """Plain AR (greedy or beam) decoding with faster-whisper / CTranslate2: Whisper's own long-form decoding, with
    timestamp tokens, conditioned on the previous text, and word timestamps.

    Args:
        model_path: CTranslate2 Whisper directory or hub id.
        device: "cpu", "cuda" or "auto"; compute_type: "int8" on CPU, "float16" on CUDA by default.
        language: the language decoded in (ISO 639-1), "auto" = faster-whisper identifies it per call.
        beam_size: 1 = greedy.
        guard: a :class:`engine.asr.window.DecodeGuard`: a decode that fails it, or whose mean token log-prob is
            below its floor, is ``doubtful`` in the stats; None = never doubtful.
    """

    name = "ar"
    supports_language = True

    def __init__(self, model_path, device: str = "auto", compute_type: str = "int8", cpu_threads: int = 0,
                 language: str = "en", beam_size: int = 1, guard=None):
        import ctranslate2
        from faster_whisper import WhisperModel

        if device == "auto":
            device = "cuda" if ctranslate2.get_cuda_device_count() > 0 else "cpu"
        if device == "cuda" and compute_type == "int8":
            compute_type = "float16"
        self.device = device
        self.model = WhisperModel(str(model_path), device=device, compute_type=compute_type, cpu_threads=cpu_threads)
        repair_model_tokenizer(self.model, model_path)  # prompts are encoded with it
        # "auto": faster-whisper identifies the language itself (on the first 30 s window of each call)
        self.language = language if self.model.model.is_multilingual and language != "auto" else None
        self.beam_size = beam_size
        self.guard = guard

    def transcribe(self, audio: np.ndarray, prompt: str = "", language: str | None = None) -> BackendResult:
        """Decode float32 16 kHz ``audio`` after the text ``prompt`` (faster-whisper ``transcribe``: greedy or beam,
        temperature 0, timestamp tokens, word timestamps). ``language``: an ISO 639-1 code for this call (None = the
        backend's). Returns words (seconds from the start of ``audio``), segment ends and ``stats``: ``tokens``,
        ``language``, ``avg_logprob`` (token-weighted over the segments), ``doubtful`` (fails :attr:`guard`)."""
        segments, info = self._decode(audio, prompt or None, language)
        return self._result(segments, info, len(audio) / SAMPLE_RATE)

    def transcribe_window(self, audio: np.ndarray, prompt_tokens: Sequence[int] = (), language: str | None = None,
                          last: bool = False) -> BackendResult:
        """One window of faster-whisper's long-form transcription (greedy or beam, temperature 0, timestamp tokens,
        word timestamps, ``condition_on_previous_text``), as an offline transcription of the whole stream decodes the
        30 s window starting at its seek position.

        Args:
            audio: float32 16 kHz, (n,): the stream from the window's seek position on (at most 30 s is decoded
                unless ``last``).
            prompt_tokens: the token ids of the segments decoded before the window (timestamp tokens included), as
                long-form decoding conditions on them (its last 223 are used); empty at the start of the stream.
            language: ISO 639-1 code of this window (None: the backend's; with "auto", identified on the window).
            last: the audio is the end of the stream: every segment of it is kept (later windows included).

        A segment whose words Whisper's alignment finds no audio for (:func:`unheard_segments`: improbable words
        squeezed into a few frames, with no speech around them: text written from the prompt, typically in a
        window that is nearly all padding at the end of the stream) is left out of the words and of the prompt.

        Returns:
            words (seconds from the start of ``audio``) and segment ends of the segments the window settles (those
            of the first 30 s window, or all when ``last``); ``stats``: ``seek_s`` (where the next window starts,
            seconds from the start of ``audio``; the decoded length when ``last``), ``prompt_tokens`` (the settled
            segments' token ids), ``language``, ``avg_logprob`` and the guard's ``guard``/``doubtful`` as
            :meth:`transcribe`.
        """
        segments, info = self._decode(audio, list(prompt_tokens), language)
        audio_s = len(audio) / SAMPLE_RATE
        frames_per_s = SAMPLE_RATE / self.model.feature_extractor.hop_length
        seek_s = audio_s if last else min(audio_s, 30.0)
        settled = []
        for s in segments:  # a generator: the windows after the first are decoded only when asked for
            if s.seek > 0 and not last:  # the next window's first segment: it starts at the next seek position
                seek_s = s.seek / frames_per_s
                break
            settled.append(s)
        unheard = unheard_segments(settled, frames_per_s, audio_s if last else min(audio_s, 30.0))
        kept = [s for s, bad in zip(settled, unheard) if not bad]
        res = self._result(kept, info, min(seek_s, audio_s))
        # the prompt of the next window: the kept segments' tokens (never a hallucination's: it would be repeated)
        res.stats.update(seek_s=round(seek_s, 3), prompt_tokens=[t for s in kept for t in s.tokens],
                         unheard=sum(unheard))
        return res

    def encode_prompt(self, text: str) -> list[int]:
        """The token ids of ``text`` (after a space, no special tokens): the prompt of a window decoded after it
        (:meth:`transcribe_window` ``prompt_tokens``)."""
        return list(self.model.hf_tokenizer.encode(" " + text.strip(), add_special_tokens=False).ids)

    def _decode(self, audio: np.ndarray, initial_prompt, language: str | None):
        """faster-whisper's long-form ``transcribe`` (lazy segments, info) as every decode of this backend runs it."""
        lang = language if isinstance(language, str) and language and self.model.model.is_multilingual \
            else self.language
        return self.model.transcribe(
            audio, language=lang, beam_size=self.beam_size, initial_prompt=initial_prompt,
            word_timestamps=True, condition_on_previous_text=True, vad_filter=False, temperature=0.0,
        )

    def _result(self, segments, info, audio_s) -> BackendResult:
        """Words, segment ends and stats of ``segments``; ``audio_s``: the seconds the guard judges them against."""
        eot = self.model.hf_tokenizer.token_to_id("<|endoftext|>")
        words, ends, tokens, nsp = [], [], [], []
        lp_sum = 0.0  # the segments' mean log-probs weighted by their token counts
        n_tok = 0
        for s in segments:
            tokens += [t for t in s.tokens if t < eot]  # text tokens (no timestamps)
            lp_sum += float(s.avg_logprob) * len(s.tokens)
            n_tok += len(s.tokens)
            nsp.append(float(s.no_speech_prob))
            ends.append(float(s.end))
            for w in s.words or []:
                words.append(Word(float(w.start), float(w.end), w.word))
        # the language decoded in (identified by faster-whisper under "auto"): a prompt in another one is not kept
        stats = {"tokens": len(tokens), "language": info.language if self.model.model.is_multilingual else None}
        avg_lp = lp_sum / n_tok if n_tok else None
        if avg_lp is not None:
            stats["avg_logprob"] = round(avg_lp, 3)
        if self.guard is not None:
            v = self.guard.check(tokens, "".join(w.text for w in words), audio_s, avg_lp, min(nsp) if nsp else None)
            stats["guard"] = v.reason
            stats["doubtful"] = (not v.ok and v.reason != "no_speech") or (avg_lp is not None
                                                                         and avg_lp < self.guard.logprob)
        return BackendResult(words, ends, stats)

    def transcribe_text(self, audio: np.ndarray) -> str:
        """Offline transcription of a whole file (long-form), for reference transcripts."""
        segments, _ = self.model.transcribe(audio, language=self.language, beam_size=self.beam_size, vad_filter=False)
        return "".join(s.text for s in segments).strip()
