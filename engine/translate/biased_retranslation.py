"""SSBD: Self-Speculative Biased Decoding for live re-translation (Zeng et al., "Self-Speculative Biased Decoding
for Faster Live Translation", 2025, https://arxiv.org/abs/2509.21740).

Each streaming update re-translates the grown source X^T, using the previous output Y^{T-1} as the draft
(Algorithm 1):
    line 2–3   prompt = create_input(X^T, Y^{T-1}); ONE forward pass over (uncached prompt) ⊕ Y^{T-1}
    line 4–12  for each draft position, P' = (1−β)·P + β·onehot(Y_i^{T-1})   (Eq. 5); accept while argmax P'
               equals the draft token; at the first divergence keep the chosen token and stop
    line 13    crop the KV cache at the divergence (kv_cache_clear(i, −1))
    line 14–20 continue greedy AR until EOS
β = 0 is plain self-speculative re-translation; the AR baseline (engine.translate.translator.Translator) decodes from scratch.

Partial updates give the CPU back (the caption thread's job policy, engine.translate.caption_loop.CaptionLoop): the forward pass
over the uncached prompt ⊕ draft runs in chunks of :data:`VERIFY_CHUNK` tokens and each chunk or decode step first
calls ``pause`` (waiting out a streaming-ASR decode, engine.core.cpu) and checks ``cancel`` (a newer job is waiting), so a
stale partial stops within one chunk. The rows are those of the one-pass verification; a final update is one pass.

Flicker control:
    * mask-k (Arivazhagan et al. 2020b): the last k draft tokens are trimmed before verification;
    * display-only mask-k (the paper's proposal, the default): the last k tokens stay in the draft but are hidden
      on screen until the source is final.
Metrics: erasure E(i) = |Y^{i−1}| − |LCP(Y^{i−1}, Y^i)| (Eq. 3) over the *displayed* outputs, normalised erasure
NE = Σ E(i) / |Y^N| (Eq. 4), draft acceptance A/D, accepted share of output A/O, output tokens/s.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from engine.config import CaptionConfig
from engine.core import verify as V
from engine.translate.stream_metrics import SSBDUpdate, StreamStats
from engine.translate.translator import Translator, same_source

#: tokens per forward pass of a cancellable (partial) verification pass: on this 2-core CPU 32-token passes cost
#: ≈ 15 % more than one pass over a 93-token prompt ⊕ draft; the streaming ASR gets the CPU between passes, and a
#: cancel stops a pass at once on llama.cpp (its abort callback, :meth:`engine.llm.llama_cpp_lm.LlamaCppLM.eval_cancellable`)
VERIFY_CHUNK = 32


def eval_chunked(session, prompt: list[int], draft: list[int], cancel: threading.Event | None = None,
                 pause=None, chunk: int | None = None) -> np.ndarray | None:
    """:meth:`engine.llm.generate.LMSession.eval_draft` in passes of at most ``chunk`` tokens (default
    :data:`VERIFY_CHUNK`), calling ``pause()`` before each pass and stopping (None) when ``cancel`` is set —
    between passes, and within a pass on an adapter that can abort one (llama.cpp). The cache then holds the
    evaluated part of prompt ⊕ draft (all of it unless cancelled). One pass when neither is given.

    Returns:
        float32 (len(draft)+1, n_vocab) verification rows (row j: next-token logits before ``draft[j]``), or None
        when cancelled.

    Raises:
        ValueError: empty prompt.
    """
    if cancel is None and pause is None:
        return session.eval_draft(prompt, draft)
    prompt, draft = list(prompt), list(draft)
    if not prompt:
        raise ValueError("empty prompt")
    chunk = chunk or VERIFY_CHUNK
    session._claim()
    feed = V.sync_cache(session.lm, session.tokens, prompt) + draft
    rows = []
    for i in range(0, len(feed), chunk):
        if pause is not None:
            pause()
        r = session.eval_cancellable(feed[i : i + chunk], cancel)  # llama.cpp stops mid-pass when cancelled
        if r is None:
            return None
        rows.append(r)
    return np.concatenate(rows)[len(feed) - len(draft) - 1 :]




def reuse_final(translator, source: str, final: bool, cancel: threading.Event | None) -> SSBDUpdate | None:
    """The final update of ``source`` without any LM work when the translator's last update translated exactly this
    source and ran to EOS (not cancelled, not cut at ``max_tokens``): greedy decoding of the same prompt gives the
    same tokens again (and SSBD's verification of its own greedy output as the draft accepts all of it), so the
    final caption is that output, shown whole. None when the shortcut does not apply."""
    last = translator.stream.updates[-1] if translator.stream.updates else None
    if (not final or last is None or last.final or not getattr(translator, "_last_complete", False)
            or not same_source(last.source, source) or (cancel is not None and cancel.is_set())
            or getattr(translator, "prev", last.tokens) != last.tokens):  # the draft was trimmed since
        return None
    u = SSBDUpdate(source, list(last.tokens), last.text, last.text, "", len(last.tokens), len(last.tokens),
                   len(last.tokens), 0, 0.0, True)
    translator.stream.updates.append(u)
    return u






def mask_tail(lm, tokens: list[int], k: int) -> tuple[str, str]:
    """Display-only mask-k: (shown text, hidden tail) — the last ``k`` tokens are hidden, and so is the rest of a
    word they cut through (a caption never shows half a word)."""
    full = lm.detokenize(tokens).strip()
    if k <= 0 or not tokens:
        return full, ""
    stable = lm.detokenize(tokens[: max(0, len(tokens) - k)]).strip()
    if not full.startswith(stable):
        return "", full
    if len(stable) < len(full) and full[len(stable)].isalnum() and stable and stable[-1].isalnum():
        cut = stable.rfind(" ")
        stable = stable[:cut] if cut > 0 else ""
    return stable, full[len(stable):]






class SSBDTranslator(Translator):
    """Live re-translation with SSBD. Call :meth:`translate` with each grown source; :meth:`reset` at a new
    sentence/utterance.

    Args:
        lm: CausalLM with ``chat_prompt`` (llama.cpp adapter).
        target: target language name or code.
        beta: β of Eq. 5 (0 = unbiased self-speculation).
        mask_k: k of mask-k (tokens).
        display_only: True = display-only mask-k (keep the tail in the draft, hide it on screen);
            False = classic mask-k (trim the draft).

    The defaults are the ``caption`` settings' (:class:`engine.config.CaptionConfig`).

    Raises:
        ValueError: ``beta`` outside [0, 1] or a negative ``mask_k``.
    """

    def __init__(self, lm, target: str = "German", max_tokens: int = 96, beta: float = 0.2,
                 mask_k: int = CaptionConfig.mask_k, display_only: bool = True):
        super().__init__(lm, target, max_tokens)
        if not 0.0 <= beta <= 1.0:
            raise ValueError(f"beta must be in [0, 1], got {beta}")
        if mask_k < 0:
            raise ValueError(f"mask_k must be >= 0, got {mask_k}")
        self.beta, self.mask_k, self.display_only = beta, mask_k, display_only
        self.prev: list[int] = []
        self.stream = StreamStats()
        self._last_complete = False  # the last update ran to EOS (see reuse_final)

    def reset(self) -> None:
        self.prev = []
        self.stream = StreamStats()
        self._last_complete = False

    def _display(self, tokens: list[int], final: bool) -> tuple[str, str]:
        if final:
            return self.lm.detokenize(tokens).strip(), ""
        return mask_tail(self.lm, tokens, self.mask_k)

    def translate_ssbd(self, source: str, final: bool = False, cancel: threading.Event | None = None,
                       pause=None) -> SSBDUpdate:
        """Algorithm 1 for one update; a final update whose source the last update already translated to EOS
        reuses that output (:func:`reuse_final`). ``cancel`` set: the update stops at the next chunk or token
        (its output so far is returned and kept as the next draft); ``pause()`` is called before each forward
        pass (see the module doc)."""
        again = reuse_final(self, source, final, cancel)
        if again is not None:
            return again
        t0 = time.perf_counter()
        s = self.session
        prompt = self.prompt_tokens(source)
        draft = list(self.prev)
        if self.mask_k and not self.display_only:  # classic mask-k: the unstable tail is not reused
            draft = draft[: max(0, len(draft) - self.mask_k)]
        n_eval0 = s.n_eval
        rows = eval_chunked(s, prompt, draft, cancel, pause)  # line 3: one forward pass (chunked for a partial)
        if rows is None:  # cancelled before the draft was verified: nothing new, the draft stays
            self._last_complete = False
            u = SSBDUpdate(source, [], "", "", "", len(draft), 0, 0, s.n_eval - n_eval0,
                           time.perf_counter() - t0, final)
            self.stream.updates.append(u)
            return u
        if draft:
            v = V.biased(rows, draft, self.beta)  # lines 4–12, Eq. 5
            k = v.accepted
            out = draft[:k]
            s.crop(len(prompt) + k)  # line 13
            nxt = v.correction
        else:
            k = 0
            out = []
            nxt = int(np.argmax(rows[-1]))
        nxt = greedy_to_eos(s, out, nxt, self.lm.eos_ids, self.max_tokens, cancel, pause)  # lines 14–20
        self._last_complete = nxt is not None and nxt in self.lm.eos_ids
        self.prev = next_draft(out, draft, cancel is not None and cancel.is_set())
        stable, tail = self._display(out, final)
        u = SSBDUpdate(source, out, self.lm.detokenize(out).strip(), stable, tail, len(draft), k, len(out),
                       s.n_eval - n_eval0, time.perf_counter() - t0, final)
        self.stream.updates.append(u)
        return u


def next_draft(out: list[int], draft: list[int], cancelled: bool) -> list[int]:
    """The draft Y^{T-1} of the next update (Algorithm 1, line 2). An update that ran to its end gives its output.
    One cancelled while decoding (a newer source is waiting) stopped short of its translation's end: its output is
    the verified prefix, the token chosen at the divergence and what was decoded after it; when that is shorter than
    the draft it verified, the draft's remaining tokens are kept after it (aligned as if the divergence were a
    substitution), so the next update — usually the final transcript — still gets a whole translation to verify
    instead of a few tokens. A wrong tail costs nothing but its verification rows: tokens are accepted only where
    the target agrees (Eq. 5)."""
    if cancelled and len(out) < len(draft):
        return list(out) + list(draft[len(out):])
    return list(out)


def greedy_to_eos(session, out: list[int], nxt, eos_ids, max_tokens: int, cancel=None, pause=None):
    """Greedy AR decoding after ``out`` (appended to in place) from the next token ``nxt`` until an EOS id,
    ``max_tokens`` tokens in ``out``, or ``cancel`` is set; ``pause()`` runs before each decode step (CPU sharing).
    Returns the token that was not appended (an EOS id, the next token when stopped early, or None)."""
    while nxt is not None and nxt not in eos_ids and len(out) < max_tokens:
        if pause is not None:
            pause()
        if cancel is not None and cancel.is_set():
            break
        out.append(nxt)
        nxt = int(np.argmax(session.eval([nxt])[-1]))
    return nxt


class ARRetranslator(Translator):
    """The AR baseline with the same update/metric interface: every update re-translates from scratch.

    Args:
        lm, target, max_tokens: as :class:`engine.translate.translator.Translator`.
        mask_k: the last k tokens of a partial update are hidden on screen (display-only mask-k: AR keeps no draft
            to trim; :func:`engine.runtime.build_translator` passes 0 under classic mask-k).
    """

    def __init__(self, lm, target: str = "German", max_tokens: int = 96, mask_k: int = CaptionConfig.mask_k):
        super().__init__(lm, target, max_tokens)
        self.mask_k = mask_k
        self.stream = StreamStats()
        self._last_complete = False

    def reset(self) -> None:
        self.stream = StreamStats()
        self._last_complete = False

    def translate_ssbd(self, source: str, final: bool = False, cancel: threading.Event | None = None,
                       pause=None) -> SSBDUpdate:
        """Re-translate ``source`` from scratch; a final update whose source the last update already translated to
        EOS reuses that output (:func:`reuse_final`). ``cancel`` and ``pause`` as in
        :meth:`SSBDTranslator.translate_ssbd` (the pre-fill is chunked the same way)."""
        again = reuse_final(self, source, final, cancel)
        if again is not None:
            return again
        from engine.llm.protocol import GreedyDecoder

        n0 = self.session.n_eval
        if (cancel is None and pause is None) or isinstance(self.lm, GreedyDecoder):  # a server decodes in one call
            r = self.translate(source, cancel)
        else:
            r = self._translate_yielding(source, cancel, pause)
        self._last_complete = (r is not None and len(r.tokens) < self.max_tokens
                               and not (cancel is not None and cancel.is_set()))
        if r is None:
            u = SSBDUpdate(source, [], "", "", "", 0, 0, 0, self.session.n_eval - n0, 0.0, final)
            self.stream.updates.append(u)
            return u
        stable, tail = SSBDTranslator._display(self, r.tokens, final)  # same display rule
        u = SSBDUpdate(source, r.tokens, r.text, stable, tail, 0, 0, len(r.tokens), self.session.n_eval - n0,
                       r.compute_s, final)
        self.stream.updates.append(u)
        return u

    def _translate_yielding(self, source: str, cancel, pause):
        """:meth:`engine.translate.translator.Translator.translate` with a chunked pre-fill and ``pause``/``cancel`` before
        each forward pass; None when cancelled during the pre-fill."""
        from engine.llm.generate import GenStats
        from engine.translate.translator import TranslationResult

        t0 = time.perf_counter()
        s = self.session
        rows = eval_chunked(s, self.prompt_tokens(source), [], cancel, pause)
        if rows is None:
            return None
        out: list[int] = []
        greedy_to_eos(s, out, int(np.argmax(rows[-1])), self.lm.eos_ids, self.max_tokens, cancel, pause)
        return TranslationResult(self.lm.detokenize(out).strip(), out, time.perf_counter() - t0, GenStats())
