"""The fidelity guard: a caption must translate its source, never answer it.

:class:`FidelityGuard` checks a final caption against its source: length ratio (characters), target-language
check (stop words and letters of de/fr/es/en, :mod:`engine.translate.languages`: the caption must not stay in
English or in the source's language), and cues that it answers instead of translating (question mark lost or
invented, answer openers, markdown or line breaks, numbers of the source missing (a digit 0–20 may be written out
in the target language) or invented, more sentences than the source, a trailing "..."). :class:`GuardedTranslator` wraps any live translator (SSBD or AR): a final
caption that fails is re-translated once with AR in the ``guard`` frame, and the event is counted and kept; a
trailing continuation mark is cut from the SSBD draft before verification (:func:`trim_continuation`).
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass, field

from engine.translate.languages import (
    _WORD,
    STOPWORDS,
    SUPPORTED,
    language_code,
    language_scores,
)
from engine.translate.sentence_translator import SentenceTranslator
from engine.translate.translator import GUARD_FRAME, Translator

log = logging.getLogger(__name__)


# openers of a reply (not of a translation), per language; English covers an untranslated answer
ANSWER_OPENERS = {
    "en": r"(sure|certainly|of course|absolutely|yes|no|here is|here are|here's|i am|i'm|i can|i cannot|i can't|"
          r"i'll|i will|i'd|i would|as an ai|sorry|unfortunately|the current time|it is currently|"
          r"hello! how can i)\b",
    "de": r"(natürlich|gerne|gern|sicher[,!]|klar[,!]|ja[,!]|nein[,!]|hier (ist|sind)|ich bin|ich kann|ich habe|"
          r"ich werde|ich würde|es tut mir leid|leider|entschuldigung|als (ki|künstliche)|die aktuelle|"
          r"wie kann ich (ihnen|dir) helfen)",
    "fr": r"(bien sûr|certainement|volontiers|oui[,!]|non[,!]|voici|je suis|je peux|je ne peux|je vais|"
          r"désolé|malheureusement|en tant qu'ia|l'heure actuelle|comment puis-je vous aider)",
    "es": r"(claro|por supuesto|desde luego|sí[,!]|no[,!]|aquí (está|están|tienes)|soy |puedo|no puedo|voy a|"
          r"lo siento|lamentablemente|como (ia|una ia)|la hora actual|¿en qué puedo ayudarte)",
}


_FIRST_PERSON = re.compile(r"i\b|i'")


_QWORDS = set("what how why when where who whom whose which can could would will should shall do does did is are "
              "am was were have has had may might".split())


_TRAILING_DOTS = re.compile(r"(\.\.+|…)\W*$")


_NUMBER_WORDS = re.compile(r"\b(zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|\w+teen|"
                           r"twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|hundred|thousand|million|"
                           r"half|quarter|dozen|first|second|third|once|twice)\b")


#: number words 0–20 per language: a digit of the source may be written out in the caption ("5" → "fünf")
NUMBER_WORDS = {
    "en": "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
          "seventeen eighteen nineteen twenty",
    "de": "null eins zwei drei vier fünf sechs sieben acht neun zehn elf zwölf dreizehn vierzehn fünfzehn sechzehn "
          "siebzehn achtzehn neunzehn zwanzig",
    "fr": "zéro un deux trois quatre cinq six sept huit neuf dix onze douze treize quatorze quinze seize dix-sept "
          "dix-huit dix-neuf vingt",
    "es": "cero uno dos tres cuatro cinco seis siete ocho nueve diez once doce trece catorce quince dieciséis "
          "diecisiete dieciocho diecinueve veinte",
}


_ALT_NUMBER = {"de": {"1": ("ein", "eine", "einen", "einem", "einer")}, "fr": {"1": ("une",)},
               "es": {"1": ("un", "una")}}


def number_kept(number: str, caption: str, code: str) -> bool:
    """Whether the source's ``number`` (digits) is in ``caption`` as digits or, for 0–20, as a number word of the
    caption's language ``code`` or of English (word-bounded, case-insensitive)."""
    if number in caption:
        return True
    if not number.isdigit() or int(number) > 20:
        return False
    low = caption.lower()
    forms = [NUMBER_WORDS[c].split()[int(number)] for c in ("en", code) if c in NUMBER_WORDS]
    forms += list(_ALT_NUMBER.get(code, {}).get(str(int(number)), ()))
    return any(re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", low) for f in forms)


@dataclass
class GuardVerdict:
    ok: bool
    reasons: list[str]


@dataclass
class GuardEvent:
    """A final caption the guard rejected and what replaced it (the AR re-translation in the guard frame)."""

    source: str
    rejected: str
    reasons: list[str]
    replacement: str
    replacement_ok: bool
    compute_s: float  # seconds of the re-translation


def source_language(text: str) -> str:
    """The language (en, de, fr or es) with the most evidence in ``text`` (:func:`language_scores`; ties go to the
    first of en, de, fr, es); "" when there is none."""
    sc = language_scores(text)
    best = max(sc.items(), key=lambda kv: kv[1])
    return best[0] if best[1] > 0 else ""


class FidelityGuard:
    """Checks that a final caption translates its source into the target language and does not answer it.

    Args:
        target: target language (code or name); the language check runs for :data:`SUPPORTED` targets and English.
        min_ratio, max_ratio: allowed caption/source length ratio in characters (sources of ≥ ``min_chars``).
        min_chars: shorter sources skip the length check.
    """

    def __init__(self, target: str, min_ratio: float = 0.5, max_ratio: float = 2.2, min_chars: int = 16):
        self.code = language_code(target) or ""
        self.min_ratio, self.max_ratio, self.min_chars = min_ratio, max_ratio, min_chars
        self.checked = 0
        self.triggered = 0

    def check(self, source: str, caption: str) -> GuardVerdict:
        self.checked += 1
        v = self.verdict(source, caption)
        self.triggered += not v.ok
        return v

    def verdict(self, source: str, caption: str) -> GuardVerdict:
        """The checks without counting (see the class doc)."""
        src, cap = source.strip(), caption.strip()
        reasons: list[str] = []
        if not src:
            return GuardVerdict(True, [])
        if not cap:
            return GuardVerdict(False, ["empty"])
        if len(src) >= self.min_chars:
            r = len(cap) / len(src)
            if not self.min_ratio <= r <= self.max_ratio:
                reasons.append(f"length_ratio={r:.2f}")
        words = _WORD.findall(cap.lower())
        src_lang = source_language(src)
        if (self.code in SUPPORTED or self.code == "en") and self.code in STOPWORDS:
            sc = language_scores(cap)
            tgt, best = sc[self.code], max(sc.items(), key=lambda kv: kv[1])
            # the caption is in English (an untranslated English source, or the LLM's own language) or still in
            # the source's language; no target-language evidence at all only counts on a longer caption: a short
            # one ("Rad, Lenkrad, Auto, Motor.") may hold no stop word of any language
            other = {"en", src_lang} - {self.code, ""}
            if (best[0] in other and best[1] > tgt and best[1] >= 2) or (tgt == 0 and len(words) >= 6):
                reasons.append(f"not_{self.code}")
        # answer cues
        src_low, cap_low = src.lower(), cap.lower()
        if "?" in src and "?" not in cap:
            reasons.append("question_not_kept")
        first = _WORD.findall(src_low)[:1]
        if "?" in cap and "?" not in src and not (first and first[0] in _QWORDS):
            reasons.append("question_invented")
        # a source that opens like an answer itself ("Nein, ich kann …") may be translated with an opener
        src_opens = any(re.match(r"[\s\"'«¡¿]*" + ANSWER_OPENERS[lang], src_low)
                        for lang in {"en", src_lang} & set(ANSWER_OPENERS))
        for lang in {"en", self.code} & set(ANSWER_OPENERS):
            m = re.match(r"[\s\"'«¡¿]*" + ANSWER_OPENERS[lang], cap_low)
            # into English, "I am / I will / I would …" is how first-person speech translates (Spanish and Italian
            # drop the pronoun, so the source's own opener cannot tell); a reply's other openers still count
            if m and self.code == "en" and src_lang != "en" and _FIRST_PERSON.match(m.group(1)):
                continue
            if m and not src_opens:
                reasons.append(f"answer_opener:{m.group(0).strip()}")
                break
        if any(mk in cap and mk not in src for mk in ("```", "**", "\n- ", "\n1.", "\n\n")):
            reasons.append("markdown")
        elif "\n" in cap and "\n" not in src:
            reasons.append("line_breaks")  # e.g. a poem written instead of the request translated
        nums = re.findall(r"\d+", src)
        if nums and sum(number_kept(n, cap, self.code) for n in nums) < len(nums) / 2:
            reasons.append("numbers_missing")
        if re.search(r"\d", cap) and not nums and not _NUMBER_WORDS.search(src_low):
            reasons.append("numbers_invented")
        if _TRAILING_DOTS.search(cap) and not _TRAILING_DOTS.search(src):
            reasons.append("unfinished")
        if len(re.findall(r"[.!?]+(\s|$)", cap)) > len(re.findall(r"[.!?]+(\s|$)", src)) + 1:
            reasons.append("more_sentences")
        return GuardVerdict(not reasons, reasons)


@dataclass
class GuardStats:
    checked: int = 0
    triggered: int = 0
    replacement_failed: int = 0
    events: list[GuardEvent] = field(default_factory=list)


def trim_continuation(lm, tokens: list[int]) -> list[int]:
    """``tokens`` without a trailing continuation mark ("...", "…") that a translation of an unfinished source
    may end with: as part of an SSBD draft (Algorithm 1) biased verification (Eq. 5) would keep it, and EOS after
    it, in the final caption."""
    n = len(tokens)
    while n and re.fullmatch(r"[\s.…]*", lm.detokenize(tokens[n - 1 : n])):
        n -= 1
    tail = lm.detokenize(tokens[n:])
    return list(tokens[:n]) if (".." in tail or "…" in tail) else list(tokens)


class GuardedTranslator:
    """A live translator (:class:`engine.translate.biased_retranslation.SSBDTranslator` or :class:`engine.translate.biased_retranslation.ARRetranslator`) whose final
    captions pass :class:`FidelityGuard`; a failing one is re-translated with AR in the ``guard`` frame, on the
    same LM session (the shared system prompt stays cached). Everything else is the wrapped translator's
    (``stream``, ``lm``, ``beta``, …); the update that replaced a rejected caption is also the stream's last.

    Args:
        inner: the live translator (``translate_ssbd``, ``reset``, ``stream``).
        guard: the guard (default: a :class:`FidelityGuard` for the inner translator's target).
        on_trigger: called with each :class:`GuardEvent` (from the caption thread).
    """

    def __init__(self, inner, guard: FidelityGuard | None = None, on_trigger=None):
        self.inner = inner
        self.guard = guard or FidelityGuard(inner.target)
        self.on_trigger = on_trigger
        self.guard_stats = GuardStats()

    def __getattr__(self, name):
        return getattr(self.__dict__["inner"], name)

    def reset(self) -> None:
        self.inner.reset()

    def translate_ssbd(self, source: str, final: bool = False, cancel: threading.Event | None = None, pause=None):
        """One update (see :meth:`engine.translate.biased_retranslation.SSBDTranslator.translate_ssbd`); a final one is guarded."""
        prev = getattr(self.inner, "prev", None)
        if prev:
            self.inner.prev = trim_continuation(self.inner.lm, prev)
        if pause is None:
            u = self.inner.translate_ssbd(source, final=final, cancel=cancel)
        else:
            u = self.inner.translate_ssbd(source, final=final, cancel=cancel, pause=pause)
        if not final:
            return u
        v = self.guard.check(source, u.text)
        self.guard_stats.checked += 1
        if v.ok:
            return u
        from engine.translate.stream_metrics import SSBDUpdate

        n0 = self.inner.session.n_eval
        r = Translator.translate(self.inner, source, cancel, frame=GUARD_FRAME)
        ok = self.guard.verdict(source, r.text).ok
        ev = GuardEvent(source, u.text, v.reasons, r.text, ok, r.compute_s)
        self.guard_stats.triggered += 1
        self.guard_stats.replacement_failed += not ok
        self.guard_stats.events.append(ev)
        log.warning("caption guard (%s): %r → %r re-translated as %r", ", ".join(v.reasons), source, u.text, r.text)
        nu = SSBDUpdate(source, r.tokens, r.text, r.text, "", u.draft, u.accepted, len(r.tokens),
                        u.forward_passes + self.inner.session.n_eval - n0, u.compute_s + r.compute_s, True)
        st = getattr(self.inner, "stream", None)
        if st is not None and st.updates and st.updates[-1] is u:
            st.updates[-1] = nu
        if hasattr(self.inner, "prev"):
            self.inner.prev = list(r.tokens)
        if self.on_trigger is not None:
            self.on_trigger(ev)
        return nu


def guarded(translator, on_trigger=None) -> GuardedTranslator:
    """``translator`` behind the fidelity guard (unchanged if it already is, or if it is a
    :class:`SentenceTranslator`, whose inner translator is)."""
    if isinstance(translator, (GuardedTranslator, SentenceTranslator)):
        return translator
    return GuardedTranslator(translator, on_trigger=on_trigger)
