"""Streaming ASR: incremental re-decoding of the growing utterance with a LocalAgreement-2 commit policy.

Policy as in whisper_streaming (Macháček et al., 2023, ``whisper_online.py``): every update re-transcribes the
whole uncommitted audio buffer (prompted with the committed text); the longest common prefix of the last two
hypotheses is committed (LocalAgreement-2, :class:`engine.asr.local_agreement.HypothesisBuffer`); the buffer is trimmed
at a completed segment end once it grows past ``asr.buffer_trim_s``, keeping up to ``asr.trim_overlap_s`` of audio
before the cut (from a word start) so the decodes after it hear the words before their first new word, as a decode
inside an offline window does; those words are not emitted again (time and n-gram rules of
:meth:`~engine.asr.local_agreement.HypothesisBuffer.insert`). Updates are computation-aware: the caller decodes
whatever audio has arrived when it is free, at least ``asr.min_chunk_s`` of new audio per update.

The final text of an utterance is the latest decode of the whole buffer after the words that left it at a trim
(``asr.final_full``), not the words LocalAgreement-2 committed from shorter prefixes; the words that leave the buffer
at a trim keep the text of the decode whose segment end the trim cut at, which heard the audio after them
(``asr.trim_latest``). That decode is made once: the latest hypothesis is the final text, with no decode at the end
of speech, when it was decoded with the final's settings (the decode at the VAD's pause, or a streaming decode that
is the same call) and its audio reaches the end of speech (:meth:`OnlineASRProcessor.final_covers`).
With ``asr.final_piece_s`` > 0 a trimmed utterance's final text comes from a decode of the whole utterance instead:
the end of speech (or a VAD pause) decodes the utterance's audio since its last finished
piece in one window, with the streaming hypothesis as a draft that one decoder pass verifies exactly
(:func:`engine.core.verify.majority_accepted`), so the final is greedy decoding of the whole utterance (a backend
whose final decode uses beam search, ``asr.final_beam_size`` > 1, ignores the draft); speech longer than
``final_piece_s`` is finished in pieces while it is spoken, each cut at a word end (at a sentence end where there is
one) and decoded the same way, as an offline decode moves through 30 s windows. A run-on utterance is ended between
two words (:meth:`OnlineASRProcessor.run_on_cut`).
"""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from audio.io import SAMPLE_RATE
from engine.asr.backend import (
    ASRBackend,
    BackendCapabilities,
    BackendResult,
    DecodeAbandoned,
    UpdateStats,
)
from engine.asr.language_id import LanguageChoice, SessionLanguage
from engine.asr.local_agreement import HypothesisBuffer, repeated_context
from engine.asr.whole_utterance import WholeUtteranceDecodes
from engine.asr.window import quietest_word_boundary, split_point
from engine.asr.words import join_words, word_mid
from engine.config import AsrConfig
from engine.core.events import Word


class OnlineASRProcessor(WholeUtteranceDecodes):
    """whisper_streaming's three verbs over one utterance at a time: :meth:`insert_audio_chunk`,
    :meth:`process_iter`, :meth:`finish`.

    Args:
        backend: the decoder (:class:`engine.asr.backend.ASRBackend`); the optional arguments it declares are passed.
        asr: the ``asr`` settings of the policy (:class:`engine.config.AsrConfig`, whose help says what each does):
            ``buffer_trim_s`` (seconds), ``final_full``, ``final_piece_s`` (seconds; at least 9 when > 0: a piece
            needs room for its cut), ``trim_latest``, ``trim_overlap_s`` (seconds), ``context_prefix`` (with
            ``context_words`` and a backend that declares ``supports_prefix``), ``align_final``,
            ``context_repeat_words`` (with ``context_words`` and no prefix), ``partial_retry``, ``final_retry``
            (with a backend that declares ``supports_padded_retry``).
        context: text of earlier utterances, used as the decoding prompt (last 200 characters).
        t_offset: audio time of the buffer's first sample, seconds.
        context_words: words of an earlier utterance whose audio is at the start of the buffer (acoustic context,
            as in whisper_streaming's long-form buffer); they count as committed and are never emitted again.
        committed_until: audio time (seconds) the context's words end at (default ``t_offset``).
        speech_start: the audio time (seconds) the VAD heard this utterance's speech start, after any pre-roll or
            acoustic context (default ``t_offset``).
        session_language: ``asr.language = "auto"``: each decode identifies its language and decodes in the one the
            session's hysteresis picks (a backend that does not declare ``supports_language`` decodes in its own);
            None = the backend's fixed language.
    """

    # a final decoded again without its acoustic context needs this much speech since the VAD's start, seconds:
    # shorter speech is a backchannel, a filler or a breath, on which Whisper alone invents words
    OWN_AUDIO_MIN_S = 1.0
    # a mostly doubtful utterance with at least this much audio since the VAD's start (seconds) keeps its latest
    # decode: seconds of speech that Whisper base scores below the log-prob floor (most languages other than
    # English, speech in noise) are still that speech; under it (a filler, a breath, a burst of noise) Whisper
    # invents words
    DOUBTFUL_KEEP_S = 2.0

    def __init__(self, backend: ASRBackend, asr: AsrConfig, context: str = "", t_offset: float = 0.0,
                 context_words: Sequence[Word] = (), committed_until: float | None = None,
                 speech_start: float | None = None, session_language: SessionLanguage | None = None):
        self.backend = backend
        self.session_language = session_language
        if session_language is not None:  # the prompt holds text in the session's language only
            context = session_language.prompt_text(context)
        fixed = getattr(backend, "language", None)
        # the language of this utterance's latest decode (ISO 639-1; "" while unknown)
        self.language: str = (session_language.language if session_language is not None else
                              fixed if isinstance(fixed, str) and fixed != "auto" else None) or ""
        self.language_probs: list | None = None  # the latest identification: (code, probability) pairs
        self._choose_language = LanguageChoice(self)
        # the final text of the words still in the buffer is the latest decode of the whole buffer (which heard the
        # whole utterance), not the words LocalAgreement-2 committed from shorter prefixes (off: whisper_streaming's)
        self.final_full = bool(asr.final_full)
        # the words that leave the buffer at a trim keep the text of the latest decode (which heard the most audio)
        self.trim_latest = bool(asr.trim_latest)
        self.left_words: list[Word] = []  # the final words of the audio that left the buffer at trims
        # the final decodes tell their new words from the committed ones by the committed tail's text where they
        # hold it (HypothesisBuffer.insert ``align_text``), else by time and n-gram
        self.align_final = bool(asr.align_final)
        self.context_repeat_words = max(0, int(asr.context_repeat_words))
        self.context_words = list(context_words)
        self.context_prefix = bool(asr.context_prefix and self.context_words and BackendCapabilities.of(backend).prefix)
        # the words a decode's new words are told apart from by time and n-gram (none when the context is a prefix)
        self._dedup_words = [] if self.context_prefix else self.context_words
        self.context_end = t_offset if committed_until is None or self.context_prefix else committed_until
        self._last_full: list[Word] = []  # the latest decode of the buffer, absolute times
        self.buffer_trim_s = float(asr.buffer_trim_s)
        self.context = context
        self.audio = np.zeros(0, np.float32)
        self.buffer_time_offset = t_offset  # audio time of audio[0], seconds
        self.left_until = t_offset  # the words whose middle is before this audio time have left the buffer (final)
        self.trim_overlap_s = max(0.0, float(asr.trim_overlap_s))
        self._t_start = t_offset
        self.speech_start = t_offset if speech_start is None else max(t_offset, float(speech_start))
        # a decode that fails the guards is redone on the padded window: a streaming update's, a final text's
        self.partial_retry = bool(asr.partial_retry)
        self.final_retry = bool(asr.final_retry)
        self.hyp = HypothesisBuffer()
        self.hyp.last_committed_time = self.context_end
        self.hyp.committed_in_buffer = list(self._dedup_words)
        self.committed: list[Word] = []
        self.updates: list[UpdateStats] = []
        self.decoded_until = t_offset  # audio time covered by the latest hypothesis, seconds
        # the latest hypothesis was decoded as the final text's decode is (:meth:`_decoded_as_final`)
        self.decoded_as_final = False
        self.final_decodes_skipped = 0
        self.final_reused = False  # the final text is the latest hypothesis, not decoded again (:meth:`final_covers`)
        self.own_audio_decodes = 0  # finals decoded again without the acoustic context (_own_audio_final)
        # decodes of the whole utterance: its audio since the last finished piece, the final words before it
        # a piece needs room for its cut (PIECE_MIN_S after its start, PIECE_TAIL_S before the audio's end)
        self.final_piece_s = max(float(asr.final_piece_s), self.PIECE_MIN_S + self.PIECE_TAIL_S + 1.0) \
            if asr.final_piece_s > 0 else 0.0
        self._whole_on = self.final_full and self.final_piece_s > 0
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
        return self.final_words + [w for w in self.left_words if self.whole_offset <= word_mid(w) < until]

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
        self.decoded_as_final = self._decoded_as_final(until is not None)
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

    def _decoded_as_final(self, final: bool) -> bool:
        """Whether a decode of :meth:`process_iter` (``final``: up to a VAD pause, through the backend's
        ``transcribe_final``) is decoded as the final text's decode (:meth:`_finish`) is: with the final's decoding
        settings, or a streaming decode proven to be the same call. A backend's streaming decode is its final decode
        when it has no ``transcribe_final``, or declares ``final_is_partial`` (e.g.
        :class:`engine.asr.whisper_ar.WhisperARBackend` with greedy finals: without a draft ``transcribe_final``
        then calls ``transcribe`` exactly as a streaming update does), and the padded re-decode of a failed decode
        is asked for alike (``partial_retry`` = ``final_retry``, or a backend that has none); an ``abandon`` check
        that did not stop a decode changes nothing. A streaming update of a backend that decodes finals with beam
        search (``asr.final_beam_size`` > 1) is not."""
        if final:
            return True
        if getattr(self.backend, "transcribe_final", None) is not None and not getattr(self.backend,
                                                                                      "final_is_partial", False):
            return False
        return not BackendCapabilities.of(self.backend).padded_retry or self.partial_retry == self.final_retry

    def final_covers(self, speech_end: float) -> bool:
        """Whether the latest hypothesis is the final text of speech that ends at ``speech_end`` (audio time,
        seconds): it was decoded as the final's decode is (:meth:`_decoded_as_final`: at a VAD pause, whose decode
        ends exactly at the speech end the VAD then confirms, or a streaming decode proven the same) and its audio
        reaches ``speech_end``, so no speech came after the audio it heard. :meth:`_finish` then takes it as the
        final without decoding again; a hypothesis that is not the final's (a greedy streaming update that heard the
        end while the final decodes with beam search) is decoded again."""
        return bool(self.updates) and self.decoded_as_final and self.decoded_until >= speech_end - 1e-3

    def _decode(self, audio: np.ndarray, final: bool, prompt: str | None = None, draft: str = "",
                at: float | None = None, abandon=None) -> BackendResult:
        """One backend decode of ``audio`` after ``prompt`` (default :meth:`prompt`); ``at``: the audio time of
        ``audio[0]`` (seconds, default the buffer's start): audio that starts with the acoustic context is decoded
        after the context's text as a forced prefix (``context_prefix``). ``final``: this decode may give
        the utterance's final text (at a VAD pause or the end of speech): a backend with ``transcribe_final`` (e.g.
        beam search for the final text, ``asr.final_beam_size``) decodes it with that, given ``draft`` if it takes
        one (``supports_draft``). With a :class:`SessionLanguage` the backend identifies the window's language and
        decodes in the one :meth:`SessionLanguage.choose` picks (:attr:`language`). ``abandon``: see
        :meth:`process_iter` (passed to a backend that declares ``supports_abandon``)."""
        prompt = self.prompt() if prompt is None else prompt
        caps = BackendCapabilities.of(self.backend)
        final_fn = getattr(self.backend, "transcribe_final", None) if final else None
        fn = final_fn or self.backend.transcribe
        kw = {}
        if final_fn is not None and draft.strip() and caps.draft:
            kw["draft"] = draft
        if self.session_language is not None and caps.language:
            kw["language"] = self._choose_language
        if not (self.final_retry if final else self.partial_retry) and caps.padded_retry:
            kw["padded_retry"] = False
        at = self.buffer_time_offset if at is None else at
        if self.context_prefix and abs(at - self._t_start) < 1e-6 and caps.prefix:
            kw["prefix"] = join_words(self.context_words)
        if abandon is not None and caps.abandon:
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
            left = [w for w in latest if word_mid(w) < t]
            # the shown committed text takes them now: corrected while the utterance is short
            self.committed = ([w for w in self.committed if word_mid(w) < self.left_until] + left
                              + [w for w in self.committed if word_mid(w) >= t])
        else:
            left = [w for w in self.committed if self.left_until <= word_mid(w) < t]
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
        end, off = self.audio_end, self.buffer_time_offset
        self._word_cut = quietest_word_boundary(self.audio, off, self._last_full, max(off, self.left_until),
                                                span_s, min_tail_s, frame_s)
        if self._word_cut is not None:
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

        If the latest hypothesis is the final's decode of the audio up to ``speech_end`` (audio time, seconds; only
        silence came after it; :meth:`final_covers`: decoded with the final's settings, e.g. the decode at the VAD's
        pause), that hypothesis is final and no decode is needed (:attr:`final_reused`); otherwise the remaining
        buffer is decoded once more, with the final's settings. ``cut``: speech goes on after ``speech_end`` (a
        run-on utterance ended at :meth:`run_on_cut`): when the cut is a word boundary of the latest decode (which
        heard ≥ ``min_tail_s`` of audio after it), that decode's words before the cut are final, with no decode (a
        decode that ends at the cut can miss the word before it, and the next utterance starts after it); with
        decodes of the whole utterance (``final_piece_s``) that decode runs past the cut and keeps the words before
        it. Otherwise the audio up to the cut is decoded again."""
        at_word = (cut and speech_end is not None and self._word_cut is not None
                   and abs(speech_end - self._word_cut) < 1e-6 and self.final_full)
        if self._needs_whole and not self.mostly_doubtful:
            end = self.audio_end if speech_end is None else min(speech_end, self.audio_end)
            if at_word:  # decoded past the cut too (the words before it are heard whole), kept up to it below
                end = self.audio_end
            # the pause decoded the whole utterance up to this end (the final's decode): it is not repeated
            reused = not (self._whole is None or self._whole_update != len(self.updates)
                          or abs(self._whole[0] - end) > 1e-3)
            if not reused:
                self._decode_whole(end)
            _, words, doubtful = self._whole
            if at_word:
                words = [w for w in words if word_mid(w) < speech_end]
            if not doubtful:
                self.final_reused = reused
                self.committed = self.final_words + words
                self.hyp.buffer = []
                return words
        tail: list[Word] = []
        if (at_word and self.updates and not self.updates[-1].stats.get("doubtful")
                and self.decoded_until >= speech_end):
            # a run-on utterance cut between two words of the latest decode (run_on_cut): that decode heard the
            # audio after the cut, so its words before the cut are final; a decode that ends at the cut can miss
            # its last word, which the next utterance (starting at the cut) would not hear either
            self._last_full = [w for w in self._last_full if word_mid(w) < speech_end]
            self.final_decodes_skipped += 1
        elif speech_end is not None and not cut and self.final_covers(speech_end):
            tail = self.hyp.complete()  # the final's decode of this audio is the one already made: not repeated
            self.final_decodes_skipped += 1
            self.final_reused = True
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
            self.updates.append(UpdateStats(time.perf_counter() - t0, len(self.audio) / SAMPLE_RATE, len(tail),
                                            res.stats))
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
            repeat = repeated_context(self.committed, self.context_words, self.context_repeat_words)
            if not self.committed or repeat:
                own = self._own_audio_final(speech_end)
                # no own-audio words (a filler, a doubtful decode): the words after the repeated run are kept
                tail = self.committed = own if own or not repeat else self.committed[repeat:]
        return tail

    def _own_audio_final(self, speech_end: float | None) -> list[Word]:
        """The final words of an utterance decoded with the previous one's audio as acoustic context when that
        decode gave no new words, or opened with the context's words written again
        (:func:`~engine.asr.local_agreement.repeated_context`): Whisper can write the context's words again over the
        new audio, or skip them and time the new words into the context, where they are dropped as the context's.
        The utterance's own audio
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
