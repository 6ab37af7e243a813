"""Greedy AR generation over the :class:`engine.llm.protocol.CausalLM` protocol, with KV-cache prefix reuse.

:class:`LMSession` remembers which token ids sit in the LM's KV cache; :meth:`LMSession.prefill` crops the cache to
the longest common prefix with the new prompt (:func:`engine.core.verify.sync_cache`) and evaluates only the rest — so a
multi-turn conversation, or a re-translation whose instruction prefix is unchanged, never recomputes what is cached. Speculative algorithms use
the same session (crop at divergence, evaluate a draft in one pass).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

import numpy as np

from engine.core import verify as V
from engine.llm.protocol import CausalLM, GreedyDecoder


class LMSession:
    """A :class:`CausalLM` plus the token ids in its cache.

    Several sessions may share one LM (one KV cache): a session that finds the cache last written by another one
    starts over from an empty cache instead of trusting stale token ids."""

    def __init__(self, lm: CausalLM):
        self.lm = lm
        self.tokens: list[int] = []
        self.n_eval = 0  # forward passes
        self.n_eval_tokens = 0

    def _claim(self) -> None:
        if getattr(self.lm, "_session_owner", None) is not self or self.lm.n_past != len(self.tokens):
            self.lm.crop(0)
            self.tokens = []
            self.lm._session_owner = self

    def crop(self, n: int) -> None:
        self._claim()
        n = min(n, len(self.tokens))
        self.lm.crop(n)
        del self.tokens[n:]

    def eval(self, tokens: Sequence[int]) -> np.ndarray:
        """Append and evaluate ``tokens``; logits (len(tokens), n_vocab)."""
        self._claim()
        return self._record(tokens, self.lm.eval(tokens))

    def _record(self, tokens: Sequence[int], logits: np.ndarray) -> np.ndarray:
        """Account for ``tokens`` just evaluated into the cache; returns their ``logits``."""
        self.tokens.extend(tokens)
        self.n_eval += 1
        self.n_eval_tokens += len(tokens)
        return logits

    def eval_cancellable(self, tokens: Sequence[int], cancel) -> np.ndarray | None:
        """:meth:`eval` that returns None (evaluating nothing) when ``cancel`` is set before or — on an adapter with
        ``eval_cancellable`` (llama.cpp) — during the forward pass."""
        if cancel is not None and cancel.is_set():
            return None
        fn = getattr(self.lm, "eval_cancellable", None)
        if fn is None or cancel is None:
            return self.eval(tokens)
        self._claim()
        logits = fn(tokens, cancel)
        return None if logits is None else self._record(tokens, logits)

    def prefill(self, prompt: Sequence[int], probe: int | None = None) -> np.ndarray:
        """Make the cache hold exactly ``prompt``; return the logits row after its last token (n_vocab,).
        Reuses the longest cached common prefix (at least the last prompt token is re-evaluated for its row).
        ``probe``: as in :meth:`eval_draft`."""
        return self.eval_draft(prompt, [], probe)[0]

    #: after :meth:`eval_draft` with a ``probe``: the logits row (n_vocab,) before ``prompt[probe]``, or None when
    #: that row was not evaluated by the pass (the cache already held it)
    probe_row: np.ndarray | None = None

    def eval_draft(self, prompt: Sequence[int], draft: Sequence[int], probe: int | None = None) -> np.ndarray:
        """ONE forward pass over the uncached part of ``prompt`` followed by ``draft``; the cache then holds
        prompt ⊕ draft. Returns the verification rows (len(draft)+1, n_vocab): row j is the next-token logits
        before ``draft[j]`` (row len(draft) follows the last draft token) — the row convention of engine.core.verify.
        ``probe`` (an index into ``prompt``, ≥ 1): the same pass also keeps the row predicting ``prompt[probe]`` in
        :attr:`probe_row` (no extra pass: the cache is cropped to the tokens before it when it held more, so the
        pass re-reads the few tokens from there).

        Raises:
            ValueError: empty prompt.
        """
        prompt, draft = list(prompt), list(draft)
        if not prompt:
            raise ValueError("empty prompt")
        self._claim()
        if probe is not None and 1 <= probe < len(prompt):
            # the probe's row must be in this pass: the cache keeps at most the tokens before it
            k = min(V.common_prefix(self.tokens, prompt), len(prompt) - 1, probe - 1)
            self.crop(k)
            feed = prompt[k:]
        else:
            feed = V.sync_cache(self.lm, self.tokens, prompt)  # crop to the cached common prefix
        rows = self.eval(feed + draft)
        self.probe_row = None
        if probe is not None:
            i = probe - 1 - (len(prompt) - len(feed))  # the row before prompt[probe], within this pass
            if 0 <= i < len(feed):
                self.probe_row = np.array(rows[i], np.float32)
        return rows[len(feed) - 1 :]


@dataclass
class GenStats:
    prompt_tokens: int = 0
    new_tokens: int = 0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    first_token_wall: float | None = None
    extra: dict = field(default_factory=dict)

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.decode_s if self.decode_s > 0 else 0.0


def greedy_stream(session: LMSession, prompt: Sequence[int], max_new: int, stop_ids: frozenset[int] | set[int],
                  cancel: threading.Event | None = None, stats: GenStats | None = None) -> Iterator[int]:
    """Plain AR greedy decoding: yield tokens until a stop id, ``max_new`` tokens, or ``cancel``.

    The stop token itself is not yielded (and is not left in the cache). An LM with the
    :class:`engine.llm.protocol.GreedyDecoder` capability (an LLM server) decodes the whole answer in one call (one streamed
    request); any other LM is driven one ``eval`` per token. ``stats.prefill_s`` is then the time to the first
    token."""
    stats = stats if stats is not None else GenStats()
    stats.prompt_tokens = len(prompt)
    t0 = time.perf_counter()
    if isinstance(session.lm, GreedyDecoder) and prompt:
        session._claim()
        dec = _ServerDecode(session, list(prompt), max_new, stop_ids, cancel)
        t1 = None
        for tok in dec:
            if t1 is None:
                t1 = time.perf_counter()
                stats.prefill_s = t1 - t0
            if stats.first_token_wall is None:
                stats.first_token_wall = time.monotonic()
            stats.new_tokens += 1
            yield tok
            stats.decode_s = time.perf_counter() - t1
        return
    row = session.prefill(prompt)
    stats.prefill_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    for _ in range(max_new):
        if cancel is not None and cancel.is_set():
            break
        tok = int(np.argmax(row))
        if tok in stop_ids:
            break
        if stats.first_token_wall is None:
            stats.first_token_wall = time.monotonic()
        stats.new_tokens += 1
        yield tok
        row = session.eval([tok])[-1]
        stats.decode_s = time.perf_counter() - t1


class _ServerDecode:
    """Greedy tokens after ``context`` from an LM with :class:`engine.llm.protocol.GreedyDecoder` (one call), keeping the
    session's token list equal to the LM's cache; closing it (or ``cancel``) ends the call."""

    def __init__(self, session: LMSession, context: list[int], max_new: int, stop_ids, cancel):
        self.session, self.context = session, context
        self.max_new, self.stop_ids, self.cancel = max_new, frozenset(stop_ids), cancel
        self.yielded = 0

    def __iter__(self) -> Iterator[int]:
        s = self.session
        if self.max_new < 1:
            return
        gen = s.lm.generate(self.context, self.max_new, self.stop_ids, cancel=self.cancel)
        s.tokens = list(self.context)
        try:
            for tok in gen:
                s.tokens.append(tok)
                s.n_eval += 1  # one forward pass per decoded token, on the server
                s.n_eval_tokens += 1
                self.yielded += 1
                yield tok
        finally:
            gen.close()
            s.tokens = s.tokens[: s.lm.n_past]


class GreedySteps:
    """Greedy decoding driven one token at a time by a loop that decides after each token whether to go on (e.g.
    PredGen's final step: up to the first sentence, then the rest): ``step(tok)`` returns the greedy token after
    the cached context ⊕ ``tok``.

    On an LM with :class:`engine.llm.protocol.GreedyDecoder` (an LLM server) the first ``step`` opens ONE streamed call for
    the whole continuation (at most ``max_new`` tokens) and later steps read from it — the server keeps decoding
    while the loop does other work (e.g. synthesises the first sentence); each later ``tok`` must be the token the
    previous step returned. Otherwise each step is one ``eval([tok])``, exactly as a hand-written loop.

    Args:
        session: the session whose cache holds the context.
        max_new: tokens the streamed call may decode (ignored per token).
        stop_ids: ids that end the answer (the stream never yields them; :meth:`step` then returns one of them).
        cancel: ends the streamed call before its next token (``step`` then returns None).

    Attributes:
        requests: streamed calls opened (0 or 1).
    """

    def __init__(self, session: LMSession, max_new: int, stop_ids: frozenset[int] | set[int],
                 cancel: threading.Event | None = None):
        self.session, self.max_new, self.stop_ids, self.cancel = session, max_new, frozenset(stop_ids), cancel
        self.requests = 0
        self._dec: _ServerDecode | None = None
        self._it: Iterator[int] | None = None
        self._last: int | None = None
        self._prev: int | None = None
        self._server = isinstance(session.lm, GreedyDecoder)

    def step(self, tok: int) -> int | None:
        """The next greedy token after ⊕ ``tok`` (int), a stop id, or None (stream ended by ``max_new``/cancel).

        Raises:
            ValueError: on a streamed call, ``tok`` is not the token the previous step returned.
            Whatever the LM raises (e.g. :class:`engine.llm.remote.adapter.RemoteLMError` when the server went away).
        """
        if not self._server:
            return int(np.argmax(self.session.eval([tok])[-1]))
        if self._it is None:
            if self.max_new < 1 or (self.cancel is not None and self.cancel.is_set()):
                return None
            s = self.session
            s._claim()
            self._dec = _ServerDecode(s, s.tokens + [int(tok)], self.max_new, self.stop_ids, self.cancel)
            self._it = iter(self._dec)
            self.requests += 1
        elif tok != self._last:
            if tok == self._prev:  # the same step again (a loop that re-feeds its last token): same answer
                return self._last
            raise ValueError(f"step({tok}) after the stream gave {self._last}: the streamed continuation cannot "
                             f"follow another token")
        self._prev = int(tok)
        nxt = next(self._it, None)
        if nxt is None:
            reason = getattr(self.session.lm, "finish_reason", None)
            if reason is None:  # an LM that does not say why: a stream shorter than asked ended at a stop id
                reason = "stop" if self._dec.yielded < self.max_new else "length"
            stopped = reason == "stop" and self.stop_ids and not (self.cancel is not None and self.cancel.is_set())
            nxt = min(self.stop_ids) if stopped else None  # the server decoded an end-of-answer token
        self._last = nxt
        return nxt

    def close(self) -> None:
        """End the streamed call (if any): the server stops decoding."""
        if self._it is not None:
            self._it.close()


class TextStreamer:
    """Incremental detokenisation: feed token ids, get the new text (holds back incomplete UTF-8)."""

    def __init__(self, detokenize: Callable[[Sequence[int]], str]):
        self.detok = detokenize
        self.ids: list[int] = []
        self.text = ""

    def push(self, tok: int) -> str:
        self.ids.append(tok)
        full = self.detok(self.ids)
        if full.endswith("\ufffd"):
            return ""
        new = full[len(self.text):] if full.startswith(self.text) else ""
        self.text = full
        return new
