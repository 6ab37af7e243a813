"""Session language identification for ``asr.language = "auto"``: each decode is made in the language the
session's hysteresis picks (:class:`SessionLanguage`) from Whisper's language identification (fused with the trained
language-ID head, :mod:`engine.asr.language_head`) on the decode's own encoder output, the utterance's windows so far
pooled (:func:`pool_identifications`). A decoding prompt holds text in the decode's language only: prompted with
English text, Whisper writes German speech as an English translation.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from engine.config import AsrConfig, spoken_languages


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
    since the utterance began, pooled by :func:`pool_identifications` (:class:`LanguageChoice`).

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
        asr: the ``asr`` settings: ``language_switch_p`` (the probability a language needs to switch an utterance away
            from the session's, ``switch_p``), ``language_switch_min_s`` (the shortest audio whose identification may
            switch it, ``switch_min_s``), ``language_agree_p`` (the probability with which two consecutive utterances
            must name the same other language, ``agree_p``), ``language_memory`` (the weight of the session's evidence
            per utterance of age, ``memory``; 0 = each window on its own evidence alone, as before any utterance
            ended), ``languages`` (the languages the speakers may use: every identification is restricted to them and
            renormalised, so a short or unsure window is never heard as a language nobody speaks; empty = every
            language Whisper knows) and ``language_pool`` (each decode of an utterance is given the utterance's
            identification so far, :func:`pool_identifications` over its windows, not its own window's alone).
        language: the session's language at the start (ISO 639-1), or None to take the first utterance's.
    """

    def __init__(self, asr: AsrConfig, language: str | None = None):
        self.switch_p, self.switch_min_s = float(asr.language_switch_p), float(asr.language_switch_min_s)
        self.agree_p = float(asr.language_agree_p)
        self.pool = bool(asr.language_pool)
        self.memory = float(asr.language_memory)
        self.languages = spoken_languages(asr.languages)
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


def pool_identifications(windows: Sequence[tuple[float, Sequence[tuple[str, float]]]]) -> list[tuple[str, float]]:
    """One utterance's language identification from those of its decodes' windows.

    The windows of an utterance are prefixes of one another (a growing buffer) or its later parts (after a trim),
    each encoded in its own window length; the identification of short speech (Whisper's, with the language-ID
    head's) moves from one window to the next, so the utterance's is their weighted geometric mean:
    log q(l) = Σ_w a_w log p_w(l) / Σ_w a_w, renormalised, with a_w the window's seconds of audio (a longer window
    hears more of the speech). The mean, not
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


class LanguageChoice:
    """The ``language`` a processor passes its backend under ``asr.language = "auto"``: picks each window's language
    by the session's hysteresis (:meth:`SessionLanguage.choose`, from the utterance's language so far), and says
    which language the processor's prompt text is in (``prompt_language``: the session's before this utterance),
    so a window in another language is decoded without it.

    Args:
        proc: the processor (:class:`engine.asr.online_processor.OnlineASRProcessor`): its ``session_language`` and
            the utterance's ``language`` so far are read at each window.
    """

    def __init__(self, proc):
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
        """The language to decode a window of ``audio_s`` seconds in (:class:`engine.asr.backend.LanguageChooser`):
        the window's identification ``probs`` (and Whisper's own, ``whisper_probs``) pooled with the utterance's
        earlier windows when the session pools, then :meth:`SessionLanguage.choose`."""
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
