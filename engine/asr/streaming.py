"""Streaming ASR: incremental re-decoding of the growing utterance with a LocalAgreement-2 commit policy.

Policy as in whisper_streaming (Macháček et al., 2023, ``whisper_online.py``): every update re-transcribes the
whole uncommitted audio buffer (prompted with the committed text); the longest common prefix of the last two
hypotheses is committed (LocalAgreement-2, :class:`HypothesisBuffer`); the buffer is trimmed at a completed
segment end once it grows past ``buffer_trim_s``, keeping up to ``trim_overlap_s`` of audio before the cut (from a
word start) so the decodes after it hear the words before their first new word, as a decode inside an offline
window does; those words are not emitted again (time and n-gram rules of :meth:`HypothesisBuffer.insert`). Updates
are computation-aware: the processor decodes whatever audio has arrived when it is free, at least ``min_chunk_s`` of
new audio per update.

The final text of an utterance is the latest decode of the whole buffer after the words that left it at a trim
(``final_full``), not the words LocalAgreement-2 committed from shorter prefixes; the words that leave the buffer at a
trim keep the text of the decode whose segment end the trim cut at, which heard the audio after them
(``trim_latest``). With ``final_piece_s`` > 0 a trimmed utterance's final text comes from a decode of the whole
utterance instead: the end of speech (or a VAD pause) decodes the utterance's audio since its last finished piece in
one window, with the streaming hypothesis as a draft that one decoder pass verifies exactly
(:func:`engine.core.verify.majority_accepted`), so the final is greedy decoding of the whole utterance (a backend whose
final decode uses beam search, ``asr.final_beam_size`` > 1, ignores the draft); speech longer than
``final_piece_s`` is finished in pieces while it is spoken, each cut at a word end (at a sentence end where there is
one) and decoded the same way, as an offline decode moves through 30 s windows. A run-on utterance is ended between
two words (:meth:`OnlineASRProcessor.run_on_cut`).

The backend is behind :class:`ASRBackend` (``transcribe(audio, prompt) -> (words, segment_ends)``), so a
speculative decoder replaces plain AR decoding without touching the policy.

Two things reach past one utterance. :class:`SessionLanguage` (``asr.language = "auto"``) picks the language each
decode is made in from Whisper's language identification on the decodes' encoder output (the utterance's windows so
far pooled, :func:`pool_identifications`), with hysteresis across the session; a decode's text prompt holds earlier
text in the decode's language only (prompted with English text, Whisper writes German speech as an English
translation). :class:`SecondPass` re-decodes finished utterances together once a pause completes them (the VAD cut
them apart, and each final was decoded without its neighbours' audio) and revises their text
(``RevisedTranscript``); the live partials and finals are not delayed by it.
"""

from __future__ import annotations

import functools
import inspect
import time
from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

from engine.core.events import Word
from engine.asr.tokenizer import repair_model_tokenizer

SAMPLE_RATE = 16000


@dataclass(frozen=True)
class BackendResult:
    """``words``: word timestamps relative to the start of the transcribed audio (seconds);
    ``segment_ends``: ends of Whisper segments (seconds); ``stats``: backend counters (tokens, forwards, ...)."""

    words: list[Word]
    segment_ends: list[float]
    stats: dict


class DecodeAbandoned(Exception):
    """A decode given ``abandon`` (a backend's ``transcribe``) stopped after its encoder pass because ``abandon()``
    said its result is no longer wanted (a streaming update the VAD's pause is about to supersede)."""


class ASRBackend(Protocol):
    """A streaming decoder. It may also have ``transcribe_final(audio, prompt, draft="")`` (same result) for the
    decodes that give an utterance's final text; :class:`OnlineASRProcessor` then calls it at a VAD pause and at the
    end of speech (e.g. beam search there while the partials stay greedy), with ``draft`` the text it expects (the
    streaming hypothesis) for the decodes of a whole utterance."""

    name: str

    def transcribe(self, audio: np.ndarray, prompt: str = "") -> BackendResult:
        """Transcribe float32 16 kHz audio (n,) (≤ 30 s is the efficient case); ``prompt`` is previous text."""
        ...


class FasterWhisperBackend:
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
        res = self._result(settled, info, min(seek_s, audio_s))
        res.stats.update(seek_s=round(seek_s, 3), prompt_tokens=[t for s in settled for t in s.tokens])
        return res

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


class HypothesisBuffer:
    """LocalAgreement-2 (whisper_streaming ``HypothesisBuffer``): commit the longest common word prefix of the
    previous and the current hypothesis."""

    def __init__(self) -> None:
        self.committed_in_buffer: list[Word] = []
        self.buffer: list[Word] = []  # previous hypothesis, uncommitted part
        self.new: list[Word] = []
        self.last_committed_time = 0.0

    def insert(self, new: Sequence[Word], offset: float, align_text: bool = False) -> None:
        """Add a hypothesis (word times relative to the buffer, shifted by ``offset`` seconds); words that end
        before the last committed time are dropped, as are 1–5-grams repeating the committed tail.

        ``align_text``: when the hypothesis holds the committed tail itself (its last 2–4 words, ending within
        1 s of the last committed time), the words after that match are the new ones, whatever their times:
        a decode that re-hears the committed words (acoustic context) places the boundary word times of the
        alignment least well, and a new word timed a little before the committed end is not dropped."""
        shifted = [Word(w.start + offset, w.end + offset, w.text) for w in new]
        if align_text:
            i = self._after_committed_tail(shifted)
            if i is not None:
                self.new = shifted[i:]
                return
        self.new = [w for w in shifted if w.start > self.last_committed_time - 0.1]
        if self.new and abs(self.new[0].start - self.last_committed_time) < 1 and self.committed_in_buffer:
            cn, nn = len(self.committed_in_buffer), len(self.new)
            for i in range(1, min(cn, nn, 5) + 1):
                c = " ".join(_norm(self.committed_in_buffer[-j].text) for j in range(i, 0, -1))
                t = " ".join(_norm(self.new[j].text) for j in range(i))
                if c == t:
                    del self.new[:i]
                    break

    def _after_committed_tail(self, words: Sequence[Word]) -> int | None:
        """Index of the first word after the committed tail's match in ``words`` (the longest tail of 4…2
        words matched; of several matches, the one ending nearest the last committed time, and within 1 s of
        it), None when there is none."""
        tail = [_key(w.text) for w in self.committed_in_buffer][-4:]
        keys = [_key(w.text) for w in words]
        for k in range(len(tail), 1, -1):
            t = tail[-k:]
            if not all(t):
                continue
            hits = [i for i in range(k, len(keys) + 1) if keys[i - k : i] == t
                    and abs(words[i - 1].end - self.last_committed_time) < 1.0]
            if hits:
                return min(hits, key=lambda i: abs(words[i - 1].end - self.last_committed_time))
        return None

    def flush(self) -> list[Word]:
        """Commit the agreeing prefix of ``new`` and ``buffer``; ``new`` becomes the buffer."""
        commit: list[Word] = []
        while self.new and self.buffer and _norm(self.new[0].text) == _norm(self.buffer[0].text):
            w = self.new.pop(0)
            self.buffer.pop(0)
            commit.append(w)
            self.last_committed_time = w.end
        self.buffer = self.new
        self.new = []
        self.committed_in_buffer.extend(commit)
        return commit

    def pop_committed(self, t: float) -> None:
        while self.committed_in_buffer and self.committed_in_buffer[0].end <= t:
            self.committed_in_buffer.pop(0)

    def complete(self) -> list[Word]:
        return list(self.buffer)


@functools.lru_cache(maxsize=64)
def _takes(fn, name: str) -> bool:
    """Whether a backend method takes the argument ``name`` (``draft``, ``language``; read once per bound method,
    not per decode)."""
    return name in inspect.signature(fn).parameters


class SessionLanguage:
    """The language a session speaks, for ``asr.language = "auto"``: Whisper's language identification on the
    encoder output of each decode, with hysteresis, so a short "okay" or a word Whisper is unsure of does not flip
    the language everything is decoded in.

    Rule for each decode of an utterance (``current``: the utterance's language so far, at first the session's):

    * the session has no language yet (its first utterance): the most probable language on this window (each
      longer window of the utterance decides anew);
    * the most probable language is ``current``: ``current``;
    * a language that Whisper's own identification (``whisper_probs``, without the language-ID head) ranks below
      ``current`` is never switched to: the head, trained on clean speech, can be sure of a wrong language on
      noisy or telephone-band speech that Whisper itself, unsure, still hears as ``current``;
    * another language, with probability ≥ ``switch_p`` (or ≥ 0.5 while ``current`` has < 0.05: the speech is
      surely not in it) on a window of at least ``switch_min_s`` seconds of audio: that language (the utterance
      switches);
    * otherwise, once utterances have ended and on a window of at least ``switch_min_s``: the language with the most
      evidence, ``memory`` × the session's evidence + log p of this window, among this window's candidates,
      ``current`` and the session's language (a person keeps speaking their language: an unsure window is read
      together with what the session said);
    * otherwise ``current``.

    With ``pool`` (the default) the identification a decode is given is its utterance's so far: the windows decoded
    since the utterance began, pooled by :func:`pool_identifications` (``_LanguageChoice``).

    The session's evidence is a language's log-probability summed over the ended utterances (their final
    identification), each utterance weighted ``memory`` × the weight of the one after it — a forgetting prior, so
    a new speaker's language takes over within an utterance or two while one unsure identification (Whisper base
    hears some synthetic French voices as Japanese or Thai, unsurely) does not move a session that said French
    before (bench conversation, language-ID corpus as one stream).
    A language missing from an identification's top candidates counts with half the least listed probability.

    At the end of an utterance (:meth:`end_utterance`) the session takes the utterance's language; and a language
    that was the most probable (p ≥ ``agree_p``) at the end of two consecutive utterances without passing the
    switch rule, and that Whisper's own identification ranks above the session's, becomes the session's too ("two
    utterances agree"). Used from the ASR thread only.

    Args:
        switch_p: probability a language needs to switch an utterance away from the session's (0–1).
        switch_min_s: shortest audio (seconds) whose identification may switch it.
        agree_p: probability with which two consecutive utterances must name the same other language (0–1).
        language: the session's language at the start (ISO 639-1), or None to take the first utterance's.
        memory: weight of the session's evidence per utterance of age (0 = each window on its own evidence alone,
            as before any utterance ended; 0–1).
        languages: the languages the speakers may use (ISO 639-1 codes); every identification is restricted to
            them and renormalised (a short or unsure window is then never heard as a language nobody speaks);
            None or empty = every language Whisper knows.
        pool: each decode of an utterance is given the utterance's identification so far
            (:func:`pool_identifications` over its windows), not its own window's alone.
    """

    def __init__(self, switch_p: float = 0.8, switch_min_s: float = 1.5, agree_p: float = 0.6,
                 language: str | None = None, memory: float = 0.5, languages: Sequence[str] | None = None,
                 pool: bool = True):
        self.switch_p, self.switch_min_s, self.agree_p = float(switch_p), float(switch_min_s), float(agree_p)
        self.pool = bool(pool)
        self.memory = float(memory)
        self.languages = tuple(languages or ())
        self.language = language
        self._candidate: str | None = None  # the other language the previous utterance leaned to
        self._spoken: list[tuple[str, str]] = []  # (language, final text) of the latest utterances, oldest first
        self._evidence: dict[str, float] = {}  # language → weighted sum of log p over the ended utterances
        self._evidence_rest = 0.0  # the same for every language not in _evidence

    @staticmethod
    def _log_probs(probs: Sequence[tuple[str, float]]) -> tuple[dict[str, float], float]:
        """({code: log p} of the listed candidates, log p of any unlisted language: half the least listed)."""
        logs = {code: float(np.log(max(p, 1e-6))) for code, p in probs}
        return logs, float(np.log(max(min(p for _, p in probs) / 2, 1e-6)))

    def restrict(self, probs: Sequence[tuple[str, float]]) -> list[tuple[str, float]]:
        """``probs`` ((code, probability) pairs, most probable first) restricted to :attr:`languages` and
        renormalised, most probable first (unchanged when no languages are set; the first of them with probability 1
        when the identification names none of them)."""
        if not self.languages:
            return list(probs)
        kept = [(c, p) for c, p in probs if c in self.languages]
        total = sum(p for _, p in kept)
        if not kept or total <= 0:
            return [(self.languages[0], 1.0)]
        return sorted(((c, p / total) for c, p in kept), key=lambda x: -x[1])

    def _backed(self, code: str, current: str, whisper_probs: Sequence[tuple[str, float]] | None) -> bool:
        """Whether Whisper's own identification ``whisper_probs`` ranks ``code`` above ``current`` (True without
        one)."""
        if not whisper_probs:
            return True
        own = dict(self.restrict(whisper_probs))
        return own.get(code, 0.0) > own.get(current, 0.0)

    def choose(self, probs: Sequence[tuple[str, float]], audio_s: float, current: str | None = None,
               whisper_probs: Sequence[tuple[str, float]] | None = None) -> str:
        """The language to decode a window of ``audio_s`` seconds in, given the identified ``probs`` ((code,
        probability) pairs, most probable first; Whisper's fused with the language-ID head), Whisper's own
        identification ``whisper_probs`` (the same form; None = not known, no veto) and the utterance's ``current``
        language (default the session's)."""
        probs = self.restrict(probs)
        top, p = probs[0]
        # before the session has a language, each (longer) window of its first utterance decides anew: the first
        # decode reads about a second of speech, too little to bind the rest of the utterance to
        if self.language is None or top == (current or self.language):
            return top
        current = current or self.language
        if (audio_s >= self.switch_min_s and self._backed(top, current, whisper_probs)
                and (p >= self.switch_p or (p >= 0.5 and dict(probs).get(current, 0.0) < 0.05))):
            return top
        if self._evidence and self.memory > 0 and audio_s >= self.switch_min_s:
            logs, rest = self._log_probs(probs)
            candidates = [code for code, _ in probs] + [current] + ([self.language] if self.language else [])

            def score(code: str) -> float:
                return self.memory * self._evidence.get(code, self._evidence_rest) + logs.get(code, rest)

            best = max(candidates, key=score)
            return best if score(best) > score(current) and self._backed(best, current, whisper_probs) else current
        return current

    def end_utterance(self, language: str | None, probs: Sequence[tuple[str, float]] | None = None,
                      whisper_probs: Sequence[tuple[str, float]] | None = None) -> None:
        """An utterance was decoded in ``language`` (its final decode), whose latest identification gave ``probs``
        (Whisper's own: ``whisper_probs``, or None)."""
        probs = self.restrict(probs) if probs else probs
        if language:
            self.language = language
        if probs:
            logs, rest = self._log_probs(probs)
            self._evidence = {code: self.memory * self._evidence.get(code, self._evidence_rest) + logs.get(code, rest)
                              for code in set(self._evidence) | set(logs)}
            self._evidence_rest = self.memory * self._evidence_rest + rest
        top = probs[0] if probs else None
        if (top is not None and top[0] != self.language and top[1] >= self.agree_p
                and (self.language is None or self._backed(top[0], self.language, whisper_probs))):
            if self._candidate == top[0]:
                self.language, self._candidate = top[0], None
            else:
                self._candidate = top[0]
        else:
            self._candidate = None

    def note_text(self, text: str, language: str | None) -> None:
        """An utterance's final ``text`` was decoded in ``language`` (for :meth:`prompt_text`)."""
        if text.strip():
            self._spoken = (self._spoken + [(language or "", text.strip())])[-32:]

    def prompt_text(self, context: str) -> str:
        """The end of ``context`` (the final texts of the latest utterances joined by spaces, the latest last, as a
        decoding prompt) that was spoken in the session's language: the utterances noted (:meth:`note_text`) in it
        since the last one in another language. Prompted with text in one language, Whisper translates speech in
        another into it, so a prompt must hold one language only — the one it is declared in (the decode drops it
        when it decodes in another). The cut is by the noted texts' lengths, at a word start (a revised text may
        differ a little in length). Returns ``context`` whole when all of it was spoken in the session's language."""
        c = context.rstrip()
        n = -1  # characters of the trailing same-language texts, with the spaces joining them
        for lang, text in reversed(self._spoken):
            if lang != (self.language or ""):
                break
            n += len(text) + 1
        else:
            return context
        if n >= len(c):
            return context
        start = len(c) - max(n, 0)
        if start > 0 and not c[start - 1].isspace():  # inside a word: start at the next one
            nxt = c.find(" ", start)
            start = len(c) if nxt < 0 else nxt
        kept = c[start:].strip()
        return kept + context[len(c):] if kept else ""


def _mid(w: Word) -> float:
    """The middle of a word (audio time, seconds): a word leaves the buffer at a trim by its middle."""
    return (w.start + w.end) / 2


def _norm(w: str) -> str:
    return w.strip()


def join_words(words: Sequence[Word]) -> str:
    return "".join(w.text for w in words).strip()


def pool_identifications(windows: Sequence[tuple[float, Sequence[tuple[str, float]]]]) -> list[tuple[str, float]]:
    """One utterance's language identification from those of its decodes' windows.

    The windows of an utterance are prefixes of one another (a growing buffer) or its later parts (after a trim),
    each encoded in its own window length; the identification of short speech (Whisper's, with the language-ID
    head's) moves from one window to the next, so the utterance's is their weighted geometric mean: log q(l) = Σ_w a_w log p_w(l) / Σ_w a_w,
    renormalised, with a_w the window's seconds of audio (a longer window hears more of the speech). The mean, not
    the sum: the windows hear mostly the same audio, so they are not independent evidence, and the pooled
    probabilities stay on the scale of one window's (the switch and agreement thresholds apply to them unchanged).
    A language a window does not list counts with half that window's least listed probability.

    Args:
        windows: (audio seconds, (code, probability) pairs) per window, in any order; at least one.

    Returns:
        (code, probability) pairs over every language any window lists, most probable first, summing to 1.

    Raises:
        ValueError: no windows.
    """
    if not windows:
        raise ValueError("no language identification to pool")
    weights = np.array([max(float(a), 1e-3) for a, _ in windows])
    codes = sorted({c for _, probs in windows for c, _ in probs})
    total = np.zeros(len(codes))
    for wt, (_, probs) in zip(weights, windows):
        listed = {c: max(float(p), 1e-9) for c, p in probs}
        rest = min(listed.values()) / 2
        total += wt * np.log([listed.get(c, rest) for c in codes])
    total /= weights.sum()
    q = np.exp(total - total.max())
    q /= q.sum()
    return sorted(zip(codes, map(float, q)), key=lambda x: -x[1])


class _LanguageChoice:
    """The ``language`` a processor passes its backend under ``asr.language = "auto"``: picks each window's language
    by the session's hysteresis (:meth:`SessionLanguage.choose`, from the utterance's language so far), and says
    which language the processor's prompt text is in (``prompt_language``: the session's before this utterance),
    so a window in another language is decoded without it."""

    def __init__(self, proc: "OnlineASRProcessor"):
        self.proc = proc
        self.prompt_language = proc.session_language.language if proc.session_language is not None else None
        # audio seconds → (seconds, that window's identification, Whisper's own or None)
        self._windows: dict[float, tuple[float, list, list | None]] = {}
        #: the utterance's identification so far (:func:`pool_identifications`), or None without pooling
        self.pooled: list[tuple[str, float]] | None = None
        #: the same of Whisper's own identification (without the language-ID head; without pooling the latest
        #: window's), or None
        self.pooled_whisper: list[tuple[str, float]] | None = None

    def __call__(self, probs: Sequence[tuple[str, float]], audio_s: float,
                 whisper_probs: Sequence[tuple[str, float]] | None = None) -> str:
        session = self.proc.session_language
        if session.pool and probs:
            # a window decoded again (the same audio) replaces its earlier identification: the same audio twice
            # is not twice the evidence
            self._windows[round(float(audio_s), 2)] = (float(audio_s), list(probs),
                                                       list(whisper_probs) if whisper_probs else None)
            probs = self.pooled = pool_identifications([(a, p) for a, p, _ in self._windows.values()])
            owns = [(a, w) for a, _, w in self._windows.values() if w]
            whisper_probs = self.pooled_whisper = pool_identifications(owns) if owns else None
        else:
            self.pooled_whisper = list(whisper_probs) if whisper_probs else None
        return session.choose(probs, audio_s, self.proc.language or None, whisper_probs=whisper_probs)


@dataclass
class UpdateStats:
    compute_s: float
    audio_s: float
    committed: int
    stats: dict


class OnlineASRProcessor:
    """whisper_streaming's three verbs over one utterance at a time: :meth:`insert_audio_chunk`,
    :meth:`process_iter`, :meth:`finish`.

    Args:
        backend: an :class:`ASRBackend`.
        buffer_trim_s: trim the audio buffer at a completed segment when it is longer than this (seconds).
        context: text of earlier utterances, used as the decoding prompt (last 200 characters).
        final_piece_s: > 0 (with ``final_full``): a trimmed utterance's final text comes from decodes of the whole
            utterance (module docstring); speech longer than this (seconds, at least 9) is finished in pieces while
            it is spoken. ≤ 0 (default): the final text of a trimmed utterance is the words that left the buffer
            (``trim_latest``) plus the latest decode of the buffer.
    """

    PIECE_TAIL_S = 3.0  # a piece ends at least this long before the audio that has arrived (its last word may be cut)
    PIECE_MIN_S = 5.0  # ... and at least this long after its start, seconds
    # a final decoded again without its acoustic context needs this much speech since the VAD's start, seconds:
    # shorter speech is a backchannel, a filler or a breath, on which Whisper alone invents words
    OWN_AUDIO_MIN_S = 1.0
    # a mostly doubtful utterance with at least this much audio since the VAD's start (seconds) keeps its latest
    # decode: seconds of speech that Whisper base scores below the log-prob floor (most languages other than
    # English, speech in noise) are still that speech; under it (a filler, a breath, a burst of noise) Whisper
    # invents words
    DOUBTFUL_KEEP_S = 2.0

    def __init__(self, backend: ASRBackend, buffer_trim_s: float = 15.0, context: str = "", t_offset: float = 0.0,
                 context_words: Sequence[Word] = (), committed_until: float | None = None,
                 final_full: bool = True, final_piece_s: float = 0.0, trim_latest: bool = True,
                 trim_overlap_s: float = 0.0, session_language: SessionLanguage | None = None,
                 context_prefix: bool = False, align_final: bool = False, speech_start: float | None = None,
                 partial_retry: bool = True, final_retry: bool = True, context_repeat_words: int = 0):
        """``speech_start``: the audio time (seconds) the VAD heard this utterance's speech start, after any pre-roll
        or acoustic context (default ``t_offset``). ``partial_retry``: False = an update's decode that fails the
        guards is not redone on the padded window (a backend whose ``transcribe`` takes ``padded_retry``);
        ``final_retry``: the same for the decodes that may give the final text (:meth:`_decode` ``final``, through
        ``transcribe_final`` where the backend has it). ``context_words``/``committed_until``:
        words of an earlier utterance whose audio is at the start of the buffer (acoustic context, as in
        whisper_streaming's long-form buffer); they count as committed and are never emitted again.
        ``final_full``: the final text of the words still in the buffer is the latest decode of the whole buffer
        (which sees the whole utterance), not the words LocalAgreement-2 committed from shorter prefixes; False =
        whisper_streaming's rule (committed words + the last hypothesis's tail).
        ``trim_latest`` (with ``final_full``): the words whose audio leaves the buffer at a trim keep the text of
        the latest decode of the buffer (the one whose segment end is the cut, which heard the most audio), not
        the words LocalAgreement-2 committed from shorter prefixes; False: the committed words.
        ``trim_overlap_s``: after a trim the buffer keeps up to this much audio before the cut (from a word start):
        the next decodes hear the words before their first new word (as an offline decode does inside its window),
        and those words stay final as they left (they are dropped from the new decodes by time and n-gram, as
        words of an earlier utterance are). ``session_language``: ``asr.language = "auto"`` — each decode identifies
        its language and decodes in the one the session's hysteresis picks (:class:`SessionLanguage`; a backend
        whose ``transcribe`` takes no ``language`` decodes in its own). ``context_prefix`` (with ``context_words``,
        a backend whose ``transcribe`` takes a ``prefix``): every decode of audio that starts with the context is
        given the context's text as a forced prefix and returns only the words after it (as in one long-form
        window), so no word of the context is decoded again and none of the new words is dropped as one of
        them by its time; otherwise the decodes transcribe the context too and its words are dropped by time and
        n-gram. ``context_repeat_words`` (> 0, with ``context_words`` and no prefix): a final whose words open with at
        least this many of the context's words in a row is decoded again on the utterance's own audio
        (:meth:`_context_repeat`, :meth:`_own_audio_final`); 0 = only a final with no new words is."""
        self.backend = backend
        self.session_language = session_language
        if session_language is not None:  # the prompt holds text in the session's language only
            context = session_language.prompt_text(context)
        fixed = getattr(backend, "language", None)
        # the language of this utterance's latest decode (ISO 639-1; "" while unknown)
        self.language: str = (session_language.language if session_language is not None else
                              fixed if isinstance(fixed, str) and fixed != "auto" else None) or ""
        self.language_probs: list | None = None  # the latest identification: (code, probability) pairs
        self._choose_language = _LanguageChoice(self)
        self.final_full = final_full
        self.trim_latest = trim_latest
        self.left_words: list[Word] = []  # the final words of the audio that left the buffer at trims
        # the final decodes tell their new words from the committed ones by the committed tail's text where they
        # hold it (HypothesisBuffer.insert ``align_text``), else by time and n-gram
        self.align_final = bool(align_final)
        self.context_repeat_words = max(0, int(context_repeat_words))
        self.context_words = list(context_words)
        self.context_prefix = bool(context_prefix and self.context_words and _takes(backend.transcribe, "prefix"))
        # the words a decode's new words are told apart from by time and n-gram (none when the context is a prefix)
        self._dedup_words = [] if self.context_prefix else self.context_words
        self.context_end = t_offset if committed_until is None or self.context_prefix else committed_until
        self._last_full: list[Word] = []  # the latest decode of the buffer, absolute times
        self.buffer_trim_s = buffer_trim_s
        self.context = context
        self.audio = np.zeros(0, np.float32)
        self.buffer_time_offset = t_offset  # audio time of audio[0], seconds
        self.left_until = t_offset  # the words whose middle is before this audio time have left the buffer (final)
        self.trim_overlap_s = max(0.0, float(trim_overlap_s))
        self._t_start = t_offset
        self.speech_start = t_offset if speech_start is None else max(t_offset, float(speech_start))
        self.partial_retry = bool(partial_retry)
        self.final_retry = bool(final_retry)
        self.hyp = HypothesisBuffer()
        self.hyp.last_committed_time = self.context_end
        self.hyp.committed_in_buffer = list(self._dedup_words)
        self.committed: list[Word] = []
        self.updates: list[UpdateStats] = []
        self.decoded_until = t_offset  # audio time covered by the latest hypothesis, seconds
        self.final_decodes_skipped = 0
        self.own_audio_decodes = 0  # finals decoded again without the acoustic context (_own_audio_final)
        # decodes of the whole utterance: its audio since the last finished piece, the final words before it
        # a piece needs room for its cut (PIECE_MIN_S after its start, PIECE_TAIL_S before the audio's end)
        self.final_piece_s = max(float(final_piece_s), self.PIECE_MIN_S + self.PIECE_TAIL_S + 1.0) \
            if final_piece_s > 0 else 0.0
        self._whole_on = final_full and self.final_piece_s > 0
        self.whole = np.zeros(0, np.float32)
        self.whole_offset = t_offset  # audio time of whole[0], seconds
        self.final_words: list[Word] = []  # final words of the finished pieces (all before whole_offset)
        self._whole: tuple[float, list[Word], bool] | None = None  # latest whole decode: (until, words, doubtful)
        self._whole_update = -1  # len(self.updates) right after it
        self.whole_decodes = 0
        self.pieces = 0
        self._word_cut: float | None = None  # the latest run_on_cut, when it is a word boundary of the latest decode

    def insert_audio_chunk(self, samples: np.ndarray) -> None:
        samples = np.asarray(samples, np.float32)
        self.audio = np.concatenate([self.audio, samples])
        if self._whole_on:
            self.whole = np.concatenate([self.whole, samples])

    @property
    def audio_end(self) -> float:
        return self.buffer_time_offset + len(self.audio) / SAMPLE_RATE

    def prompt(self) -> str:
        # the words before the buffer's audio, after earlier utterances; last 200 characters
        return (self.context + join_words(self._before_buffer(self.buffer_time_offset)))[-200:]

    def _before_buffer(self, until: float | None = None) -> list[Word]:
        """The words that left the buffer: the final words of finished pieces, then the words whose audio left
        the buffer at a later trim (:meth:`_trim_at`): those whose middle lies before ``left_until`` (or ``until``,
        audio time: the buffer's start for the prompt, as a trim's overlap stays in the buffer)."""
        until = self.left_until if until is None else until
        return self.final_words + [w for w in self.left_words if self.whole_offset <= _mid(w) < until]

    @property
    def _needs_whole(self) -> bool:
        """The buffer no longer starts where the unfinished part of the utterance does (it was trimmed): its
        decodes do not see the whole utterance, so the final text needs a decode of ``whole``."""
        return self._whole_on and self.left_until > self.whole_offset + 1e-6

    def process_iter(self, until: float | None = None, abandon=None) -> tuple[list[Word], list[Word]]:
        """Re-decode the buffer (up to the audio time ``until``, seconds, if given: e.g. the end of speech at a
        VAD pause, so the final transcript may be ready when the VAD confirms the end). Returns (newly committed
        words, current tentative words).

        ``abandon`` (a streaming update, ``until`` None; a backend whose ``transcribe`` takes it): a callable the
        backend checks after its encoder pass; True stops the update there (:class:`DecodeAbandoned`): nothing is
        committed, the buffer counts as not decoded, and the update is noted with ``stats["abandoned"]``."""
        audio = self.audio
        if until is not None:
            audio = audio[: max(int(round((until - self.buffer_time_offset) * SAMPLE_RATE)), int(SAMPLE_RATE * 0.1))]
        if len(audio) < SAMPLE_RATE * 0.1:
            return [], self.hyp.complete()
        if until is not None and self._needs_whole:  # the final text's decode, before the end of speech is sure
            self._decode_whole(until)
            return [], self.hyp.complete()
        t0 = time.perf_counter()
        try:
            res = self._decode(audio, final=until is not None, abandon=abandon if until is None else None)
        except DecodeAbandoned as e:
            self.updates.append(UpdateStats(time.perf_counter() - t0, len(audio) / SAMPLE_RATE, 0,
                                            {"abandoned": True, "reason": str(e)}))
            return [], self.hyp.complete()
        self.decoded_until = self.buffer_time_offset + len(audio) / SAMPLE_RATE
        self._remember(res.words)
        self.hyp.insert(res.words, self.buffer_time_offset)
        if res.stats.get("doubtful"):  # failed the guards even after the re-decodes: shown, never committed by it
            self.hyp.buffer, self.hyp.new, new = self.hyp.new, [], []
        else:
            new = self.hyp.flush()
        self.committed.extend(new)
        if len(self.audio) / SAMPLE_RATE > self.buffer_trim_s:
            self._chunk_completed_segment(res.segment_ends, bool(res.stats.get("doubtful")))
        self.updates.append(UpdateStats(time.perf_counter() - t0, len(audio) / SAMPLE_RATE, len(new), res.stats))
        if until is None and self._whole_on and self.audio_end - self.whole_offset > self.final_piece_s:
            self._finish_piece()
        return new, self.hyp.complete()

    def _decode(self, audio: np.ndarray, final: bool, prompt: str | None = None, draft: str = "",
                at: float | None = None, abandon=None) -> BackendResult:
        """One backend decode of ``audio`` after ``prompt`` (default :meth:`prompt`); ``at``: the audio time of
        ``audio[0]`` (seconds, default the buffer's start): audio that starts with the acoustic context is decoded
        after the context's text as a forced prefix (``context_prefix``). ``final``: this decode may give
        the utterance's final text (at a VAD pause or the end of speech): a backend with ``transcribe_final`` (e.g.
        beam search for the final text, ``asr.final_beam_size``) decodes it with that, given ``draft`` if it takes
        one. With a :class:`SessionLanguage` the backend identifies the window's language and decodes in the one
        :meth:`SessionLanguage.choose` picks (:attr:`language`). ``abandon``: see :meth:`process_iter` (passed to a
        backend whose ``transcribe`` takes it)."""
        prompt = self.prompt() if prompt is None else prompt
        final_fn = getattr(self.backend, "transcribe_final", None) if final else None
        fn = final_fn or self.backend.transcribe
        kw = {}
        if final_fn is not None and draft.strip() and _takes(final_fn, "draft"):
            kw["draft"] = draft
        if self.session_language is not None and _takes(fn, "language"):
            kw["language"] = self._choose_language
        if not (self.final_retry if final else self.partial_retry) and _takes(fn, "padded_retry"):
            kw["padded_retry"] = False
        at = self.buffer_time_offset if at is None else at
        if self.context_prefix and abs(at - self._t_start) < 1e-6 and _takes(fn, "prefix"):
            kw["prefix"] = join_words(self.context_words)
        if abandon is not None and _takes(fn, "abandon"):
            kw["abandon"] = abandon
        res = fn(audio, prompt, **kw)
        pl = self._choose_language.prompt_language
        if ("language" not in kw and self.session_language is not None and prompt.strip() and pl
                and res.stats.get("language") and res.stats["language"] != pl):
            # a backend that picks the language itself decoded speech in another language than the prompt's: under
            # that prompt Whisper translates into the prompt's language, so the window is decoded again without it
            res = fn(audio, "", **kw)
        if res.stats.get("language"):
            self.language = res.stats["language"]
            pooled = self._choose_language.pooled
            # the session's evidence at the end of the utterance is the utterance's identification, pooled or not
            self.language_probs = ([(c, round(p, 3)) for c, p in pooled[:3]] if pooled else
                                   res.stats.get("language_probs") or self.language_probs)
        return res

    @property
    def language_whisper_probs(self) -> list[tuple[str, float]] | None:
        """The utterance's identification by Whisper alone (without the language-ID head), as the session's
        language choice last saw it, or None."""
        return self._choose_language.pooled_whisper

    # -- decodes of the whole utterance (final_full) --------------------------------------------------------------
    def _hypothesis_words(self) -> list[Word]:
        """The streaming hypothesis after the final words: the words that left the buffer after the last piece, then
        the latest decode of the buffer (committed + tentative words if it was doubtful)."""
        full = self._full_final() if self.updates and not self.updates[-1].stats.get("doubtful") else None
        if full is None:
            full = [w for w in self.committed if _mid(w) >= self.left_until] + self.hyp.complete()
        return self._before_buffer()[len(self.final_words):] + full

    def _decode_whole_audio(self, audio: np.ndarray) -> tuple[list[Word], bool]:
        """Decode ``whole``'s audio ``audio`` (a prefix of it) after the earlier utterances and the final words,
        with the streaming hypothesis as the draft. Returns (words in audio time, without the words of earlier
        utterances, doubtful)."""
        t0 = time.perf_counter()
        prompt = (self.context + join_words(self.final_words))[-200:]
        res = self._decode(audio, final=True, prompt=prompt, draft=join_words(self._hypothesis_words()),
                           at=self.whole_offset)
        h = HypothesisBuffer()
        h.last_committed_time = max(self.context_end, self.whole_offset)
        h.committed_in_buffer = (self._dedup_words + self.final_words)[-5:]
        h.insert(res.words, self.whole_offset, align_text=self.align_final)
        self.updates.append(UpdateStats(time.perf_counter() - t0, len(audio) / SAMPLE_RATE, 0,
                                        {**res.stats, "whole": True}))
        self.whole_decodes += 1
        return list(h.new), bool(res.stats.get("doubtful"))

    def _decode_whole(self, until: float) -> None:
        """Decode the unfinished part of the utterance up to the audio time ``until`` (seconds): the final text."""
        n = int(round((until - self.whole_offset) * SAMPLE_RATE))
        audio = self.whole[: max(n, int(SAMPLE_RATE * 0.1))]
        words, doubtful = self._decode_whole_audio(audio)
        self._whole = (self.whole_offset + len(audio) / SAMPLE_RATE, words, doubtful)
        self._whole_update = len(self.updates)

    def _finish_piece(self) -> None:
        """Speech has gone on past ``final_piece_s`` since the last piece: decode it whole and make its words final
        up to a sentence end (else a word end) between ``PIECE_MIN_S`` and ``PIECE_TAIL_S`` before the audio's end;
        the audio after that cut starts the next piece. When no such word passes, the words that left the buffer
        (:meth:`_trim_at`) become final instead."""
        words, doubtful = self._decode_whole_audio(self.whole)
        end = self.audio_end
        cands = [i for i, w in enumerate(words)
                 if w.end <= end - self.PIECE_TAIL_S and w.end >= self.whole_offset + self.PIECE_MIN_S]
        if doubtful or not cands:
            cut = self.left_until
            if cut <= self.whole_offset + 1e-6:
                return
            self.final_words = self._before_buffer()
        else:
            ends = [i for i in cands if words[i].text.rstrip().endswith((".", "?", "!"))]
            i = ends[-1] if ends else cands[-1]
            cut = words[i].end if i + 1 == len(words) else min(words[i].end, words[i + 1].start)
            cut = max(cut, self.whole_offset + 0.01)
            self.final_words = self.final_words + words[: i + 1]
        self.whole = self.whole[int(round((cut - self.whole_offset) * SAMPLE_RATE)):]
        self.whole_offset = cut
        self._whole = None
        self.pieces += 1
        if self.left_until < cut:  # the partials' buffer starts at the piece's cut too
            self._chunk_at(cut)
            self.hyp.last_committed_time = max(self.hyp.last_committed_time, cut)

    def _chunk_completed_segment(self, ends: list[float], doubtful: bool) -> None:
        if not self.committed or len(ends) < 2:
            return
        ends = list(ends)
        t = self.committed[-1].end
        e = ends[-2] + self.buffer_time_offset
        while len(ends) > 2 and e > t:
            ends.pop()
            e = ends[-2] + self.buffer_time_offset
        if self.left_until + 0.1 < e <= t:  # never at or before the last cut (a segment end in a trim's overlap)
            self._trim_at(e, doubtful)

    def _trim_at(self, t: float, doubtful: bool) -> None:
        """Trim the buffer at ``t`` (audio time, seconds; a segment end of the latest decode, within the committed
        words). The words of the audio that leaves it become final: with ``final_full`` and ``trim_latest``, the
        latest decode's words before ``t`` (that decode heard the audio after them too; a doubtful one is not
        used: ``doubtful``), which replace the committed words that leave (so the partials show the correction
        now, when less text follows it, not at the end of speech); else the committed words whose middle lies
        before ``t`` (a committed word keeps the times of the decode that committed it, which may put its end a
        little past the cut: it still left with the audio before it)."""
        latest = self._full_final() if self.final_full and self.trim_latest and not doubtful else None
        if latest:
            left = [w for w in latest if _mid(w) < t]
            # the shown committed text takes them now: corrected while the utterance is short
            self.committed = ([w for w in self.committed if _mid(w) < self.left_until] + left
                              + [w for w in self.committed if _mid(w) >= t])
        else:
            left = [w for w in self.committed if self.left_until <= _mid(w) < t]
        self.left_words += left
        # the overlap starts at a word start (the earliest within trim_overlap_s of the cut), never mid-word
        starts = [w.start for w in self.left_words if t - self.trim_overlap_s <= w.start < t]
        self._chunk_at(t, start=min(starts) if self.trim_overlap_s > 0 and starts else t)

    def _chunk_at(self, t: float, start: float | None = None) -> None:
        """The words before ``t`` (audio time, seconds) have left; the buffer keeps the audio from ``start``
        (≤ ``t``, default ``t``: a trim's overlap) on."""
        start = t if start is None else min(max(start, self.buffer_time_offset), t)
        self.hyp.pop_committed(start)  # the committed words in the overlap stay for the n-gram rule
        cut = int(round((start - self.buffer_time_offset) * SAMPLE_RATE))
        self.audio = self.audio[cut:]
        self.buffer_time_offset = start
        self.left_until = max(self.left_until, t)

    def run_on_cut(self, min_tail_s: float = 1.0, span_s: float = 8.0, frame_s: float = 0.1) -> float:
        """Where to end a run-on utterance (speech without a pause, cut so the answer/caption paths are not starved):
        the quietest (mean energy of the ``frame_s`` around it: a decode's word times can be off, a gap between
        words is quiet) word boundary of the latest decode of the buffer between ``span_s`` and ``min_tail_s``
        seconds before the audio's end; else the quietest boundary anywhere in the buffer; else the buffer's start
        if a trim put it at a segment end; else the quietest frame of that span
        (:func:`engine.asr.window.split_point`). Audio time, seconds; the audio after it starts the next
        utterance, so no word is cut in two."""
        from engine.asr.window import split_point

        end = self.audio_end
        off = self.buffer_time_offset
        words = self._last_full
        bounds = [min(a.end, b.start) if b.start > a.start else a.end for a, b in zip(words, words[1:])]
        bounds = [t for t in bounds if max(off, self.left_until) + 0.1 <= t <= end - 0.2]
        near = [t for t in bounds if end - span_s <= t <= end - min_tail_s]
        half = int(frame_s * SAMPLE_RATE / 2)

        def energy(t: float) -> float:
            i = int(round((t - off) * SAMPLE_RATE))
            seg = self.audio[max(0, i - half): i + half]
            return float(np.mean(seg.astype(np.float64) ** 2)) if len(seg) else np.inf

        self._word_cut = None
        if near or bounds:
            self._word_cut = min(near or bounds, key=energy)
            return self._word_cut
        if self.left_until > self._t_start + 1e-6:  # trimmed at a segment end of a decode: a word boundary
            return self.left_until
        lo, hi = max(0.1, end - span_s - off), max(0.2, end - min_tail_s - off)
        return off + split_point(self.audio, hi, min(lo, hi - 0.1), frame_s) / SAMPLE_RATE

    def finish(self, speech_end: float | None = None, cut: bool = False) -> list[Word]:
        """End of speech (:meth:`_finish`); the final text and its language are noted in the session's language
        history (the next utterances' prompts hold text in one language only)."""
        words = self._finish(speech_end, cut)
        if self.session_language is not None:
            self.session_language.note_text(self.text, self.language)
        return words

    def _finish(self, speech_end: float | None = None, cut: bool = False) -> list[Word]:
        """End of speech: everything after the committed words is committed. Returns the words committed now.

        If the latest hypothesis already covers the audio up to ``speech_end`` (audio time, seconds; only silence
        came after it), that hypothesis is final and no decode is needed; otherwise the remaining buffer is decoded
        once more. ``cut``: speech goes on after ``speech_end`` (a run-on utterance ended at :meth:`run_on_cut`):
        when the cut is a word boundary of the latest decode (which heard ≥ ``min_tail_s`` of audio after it), that
        decode's words before the cut are final, with no decode (a decode that ends at the cut can miss the word
        before it, and the next utterance starts after it); with decodes of the whole utterance
        (``final_piece_s``) that decode runs past the cut and keeps the words before it. Otherwise the audio up to
        the cut is decoded again."""
        at_word = (cut and speech_end is not None and self._word_cut is not None
                   and abs(speech_end - self._word_cut) < 1e-6 and self.final_full)
        if self._needs_whole and not self.mostly_doubtful:
            end = self.audio_end if speech_end is None else min(speech_end, self.audio_end)
            if at_word:  # decoded past the cut too (the words before it are heard whole), kept up to it below
                end = self.audio_end
            if self._whole is None or self._whole_update != len(self.updates) or abs(self._whole[0] - end) > 1e-3:
                self._decode_whole(end)
            _, words, doubtful = self._whole
            if at_word:
                words = [w for w in words if _mid(w) < speech_end]
            if not doubtful:
                self.committed = self.final_words + words
                self.hyp.buffer = []
                return words
        tail: list[Word] = []
        if (at_word and self.updates and not self.updates[-1].stats.get("doubtful")
                and self.decoded_until >= speech_end):
            # a run-on utterance cut between two words of the latest decode (run_on_cut): that decode heard the
            # audio after the cut, so its words before the cut are final; a decode that ends at the cut can miss
            # its last word, which the next utterance (starting at the cut) would not hear either
            self._last_full = [w for w in self._last_full if _mid(w) < speech_end]
            self.final_decodes_skipped += 1
        elif speech_end is not None and self.updates and self.decoded_until >= speech_end - 1e-3 and not cut:
            tail = self.hyp.complete()
            self.final_decodes_skipped += 1
        elif self.mostly_doubtful:  # its words would not be kept (below): no decode, the final comes at once
            self.final_decodes_skipped += 1
        elif len(self.audio) >= SAMPLE_RATE * 0.1:
            if speech_end is not None:  # trailing silence only invites hallucinated repeats
                keep = int(round((speech_end - self.buffer_time_offset) * SAMPLE_RATE))
                self.audio = self.audio[: max(keep, int(SAMPLE_RATE * 0.1))]
            t0 = time.perf_counter()
            res = self._decode(self.audio, final=True)
            self._remember(res.words)
            self.hyp.insert(res.words, self.buffer_time_offset)
            tail = list(self.hyp.new)
            self.hyp.new = []
            self.updates.append(UpdateStats(time.perf_counter() - t0, len(self.audio) / SAMPLE_RATE, len(tail), res.stats))
        else:
            tail = self.hyp.complete()
        # a short utterance most of whose decodes were doubtful (below the guards' log-prob floor, judged silent: a
        # filler, noise; at least 3 decodes) keeps only the words two decodes agreed on, not the latest decode's guess
        doubtful = self.mostly_doubtful
        if doubtful:
            tail = []
        full = self._full_final() if self.final_full and not doubtful else None
        if full is not None:
            kept = self._before_buffer()
            tail = full
            self.committed = kept + full
        else:
            self.committed.extend(tail)
        self.hyp.buffer = []
        if self.context_words and not self.context_prefix and not cut:
            repeat = self._context_repeat(self.committed)
            if not self.committed or repeat:
                own = self._own_audio_final(speech_end)
                # no own-audio words (a filler, a doubtful decode): the words after the repeated run are kept
                tail = self.committed = own if own or not repeat else self.committed[repeat:]
        return tail

    def _context_repeat(self, words: Sequence[Word]) -> int:
        """How many of ``words`` (an utterance's final words) open with the acoustic context's text written again:
        the length of their longest first run, of at least ``context_repeat_words`` words, found anywhere in the
        context's words (compared by :func:`_key`); 0 when they do not, or the check is off. Whisper, decoding
        the context's audio and the new audio together, can write the context's words again and time them over
        the new audio, where they are not dropped as the context's."""
        n = self.context_repeat_words
        if n <= 0 or len(words) < n:
            return 0
        ctx = [_key(w.text) for w in self.context_words]
        keys = [_key(w.text) for w in words]
        if not all(keys[:n]):
            return 0
        best = 0
        for i in range(len(ctx)):
            k = 0
            while i + k < len(ctx) and k < len(keys) and ctx[i + k] == keys[k]:
                k += 1
            best = max(best, k)
        return best if best >= n else 0

    def _own_audio_final(self, speech_end: float | None) -> list[Word]:
        """The final words of an utterance decoded with the previous one's audio as acoustic context when that
        decode gave no new words, or opened with the context's words written again (:meth:`_context_repeat`):
        Whisper can write the context's words again over the new audio, or skip them and time the new words into
        the context, where they are dropped as the context's. The utterance's own audio
        (from the end of the context's last word to ``speech_end``, audio time in seconds) is decoded alone, after
        the context's text as the prompt. Returns its words (audio time); none when its speech (from
        :attr:`speech_start`) is shorter than ``OWN_AUDIO_MIN_S`` (a backchannel, a filler, a breath), or the decode
        is judged silent, or doubtful on speech shorter than ``DOUBTFUL_KEEP_S``."""
        start = max(self.context_end, self.buffer_time_offset)
        end = self.audio_end if speech_end is None else min(speech_end, self.audio_end)
        if end - self.speech_start < self.OWN_AUDIO_MIN_S:
            return []
        i0 = int(round((start - self.buffer_time_offset) * SAMPLE_RATE))
        i1 = int(round((end - self.buffer_time_offset) * SAMPLE_RATE))
        t0 = time.perf_counter()
        res = self._decode(self.audio[i0:i1], final=True, prompt=(self.context + join_words(self.context_words))[-200:],
                           at=start)
        self.updates.append(UpdateStats(time.perf_counter() - t0, (i1 - i0) / SAMPLE_RATE, 0,
                                        {**res.stats, "own_audio": True}))
        self.own_audio_decodes += 1
        if res.stats.get("doubtful") and end - self.speech_start < self.DOUBTFUL_KEEP_S:
            return []
        return [Word(w.start + start, w.end + start, w.text) for w in res.words]

    @property
    def mostly_doubtful(self) -> bool:
        """At least 3 decodes of this utterance, most of them doubtful (failed the guards or the log-prob floor
        even after their re-decodes: babble, music, noise the VAD took for speech), the latest one included, and
        less than ``DOUBTFUL_KEEP_S`` of audio since its speech started (:attr:`speech_start`). A confident latest
        decode keeps the utterance: early decodes of a word or two of unclear speech are often doubtful while the
        decode of the whole utterance is not; so does a longer one, as Whisper keeps low-log-prob text."""
        n_doubtful = sum(bool(u.stats.get("doubtful")) for u in self.updates)
        return (len(self.updates) >= 3 and n_doubtful > len(self.updates) / 2
                and bool(self.updates[-1].stats.get("doubtful"))
                and self.audio_end - self.speech_start < self.DOUBTFUL_KEEP_S)

    @property
    def decoded_whole(self) -> bool:
        """The final text is one decode of all the utterance's audio: no trim of its buffer left words behind (or,
        with ``final_piece_s``, the final decode was of the whole utterance) and no piece was finished early."""
        return self.pieces == 0 and (self._whole_on or self.left_until <= self._t_start + 1e-6)

    @property
    def hypothesis(self) -> str:
        """The text the final transcript would have if speech ended now: the words that left the buffer
        (:meth:`_trim_at`) plus the latest decode of the whole buffer (the rule of the final text, ``final_full``).
        Unlike the committed + tentative text of a partial, its earlier words may still change from one update to the
        next (a later decode with more audio corrects them, as the final decode does). Committed + tentative when there
        is no decode yet, ``final_full`` is off, or the latest decode was doubtful."""
        w = self._whole
        if w is not None and self._whole_update == len(self.updates) and not w[2]:  # the latest decode was whole
            return join_words(self.final_words + w[1])
        if self.final_full and self.updates and not self.updates[-1].stats.get("doubtful"):
            full = self._full_final()
            if full is not None:
                return join_words(self._before_buffer() + full)
        return join_words(self.committed + self.hyp.complete())

    def _remember(self, words: Sequence[Word]) -> None:
        self._last_full = [Word(w.start + self.buffer_time_offset, w.end + self.buffer_time_offset, w.text)
                           for w in words]

    def _full_final(self) -> list[Word] | None:
        """The latest decode of the whole buffer without the words of earlier utterances or of audio that left the
        buffer (the same time and n-gram rules as :meth:`HypothesisBuffer.insert`); None when there is none."""
        if not self._last_full:
            return None
        h = HypothesisBuffer()
        h.last_committed_time = max(self.context_end, self.buffer_time_offset, self.left_until)
        h.committed_in_buffer = (self._dedup_words + self._before_buffer())[-5:]
        h.insert(self._last_full, 0.0, align_text=self.align_final)
        return list(h.new)

    @property
    def text(self) -> str:
        return join_words(self.committed)


def _key(text: str) -> str:
    """A word for matching two decodes: lower case, letters and digits only."""
    return "".join(ch for ch in text.lower() if ch.isalnum())


def assign_words(old: Sequence[Sequence[Word]], new: Sequence[Word], bounds: Sequence[float]) -> list[int]:
    """Which utterance each word of a decode of several utterances belongs to.

    A new word that matches an old word (the same word in a matching block of at least two words of the two word
    sequences, difflib) belongs to that word's utterance: where the words around a boundary did not change, the
    boundary stays where the utterances' finals put it (word times are least reliable there, at the edge of a
    pause). Any other
    word goes by its time: the utterance ``k`` with ``bounds[k-1] ≤ middle < bounds[k]`` (``bounds``: audio times
    between consecutive utterances, seconds), kept between the utterances of the matched words around it.

    Args:
        old: each utterance's current words, in order.
        new: the decode's words (audio times, seconds).

    Returns:
        utterance positions (indices into ``old``), one per new word, non-decreasing.
    """
    import difflib

    labels = [k for k, ws in enumerate(old) for _ in ws]
    a = [_key(w.text) for ws in old for w in ws]
    b = [_key(w.text) for w in new]
    matched: list[int | None] = [None] * len(new)
    for blk in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks():
        if blk.size < 2:  # one common word ("you", "the") anchors nothing
            continue
        for i in range(blk.size):
            matched[blk.b + i] = labels[blk.a + i]
    out: list[int] = []
    for j, w in enumerate(new):
        k = matched[j]
        if k is None:
            k = sum(1 for x in bounds if _mid(w) >= x)
            nxt = next((m for m in matched[j + 1:] if m is not None), None)
            if nxt is not None:
                k = min(k, nxt)
        out.append(max(k, out[-1]) if out else k)
    return out


@dataclass
class SpokenUtterance:
    """A finished utterance the second pass may revise: ``index``; its speech's audio span ``t_start``–``t_end``
    (seconds, the VAD's); its current ``words`` (audio times; the final's, or a revision's); ``language`` ("" when
    not known)."""

    index: int
    t_start: float
    t_end: float
    words: list[Word]
    language: str = ""

    @property
    def text(self) -> str:
        return join_words(self.words)


@dataclass(frozen=True)
class Revision:
    """What one second-pass decode changed: ``changed`` — (index, new text, new words) of each utterance whose
    text changed, in order; ``window`` — the audio span decoded (seconds; from the first of the new words where an
    utterance began in an earlier window); ``language`` of the decode ("" when not
    known); ``compute_s`` — its wall time (seconds); ``stats`` — the backend's."""

    changed: tuple[tuple[int, str, tuple[Word, ...]], ...]
    window: tuple[float, float]
    language: str
    compute_s: float
    stats: dict


class SecondPass:
    """Finished utterances re-decoded together, with each other's audio, as an offline decode would hear them.

    The VAD's pauses cut speech into utterances, and each utterance's final text is decoded without the audio
    around it: a sentence cut by a hesitation pause comes out as two worse halves. The second pass gathers a
    *chain* of consecutive utterances (each starting at most ``gap_s`` seconds after the previous one ended, in one
    language, spanning at most ``max_s`` seconds) and decodes its audio in ONE window once the chain is complete
    (:meth:`run`: ``transcribe_final`` with the current text as the draft; greedy, guards and re-decodes as any
    final), prompted with the settled text before it. The decode's words go back to the utterances
    (:func:`assign_words`); utterances whose text changed are returned (:class:`Revision`).

    A chain is complete (:meth:`due`) when ``gap_s`` seconds of silence followed it (the next utterance could not
    join it), when the next utterance would make it longer than ``max_s`` (the next chain then gets up to ``left_s``
    seconds of its last utterance's audio, from a word start, as acoustic context only: its words there are the
    anchor, never revised, and the prompt ends before them), or at the end of the stream. One complete chain waits
    for its run (the caller runs it when the CPU is idle); if another completes first, the older is settled as it
    is. A chain is worth a run when it holds two utterances or more, has acoustic context, or holds one whose final
    text was not one decode of all of it (``whole=False``: a long utterance whose buffer was trimmed); an utterance
    longer than one window alone is decoded in pieces (the backend cuts them at the quietest moment). A decode that
    is doubtful (fails the guards) or loses more than a quarter of the words revises nothing.

    Each utterance is decoded about once more (a chain's audio once), in windows long enough to amortise the
    encoder's shortest window.

    Args:
        backend: an :class:`ASRBackend` (its ``transcribe_final`` if it has one).
        max_s: longest chain, seconds of audio (≤ 28: one encoder window).
        gap_s: longest pause between two utterances of one chain, seconds.
        pad_s: audio before the chain's first utterance and after its last one, seconds.
        left_s: acoustic context from the previous chain when the length limit cut it, seconds.
        context: text before the first utterance (the first prompt).
    """

    def __init__(self, backend: ASRBackend, max_s: float = 24.0, gap_s: float = 2.0, pad_s: float = 0.3,
                 left_s: float = 4.0, context: str = ""):
        self.backend = backend
        self.max_s = min(float(max_s), 28.0)
        self.gap_s = float(gap_s)
        self.pad_s = float(pad_s)
        self.left_s = float(left_s)
        self.chain: list[SpokenUtterance] = []  # the open chain (it may grow)
        self._whole = True  # every utterance of the open chain was decoded whole
        self._left: SpokenUtterance | None = None  # the open chain's acoustic context (the cut chain's last)
        # a complete chain waiting for its run: (utterances, acoustic context)
        self.ready: tuple[list[SpokenUtterance], SpokenUtterance | None] | None = None
        self._settled: dict[int, str] = {}  # the settled utterances' text by index (a run may settle late)
        self._settled_language: dict[int, str] = {}  # ... and their language ("" when not known)
        self._context0 = context
        self.context_language = ""  # the language of the latest settled text ("" when not known)
        self.runs = 0
        self.revised = 0  # utterances whose text a run changed
        self.dropped = 0  # complete chains settled without a run (another completed before the CPU was idle)
        self.last_compute_s = 0.0  # wall time of the latest run's decode, seconds

    def add(self, u: SpokenUtterance, whole: bool = True) -> None:
        """A new final transcript. ``whole``: its text was one decode of all its audio."""
        c = self.chain
        if c:
            other_language = bool(u.language) and bool(c[-1].language) and u.language != c[-1].language
            if u.t_start - c[-1].t_end > self.gap_s or other_language:
                self._close()
            elif u.t_end - c[0].t_start + 2 * self.pad_s > self.max_s:
                last = c[-1]
                self._close()
                self._left = last  # its words are updated by the run of its chain
        if not u.words and not self.chain:  # nothing said (a cough, music): no chain starts at it
            self._left = None
            return
        self.chain.append(u)
        self._whole = self._whole and whole

    def _worth(self) -> bool:
        return len(self.chain) >= 2 or self._left is not None or (bool(self.chain) and not self._whole)

    def _close(self) -> None:
        """The open chain is complete: it waits for its run (or is settled when no run would change it)."""
        if self._worth():
            if self.ready is not None:
                self._settle(self.ready[0])
                self.dropped += 1
            self.ready = (self.chain, self._left)
        else:
            self._settle(self.chain)
        self.chain, self._whole, self._left = [], True, None

    def _settle(self, us: Sequence[SpokenUtterance]) -> None:
        for u in us:
            self._settled[u.index] = u.text
            self._settled_language[u.index] = u.language or ""
            if u.text:
                self.context_language = u.language or self.context_language
        while len(self._settled) > 64:  # the prompt needs the last 200 characters only
            i = min(self._settled)
            del self._settled[i], self._settled_language[i]

    @property
    def context(self) -> str:
        """The settled text (the next run's prompt), in the order it was spoken; last 400 characters."""
        return " ".join([self._context0] + [self._settled[i] for i in sorted(self._settled)]).strip()[-400:]

    def context_in(self, language: str) -> str:
        """The end of :attr:`context` spoken in ``language`` (ISO 639-1): the settled texts since the last one in
        another language (one whose language is not known counts as this one), and the first prompt only when no
        settled text is in another language; last 400 characters."""
        texts = []
        for i in sorted(self._settled, reverse=True):
            if self._settled_language.get(i, "") not in ("", language):
                break
            texts.append(self._settled[i])
        else:
            texts.append(self._context0)
        return " ".join(reversed(texts)).strip()[-400:]

    def due(self, now: float | None = None) -> bool:
        """Whether a run would decode something no decode has heard together yet: a complete chain waits, or the
        open one is complete at the audio time ``now`` (seconds; None = the end of the stream)."""
        if self.ready is not None:
            return True
        if not self.chain:
            return False
        if now is None or now - self.chain[-1].t_end >= self.gap_s:
            self._close()
            return self.ready is not None
        return False

    def closes(self, u: SpokenUtterance) -> bool:
        """Whether adding ``u`` would complete the open chain (its pause or length)."""
        c = self.chain
        return bool(c) and (u.t_start - c[-1].t_end > self.gap_s
                            or u.t_end - c[0].t_start + 2 * self.pad_s > self.max_s)

    @property
    def earliest(self) -> float | None:
        """The earliest audio time (seconds) a run may still decode (None: none pending): the caller keeps the
        audio from there on."""
        ts = []
        if self.ready is not None:
            ts.append(self.window[0])
        if self.chain:
            ts.append((self._left or self.chain[0]).t_start - self.pad_s)
        return min(ts) if ts else None

    @staticmethod
    def _left_words(left: SpokenUtterance | None, left_s: float) -> list[Word]:
        """The words of ``left`` a run hears as acoustic context (those starting within ``left_s`` of its end)."""
        return [] if left is None else [w for w in left.words if w.start >= left.t_end - left_s]

    @property
    def window(self) -> tuple[float, float] | None:
        """The audio span (seconds) the next run decodes; None when no chain is complete."""
        if self.ready is None:
            return None
        chain, left = self.ready
        lw = self._left_words(left, self.left_s)
        start = max(lw[0].start - 0.05, left.t_start) if lw else chain[0].t_start - self.pad_s
        return max(0.0, start), chain[-1].t_end + self.pad_s

    def run(self, audio: np.ndarray, t0: float, language=None) -> Revision | None:
        """Decode the complete chain: ``audio`` float32 16 kHz from the audio time ``t0`` (seconds), covering
        :attr:`window` (what it lacks at either end is not decoded). ``language``: passed to the backend (a code,
        or a callable that picks it; None: the chain's language when every utterance has one, else the backend's).
        Returns the utterances whose text changed (None: no chain complete, nothing changed, or a rejected
        decode). The chain's words are updated and it is settled. The same as :meth:`take`, :meth:`decode` and
        :meth:`apply` in a row (a caller on another thread holds its lock for the first and the last only)."""
        job = self.take(language)
        if job is None:
            return None
        return self.apply(job, self.decode(job, audio, t0))

    def take(self, language=None) -> "_PassJob | None":
        """The complete chain's decode to run (None: none is complete); it is no longer :attr:`ready`."""
        win = self.window
        if win is None:
            return None
        chain, left_u = self.ready
        self.ready = None
        left = self._left_words(left_u, self.left_s)
        prompt = self.context
        ctx_text = join_words(left)
        if ctx_text and prompt.endswith(ctx_text):  # the prompt is the text before the window's audio
            prompt = prompt[: -len(ctx_text)].rstrip()
        langs = {u.language for u in chain}
        if language is None and len(langs) == 1 and "" not in langs:
            language = next(iter(langs))
        if isinstance(language, str):
            # prompted with text in one language, Whisper translates speech in another into it: the prompt holds
            # the settled text in the chain's language only
            prompt = self.context_in(language)
            if ctx_text and prompt.endswith(ctx_text):
                prompt = prompt[: -len(ctx_text)].rstrip()
        return _PassJob(chain, left, win, prompt[-200:], join_words(left + [w for u in chain for w in u.words]),
                        language)

    def decode(self, job: "_PassJob", audio: np.ndarray, t0: float) -> BackendResult | None:
        """The backend's decode of ``job``'s window from ``audio`` (float32 16 kHz starting at the audio time ``t0``,
        seconds); None when that audio lacks most of it. Touches no state but the counters."""
        a, b = max(job.window[0], t0), min(job.window[1], t0 + len(audio) / SAMPLE_RATE)
        job.window = (a, b)
        seg = np.asarray(audio[int(round((a - t0) * SAMPLE_RATE)): int(round((b - t0) * SAMPLE_RATE))], np.float32)
        self.last_compute_s = 0.0
        if len(seg) < SAMPLE_RATE * 0.3:
            return None
        fn = getattr(self.backend, "transcribe_final", None)
        kw = {}
        if fn is not None and job.draft and _takes(fn, "draft"):
            kw["draft"] = job.draft
        fn = fn or self.backend.transcribe
        if job.language is not None and _takes(fn, "language"):
            kw["language"] = job.language
        t_start = time.perf_counter()
        res = fn(seg, job.prompt, **kw)
        job.compute_s = self.last_compute_s = time.perf_counter() - t_start
        self.runs += 1
        return res

    def apply(self, job: "_PassJob", res: BackendResult | None) -> Revision | None:
        """Give ``job``'s chain the words of its decode ``res`` and settle it. Returns what changed (None: nothing,
        or the decode was rejected: missing, doubtful, or more than a quarter of the words lost)."""
        chain, left, language = job.chain, job.left, job.language
        if res is None:
            self._settle(chain)
            return None
        a = job.window[0]
        lang = res.stats.get("language") or (language if isinstance(language, str) else "") or chain[-1].language
        words = [Word(w.start + a, w.end + a, w.text) for w in res.words]
        old = [left] + [u.words for u in chain]
        if res.stats.get("doubtful") or len(words) < 0.75 * sum(len(ws) for ws in old):
            self._settle(chain)
            return None
        ends = [chain[0].t_start - self.pad_s] + [(u.t_end + v.t_start) / 2 for u, v in zip(chain, chain[1:])]
        owner = assign_words(old, words, ends)
        new: list[list[Word]] = [[] for _ in chain]
        for w, k in zip(words, owner):
            if k > 0:  # 0: the acoustic context's words, which stay as they are
                new[k - 1].append(w)
        changed = []
        for u, ws in zip(chain, new):
            if " ".join(join_words(ws).split()) != " ".join(u.text.split()):
                changed.append((u.index, join_words(ws), tuple(ws)))
                self.revised += 1
            u.words = ws
            u.language = lang or u.language
        self._settle(chain)
        if not changed:
            return None
        return Revision(tuple(changed), job.window, lang or "", job.compute_s, dict(res.stats))


@dataclass
class _PassJob:
    """One second-pass decode: the chain, its acoustic context's words, the audio span (seconds), prompt, draft
    and language; ``compute_s`` once decoded."""

    chain: list[SpokenUtterance]
    left: list[Word]
    window: tuple[float, float]
    prompt: str
    draft: str
    language: object
    compute_s: float = 0.0


class OfflineWindowPass:
    """The second pass as offline Whisper decodes the recording: the stream re-decoded in consecutive 30 s windows,
    each starting where the previous one's settled segments end (its seek position) and conditioned on the tokens
    decoded before it, as faster-whisper's long-form transcription of the whole recording moves through it (greedy,
    temperature 0, timestamp tokens; :meth:`FasterWhisperBackend.transcribe_window`). Each window's words go back to
    the utterances they were heard in (:func:`assign_words`) and revise their text (:class:`Revision`).

    The VAD's pauses cut speech into utterances, and each utterance's final text is decoded without most of the
    audio around it; an offline decode hears up to 30 s of it, before and after each word. A window runs once all
    of its 30 s have been heard (plus ``margin_s``, so speech the VAD has not yet reported is not in it) and no
    utterance is open (the caller's rule), or at the end of the stream (the rest, in as many windows as it takes):
    a revision comes about 30 s after the speech at most, and the live partials and finals are not delayed by it.
    A window that overlaps no utterance is skipped (30 s of silence: offline Whisper hears nothing there either).
    Where the language changes (``asr.language = "auto"``), the window ends between the two utterances and the
    prompt restarts: prompted in one language, Whisper translates speech in another. A decode that loops (fails
    the guard's token cap, repetition or compression checks) revises nothing, and the prompt restarts after it.

    Args:
        backend: a :class:`FasterWhisperBackend` (anything with its ``transcribe_window``).
        window_s: the window, seconds (Whisper's 30 s).
        margin_s: audio past a window's end heard before it runs, seconds.
        context: text before the stream (the first prompt).
    """

    def __init__(self, backend, window_s: float = 30.0, margin_s: float = 1.0, context: str = ""):
        self.backend = backend
        self.window_s = float(window_s)
        self.margin_s = float(margin_s)
        self.seek = 0.0  # audio time the next window starts at, seconds
        self.pending: list[SpokenUtterance] = []  # utterances no settled window has passed the end of yet
        self._new: dict[int, list[Word]] = {}  # the windows' words of each pending utterance so far
        self._keep: set[int] = set()  # pending utterances a rejected window heard: they keep their final text
        self._context0 = context
        self._tokens: list[int] | None = None  # token ids decoded so far (None: encode the context first)
        self._prompt_language = ""  # the language the prompt tokens are in ("" when not known)
        self.ready: tuple[float, float, bool, str] | None = None  # (start, end, last, language) of the next window
        self.runs = 0
        self.revised = 0  # utterances whose text a window changed
        self.dropped = 0  # windows rejected (a loop): their utterances keep their text
        self.last_compute_s = 0.0

    def add(self, u: SpokenUtterance, whole: bool = True) -> None:
        """A new final transcript (``whole`` is not used: every utterance is decoded again)."""
        if u.t_end <= self.seek:  # the windows have passed it already (audio decoded before it was reported)
            return
        self.pending.append(u)
        self._new.setdefault(u.index, [])

    @property
    def earliest(self) -> float | None:
        """The earliest audio time (seconds) a window may still decode: the caller keeps the audio from there on."""
        return self.seek

    @property
    def window(self) -> tuple[float, float] | None:
        """The audio span (seconds) the next run decodes; None when none is due."""
        return None if self.ready is None else (self.ready[0], self.ready[1])

    def due(self, now: float | None = None) -> bool:
        """Whether a window is due at the audio time ``now`` (seconds; None = the end of the stream)."""
        if self.ready is not None:
            return True
        # 30 s without an utterance: offline Whisper's window there gives nothing; the next one starts after it
        while (now is not None and now - self.seek >= self.window_s + self.margin_s
               and not any(u.t_start < self.seek + self.window_s for u in self.pending)):
            self.seek += self.window_s
        if not self.pending:
            return False
        if now is None:
            end, last = max(u.t_end for u in self.pending) + self.window_s, True  # all the audio there is
        elif now - self.seek >= self.window_s + self.margin_s:
            end, last = self.seek + self.window_s, False
        else:
            return False
        us = [u for u in self.pending if u.t_start < end]
        language = next((u.language for u in us if u.language), "")
        for a, b in zip(us, us[1:]):
            if a.language and b.language and a.language != b.language:
                end, last = (a.t_end + b.t_start) / 2, True  # the window ends where the language changes
                break
        self.ready = (self.seek, end, last, language)
        return True

    def _prompt(self, language: str) -> list[int]:
        """The prompt token ids of a window in ``language``: the tokens decoded before it (the context's at the
        start of the stream), none after a loop or where the language changed."""
        if self._tokens is not None and language and self._prompt_language and language != self._prompt_language:
            self._tokens = None
        if self._tokens is None:
            self._tokens = []
            tok = getattr(getattr(self.backend, "model", None), "hf_tokenizer", None)
            if self.runs == 0 and self._context0.strip() and tok is not None:
                self._tokens = list(tok.encode(" " + self._context0.strip(), add_special_tokens=False).ids)
        self._prompt_language = language or self._prompt_language
        return self._tokens[-223:]

    def take(self, language=None) -> "_WindowJob | None":
        """The due window's decode (None: none is due); it is no longer :attr:`ready`. ``language``: a code for the
        decode (None: the language of its utterances; a callable is not used here)."""
        if self.ready is None:
            return None
        start, end, last, lang = self.ready
        self.ready = None
        if isinstance(language, str) and language:
            lang = language
        return _WindowJob((start, end), self._prompt(lang), lang, last, end if last else end + self.margin_s)

    def decode(self, job: "_WindowJob", audio: np.ndarray, t0: float) -> BackendResult | None:
        """The backend's decode of ``job``'s window from ``audio`` (float32 16 kHz starting at the audio time ``t0``,
        seconds); None when that audio lacks most of it. A window before the end of the stream is given the audio
        after it too (up to ``margin_s``), as an offline decode computes a window's features from the whole
        recording: cut at the window's end, the last frames differ and Whisper may settle fewer segments. Touches
        no state but the counters."""
        t_audio = t0 + len(audio) / SAMPLE_RATE
        a, b = max(job.window[0], t0), min(job.window[1], t_audio)
        job.window = (a, b)
        upto = b if job.last else min(t_audio, b + self.margin_s)
        seg = np.asarray(audio[int(round((a - t0) * SAMPLE_RATE)): int(round((upto - t0) * SAMPLE_RATE))],
                         np.float32)
        self.last_compute_s = 0.0
        if (b - a) < 0.3:
            return None
        t_start = time.perf_counter()
        res = self.backend.transcribe_window(seg, job.prompt_tokens, job.language or None, last=job.last)
        job.compute_s = self.last_compute_s = time.perf_counter() - t_start
        self.runs += 1
        return res

    def apply(self, job: "_WindowJob", res: BackendResult | None) -> Revision | None:
        """Give the window's words to the utterances it heard, settle those it passed the end of, and move the seek
        position on. Returns the settled utterances whose text changed (None: none)."""
        a, end = job.window
        rejected = res is None or res.stats.get("guard") in ("cap", "loop", "compression")
        seek = end if (res is None or job.last) else min(end, a + float(res.stats.get("seek_s", end - a)))
        seek = max(seek, self.seek + 0.1)  # always forward
        us = [u for u in self.pending if u.t_start < seek]
        lang = ((res.stats.get("language") if res is not None else None) or job.language or "")
        if rejected:
            self._tokens = None  # the prompt restarts after a loop
            self._keep.update(u.index for u in us)  # these utterances keep their text
        else:
            words = [Word(w.start + a, w.end + a, w.text) for w in res.words]
            bounds = [(u.t_end + v.t_start) / 2 for u, v in zip(us, us[1:])]
            if us:
                for w, k in zip(words, assign_words([u.words for u in us], words, bounds)):
                    self._new[us[k].index].append(w)
            self._tokens = (self._tokens or []) + list(res.stats.get("prompt_tokens", []))
            self._prompt_language = lang or self._prompt_language
        self.seek = seek
        changed = []
        for u in [u for u in self.pending if u.t_end <= seek or job.last and u.t_start < seek]:
            ws = self._new.pop(u.index, [])
            if u.index in self._keep:
                self._keep.discard(u.index)
                ws = list(u.words)
            if " ".join(join_words(ws).split()) != " ".join(u.text.split()):
                changed.append((u.index, join_words(ws), tuple(ws)))
                self.revised += 1
            u.words = ws
            u.language = lang or u.language
            self.pending.remove(u)
        if rejected and res is not None:
            self.dropped += 1
        if not changed:
            return None
        stats = {k: v for k, v in res.stats.items() if k != "prompt_tokens"} if res is not None else {}
        # an utterance that went on past a window has words from the window before too
        start = min([job.window[0]] + [w.start for _, _, ws in changed for w in ws])
        return Revision(tuple(changed), (start, job.window[1]), lang, job.compute_s, stats)


@dataclass
class _WindowJob:
    """One :class:`OfflineWindowPass` decode: the audio span it settles (seconds), prompt token ids, language,
    whether it is the end of the stream or of a language (every segment kept), the end of the audio it hears;
    ``compute_s`` once decoded."""

    window: tuple[float, float]
    prompt_tokens: list[int]
    language: str
    last: bool
    audio_end: float  # the decode hears the audio up to here (seconds): past the window's end unless ``last``
    compute_s: float = 0.0
