"""Principled Coarse-Graining (PCG) for speculative sampling of codec tokens (§2, Algorithm 1 of Yanuka et al.,
"Principled Coarse-Grained Acceptance for Speculative Decoding in Speech", 2025, https://arxiv.org/abs/2511.13732):
the codec LM's draft proposes tokens, and the target accepts them at the level of acoustically similar groups of
tokens instead of exact tokens, so more drafts are accepted while the emitted groups keep the target's distribution.

Acoustic Similarity Groups (Eq. 1) come from the target model's token embeddings; each token's probability is split
equally across the groups that contain it (Eq. 2–5) (:class:`AcousticGroups`). The acceptance rules — PCG's
group-level rejection sampling (Eq. 6–10), standard speculative sampling (token-level, exact for q) and the SSD-style
constant bias (min(1, (q(x) + b)/p(x))) — are :func:`engine.core.verify.pcg_step` / :func:`engine.core.verify.sd_step`;
this module drives the codec LM (:mod:`engine.synthesis.codec_lm_session`, a :class:`engine.llm.protocol.CausalLM`)
with them: :func:`speculative_generate` (Algorithm 1), and :func:`ar_generate` (target-only AR, the baseline). The
emitted *group* is distributed exactly as Q_c (the paper's Proposition; tests/test_pcg.py checks it with a
chi-square test); on acceptance the draft token is kept as the group's representative (KV cache stays valid). The
codec TTS engine that samples with them is :class:`engine.synthesis.codec_tts.CodecTTS`; on an accelerator, the same
rules run as whole rounds on the device (:mod:`engine.synthesis.device_sampling`).

Groups are cached on disk as ``asg_<sha256>.npz`` (plain arrays), keyed by the sha256 of the target's code embeddings
and θ, and rebuilt when the file is missing, unreadable or of another model.

Shapes: probability vectors are float64 (V,); the vocabulary is the codec's token ids 0..V−1.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import numpy as np

from engine.core import verify as V
from engine.synthesis.codec_lm_session import CodecLMSession, SelfSpeculativeSession


class AcousticGroups:
    """Eq. 1 groups and Eq. 3 equal-split weights.

    Args:
        emb: float (V, d) target token embeddings Emb_q.
        theta: cosine threshold θ (paper's best 0.38–0.45).

    Attributes:
        groups: list of M int arrays, the distinct G_k (each G(t) contains t, so every token is covered).
        S: list of V int arrays, S(t) = {k : t ∈ G_k}; N: int (V,), N(t) = |S(t)|.
        group_of_token: int (V,), the index of G(t) itself.
    """

    def __init__(self, emb: np.ndarray, theta: float):
        e = np.asarray(emb, np.float64)
        e = e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)
        member = (e @ e.T) > theta  # row t: G(t)   (Eq. 1)
        np.fill_diagonal(member, True)
        uniq, inv = np.unique(member, axis=0, return_inverse=True)
        self._set(uniq, np.asarray(inv).reshape(-1), theta)

    def _set(self, uniq: np.ndarray, inv: np.ndarray, theta: float) -> None:
        """uniq: bool (M, V) distinct membership rows; inv: int (V,) row of G(t)."""
        self.theta = float(theta)
        self.V = uniq.shape[1]
        self.groups = [np.flatnonzero(r) for r in uniq]
        self.M = len(self.groups)
        mem = uniq.T  # (V, M): token t in group k
        self.S = [np.flatnonzero(mem[t]) for t in range(self.V)]
        self.N = mem.sum(axis=1).astype(np.int64)
        self.group_of_token = inv.astype(np.int64)
        self._uniq = uniq
        self._N_of_group = [self.N[g] for g in self.groups]  # N(t) for t ∈ G_k, for Eq. 5
        self._w_of_group = [1.0 / n.astype(np.float32) for n in self._N_of_group]  # 1/N(t), Eq. 5 as one dot

    # ----------------------------------------------------------------------------------------------- cache
    @staticmethod
    def cache_key(emb: np.ndarray, theta: float) -> str:
        """sha256 (hex) of the float32 embeddings and θ (4 decimals): what the groups are a function of."""
        h = hashlib.sha256(np.ascontiguousarray(emb, np.float32).tobytes())
        h.update(f"{theta:.4f}".encode())
        return h.hexdigest()

    @classmethod
    def load(cls, path: str | Path, key: str) -> "AcousticGroups | None":
        """Groups from an ``.npz`` cache written by :meth:`save` for ``key``; None when the file is missing,
        unreadable, of another key, or inconsistent. Only plain arrays are read (np.load refuses object arrays)."""
        try:
            with np.load(path) as z:
                if str(z["key"]) != key:
                    return None
                uniq, inv, theta = z["member"].astype(bool), z["group_of_token"], float(z["theta"])
        except Exception:  # not a zip, truncated, a missing or malformed array: rebuilt by the caller
            return None
        V_, M = uniq.shape[1] if uniq.ndim == 2 else -1, len(uniq)
        if inv.shape != (V_,) or not (0 <= inv.min() and inv.max() < M) or not uniq[inv, np.arange(V_)].all():
            return None
        g = cls.__new__(cls)
        g._set(uniq, inv, theta)
        return g

    def save(self, path: str | Path, key: str) -> None:
        """Write the groups to ``path`` (.npz) atomically (a temporary file renamed over it)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            np.savez_compressed(f, key=np.array(key), theta=np.array(self.theta), member=self._uniq,
                                group_of_token=self.group_of_token)
        os.replace(tmp, path)

    @classmethod
    def cached(cls, emb: np.ndarray, theta: float, cache_dir: str | Path) -> "AcousticGroups":
        """The groups for (emb, θ) from ``cache_dir/asg_<key>.npz`` (:meth:`cache_key`), computed and written when
        that file is missing or corrupt."""
        key = cls.cache_key(emb, theta)
        p = Path(cache_dir) / f"asg_{key[:32]}.npz"
        g = cls.load(p, key) if p.exists() else None
        if g is None:
            g = cls(emb, theta)
            g.save(p, key)
        return g

    # ------------------------------------------------------------------------------------------ Eq. 4–5
    def coarse(self, p: np.ndarray, k: int) -> float:
        """Eq. 5: P_c(G_k) = Σ_{t∈G_k} p(t)/N(t)."""
        return float(p[self.groups[k]] @ self._w_of_group[k])

    def coarse_all(self, p: np.ndarray) -> np.ndarray:
        """Eq. 4 for every group: float (M,) (sums to 1)."""
        w = p / self.N
        return np.array([w[g].sum() for g in self.groups])

    def sample_group(self, t: int, rng: np.random.Generator) -> int:
        """Eq. 6: K ~ w_{k,t} over k ∈ S(t) (uniform under equal split)."""
        s = self.S[t]
        return int(s[int(rng.random() * len(s))])  # uniform index (rng.random() < 1); cheaper than rng.integers

    def mean_group_size(self) -> float:
        return float(np.mean([len(g) for g in self.groups]))


def _pass_stats(st: V.SpecStats, **sessions) -> V.SpecStats:
    """Attach each session's per-pass wall time (``CodecLMSession.pass_time``) to ``st`` as ``st.passes``
    ({role: {tokens per pass: [passes, seconds]}}), the in-situ cost of the model passes."""
    st.passes = {role: dict(s.pass_time) for role, s in sessions.items()}
    return st


def _sync(lm, cached: list[int], ctx: list[int], ok: int) -> tuple[list[int], int]:
    """:func:`engine.core.verify.sync_cache` for a context that only grows: ``cached[:ok]`` is known to equal
    ``ctx[:ok]``, so the common prefix is extended from ``ok`` instead of rescanned from 0 (O(new tokens) per round,
    not O(utterance)). Same crop and feed as ``sync_cache``. Returns (tokens to evaluate next, new ``ok``)."""
    m = min(len(cached), len(ctx))
    while ok < m and cached[ok] == ctx[ok]:
        ok += 1
    k = min(ok, len(ctx) - 1)
    lm.crop(k)
    del cached[k:]
    return ctx[k:], k


def uses_onnx(lm) -> bool:
    """Whether the codec LM module ``lm`` runs on ONNX Runtime (a module on the CPU; a module on a GPU runs in
    torch)."""
    return next(lm.parameters()).device.type == "cpu"


def ar_generate(lm, cond: np.ndarray, rng: np.random.Generator, temperature: float = 0.8,
                threads: int = 1) -> tuple[np.ndarray, V.SpecStats]:
    """Target-only AR sampling of one utterance: one target pass per token.

    On the CPU each pass samples inside the graph (:class:`engine.synthesis.codec_lm_session.SelfSpeculativeSession`,
    the same fast path as :func:`speculative_generate`'s, so the two compare like for like); on a GPU the torch
    module's pass and a numpy draw.

    Args:
        lm: :class:`engine.synthesis.codec_lm.CodecLM`; cond: float32 (n_frames, 385) frame conditioning
            (:func:`engine.synthesis.codec_lm.frame_conditioning`); rng: numpy Generator of the draws;
            temperature: softmax(logits / temperature); threads: the codec LM's inference threads
            (:class:`engine.synthesis.codec_lm_session.CodecLMSession`).

    Returns:
        (int64 codes (n_frames,), stats with ``tokens``, ``target_passes`` and ``passes`` (per-pass wall time)).
    """
    t0 = time.perf_counter()
    n = len(cond)
    out: list[int] = []
    tok = lm.bos
    if uses_onnx(lm):
        s = SelfSpeculativeSession(lm, cond, temperature, rng, threads)
        while len(out) < n:
            tok = s.target_step(tok)
            out.append(tok)
        st = V.SpecStats(tokens=n, target_passes=s.n_target, seconds=time.perf_counter() - t0)
        st.passes = {"target": s.pass_time["target"]}
        return np.asarray(out, np.int64), st
    s = CodecLMSession(lm, cond, threads=threads)
    while len(out) < n:
        q = V.softmax(s.eval([tok])[-1], temperature)
        tok = V.sample_categorical(q, rng)
        out.append(tok)
    st = V.SpecStats(tokens=n, target_passes=s.n_forward, seconds=time.perf_counter() - t0)
    return np.asarray(out, np.int64), _pass_stats(st, target=s)


def speculative_generate(lm, cond: np.ndarray, rng: np.random.Generator, accept, lookahead: int = 3,
                         temperature: float = 0.8, threads: int = 1) -> tuple[np.ndarray, V.SpecStats]:
    """Speculative sampling of one utterance with lookahead L_d (the paper's Algorithm 1 with ``accept`` = PCG's
    group step; standard SD / SSD bias with the token-level step), over two
    :class:`engine.synthesis.codec_lm_session.CodecLMSession` (target, and the draft layers of the same model).

    ``accept(x, p, q, rng) → engine.core.verify.StepResult`` decides one drafted position given the draft distribution p
    and target distribution q (float64 (n_codes,)). On the first rejection the step's token replaces the draft and
    the round ends; if all L_d are accepted, one more token is sampled from q (the bonus token). The verification
    is one target pass over the L_d drafts plus the token before them (a single ONNX Runtime call, no Python per
    token); the L_d + 1 target distributions are one vectorised softmax.

    On the CPU the rounds run on :class:`engine.synthesis.codec_lm_session.SelfSpeculativeSession` (draws inside the
    graphs, one ORT call per pass, one KV cache for the layers the draft and target share); on a GPU, two sessions
    of the torch module.

    Returns:
        (int64 codes (n_frames,), stats: rounds, drafted, accepted, accepted_lengths, target/draft passes, and
        ``passes``: per-pass wall time by role and tokens per pass).
    """
    if uses_onnx(lm):
        return _self_speculative_generate(lm, cond, rng, accept, lookahead, temperature, threads)
    t0 = time.perf_counter()
    n = len(cond)
    tgt = CodecLMSession(lm, cond, threads=threads)
    dft = CodecLMSession(lm, cond, draft=True, threads=threads)
    ctx = [lm.bos]  # inputs: ctx[i] feeds position i, whose logits predict out[i] = ctx[i + 1]
    t_inputs: list[int] = []  # inputs in the target's KV cache (positions 0..)
    d_inputs: list[int] = []
    t_ok = d_ok = 0  # leading cached inputs known to equal ctx
    st = V.SpecStats()
    while len(ctx) <= n:
        L = min(lookahead, n - len(ctx))
        # ---- draft L tokens
        feed, d_ok = _sync(dft, d_inputs, ctx, d_ok)
        xs, ps = [], []
        for _ in range(L):
            row = dft.eval(feed)[-1]
            d_inputs += feed
            p = V.softmax(row, temperature)
            x = V.sample_categorical(p, rng)
            xs.append(x)
            ps.append(p)
            feed = [x]
        if L:
            d_ok = len(ctx)
        # ---- target: one pass over the missing context + the draft
        feed, t_ok = _sync(tgt, t_inputs, ctx, t_ok)
        rows = tgt.eval(feed + xs)
        t_inputs += feed + xs
        t_ok = len(ctx)
        qs = V.softmax(rows[len(feed) - 1 :], temperature)  # qs[j]: target distribution of position len(out) + j
        acc = _accept_drafts(ctx, xs, ps, qs, accept, rng, lambda: V.sample_categorical(qs[L], rng))
        st.record(L, acc)
    st.tokens = n
    st.target_passes, st.draft_passes = tgt.n_forward, dft.n_forward
    st.seconds = time.perf_counter() - t0
    return np.asarray(ctx[1 : n + 1], np.int64), _pass_stats(st, target=tgt, draft=dft)


def _accept_drafts(ctx: list[int], xs, ps, qs, accept, rng, bonus) -> int:
    """One round's decisions (Algorithm 1): ``accept`` each draft ``xs[j]`` in turn given its draft and target
    distributions ``ps[j]``, ``qs[j]``, appending to ``ctx`` the emitted token (the draft, or the step's token at the
    first rejection, which ends the round); when every draft is accepted, ``bonus()`` (a draw from ``qs[L]``) is
    appended too. Returns the number of drafts accepted."""
    for j, x in enumerate(xs):
        r = accept(x, ps[j], qs[j], rng)
        ctx.append(r.token)
        if not r.accepted:
            return j
    ctx.append(bonus())
    return len(xs)


def _self_speculative_generate(lm, cond, rng, accept, lookahead, temperature, threads):
    """:func:`speculative_generate` on :class:`engine.synthesis.codec_lm_session.SelfSpeculativeSession` (same rounds,
    same rules)."""
    t0 = time.perf_counter()
    n = len(cond)
    s = SelfSpeculativeSession(lm, cond, temperature, rng, threads)
    ctx = [lm.bos]  # ctx[i] feeds position i; ctx[-1] is the round's c, not yet fed
    st = V.SpecStats()
    while len(ctx) <= n:
        L = min(lookahead, n - len(ctx))
        xs, ps = [], []
        tok = ctx[-1]
        for _ in range(L):
            tok, p = s.draft_step(tok)
            xs.append(tok)
            ps.append(p)
        qs, bonus = s.verify(ctx[-1], xs)
        acc = _accept_drafts(ctx, xs, ps, qs, accept, rng, lambda: bonus)
        s.commit(acc)
        st.record(L, acc)
    st.tokens = n
    st.target_passes, st.draft_passes = s.n_target, s.n_draft
    st.seconds = time.perf_counter() - t0
    st.passes = s.pass_time
    return np.asarray(ctx[1 : n + 1], np.int64), st
