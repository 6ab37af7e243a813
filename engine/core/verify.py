"""The speculative core: every acceptance rule, the longest common prefix, softmax, the per-call statistics type and
the KV-crop bookkeeping, once each. CTC-SSD (:mod:`engine.asr.ctc_self_speculative`), SpecASR (:mod:`engine.asr.draft_model_speculative`), PredGen
(:mod:`engine.answer.predictive`), SSBD (:mod:`engine.translate.biased_retranslation`) and PCG (:mod:`engine.synthesis.coarse_grained_sampling`) call it.

Row convention (the :class:`engine.llm.protocol.CausalLM` one): ``rows[j]`` is the target's next-token logits *before* draft
token ``draft[j]`` — the row after the last context token for j = 0, after ``draft[j-1]`` otherwise. ``rows`` may
hold one more row than ``draft`` (the row after the last draft token), which gives the bonus token when everything
is accepted. Logits are float arrays of shape (len(rows), n_vocab); token ids are ints.

Deterministic acceptance (each returns a :class:`Verdict`):
    * :func:`greedy` — accept while argmax == draft token: lossless for greedy decoding (Leviathan et al. 2023;
      PredGen §3.1 "Greedy"). :func:`greedy_tree` is the same rule over a token tree (SpecASR §IV-C).
    * :func:`top_k` — accept while the draft token is among the k most likely (PredGen §3.1 "Top-K").
    * :func:`prob_threshold` — accept while p(draft token) > τ (CTC self-speculative decoding, Eq. 5, τ_SLM);
      :func:`threshold_accepted` is the rule on probabilities a decoder already returned.
    * :func:`biased` — accept while argmax of P' = (1−β)·P + β·onehot(draft) equals the draft (SSBD, Eq. 5).

Stochastic acceptance (each returns a :class:`StepResult` for one drafted position):
    * :func:`sd_step` — standard speculative sampling, min(1, q(x)/p(x)) then the residual [q − p]_+ (exact for q);
      with ``bias`` > 0 the SSD-style constant relaxation.
    * :func:`pcg_step` — PCG group-level rejection sampling (pcg_tts.txt Eq. 6–10, Algorithm 1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Protocol, Sequence

import numpy as np


# ---------------------------------------------------------------------------------------------------- utilities
def softmax(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """Softmax over the last axis, float64, of ``logits / temperature`` (temperature clamped at 1e-6).
    −inf logits (suppressed tokens) get probability 0."""
    z = np.asarray(logits, np.float64) / max(temperature, 1e-6)
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def log_softmax(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """log of :func:`softmax`, float64, computed stably (log-sum-exp)."""
    z = np.asarray(logits, np.float64) / max(temperature, 1e-6)
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def common_prefix(a: Sequence, b: Sequence) -> int:
    """Length of the longest common prefix of two sequences (tokens, words, ...)."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def sample_categorical(p: np.ndarray, rng: np.random.Generator, cdf: np.ndarray | None = None) -> int:
    """One draw from the categorical distribution p (float (V,), need not be normalised) by inverse-CDF sampling;
    ``cdf`` = np.cumsum(p) when the caller draws from the same p many times. Exact, and ≈ 5× cheaper than
    ``rng.choice(V, p=p)`` (no validation pass)."""
    c = np.cumsum(p) if cdf is None else cdf
    return int(min(np.searchsorted(c, rng.random() * c[-1], side="right"), len(c) - 1))


# ------------------------------------------------------------------------------------------ KV-crop bookkeeping
class _Croppable(Protocol):
    def crop(self, n: int) -> None: ...


def sync_cache(lm: _Croppable, cached: list[int], context: Sequence[int]) -> list[int]:
    """Make a KV cache ready to continue ``context``: crop ``lm`` (holding the tokens ``cached``) to their longest
    common prefix with ``context`` — at most ``len(context) − 1``, so the last context token is fed again and its
    row is produced — and drop the same tokens from ``cached`` (in place).

    Returns:
        the tokens to evaluate next (never empty for a non-empty ``context``).
    """
    k = min(common_prefix(cached, context), max(len(context) - 1, 0))
    lm.crop(k)
    del cached[k:]
    return list(context[k:])


# ------------------------------------------------------------------------------------------------- statistics
@dataclass
class SpecStats:
    """Counters of speculative decoding, shared by every algorithm (extend it for more).

    Attributes:
        tokens: tokens emitted.
        rounds: verification calls.
        drafted: draft tokens sent to verification (tree nodes for a tree).
        accepted: draft tokens accepted.
        target_passes / draft_passes: forward passes of the target / the draft.
        seconds: wall time (s).
        accepted_lengths: accepted draft tokens per round.
    """

    tokens: int = 0
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    target_passes: int = 0
    draft_passes: int = 0
    seconds: float = 0.0
    accepted_lengths: list = field(default_factory=list)

    def record(self, drafted: int, accepted: int) -> None:
        """One verification round: ``drafted`` tokens proposed, ``accepted`` kept."""
        self.rounds += 1
        self.drafted += drafted
        self.accepted += accepted
        self.accepted_lengths.append(accepted)

    def add(self, other: "SpecStats") -> None:
        """Accumulate ``other``'s counters (of the fields both have) into this one."""
        for f in ("tokens", "rounds", "drafted", "accepted", "target_passes", "draft_passes", "seconds"):
            setattr(self, f, getattr(self, f) + getattr(other, f))
        self.accepted_lengths += other.accepted_lengths

    @property
    def acceptance_rate(self) -> float:
        """accepted / drafted (0 when nothing was drafted)."""
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted_length(self) -> float:
        """Mean accepted draft tokens per round (0 without rounds)."""
        return float(np.mean(self.accepted_lengths)) if self.accepted_lengths else 0.0


# ------------------------------------------------------------------------------------ deterministic acceptance
@dataclass(frozen=True)
class Verdict:
    """``accepted``: number of leading draft tokens accepted; ``correction``: the target's token at the first
    rejected position (or the bonus token after a fully accepted draft; None when no row is available)."""

    accepted: int
    correction: int | None

    def all_accepted(self, n_draft: int) -> bool:
        return self.accepted >= n_draft


def _argmax(row: np.ndarray, depth: int) -> int:
    return int(np.argmax(row))


def greedy_tree(row0: np.ndarray, rows: np.ndarray | None, tokens: Sequence[int], parents: Sequence[int],
                pick: Callable[[np.ndarray, int], int] = _argmax) -> tuple[list[int], int | None]:
    """Greedy acceptance over a token tree: from the root, follow the child whose token is the target's choice.

    Args:
        row0: target logits after the accepted context (before the tree's roots).
        rows: row i = logits after tree node i (the path root..i); may be shorter than ``tokens`` (a node without
            a row ends the walk with no next token). None for an empty tree.
        tokens: node tokens in topological order; parents: parents[i] = index of node i's parent, −1 for a root.
        pick: ``pick(row, depth) → token``, the target's choice at path depth ``depth`` (default argmax; a caller
            that suppresses tokens applies it here).

    Returns:
        (accepted path as node indices, the target's token after the path or None).
    """
    children: dict[int, list[int]] = {}
    for i, p in enumerate(parents):
        children.setdefault(p, []).append(i)
    node, row, path = -1, row0, []
    while True:
        tok = pick(row, len(path))
        nxt = next((c for c in children.get(node, ()) if tokens[c] == tok), None)
        if nxt is None:
            return path, tok
        path.append(nxt)
        if rows is None or nxt >= len(rows):
            return path, None
        node, row = nxt, rows[nxt]


def greedy(rows: np.ndarray, draft: Sequence[int]) -> Verdict:
    """Accept while ``argmax(rows[j]) == draft[j]`` (a chain :func:`greedy_tree`). rows: float
    (≥ len(draft), vocab)."""
    draft = list(draft)
    if len(rows) == 0:
        return Verdict(0, None)
    n = min(len(draft), len(rows))
    path, nxt = greedy_tree(rows[0], rows[1:], draft[:n], list(range(-1, n - 1)))
    return Verdict(len(path), nxt)


def _prefix(ok: Iterable[bool]) -> int:
    k = 0
    for good in ok:
        if not good:
            break
        k += 1
    return k


def _finish(rows: np.ndarray, k: int) -> Verdict:
    return Verdict(k, int(np.argmax(rows[k])) if k < len(rows) else None)


def top_k(rows: np.ndarray, draft: Sequence[int], k_top: int = 3) -> Verdict:
    """Accept while ``draft[j]`` is among the ``k_top`` largest logits of ``rows[j]`` (its rank = the number of
    strictly larger logits); correction = argmax."""
    n = min(len(draft), len(rows))
    k = _prefix(int(np.count_nonzero(rows[j] > rows[j][draft[j]])) < k_top for j in range(n))
    return _finish(rows, k)


def threshold_accepted(p_draft: Iterable[float], tau: float) -> int:
    """τ_SLM rule (ctc_self_speculative_asr.txt Eq. 5): the number of leading draft tokens whose target probability
    p(ŷ_i | ŷ_<i, x) is > τ. ``p_draft`` may be lazy (it is read up to the first rejection)."""
    return _prefix(p > tau for p in p_draft)


def majority_accepted(p_draft: Iterable[float], allowed: Iterable[bool] | None = None) -> int:
    """Greedy acceptance (argmax == draft token) decided from the draft tokens' probabilities alone: the number of
    leading draft tokens with p(ŷ_i | ŷ_<i, x) > 1/2 (and ``allowed[i]``, e.g. not a token the decoder suppresses).
    A probability above one half is the argmax, so every accepted token is the greedy token: the accepted prefix
    followed by greedy decoding is exactly greedy decoding (a token that is the argmax with p ≤ 1/2 is rejected
    and then produced again by the greedy continuation, costing a step but not exactness). For backends that
    return p(draft) but not the full distribution (CTranslate2's ``align``)."""
    ok = (p > 0.5 for p in p_draft) if allowed is None else (p > 0.5 and a for p, a in zip(p_draft, allowed))
    return _prefix(ok)


def prob_threshold(rows: np.ndarray, draft: Sequence[int], tau: float) -> Verdict:
    """Accept while softmax(rows[j])[draft[j]] > τ (τ_SLM, :func:`threshold_accepted`); correction = argmax."""
    n = min(len(draft), len(rows))
    k = threshold_accepted((softmax(rows[j])[draft[j]] for j in range(n)), tau)
    return _finish(rows, k)


def biased(rows: np.ndarray, draft: Sequence[int], beta: float) -> Verdict:
    """SSBD Eq. 5: P' = (1−β)·softmax(rows[j]) + β·onehot(draft[j]); accept while argmax P' == draft[j].
    The correction at the first divergence is argmax P' there (= argmax P, since the draft token lost)."""

    def ok(j: int) -> bool:
        p = (1.0 - beta) * softmax(rows[j])
        p[draft[j]] += beta
        return int(np.argmax(p)) == draft[j]

    k = _prefix(ok(j) for j in range(min(len(draft), len(rows))))
    return _finish(rows, k)


# -------------------------------------------------------------------------------------- stochastic acceptance
@dataclass
class StepResult:
    """One speculative position: ``token`` emitted, ``accepted`` (draft kept), ``group`` emitted group label
    (PCG only, else −1), ``trials`` thinning trials in the residual sampler."""

    token: int
    accepted: bool
    group: int = -1
    trials: int = 0


class Groups(Protocol):
    """What :func:`pcg_step` needs of a grouping (:class:`engine.synthesis.coarse_grained_sampling.AcousticGroups`): ``groups[k]`` int token
    array of G_k, ``N`` int (V,) groups per token, P_c(G_k) by :meth:`coarse`, K ~ w_{·,t} by :meth:`sample_group`."""

    groups: list
    N: np.ndarray

    def coarse(self, p: np.ndarray, k: int) -> float: ...

    def sample_group(self, t: int, rng: np.random.Generator) -> int: ...


def sd_step(x: int, p: np.ndarray, q: np.ndarray, rng: np.random.Generator, bias: float = 0.0) -> StepResult:
    """Standard speculative sampling (Leviathan et al. 2023): accept the draft token x with min(1, q(x)/p(x)), else
    sample from norm([q − p]_+) — exact for q. ``bias`` > 0: the SSD-style constant relaxation
    min(1, (q(x) + bias)/p(x)) (not exact). p, q: float64 (V,) draft / target distributions."""
    r = min(1.0, (q[x] + bias) / p[x]) if p[x] > 0 else 1.0
    if rng.random() < r:
        return StepResult(x, True)
    res = np.maximum(q - p, 0.0)
    z = sample_categorical(res, rng) if res.sum() > 0 else sample_categorical(q, rng)
    return StepResult(z, False)


def pcg_residual(p: np.ndarray, q: np.ndarray, G: Groups, rng: np.random.Generator,
                 max_trials: int = 1000) -> tuple[int, int, int]:
    """PCG Eq. 8–10 by thinning: y ~ q, K ~ w_{·,y} (so K ~ Q_c), accept K with a(K) = [1 − P_c/Q_c]_+ (Eq. 9),
    then z ~ q(t) w_{K,t} / Q_c(G_K) within G_K (Eq. 10). Returns (token z, group K, trials). After ``max_trials``
    (only when P_c ≈ Q_c everywhere) falls back to the last proposal (documented approximation)."""
    cdf = np.cumsum(q)
    trials = 0
    K = 0
    while trials < max_trials:
        trials += 1
        y = sample_categorical(q, rng, cdf)
        K = G.sample_group(y, rng)
        Pc, Qc = G.coarse(p, K), G.coarse(q, K)
        a = max(0.0, 1.0 - Pc / Qc) if Qc > 0 else 0.0
        if rng.random() < a:
            break
    g = G.groups[K]
    w = q[g] / G.N[g]
    z = int(g[sample_categorical(w, rng)])
    return z, K, trials


def pcg_step(x: int, p: np.ndarray, q: np.ndarray, G: Groups, rng: np.random.Generator) -> StepResult:
    """One position of PCG's Algorithm 1: group proposal K ~ w_{·,x} (Eq. 6), accept with r = min(1, Q_c/P_c)
    (Eq. 7) keeping x as the group's representative, else the residual group and token (Eq. 8–10). The emitted
    group is distributed exactly as Q_c (the paper's Proposition)."""
    K = G.sample_group(x, rng)
    Pc, Qc = G.coarse(p, K), G.coarse(q, K)
    r = min(1.0, Qc / Pc) if Pc > 0 else 1.0
    if rng.random() < r:
        return StepResult(x, True, K)
    z, K2, trials = pcg_residual(p, q, G, rng)
    return StepResult(z, False, K2, trials)
