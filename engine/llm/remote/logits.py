"""Logits rows of an LLM server: built from the top-N log-probs a server returns (:func:`dense_row`), and fetched
lazily: :class:`RemoteRows` behaves like the (n, n_vocab) float32 array an in-process ``eval`` returns, and makes the
request only when a row is first read (see :mod:`engine.llm.remote.adapter` for how reads map onto requests)."""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from .errors import RemoteLMError


Score = Callable[[list[int], int], np.ndarray]  # (tokens, first) → rows (len(tokens) − first, n_vocab), float32


def top_logprob_entries(resp: dict) -> list[dict | None]:
    """The per-position top-log-prob entries ({key: logprob}, None where the server gives none) of an OpenAI-style
    ``/v1/completions`` answer; keys are token strings, or ``"token_id:N"`` (vLLM ``return_tokens_as_token_ids``, and
    the chat-style layout of llama.cpp's llama-server, which carries ids).

    Raises:
        RemoteLMError: the answer has no ``choices[0]``.
    """
    try:
        lp = resp["choices"][0].get("logprobs") or {}
    except (KeyError, IndexError, TypeError, AttributeError):
        raise RemoteLMError(f"unexpected /v1/completions answer: {str(resp)[:200]}") from None
    if isinstance(lp.get("content"), list):  # the chat-style layout (llama.cpp's llama-server), with ids
        out: list[dict | None] = []
        for c in lp["content"]:
            d = {f"token_id:{t['id']}": t["logprob"] for t in c.get("top_logprobs") or [] if "id" in t}
            if "id" in c:
                d.setdefault(f"token_id:{c['id']}", c.get("logprob"))
            out.append(d or None)
        return out
    return list(lp.get("top_logprobs") or [])


def dense_row(known: dict[int, float], n_vocab: int) -> np.ndarray:
    """{token id: logprob} (a server's top-N entries) → a float32 row of length ``n_vocab``.

    The known entries (the top-N, and the scored token where the server reports it) hold their log-probabilities;
    every other entry holds the remaining probability mass spread evenly, log((1 − Σ top-N p) / (V − N)), never
    above the N-th entry. So argmax (greedy acceptance) is exact whenever the top-1 token is returned; top-k
    acceptance is exact for k ≤ N; τ-threshold and β-biased acceptance are exact when the draft token is among the
    returned entries, and otherwise see a probability no larger than the true one (they can only reject more).
    ``softmax`` of a row reproduces the returned probabilities exactly.

    Raises:
        RemoteLMError: ``known`` is empty.
    """
    if not known:
        raise RemoteLMError("a log-prob entry without any usable token")
    vals = np.fromiter(known.values(), np.float64)
    rest = 1.0 - float(np.exp(vals).sum())
    n_other = n_vocab - len(known)
    floor = math.log(rest / n_other) if rest > 1e-12 and n_other > 0 else float(vals.min()) - 30.0
    floor = min(floor, float(vals.min()))
    row = np.full(n_vocab, floor, np.float32)
    row[np.fromiter(known.keys(), np.int64)] = vals.astype(np.float32)
    return row


class PendingEval:
    """One ``eval``: the full token list at that moment and the rows fetched so far.

    Args:
        score: ONE request for the rows from absolute position ``first`` to the end of ``tokens``.
        unsent: the adapter's list of evaluations never sent; this one leaves it once fetched.
        tokens: the whole token list after this ``eval``. start: where this ``eval``'s tokens begin in it.
    """

    def __init__(self, score: Score, unsent: list[PendingEval], tokens: list[int], start: int):
        self._score, self._unsent = score, unsent
        self.tokens, self.start = tokens, start  # rows of tokens[start:] belong to this eval
        self.rows: np.ndarray | None = None  # rows [fetched_from, len(tokens)) of the full list
        self.fetched_from: int | None = None

    def fetch(self, first: int) -> None:
        """Make rows from absolute position ``first`` available (one request if not yet fetched)."""
        if self.fetched_from is not None and self.fetched_from <= first:
            return
        rows = self._score(self.tokens, first)
        self.rows, self.fetched_from = rows, first
        if self in self._unsent:
            self._unsent.remove(self)

    def get(self, a: int, b: int) -> np.ndarray:
        """Rows of eval-relative positions [a, b) as a float32 array."""
        self.fetch(self.start + a)
        off = self.start - self.fetched_from
        return self.rows[off + a: off + b]


class RemoteRows:
    """Rows (n, n_vocab) of one :meth:`engine.llm.remote.adapter.RemoteLM.eval`, fetched from the server when first
    read.

    Behaves like a read-only float32 ndarray for what the speculative code does with rows: ``len``, ``shape``,
    integer and slice indexing (a slice stays lazy), ``np.asarray``. Reading row i fetches the rows from i to the end
    of the evaluation in one request (the speculative code reads rows in increasing order, so a verification is one
    request, and reading only the last row needs no prompt log-probs); other attribute access materialises the
    view."""

    def __init__(self, pending: PendingEval, a: int, b: int, n_vocab: int):
        self._p, self._a, self._b, self._v = pending, a, b, n_vocab

    def __len__(self) -> int:
        return self._b - self._a

    @property
    def shape(self) -> tuple[int, int]:
        return (len(self), self._v)

    ndim = 2
    dtype = np.dtype(np.float32)

    def materialize(self) -> np.ndarray:
        """The rows as a float32 ndarray (len(self), n_vocab), fetched now if not yet.

        Raises:
            RemoteLMError: the request failed (see :meth:`engine.llm.remote.adapter.RemoteLM.eval`).
        """
        return self._p.get(self._a, self._b)

    def __array__(self, dtype=None, copy=None):
        a = self.materialize()
        return a.astype(dtype) if dtype is not None else a

    def __getitem__(self, key):
        if isinstance(key, slice):
            a, b, step = key.indices(len(self))
            if step == 1:
                return RemoteRows(self._p, self._a + a, self._a + max(a, b), self._v)
        if isinstance(key, (int, np.integer)):
            n = len(self)
            i = int(key) + n if key < 0 else int(key)
            if not 0 <= i < n:
                raise IndexError(f"row {key} out of range for {n} rows")
            return self._p.get(self._a + i, self._a + i + 1)[0]
        return self.materialize()[key]

    def __getattr__(self, name):
        return getattr(self.materialize(), name)

    def __repr__(self) -> str:
        return f"RemoteRows({len(self)} rows × {self._v})"

