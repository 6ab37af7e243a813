"""Sentence-by-sentence live translation: finished sentences are translated once and kept.

:func:`split_sentences` cuts a transcript at sentence ends (not after common abbreviations or initials);
:class:`SentenceTranslator` re-translates only the unfinished last sentence on each update, so the final
caption of a long utterance costs one short translation.
"""

from __future__ import annotations

import re
import threading
import time

from engine.translate.translator import same_source

# -- sentence segmentation --------------------------------------------------------------------------------------
_ABBREV = re.compile(r"(?:\b(?:Mr|Mrs|Ms|Dr|St|Prof|Sr|Jr|vs|etc|e\.g|i\.e|No|Mt)\.|\b[A-Z]\.)$")


_SENT_END = re.compile(r"(?<=[.!?…])[\"')\]]*\s+(?=\S)")


def split_sentences(text: str) -> list[str]:
    """``text`` cut after each sentence end (. ! ? … and closing quotes/brackets, then whitespace); a period of a
    common abbreviation ("Mr.", "e.g.", an initial) does not end a sentence. The pieces joined by single spaces give
    ``text`` with its whitespace normalised; no empty piece; ``[]`` for blank text."""
    text = " ".join(text.split())
    out: list[str] = []
    start = 0
    for m in _SENT_END.finditer(text):
        if _ABBREV.search(text[start : m.start()]):
            continue
        out.append(text[start : m.end()].strip())
        start = m.end()
    if text[start:].strip():
        out.append(text[start:].strip())
    return out


class SentenceTranslator:
    """Live translation sentence by sentence: an utterance's sentences that are already followed by another one
    (*closed*) are translated once, to a final caption (guarded), and kept while the ASR's text of them does not
    change; only the open (last) sentence is re-translated by the live translator on each update, SSBD drafting it
    from its previous output. At the end of an utterance only its last sentence is left to translate, so the final
    caption's wait grows with the last sentence, not with the utterance — and closed sentences never flicker.

    The same interface as the live translators (``translate_ssbd``, ``reset``, ``stream``, ``lm``, ``target``,
    ``guard_stats``): an update's ``tokens``/``text`` are the closed sentences' translations followed by the open
    sentence's (texts joined by a space); ``stable_text``/``tail_text`` hide only the open sentence's masked tail.

    Args:
        inner: a live translator behind the fidelity guard (:func:`guarded`); it is :meth:`reset` at each sentence.
    """

    def __init__(self, inner):
        self.inner = inner
        self.done: list[tuple[str, list[int], str]] = []  # closed sentences: (source, tokens, translation)
        self.closed_translated = 0  # closed sentences translated (cache misses)
        self.closed_reused = 0  # closed-sentence lookups served from the cache
        from engine.translate.stream_metrics import StreamStats

        self.stream = StreamStats()

    def __getattr__(self, name):
        return getattr(self.__dict__["inner"], name)

    def reset(self) -> None:
        """A new utterance: no closed sentence, no draft."""
        from engine.translate.stream_metrics import StreamStats

        self.inner.reset()
        self.done = []
        self.stream = StreamStats()

    def translate_ssbd(self, source: str, final: bool = False, cancel: threading.Event | None = None, pause=None):
        """One update of the utterance's text ``source`` (see the class doc). The closed sentences not yet
        translated are translated first (final, guarded; with ``pause`` but not cancellable: the work is kept for
        the next update); then the open sentence with ``final``/``cancel``/``pause`` as the inner translator's
        ``translate_ssbd``. Returns an :class:`engine.translate.stream_metrics.SSBDUpdate` of the whole utterance."""
        from engine.translate.stream_metrics import SSBDUpdate

        t0 = time.perf_counter()
        sents = split_sentences(source)
        closed, open_ = (sents[:-1], sents[-1]) if sents else ([], "")
        keep = 0
        while keep < min(len(closed), len(self.done)) and same_source(self.done[keep][0], closed[keep]):
            keep += 1
        self.closed_reused += keep
        stale = self.done[keep:]
        if stale:  # the ASR revised a closed sentence: it and the ones after are translated again, each drafted
            del self.done[keep:]  # from its old translation (SSBD verifies it under the revised source)
            self.inner.reset()
        draft = accepted = passes = 0
        for j, s in enumerate(closed[keep:]):
            if j < len(stale):
                self._set_draft(stale[j][1])
            u = self.inner.translate_ssbd(s, final=True, pause=pause)
            self.done.append((s, list(u.tokens), u.text))
            self.closed_translated += 1
            draft, accepted, passes = draft + u.draft, accepted + u.accepted, passes + u.forward_passes
            self.inner.reset()
        if open_:
            u = self.inner.translate_ssbd(open_, final=final, cancel=cancel, pause=pause)
            o_tokens, o_text, o_stable, o_tail = list(u.tokens), u.text, u.stable_text, u.tail_text
            draft, accepted, passes = draft + u.draft, accepted + u.accepted, passes + u.forward_passes
        else:
            o_tokens, o_text, o_stable, o_tail = [], "", "", ""
        head_tokens = [t for _, toks, _ in self.done for t in toks]
        head = " ".join(x for _, _, x in self.done if x)
        text = " ".join(x for x in (head, o_text) if x)
        stable = " ".join(x for x in (head, o_stable) if x)
        out = head_tokens + o_tokens  # a final update's tail is empty (its text is shown whole)
        nu = SSBDUpdate(source, out, text, text if final else stable, o_tail, draft, accepted, len(out), passes,
                        time.perf_counter() - t0, final)
        self.stream.updates.append(nu)
        return nu

    def _set_draft(self, tokens: list[int]) -> None:
        """Make ``tokens`` the next draft of the innermost live translator (SSBD's ``prev``; AR has none)."""
        t = self.inner
        while "inner" in getattr(t, "__dict__", {}):
            t = t.__dict__["inner"]
        if "prev" in getattr(t, "__dict__", {}):
            t.prev = list(tokens)
            t._last_complete = False
