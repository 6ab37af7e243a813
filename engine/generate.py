"""Greedy AR generation over the :class:`engine.lm.CausalLM` protocol, with KV-cache prefix reuse.

:class:`LMSession` remembers which token ids sit in the LM's KV cache; :meth:`LMSession.prefill` crops the cache to
the longest common prefix with the new prompt (:func:`engine.verify.sync_cache`) and evaluates only the rest — so a
multi-turn conversation, or a re-translation whose instruction prefix is unchanged, never recomputes what is cached. Speculative algorithms use
the same session (crop at divergence, evaluate a draft in one pass).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

import numpy as np

from . import verify as V
from .lm import CausalLM


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
        logits = self.lm.eval(tokens)
        self.tokens.extend(tokens)
        self.n_eval += 1
        self.n_eval_tokens += len(tokens)
        return logits

    def prefill(self, prompt: Sequence[int]) -> np.ndarray:
        """Make the cache hold exactly ``prompt``; return the logits row after its last token (n_vocab,).
        Reuses the longest cached common prefix (at least the last prompt token is re-evaluated for its row)."""
        return self.eval_draft(prompt, [])[0]

    def eval_draft(self, prompt: Sequence[int], draft: Sequence[int]) -> np.ndarray:
        """ONE forward pass over the uncached part of ``prompt`` followed by ``draft``; the cache then holds
        prompt ⊕ draft. Returns the verification rows (len(draft)+1, n_vocab): row j is the next-token logits
        before ``draft[j]`` (row len(draft) follows the last draft token) — the row convention of engine.verify.

        Raises:
            ValueError: empty prompt.
        """
        prompt, draft = list(prompt), list(draft)
        if not prompt:
            raise ValueError("empty prompt")
        self._claim()
        feed = V.sync_cache(self.lm, self.tokens, prompt)  # crop to the cached common prefix
        return self.eval(feed + draft)[len(feed) - 1 :]


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

    The stop token itself is not yielded (and is not left in the cache)."""
    stats = stats if stats is not None else GenStats()
    stats.prompt_tokens = len(prompt)
    t0 = time.perf_counter()
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
