"""Plain autoregressive Whisper decoding for the streaming path (``asr.method = "ar"``): CTranslate2's int8 encoder
and decoder in a length-scaled encoder window, every decode checked by the decode guards and redone where it fails
them (:mod:`engine.asr.window`), word times by cross-attention alignment, and a caller's draft of the text verified
exactly in one decoder pass. :class:`engine.asr.ctc_self_speculative.SSDCT2Backend` adds CTC self-speculative
drafts to the same decoding.
"""

from __future__ import annotations

import difflib
import time
from dataclasses import dataclass, field

import numpy as np

from audio.io import SAMPLE_RATE
from engine.asr.backend import ASRBackend, BackendResult, DecodeAbandoned
from engine.asr.whisper_ct2 import CT2WhisperDecoder
from engine.asr.window import (
    DecodeGuard,
    WindowPolicy,
    log_mel,
    skipped_regions,
    split_point,
)
from engine.asr.words import word_key
from engine.core import verify as V
from engine.core.events import Word


def echoes_prompt(words, prompt: str) -> bool:
    """Whether a decode's ``words`` (:class:`Word`) mostly repeat its prompt's text: at least two words and at least
    60 % of them in one run of words the prompt also has. Whisper, prompted with the text before a stretch of audio
    it is unsure of (babble, a mumble), can answer with that text again; such a decode is the prompt's echo, not the
    stretch's words."""
    new = [k for k in (word_key(w.text) for w in words) if k]
    if len(new) < 2:
        return False
    old = [k for k in (word_key(t) for t in prompt.split()) if k]
    m = difflib.SequenceMatcher(None, old, new, autojunk=False).find_longest_match(0, len(old), 0, len(new))
    return m.size >= 2 and m.size >= 0.6 * len(new)


def transcribe_in_pieces(backend, audio: np.ndarray, prompt: str, max_s: float, **kw) -> BackendResult:
    """Decode audio longer than one window with ``backend.transcribe``: cut at the quietest moment before
    ``max_s`` seconds (:func:`engine.asr.window.split_point`), decode the first piece, then the rest (split
    again if needed) prompted with the text so far (``kw``: more arguments of every ``transcribe``). Word times are
    relative to the start of ``audio``; numeric stats are summed, ``pieces`` counts the windows."""
    cut = split_point(audio, max_s)
    prefix = kw.pop("prefix", "")
    first = backend.transcribe(audio[:cut], prompt, **kw, **({"prefix": prefix} if prefix else {}))
    text = "".join(w.text for w in first.words).strip()
    rest = backend.transcribe(audio[cut:], " ".join(t for t in (prompt, prefix, text) if t).strip()[-400:], **kw)
    off = cut / SAMPLE_RATE
    words = list(first.words) + [Word(w.start + off, w.end + off, w.text) for w in rest.words]
    stats = {k: (v + rest.stats.get(k, 0) if isinstance(v, (int, float)) and not isinstance(v, bool)
                 and isinstance(rest.stats.get(k, 0), (int, float)) else v) for k, v in first.stats.items()}
    stats["pieces"] = first.stats.get("pieces", 1) + rest.stats.get("pieces", 1)
    return BackendResult(words, segment_ends(words), stats)


def segment_ends(words: list[Word]) -> list[float]:
    """Sentence ends (words ending in . ? !) and the last word end, for the streaming buffer trimming."""
    ends = [w.end for w in words if w.text.rstrip().endswith((".", "?", "!"))]
    if words and (not ends or ends[-1] != words[-1].end):
        ends.append(words[-1].end)
    return ends


class WhisperARBackend(ASRBackend):
    """Plain autoregressive Whisper decoding (greedy, or beam search of width ``beam_size``) for the live streaming
    path, on CTranslate2's int8 decoder (what faster-whisper runs), without timestamp tokens: the encoder sees the
    audio in a length-scaled window (:class:`engine.asr.window.WindowPolicy`), every decode passes the decode guards
    (:class:`engine.asr.window.DecodeGuard`) or is redone, and word times come from cross-attention alignment
    (``asr.method = "ar"``, the default).

    A caller's ``draft`` (:meth:`transcribe_final`: the text it expects) is verified in ONE decoder pass
    (``Whisper.align``, which also yields the word timestamps) and accepted by
    :func:`engine.core.verify.majority_accepted`, then greedy decoding continues from the accepted prefix with
    ``generate`` (the prefix is re-read in one batched pass; CTranslate2 keeps no KV cache between calls), so the
    text is exactly greedy decoding's. :class:`engine.asr.ctc_self_speculative.SSDCT2Backend` drafts every decode
    itself (CTC self-speculative decoding) through the same path.

    Args:
        model: the Whisper model (:class:`engine.asr.whisper_ssd.WhisperSSD`: CTranslate2 encoder and
            decoder, tokenizers, word alignment, language identification).
        window: the encoder window (default :class:`engine.asr.window.WindowPolicy`'s).
        guard: the decode guards (default :class:`engine.asr.window.DecodeGuard`'s).
        beam_size: beam width of a decode (``asr.beam_size``; 1 = greedy).
        final_beam_size: beam width of the decode of an utterance's final text (``asr.final_beam_size``;
            :meth:`transcribe_final`; 1 = greedy, with the caller's draft verified).
    """

    name = "ar"
    supports_language = True
    supports_prefix = True
    supports_padded_retry = True
    supports_abandon = True
    supports_draft = True
    #: whether a streaming update's decode drafts its own text (:meth:`_draft`; speculative decoding)
    speculative = False

    def __init__(self, model, window: WindowPolicy | None = None, guard: DecodeGuard | None = None,
                 beam_size: int = 1, final_beam_size: int = 3):
        self.m = model
        self.beam_size = beam_size  # not with a draft (its verification is against greedy)
        self.final_beam_size = final_beam_size  # the decode of an utterance's final text (transcribe_final)
        self.redecode_gaps = True  # decode stretches of loud audio the decoder skipped (skipped_regions)
        self.window = window or WindowPolicy()
        self.guard = guard or DecodeGuard()
        self._bad_prompt = ""  # a prompt under which a decode collapsed and the decode without it passed
        self.counts = {"ctc": 0, "verified": 0, "fallback": 0, "ar": 0}

    @property
    def language(self) -> str | None:
        """``asr.language``: an ISO 639-1 code, "auto" (identified per decode), or None (an English-only model)."""
        return self.m.language

    @property
    def final_is_partial(self) -> bool:
        """Whether :meth:`transcribe_final` without a draft is exactly a streaming update's :meth:`transcribe`
        (greedy finals, ``final_beam_size`` 1: it passes no beam width, so the decode is the partials' own): a
        streaming hypothesis of the audio up to the end of speech is then the final's decode
        (:meth:`engine.asr.online_processor.OnlineASRProcessor.final_covers`). With beam search for the final text it
        is not."""
        return self.final_beam_size <= 1

    def _words_from(self, res, tokens: list[int], language: str | None = None) -> list[Word]:
        """Word timestamps from an ``align`` result (faster-whisper's find_alignment arithmetic)."""
        from faster_whisper.transcribe import merge_punctuations

        tok = self.m.tokenizer(language)
        words, word_tokens = tok.split_to_word_tokens(tokens + [tok.eot])
        if len(word_tokens) <= 1:
            return []
        text_idx = np.array([p[0] for p in res.alignments])
        time_idx = np.array([p[1] for p in res.alignments])
        bounds = np.pad(np.cumsum([len(t) for t in word_tokens[:-1]]), (1, 0))
        jumps = np.pad(np.diff(text_idx), (1, 0), constant_values=1).astype(bool)
        jt = time_idx[jumps] / self.m.fw.tokens_per_second
        if len(jt) < bounds[-1] + 1:
            return []
        al = [dict(word=w, tokens=t, start=float(jt[i]), end=float(jt[j]), probability=0.0)
              for w, t, i, j in zip(words, word_tokens, bounds[:-1], bounds[1:])]
        merge_punctuations(al, "\"'“¿([{-", "\"'.。,，!！?？:：”)]}、")
        return [Word(a["start"], a["end"], a["word"]) for a in al if a["word"]]

    def transcribe_final(self, audio: np.ndarray, prompt: str = "", draft: str = "",
                         language=None, prefix: str = "", padded_retry: bool = True) -> BackendResult:
        """:meth:`transcribe` for the decode that gives an utterance's final text (the streaming processor calls it
        at a VAD pause and at the end of speech): beam search of width ``final_beam_size`` (``asr.final_beam_size``;
        greedy when 1).

        ``draft``: text the caller expects (the streaming hypothesis of a whole utterance): verified in one
        decoder pass and accepted by :func:`engine.core.verify.majority_accepted`, then greedy decoding continues from
        the accepted prefix, so the text is exactly greedy decoding's (for every method: the final decode of a
        whole utterance does not use SSD's relaxed τ_SLM); ignored under beam search. ``language``, ``prefix``,
        ``padded_retry``: as in :meth:`transcribe`."""
        beam = self.final_beam_size if self.final_beam_size > 1 else None
        kw = {"draft": draft} if draft.strip() and beam is None else {"beam_size": beam}
        return self.transcribe(audio, prompt, language=language, prefix=prefix, padded_retry=padded_retry, **kw)

    def transcribe(self, audio: np.ndarray, prompt: str = "", beam_size: int | None = None,
                   draft: str | None = None, language=None, prefix: str = "",
                   padded_retry: bool = True, abandon=None) -> BackendResult:
        """Decode ``audio`` (float32 16 kHz, any length) after the text ``prompt`` (``beam_size``: this decode's
        beam width without a draft, default ``self.beam_size``; ``draft``: see :meth:`transcribe_final`, no
        speculative draft then; ``language``: None = the model's ``asr.language``, an ISO 639-1 code, or a
        :class:`engine.asr.backend.LanguageChooser` that picks it from the language identified on this window's
        encoder output (:meth:`engine.asr.whisper_ssd.WhisperSSD.language_for`); every re-decode of the
        window keeps the language picked, and a window not in English is never drafted by the CTC head, which was
        trained on English).
        ``prefix``: the text of the words the audio begins with (an earlier utterance kept as acoustic context),
        forced as the decoder's first text tokens, as in one long-form window where Whisper has already written
        them: the decode continues after them, its words are only the new ones, and no word of the context is
        decoded again.
        ``padded_retry``: False = a decode that fails the guards is not redone on the padded window (a streaming
        update's partial, replaced by the next update); the prompt reset still applies, on the scaled window.
        ``abandon``: a callable checked once the encoder pass is done (audio up to one window long): True raises
        :class:`engine.asr.backend.DecodeAbandoned` before the decoder runs (a streaming update that a decode
        about to start supersedes, e.g. at the VAD's pause).

        The encoder sees the audio in a window of ``self.window`` (length-scaled by default); the decode passes
        :attr:`guard` or is redone greedily on the padded 30 s window, and, when the best decode so far collapsed
        (below the log-prob floor with fewer than 0.5 tokens per second) or echoes its prompt (:func:`echoes_prompt`)
        and had a prompt, once more without the prompt, which is then not used again (Whisper can answer a lone "."
        or the prompt's own text under its prompt); the best decode by
        guard verdict and mean log-prob is kept. A loop that survives is cut at its first repetition and a silent
        window gives no words. Audio longer than ``window.max_audio_s`` is cut at its
        quietest moment and decoded piece by piece, the next piece prompted with the previous piece's text.

        Returns:
            words (seconds from the start of ``audio``), segment ends, and ``stats`` (``encode_s``, ``decode_s``,
            ``ctc_s``, ``align_s``, ``stage``, ``accepted``, ``draft_tokens``, ``n_forward``, ``window_s``,
            ``guard`` (the failed check or ""), ``fallback`` (re-decodes), ``prompt_reset`` (re-decodes without the
            prompt), ``doubtful`` (the kept decode still fails a guard or the log-prob floor), ``pieces``,
            ``language`` (the code decoded in, None for an English-only model) and, when it was identified,
            ``language_probs`` (the three most probable (code, probability) pairs)).
        """
        audio = np.asarray(audio, np.float32)
        if len(audio) > self.window.max_audio_s * SAMPLE_RATE:
            return self._transcribe_long(audio, prompt, language, prefix)
        n = len(audio)
        audio_s = n / SAMPLE_RATE
        if prompt and prompt == self._bad_prompt:
            prompt = ""  # the buffer's earlier decodes collapsed under this prompt: it is not tried again
        if draft is not None:
            r = self._decode_window(audio, prompt, self.window.n_frames(n), False, draft_text=draft, language=language,
                                    prefix=prefix)
        else:
            r = self._decode_window(audio, prompt, self.window.n_frames(n), self.speculative, beam_size,
                                    language=language, prefix=prefix, abandon=abandon)
        lang = r.stats.get("language")
        if not self.m.prompt_fits(language, lang):
            prompt = ""  # nor for its re-decodes
        stats = dict(r.stats)
        verdict = self.guard.check(r.tokens, r.text, audio_s, r.avg_logprob, r.no_speech_prob)
        stats["guard"] = verdict.reason
        stats["fallback"] = 0

        def collapsed(v, d) -> bool:  # next to nothing over seconds of audio, below the log-prob floor
            return v.reason == "logprob" and len(d.tokens) < max(2.0, 0.5 * audio_s)

        def echoed(d) -> bool:  # the prompt's text again: Whisper's answer to audio it is unsure of
            return bool(prompt.strip()) and echoes_prompt([Word(0.0, 0.0, t) for t in d.text.split()], prompt)

        retries = []  # (prompt, whether it is the prompt reset)
        if not verdict.ok and verdict.reason != "no_speech":
            if self.window.mode == "scaled" and padded_retry:
                retries.append((prompt, False))  # Whisper was trained on 30 s windows: redo it padded, greedily
            if prompt.strip():
                retries.append(("", True))  # Whisper can collapse under its prompt (a lone "."): once more without
        for p_retry, reset in retries:
            if reset and not (collapsed(verdict, r) or echoed(r)):
                break  # no collapse and no echo (babble, music, a loop): the prompt is not to blame
            # without padded_retry the prompt reset stays on the scaled window: no decode pays a 30 s encoder pass
            frames = 3000 if padded_retry else self.window.n_frames(n)
            r2 = self._decode_window(audio, p_retry, frames, False, language=lang, prefix=prefix)
            stats["fallback"] += 1
            stats["prompt_reset"] = stats.get("prompt_reset", 0) + reset
            for k in ("encode_s", "decode_s", "align_s", "n_forward"):
                stats[k] = round(stats[k] + r2.stats[k], 4) if isinstance(stats[k], float) else stats[k] + r2.stats[k]
            v2 = self.guard.check(r2.tokens, r2.text, audio_s, r2.avg_logprob, r2.no_speech_prob)
            stats["guard_after_fallback"] = v2.reason
            if _rank(v2, r2) < _rank(verdict, r):
                r, verdict = r2, v2
                if reset and v2.ok:
                    self._bad_prompt = prompt
            if verdict.ok or verdict.reason == "no_speech":
                break
        if verdict.reason == "no_speech":
            r = _WindowDecode([], "", [], None, r.stats, r.avg_logprob, r.no_speech_prob)
        elif verdict.reason in ("cap", "loop", "compression"):
            toks = self.guard.cut(r.tokens, audio_s)
            r = _WindowDecode(toks, self.m.tok.decode(toks).strip(), None, r.sv, r.stats, r.avg_logprob,
                              r.no_speech_prob, r.forced)
        t3 = time.perf_counter()
        words = r.words if r.words is not None else self.m.words(r.tokens, r.sv, n, lang, r.forced)
        stats["align_s"] = round(stats.get("align_s", 0.0) + time.perf_counter() - t3, 4)
        stats["tokens"] = len(r.tokens)
        stats["pieces"] = 1
        stats["gaps_redecoded"] = 0
        confident = verdict.ok and (r.avg_logprob is None or r.avg_logprob >= self.guard.logprob)
        stats["doubtful"] = not confident
        if self.redecode_gaps and words and confident:  # not on doubtful windows (babble, music): nothing to find
            words = self._fill_skipped(audio, words, prompt, stats, after=prefix)
        return BackendResult(words, segment_ends(words), stats)

    def _fill_skipped(self, audio: np.ndarray, words: list[Word], prompt: str, stats: dict,
                      after: str = "") -> list[Word]:
        """Whisper can skip a whole sentence (no word, or one stretched word, over seconds of loud audio): decode
        such a stretch alone, greedily, prompted with the words before it, and put its words in place (at most two
        per window; :func:`engine.asr.window.skipped_regions`). ``after``: the text of a forced prefix (the
        acoustic context the audio begins with, whose words are not in ``words``): only stretches after the first
        word are looked at."""
        regions = skipped_regions(audio, words)
        if after.strip():
            regions = [(a, b, k) for a, b, k in regions if words and a >= words[0].start - 1e-6]
        for a, b, k in reversed(regions[:2]):  # from the end, so earlier indices stay valid
            i = k if k is not None else sum(1 for w in words if w.end <= a + 1e-6)
            head = prompt + (" " + after.strip() if after.strip() else "")
            before = (head + "".join(w.text for w in words[:i])).strip()[-400:]
            lo, hi = int(a * SAMPLE_RATE), int(b * SAMPLE_RATE)
            r = self._decode_window(audio[lo:hi], before, self.window.n_frames(hi - lo), False,
                                    language=stats.get("language"))
            stats["decode_s"] = round(stats["decode_s"] + r.stats["decode_s"], 4)
            stats["encode_s"] = round(stats["encode_s"] + r.stats["encode_s"], 4)
            stats["gaps_redecoded"] += 1
            if not r.tokens or not self.guard.check(r.tokens, r.text, (hi - lo) / SAMPLE_RATE, r.avg_logprob,
                                                    r.no_speech_prob).ok:
                continue
            new = [Word(w.start + a, w.end + a, w.text)
                   for w in self.m.words(r.tokens, r.sv, hi - lo, stats.get("language"))]
            if echoes_prompt(new, before):
                stats["gaps_echo"] = stats.get("gaps_echo", 0) + 1
                continue
            words = words[:i] + new + words[i + (k is not None):]  # a stretched word is replaced
        return words

    def _transcribe_long(self, audio: np.ndarray, prompt: str, language=None, prefix: str = "") -> BackendResult:
        """Audio longer than one window, decoded in pieces cut at its quietest moments
        (:func:`transcribe_in_pieces`)."""
        return transcribe_in_pieces(self, audio, prompt, self.window.max_audio_s, language=language, prefix=prefix)

    def _decode_window(self, audio: np.ndarray, prompt: str, n_frames: int, speculate: bool,
                       beam_size: int | None = None, draft_text: str | None = None,
                       language=None, prefix: str = "", abandon=None) -> "_WindowDecode":
        """One encoder window and one decode: beam search of width ``beam_size`` (default ``self.beam_size``), or,
        with ``speculate``, the verification of the backend's own draft (:meth:`_draft`) and greedy decoding after
        its accepted prefix. ``draft_text`` (with ``speculate`` False): a caller's draft, verified exactly
        (:func:`engine.core.verify.majority_accepted`) before greedy decoding continues. ``language``, ``prefix``,
        ``abandon``: see :meth:`transcribe` (a prefix's tokens are ``forced``, not in ``tokens``)."""
        exact = draft_text is not None and not speculate
        n = len(audio)
        t0 = time.perf_counter()
        sv = self.m.fw.encode(log_mel(self.m.fw.feature_extractor, audio, n_frames))
        t_enc = time.perf_counter() - t0
        if abandon is not None and abandon():
            raise DecodeAbandoned(f"abandoned after the encoder pass ({t_enc:.3f} s)")
        t_lid = time.perf_counter()
        lang, lang_probs = self.m.language_for(sv, language, n / SAMPLE_RATE)
        t_lid = time.perf_counter() - t_lid
        # the CTC head drafts English, and all of the window: not after a forced prefix (its words would come again)
        speculate = speculate and lang in (None, "en") and not prefix.strip()
        if not self.m.prompt_fits(language, lang):
            prompt = ""
        t1 = time.perf_counter()
        d = self._draft(sv, audio) if speculate else _NO_DRAFT
        ctc_s = time.perf_counter() - t1
        t2 = time.perf_counter()
        tok = self.m.tokenizer(lang)
        forced = tok.encode(" " + prefix.strip())[-223:] if prefix.strip() else []
        p = self.m.prompt(prompt, lang) + forced
        cap = self.guard.token_cap(n / SAMPLE_RATE)
        n_forward = 0
        words = None
        avg_lp = no_speech = None
        if d.accept_whole:  # CTC-SSD Eq. 3: the draft is final without a decoder pass
            stage, toks, draft = "ctc", tok.encode(" " + d.whole.strip())[:cap], []
            acc = len(toks)
        else:
            dec = CT2WhisperDecoder(self.m.fw.model, sv, n // 160)
            if not exact:
                draft_text = d.verify
            draft = tok.encode(" " + draft_text.strip())[:cap] if draft_text.strip() else []
            j = 0
            res = None
            lp_prefix = 0.0
            if draft:
                # verified in one pass, in the context generate() decodes in (previous text, SOT, no timestamps)
                probs = dec.token_probs(p, draft)
                res = dec.alignment
                n_forward += 1
                if exact:  # greedy's own tokens only: p > 1/2 and never a token generate() suppresses
                    sup = self.m.suppressed_ids
                    j = V.majority_accepted(probs, [t not in sup for t in draft])
                else:
                    j = self._accepted(probs)
                lp_prefix = float(np.sum(np.log(np.maximum(probs[:j], 1e-12))))
            # greedy AR from the longest verified prefix (ends at once when the prefix is complete; CTC-SSD Eq. 6)
            prefix = p + draft[:j]
            # the token cap: CTranslate2's max_length does not count new tokens one for one, so ask for enough
            # (never past Whisper's 448 positions) and cut the continuation at the cap here
            g = dec.generate(prefix, beam_size=1 if speculate or exact else (beam_size or self.beam_size),
                             max_length=min(448, 2 * (len(prefix) + max(1, cap - j)) + 2),
                             suppress_blank=j == 0, return_scores=True, return_no_speech_prob=True)
            cont = [t for t in g.sequences_ids[0] if t < tok.eot]
            if forced and cont[:len(forced)] == forced:  # CTranslate2 returns the forced prefix too
                cont = cont[len(forced):]
            if j and cont[:j] == draft[:j]:
                cont = cont[j:]
            cont = cont[: max(0, cap - j)]
            n_forward += len(cont) + 1
            toks = draft[:j] + cont
            acc = j
            stage = "ar" if not draft else ("verified" if j == len(draft) else "fallback")
            if res is not None and not cont and j == len(draft) and not forced:
                words = self._words_from(res, toks, lang)
            n_gen = len(cont) + 1
            avg_lp = (lp_prefix + float(g.scores[0]) * n_gen) / (j + n_gen)
            no_speech = float(g.no_speech_prob)
        decode_s = time.perf_counter() - t2
        self.counts[stage] += 1
        stats = {"stage": stage, "n_forward": n_forward, "accepted": acc, "draft_tokens": len(draft),
                 "encode_s": round(t_enc, 4), "decode_s": round(decode_s, 4), "ctc_s": round(ctc_s, 4),
                 "align_s": 0.0, "max_entropy": round(d.max_entropy, 3), "window_s": n_frames / 100,
                 "avg_logprob": None if avg_lp is None else round(avg_lp, 3),
                 "no_speech_prob": None if no_speech is None else round(no_speech, 3), "language": lang}
        if lang_probs is not None:
            stats.update(language_probs=[(c, round(q, 3)) for c, q in lang_probs[:3]], lid_s=round(t_lid, 4))
        return _WindowDecode(toks, tok.decode(toks).strip(), words, sv, stats, avg_lp, no_speech, forced)

    def _draft(self, sv, audio: np.ndarray) -> "WindowDraft":
        """A speculative decoder's own draft of one window, given its encoder output ``sv`` (a CTranslate2
        StorageView) and ``audio``; called only where :attr:`speculative` asks for it (plain AR has none)."""
        raise NotImplementedError(f"{type(self).__name__} drafts nothing")

    def _accepted(self, probs: np.ndarray) -> int:
        """The accepted prefix (tokens) of a speculative draft whose tokens have the target probabilities ``probs``
        (n,) (plain AR verifies only a caller's draft, exactly)."""
        raise NotImplementedError(f"{type(self).__name__} drafts nothing")


def _rank(verdict, r: "_WindowDecode") -> tuple:
    """Order of preference between decodes of the same audio: one that passes the guards, then one judged silent,
    then one only below the log-prob floor (the higher mean log-prob first), then a cap/loop/compression failure."""
    order = {"": 0, "no_speech": 1, "logprob": 2}.get(verdict.reason, 3)
    return order, -(r.avg_logprob if r.avg_logprob is not None else -np.inf)


@dataclass
class _WindowDecode:
    tokens: list[int]
    text: str
    words: list[Word] | None  # from the verification pass when it covered every token, else None
    sv: object  # the encoder output (for word alignment)
    stats: dict
    avg_logprob: float | None
    no_speech_prob: float | None
    forced: list[int] = field(default_factory=list)  # text tokens forced before ``tokens`` (a prefix)


@dataclass(frozen=True)
class WindowDraft:
    """A speculative decoder's own draft of one window (:meth:`WhisperARBackend._draft`).

    Attributes:
        verify: the text the decoder verifies in one pass (the CTC draft, merged with the previous hypothesis of the
            same growing buffer).
        whole: the text accepted without a decoder pass when ``accept_whole`` (CTC-SSD Eq. 3).
        max_entropy: the largest frame entropy of the CTC output, nats (for the stats).
    """

    verify: str
    whole: str = ""
    accept_whole: bool = False
    max_entropy: float = 0.0


_NO_DRAFT = WindowDraft("")
