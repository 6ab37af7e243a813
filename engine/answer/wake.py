"""Wake phrase: hands-free, only an utterance addressed to the assistant is answered.

Detection works on what the pipeline already computes — the streaming transcript — so any phrase the user types
works, with no training and no extra model (as pipecat's ``WakeCheckFilter``; openWakeWord, Porcupine and Rhasspy
instead run an acoustic model per phrase). Whisper spells a made-up phrase many ways ("hey spec voice", "Hey,
SpecVoice", "hey speck voice", "Hey Spec Boys"), so the phrase is matched on a *phonetic key* of the words with a
weighted edit distance:

* **Normalisation.** Lower case, accents dropped; only letters and digits (of any script) are kept in a word
  ("SpecVoice," → "specvoice", "spec-voice" → "specvoice"); "ok"/"o.k." is "okay". Up to :data:`MAX_FILLERS`
  leading fillers ("um", "oh", "so", …) are skipped.
* **Phonetic key** (:func:`phonetic_key`, in the spirit of Soundex/Metaphone): letters that Whisper confuses when it
  spells a sound are merged — c/k/q/ck → k (c before e/i/y → s), ph/v → f, z → s, b → p, d → t, g → k, x → ks,
  wh → w, a final silent e is dropped, y after the first letter is i, doubled letters collapse. The keys of
  consecutive words are joined, so a split or merged word ("spec voice" / "specvoice") costs nothing.
* **Distance** (:func:`key_distance`): Levenshtein over the keys with vowels cheap (substituting a vowel for a vowel
  costs 0.4, inserting or deleting one 0.5; any consonant edit 1). The transcript starts with the phrase when some
  prefix of 1 … (phrase words + 2) words is within ``tolerance`` × (the phrase key's length) of the phrase's key.
* **The prompt** (``duplex.wake_prompt``). While listening, each utterance is decoded with "<Phrase> is the wake
  phrase." as Whisper's previous text (:func:`prompt_sentence`; initial-prompt biasing as faster-whisper's
  ``hotwords``), so a made-up name is spelt as typed. A transcript with the prompt's tail right after the phrase
  ("Okay computer is the wake phrase.") is Whisper writing its prompt, not what it heard: not woken.

A partial transcript is decided as soon as it can be (:meth:`WakeMatcher.match`): *woken* once a prefix matches;
*not woken* once its words are long enough that no prefix, however the utterance goes on, can match (a lower bound
on the distance exceeds the tolerance); else undecided. So an armed utterance is answered no later than the first
ASR update whose text holds the phrase's words.

:class:`WakeGate` is the armed/follow-up state machine of one hands-free session (``duplex.wake_phrase``,
``duplex.follow_up_s``): *listening* — only an utterance that starts with the phrase is answered, the phrase cut
from what the LLM sees; *in conversation* — from a woken utterance until ``follow_up_s`` seconds after the answer
stopped (played out, or its text ended when nothing plays) an utterance is taken without the phrase. Times are
``time.monotonic()`` seconds.
"""

from __future__ import annotations

import functools
import re
import threading
import time
import unicodedata
from dataclasses import dataclass
from typing import Callable

VOWELS = frozenset("aeiou")
#: words that may come before the phrase and are skipped ("Um, hey spec voice …")
FILLERS = frozenset("um umm uh uhh er erm ah oh hmm mm mhm so well and".split())
MAX_FILLERS = 2
#: spellings that denote the same word
CANONICAL = {"ok": "okay", "okey": "okay", "kay": "okay"}
#: edit costs of :func:`key_distance`
VOWEL_SUB, VOWEL_INDEL, CONSONANT = 0.4, 0.5, 1.0
DEFAULT_TOLERANCE = 0.2  # × the phrase key's length (the trade-off is in `bench wake`'s tolerance sweep)
_PUNCT = " \t,.;:!?-—–…\"'"


def normalise_word(token: str) -> str:
    """A transcript token as a word to compare: lower case, accents dropped, letters and digits only (of any
    script), canonical spelling ("OK," → "okay", "Café" → "cafe"); "" when the token has no letter or digit."""
    w = unicodedata.normalize("NFKD", token.lower())
    w = "".join(c for c in w if c.isalnum() and not unicodedata.combining(c))
    return CANONICAL.get(w, w)


def phonetic_key(word: str) -> str:
    """The phonetic key of one normalised word (:func:`normalise_word`): the letters Whisper confuses when it spells
    a sound merged (see the module docstring); vowels are kept (:func:`key_distance` makes them cheap). E.g.
    "voice" → "fois", "spec" and "speck" → "spek", "boys" → "pois"."""
    w = word
    for a, b in (("ph", "f"), ("ck", "k"), ("wh", "w"), ("qu", "kw"), ("q", "k"), ("x", "ks")):
        w = w.replace(a, b)
    w = re.sub(r"c(?=[eiy])", "s", w)
    if len(w) > 3 and w.endswith("e") and w[-2] not in VOWELS:
        w = w[:-1]  # a silent final e ("voice", "spike")
    w = w.translate(str.maketrans("cvzbdg", "kfsptk"))
    if len(w) > 1:
        w = w[0] + w[1:].replace("y", "i")
    return _collapse(w)


def _collapse(s: str) -> str:
    return re.sub(r"(.)\1+", r"\1", s)


@functools.lru_cache(maxsize=65536)  # a partial transcript repeats the previous one's words
def key_distance(a: str, b: str) -> float:
    """Weighted Levenshtein distance between two phonetic keys: a vowel for a vowel costs :data:`VOWEL_SUB`,
    inserting or deleting a vowel :data:`VOWEL_INDEL`, any other edit :data:`CONSONANT`."""
    def indel(c: str) -> float:
        return VOWEL_INDEL if c in VOWELS else CONSONANT

    prev = [0.0]
    for c in b:
        prev.append(prev[-1] + indel(c))
    for ca in a:
        cur = [prev[0] + indel(ca)]
        for j, cb in enumerate(b, 1):
            sub = 0.0 if ca == cb else VOWEL_SUB if ca in VOWELS and cb in VOWELS else CONSONANT
            cur.append(min(prev[j - 1] + sub, prev[j] + indel(ca), cur[j - 1] + indel(cb)))
        prev = cur
    return prev[-1]


def _min_length_cost(extra: int) -> float:
    """The least a key ``extra`` letters longer than the phrase's can cost (each extra letter a vowel)."""
    return max(0, extra) * VOWEL_INDEL


@dataclass(frozen=True)
class WakeMatch:
    """What :meth:`WakeMatcher.match` decided about a transcript.

    Attributes:
        woken: True — it starts with the phrase; False — it cannot (final, or enough words); None — too few words
            to tell yet (a partial only).
        rest: the text after the phrase, as written (leading punctuation dropped, first letter upper case); "" when
            not woken or nothing follows.
        distance: the best prefix's distance ÷ the phrase key's length (0 = the same key; ``inf`` with no words).
        words: transcript tokens the phrase took, fillers before it included (0 when not woken).
    """

    woken: bool | None
    rest: str = ""
    distance: float = float("inf")
    words: int = 0


class WakeMatcher:
    """Does a transcript start with the wake phrase? (see the module docstring)

    Args:
        phrase: the wake phrase as the user typed it (any words, e.g. "hey spec voice").
        tolerance: accepted distance ÷ the phrase key's length, in [0, 1).

    Raises:
        ValueError: a phrase with no letter or digit, or a tolerance outside [0, 1).
    """

    def __init__(self, phrase: str, tolerance: float = DEFAULT_TOLERANCE):
        words = [w for w in (normalise_word(t) for t in phrase.split()) if w]
        if not words:
            raise ValueError(f"wake phrase {phrase!r} has no word (letters or digits)")
        if not 0.0 <= tolerance < 1.0:
            raise ValueError(f"wake tolerance must be in [0, 1), got {tolerance}")
        self.phrase = " ".join(phrase.split())
        self.words = words
        self.key = _collapse("".join(phonetic_key(w) for w in words))
        self.tolerance = tolerance
        self.limit = tolerance * len(self.key)  # accepted absolute distance

    def match(self, text: str, final: bool = False) -> WakeMatch:
        """Decide whether ``text`` (a partial transcript, or the ``final`` one) starts with the phrase."""
        tokens = [(m.end(), normalise_word(m.group())) for m in re.finditer(r"\S+", text)]
        tokens = [(end, w) for end, w in tokens if w]
        best: tuple[float, int, int] | None = None  # (distance, tokens taken, end offset in text)
        undecided = False
        for skip in range(0, min(MAX_FILLERS, len(tokens)) + 1):
            if skip and tokens[skip - 1][1] not in FILLERS:
                break
            key = ""
            for k in range(skip, min(len(tokens), skip + len(self.words) + 2)):
                key = _collapse(key + phonetic_key(tokens[k][1]))
                d = key_distance(key, self.key)
                if best is None or d < best[0] - 1e-9:
                    best = (d, k + 1, tokens[k][0])
                if _min_length_cost(len(key) - len(self.key)) > self.limit:
                    break  # longer prefixes only cost more
            else:
                # the words ran out while a longer prefix (one more letter at least) could still match
                undecided = undecided or (len(tokens) < skip + len(self.words) + 2
                                          and _min_length_cost(len(key) + 1 - len(self.key)) <= self.limit)
        dist = best[0] / len(self.key) if best is not None else float("inf")
        if best is not None and best[0] <= self.limit + 1e-9:
            rest = text[best[2]:].lstrip(_PUNCT)
            after = tuple(w for w in (normalise_word(t) for t in rest.split()[:len(_TAIL_WORDS)]) if w)
            if after == _TAIL_WORDS:  # Whisper wrote its prompt (prompt_sentence), not what it heard
                return WakeMatch(False, "", dist, 0)
            if after and not final and after == _TAIL_WORDS[:len(after)]:
                return WakeMatch(None, "", dist, 0)  # the next words tell an echo from "…, is it raining?"
            return WakeMatch(True, rest[:1].upper() + rest[1:], dist, best[1])
        return WakeMatch(None if undecided and not final else False, "", dist, 0)

    def cut(self, text: str) -> str:
        """``text`` without the phrase at its start when it has it (:meth:`match`), else ``text`` unchanged."""
        m = self.match(text, final=True)
        return m.rest if m.woken else text


#: the words :func:`prompt_sentence` puts after the phrase: a transcript with them right after the phrase is Whisper
#: writing its prompt, not what it heard (:meth:`WakeMatcher.match` does not wake on it)
PROMPT_TAIL = "is the wake phrase"
_TAIL_WORDS = tuple(PROMPT_TAIL.split())


def prompt_sentence(phrase: str) -> str:
    """``phrase`` in a sentence of Whisper's previous text that names it ("okay computer" → "Okay computer is the wake
    phrase."). The sentence does not end with the phrase: a prompt whose last words are the ones the audio opens with
    makes Whisper take them as already written and leave them out of the transcript."""
    p = " ".join(phrase.split()).rstrip(_PUNCT)
    if not p:
        return ""
    return f"{p[:1].upper()}{p[1:]} {PROMPT_TAIL}."


#: :class:`WakeGate` states
LISTENING, CONVERSATION = "listening", "conversation"


class WakeGate:
    """The armed/follow-up state of one hands-free session (see the module docstring). Thread-safe: the ASR thread
    calls :meth:`speech_started`, :meth:`partial` and :meth:`final`; a monitor thread calls :meth:`tick` (every
    few tens of ms) with whether the assistant is answering (generating or playing).

    Args:
        phrase: the wake phrase (``duplex.wake_phrase``).
        follow_up_s: seconds after the answer stopped during which an utterance needs no phrase
            (``duplex.follow_up_s``; 0 = every utterance needs it, except one started while the answer is given).
        on_change: called with the new state (:data:`LISTENING` or :data:`CONVERSATION`) on each change, on the
            thread that caused it.
        tolerance: :class:`WakeMatcher`'s.
        clock: the time source (``time.monotonic``), s.

    Raises:
        ValueError: see :class:`WakeMatcher`; a negative ``follow_up_s``.
    """

    def __init__(self, phrase: str, follow_up_s: float, on_change: Callable[[str], None] | None = None,
                 tolerance: float = DEFAULT_TOLERANCE, clock: Callable[[], float] = time.monotonic):
        if follow_up_s < 0:
            raise ValueError(f"follow-up window must be ≥ 0 s, got {follow_up_s}")
        self.matcher = WakeMatcher(phrase, tolerance)
        self.follow_up_s = float(follow_up_s)
        self.on_change = on_change
        self.clock = clock
        self.state = LISTENING
        self._lock = threading.Lock()
        self._report = threading.Lock()  # state changes are reported one at a time, in order
        self._quiet_since: float | None = None  # when the answer stopped (None: one is being given)
        self._taken: set[int] = set()  # utterances addressed to the assistant (woken, or follow-ups) not final yet
        self._changes: list[str] = []  # state changes not reported yet

    @property
    def phrase(self) -> str:
        return self.matcher.phrase

    def prompt_hint(self) -> str:
        """The ASR prompt's hint for an utterance opening now (``duplex.wake_prompt``): :func:`prompt_sentence` while
        listening, so Whisper hears and spells the phrase as typed; "" in conversation (a follow-up needs no
        phrase)."""
        with self._lock:
            self._expire()
            listening = self.state == LISTENING
        self._notify()
        return prompt_sentence(self.phrase) if listening else ""

    def speech_started(self, utterance: int) -> None:
        """An utterance starts: in conversation it is a follow-up (taken without the phrase)."""
        with self._lock:
            self._expire()
            if self.state == CONVERSATION:
                self._taken.add(utterance)
        self._notify()

    def partial(self, utterance: int, text: str) -> str | None:
        """A partial transcript of ``utterance``: the text to speculate on (the phrase cut when it is there), or
        None while the utterance is not (yet) addressed to the assistant."""
        with self._lock:
            out = self._decide(utterance, text, final=False)
        self._notify()
        return out

    def final(self, utterance: int, text: str) -> str | None:
        """The final transcript of ``utterance``: the text to answer (the phrase cut; "" when the phrase was said
        alone: the next utterance is then a follow-up), or None when it was not addressed to the assistant."""
        with self._lock:
            out = self._decide(utterance, text, final=True)
            self._taken.discard(utterance)
            if out is not None and self._quiet_since is not None:
                self._quiet_since = self.clock()  # the window starts again at the end of this utterance
        self._notify()
        return out

    def tick(self, answering: bool) -> None:
        """The assistant is (``answering``) or is not generating or playing an answer now; ends the conversation
        ``follow_up_s`` after the answer stopped."""
        with self._lock:
            if answering:
                if self.state == CONVERSATION:
                    self._quiet_since = None
            else:
                if self.state == CONVERSATION and self._quiet_since is None:
                    self._quiet_since = self.clock()
                self._expire()
        self._notify()

    def _expire(self) -> None:  # holds the lock
        if (self.state == CONVERSATION and not self._taken and self._quiet_since is not None
                and self.clock() - self._quiet_since >= self.follow_up_s):
            self._set(LISTENING)

    def _decide(self, utterance: int, text: str, final: bool) -> str | None:  # holds the lock
        if utterance in self._taken:  # a follow-up, or woken by an earlier partial: the phrase cut if said
            return self.matcher.cut(text)
        m = self.matcher.match(text, final=final)
        if not m.woken:  # a partial's "no" is provisional: a later partial or the final may still hold the phrase
            return None
        self._taken.add(utterance)
        if self.state == LISTENING:
            self._quiet_since = self.clock()  # the window counts from the end of this utterance at the latest
        self._set(CONVERSATION)
        return m.rest

    def _set(self, state: str) -> None:  # holds the lock; the change is reported by _notify, after it
        if state != self.state:
            self.state = state
            self._changes.append(state)

    def _notify(self) -> None:
        """Report the state changes made under the lock, outside it (a consumer may take its time)."""
        with self._report:
            while True:
                with self._lock:
                    if not self._changes:
                        return
                    state = self._changes.pop(0)
                if self.on_change is not None:
                    self.on_change(state)
