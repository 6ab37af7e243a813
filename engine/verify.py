"""Draft verification: one module every speculative method uses.

Given the target's logits at the draft positions and the draft itself, return the accepted length and the
correction token. Row convention (the :class:`engine.lm.CausalLM` one): ``rows[j]`` is the target's next-token
logits *before* draft token ``draft[j]`` — i.e. the row after the last context token for j = 0, after ``draft[j-1]``
otherwise. ``rows`` may hold one more row than ``draft`` (the row after the last draft token), which gives the
bonus token when everything is accepted.

Verifiers:
    * :func:`greedy` — accept while argmax == draft token (lossless for greedy decoding; Leviathan et al. 2023,
      PredGen §3.1 "Greedy").
    * :func:`top_k` — accept while the draft token is among the k most likely (PredGen §3.1 "Top-K").
    * :func:`prob_threshold` — accept while p(draft token) > τ (CTC self-speculative decoding, Eq. 5, τ_SLM).
    * :func:`biased` — accept while argmax of P' = (1−β)·P + β·onehot(draft) equals the draft (SSBD, Eq. 5).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Verdict:
    """``accepted``: number of leading draft tokens accepted; ``correction``: the target's token at the first
    rejected position (or the bonus token after a fully accepted draft; None when no row is available)."""

    accepted: int
    correction: int | None

    def all_accepted(self, n_draft: int) -> bool:
        return self.accepted >= n_draft


def _softmax(rows: np.ndarray) -> np.ndarray:
    z = rows - rows.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def _finish(rows: np.ndarray, k: int, choose) -> Verdict:
    return Verdict(k, int(choose(rows[k])) if k < len(rows) else None)


def greedy(rows: np.ndarray, draft: list[int]) -> Verdict:
    """Accept while ``argmax(rows[j]) == draft[j]``. rows: float (≥ len(draft), vocab)."""
    k = 0
    for j, t in enumerate(draft):
        if j >= len(rows) or int(np.argmax(rows[j])) != t:
            break
        k += 1
    return _finish(rows, k, np.argmax)


def top_k(rows: np.ndarray, draft: list[int], k_top: int = 3) -> Verdict:
    """Accept while ``draft[j]`` is among the ``k_top`` largest logits of ``rows[j]``; correction = argmax."""
    k = 0
    for j, t in enumerate(draft):
        if j >= len(rows):
            break
        r = rows[j]
        # rank of t = number of logits strictly greater than r[t]
        if int(np.count_nonzero(r > r[t])) >= k_top:
            break
        k += 1
    return _finish(rows, k, np.argmax)


def prob_threshold(rows: np.ndarray, draft: list[int], tau: float) -> Verdict:
    """Accept while softmax(rows[j])[draft[j]] > τ (τ_SLM)."""
    k = 0
    for j, t in enumerate(draft):
        if j >= len(rows) or _softmax(rows[j])[t] <= tau:
            break
        k += 1
    return _finish(rows, k, np.argmax)


def biased(rows: np.ndarray, draft: list[int], beta: float) -> Verdict:
    """SSBD Eq. 5: P' = (1−β)·softmax(rows[j]) + β·onehot(draft[j]); accept while argmax P' == draft[j].
    The correction at the first divergence is argmax P' there (= argmax P, since the draft token lost)."""
    k = 0
    for j, t in enumerate(draft):
        if j >= len(rows):
            break
        p = (1.0 - beta) * _softmax(rows[j])
        p[t] += beta
        if int(np.argmax(p)) != t:
            break
        k += 1
    return _finish(rows, k, np.argmax)
