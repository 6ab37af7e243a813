"""Codec-LM sampling resident on the accelerator: target-only AR, exact SD, SSD bias and PCG rounds whose passes,
draws and acceptance decisions all run on the device, replayed as CUDA graphs.

On a GPU the codec LM (3.4 M parameters) is launch-bound: an eager torch step spends its time issuing ~70 small
kernels and copying the logits back for a numpy draw, so a draft step costs 0.44 of a target step although it runs
a quarter of the layers, and the host-side acceptance work of a round is as long as a pass. Here a whole round is
one graph replay — L_d draft steps (pass, softmax, draw) and one verification (target pass over the round's L_d + 1
inputs, every position's decision, the emitted tokens written to the output, the position advanced on the device).
Rounds that cannot run past the utterance's end even if every draft is accepted are queued back to back, so the host
reads the position back once per batch of rounds, not once per round. Target-only AR is one replay per token and
never reads back until the utterance is done, so the baseline is as fast as this model can step.

The rules are those of :mod:`engine.synthesis.coarse_grained_sampling` (Algorithm 1 of Yanuka et al., "Principled
Coarse-Grained Acceptance for Speculative Decoding in Speech", 2025, arXiv:2511.13732), vectorised over the round's
L_d positions: the draft x_j ~ p_j; PCG proposes K_j ~ w_{·,x_j} (Eq. 6, uniform over S(x_j) under equal
split) and accepts with min(1, Q_c(K_j)/P_c(K_j)) (Eq. 7, Q_c and P_c by Eq. 5 as one matrix product with the
(M, V) weight matrix w_{k,t} = [t ∈ G_k]/N(t)); on rejection the group comes from norm([Q_c − P_c]_+) (Eq. 8–9, the
distribution :func:`engine.core.verify.pcg_residual` samples by thinning) and the token from q(t)·w_{K,t} within it
(Eq. 10). Exact SD accepts with min(1, q(x)/p(x)), SSD with min(1, (q(x) + b)/p(x)), residual norm([q − p]_+).
Decisions for every position are drawn at once; the round keeps the drafts before the first rejection, the
rejected position's residual token, or the bonus token from q_{L_d} when all are accepted — the same distribution
as deciding position by position.

State lives in static buffers (KV caches of ``capacity`` positions, the utterance's conditioning rows, the output
codes, one row of uniforms per round drawn up front from a seeded generator), indexed by a device-side position,
so a captured graph serves every round of every utterance. The draft is the target's first layer with its own head
(the model's ``draft_layers``): its layer-0 keys and values are the target's and share their buffer. Without CUDA
(the CPU, tests) the same functions run eagerly.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from engine.core import verify as V


class DeviceRoundSampler:
    """Samples codec tokens of one utterance at a time from a :class:`engine.synthesis.codec_lm.CodecLM` on its
    device.

    Args:
        lm: the codec LM module (target + draft), on the device it is to run on.
        temperature: sampling temperature of every draw (softmax(logits / T)).
        lookahead: L_d, drafts per round (rounds near the utterance's end draft fewer).
        method: "ar", "sd", "ssd" or "pcg".
        groups: :class:`engine.synthesis.coarse_grained_sampling.AcousticGroups` (PCG only).
        bias: SSD's constant relaxation b (method "ssd").
        capacity: positions the static buffers hold (grown, and the graphs recaptured, for a longer utterance).
        graphs: capture CUDA graphs (default: when the module is on CUDA).
        compile: fuse the AR step and the full-length round with ``torch.compile`` (inductor, static shapes)
            before capturing them: fewer, fused kernels per step; compiling costs seconds to minutes once per
            sampler. Rounds cut short at an utterance's end run uncompiled.

    Raises:
        ValueError: unknown method, PCG without groups, lookahead < 1.
    """

    def __init__(self, lm, temperature: float, lookahead: int = 3, method: str = "pcg", groups=None,
                 bias: float = 0.3, capacity: int = 1024, graphs: bool | None = None, compile: bool = False):
        import torch

        if method not in ("ar", "sd", "ssd", "pcg"):
            raise ValueError(f"unknown codec LM sampling method {method!r} (ar, sd, ssd, pcg)")
        if method == "pcg" and groups is None:
            raise ValueError("PCG needs the acoustic similarity groups")
        if lookahead < 1:
            raise ValueError("lookahead must be >= 1")
        self.torch = torch
        self.lm = lm
        p = next(lm.parameters())
        self.device, self.dtype = p.device, p.dtype
        self.T = float(temperature)
        self.L = int(lookahead)
        self.method = method
        self.bias = float(bias) if method == "ssd" else 0.0
        self.use_graphs = (self.device.type == "cuda") if graphs is None else bool(graphs)
        self._lock = threading.Lock()  # one utterance at a time: the buffers and graphs are this sampler's state
        self.compile = bool(compile)
        self._compiled: dict = {}
        if compile:  # every sampler and length is its own compiled variant
            cfg = torch._dynamo.config
            for name in ("cache_size_limit", "recompile_limit"):
                if hasattr(cfg, name):
                    setattr(cfg, name, max(getattr(cfg, name), 256))
        blk = lm.blocks[0]
        self.h, self.d = blk.h, lm.code.weight.shape[1]
        self.n_layers, self.n_draft = len(lm.blocks), lm.draft_layers
        self.V = int(lm.bos)
        if method == "pcg":
            mem = torch.from_numpy(np.ascontiguousarray(groups._uniq, np.float32))  # (M, V) t ∈ G_k
            n_t = mem.sum(0)  # N(t)
            self.W = (mem / n_t).to(self.device)  # w_{k,t} (Eq. 3 equal split), (M, V)
            self.memT = mem.t().contiguous().to(self.device)  # (V, M): S(t) rows
        self._alloc(capacity)

    # ------------------------------------------------------------------------------------------- buffers
    def _alloc(self, capacity: int) -> None:
        torch, dev = self.torch, self.device
        self.capacity = int(capacity)
        dh = self.d // self.h
        self.kv = [(torch.zeros(1, self.h, self.capacity, dh, device=dev, dtype=self.dtype),
                    torch.zeros(1, self.h, self.capacity, dh, device=dev, dtype=self.dtype))
                   for _ in range(self.n_layers)]
        self.ce = torch.zeros(1, self.capacity + self.L + 1, self.d, device=dev, dtype=self.dtype)
        self.out = torch.zeros(self.capacity + self.L + 1, dtype=torch.long, device=dev)
        self.pos = torch.zeros((), dtype=torch.long, device=dev)  # next input position
        self.last = torch.zeros(1, 1, dtype=torch.long, device=dev)  # the input at ``pos``
        self.round = torch.zeros((), dtype=torch.long, device=dev)
        self.klog = torch.zeros(self.capacity + 1, dtype=torch.long, device=dev)  # drafts accepted, per round
        self.U = torch.zeros(self.capacity + 1, 5 * self.L + 1, device=dev)  # uniforms, one row per round
        self.keys = torch.arange(self.capacity, device=dev)
        self.steps = torch.arange(self.L + 1, device=dev)
        self.graphs: dict = {}
        self.capture_s = 0.0  # wall time of the last graph capture (once per sampler and capacity)

    # ------------------------------------------------------------------------------------------- the model
    def _pass(self, x, draft: bool):
        """One KV-cached pass of x (long (1, T)) at positions pos..pos+T−1 → logits float (T, V). Keys past each
        query's position are masked, so stale buffer contents are never attended."""
        torch, lm = self.torch, self.lm
        T = x.shape[1]
        idx = self.pos + self.steps[:T]  # (T,) positions
        h = lm.code(x) + self.ce.index_select(1, idx)
        mask = self.keys[None, :] <= idx[:, None]  # (T, capacity)
        for i in range(self.n_draft if draft else self.n_layers):
            blk = lm.blocks[i]
            B, _, D = h.shape
            q, k, v = blk.qkv(blk.ln1(h)).view(B, T, 3, self.h, D // self.h).permute(2, 0, 3, 1, 4)
            kb, vb = self.kv[i]
            kb.index_copy_(2, idx, k)
            vb.index_copy_(2, idx, v)
            s = (q @ kb.transpose(-1, -2)) * (1.0 / (D // self.h) ** 0.5)  # (1, h, T, capacity)
            a = torch.softmax(s.masked_fill(~mask, float("-inf")), -1) @ vb
            h = h + blk.proj(a.transpose(1, 2).reshape(B, T, D))
            h = h + blk.ff(blk.ln2(h))
        logits = lm.draft_head(lm.draft_norm(h)) if draft else lm.head(lm.norm(h))
        return logits[0].float()

    def _probs(self, logits):
        return self.torch.softmax(logits / self.T, -1)

    def _draw(self, probs, u):
        """Inverse-CDF draws: probs float (R, n) (unnormalised allowed), u float (R,) in [0, 1) → long (R,)."""
        c = probs.cumsum(-1)
        i = self.torch.searchsorted(c, (u * c[:, -1]).unsqueeze(1)).squeeze(1)
        return i.clamp_(max=probs.shape[1] - 1)

    # ------------------------------------------------------------------------------------------- steps
    def _ar_step(self) -> None:
        u = self.U.index_select(0, self.round)[0]
        q = self._probs(self._pass(self.last, draft=False))  # (1, V)
        x = self._draw(q, u[:1])
        self.out.index_copy_(0, self.pos.view(1), x)
        self.last.copy_(x.view(1, 1))
        self.pos.add_(1)
        self.round.add_(1)

    def _round(self, L: int) -> None:
        """Algorithm 1, one round of L drafts: draft, verify, decide, emit, advance (all on the device)."""
        torch = self.torch
        u = self.U.index_select(0, self.round)[0]  # (5 L_max + 1,): independent uniforms for each use below
        start = self.pos.clone()
        tok, xs, ps = self.last, [], []
        for j in range(L):  # draft: position pos + j predicts code pos + j
            p = self._probs(self._pass(tok, draft=True))  # (1, V)
            x = self._draw(p, u[j : j + 1])
            xs.append(x)
            ps.append(p)
            tok = x.view(1, 1)
            self.pos.add_(1)
        self.pos.copy_(start)
        X = torch.cat(xs)  # (L,)
        P = torch.cat(ps)  # (L, V)
        Q = self._probs(self._pass(torch.cat([self.last, X.view(1, L)], 1), draft=False))  # (L + 1, V)
        u_acc, u_group, u_res, u_tok, u_bonus = (u[L : 2 * L], u[2 * L : 3 * L], u[3 * L : 4 * L], u[4 * L : 5 * L],
                                                 u[5 * L : 5 * L + 1])
        r, Z = self._decide(X, P, Q[:L], u_group, u_res, u_tok)
        rows = self.steps[:L]
        accept = (u_acc < r).long()
        k = accept.cumprod(0).sum()  # drafts accepted before the first rejection
        bonus = self._draw(Q[L:], u_bonus)
        E = torch.cat([torch.where(rows < k, X, Z), bonus])  # (L + 1,): E[k] is the round's last emitted token
        self.out.index_copy_(0, start + self.steps[: L + 1], E)
        self.last.copy_(E.index_select(0, k.view(1)).view(1, 1))
        self.pos.add_(k + 1)
        self.klog.index_copy_(0, self.round.view(1), k.view(1))
        self.round.add_(1)

    def _decide(self, X, P, Q, u_group, u_res, u_tok):
        """Every drafted position's acceptance probability and residual token: X long (L,) drafts, P and Q float
        (L, V) draft and target distributions, three float (L,) uniforms → (r float (L,), Z long (L,))."""
        torch = self.torch
        rows = self.steps[: len(X)]
        if self.method == "pcg":
            Pc, Qc = P @ self.W.t(), Q @ self.W.t()  # (L, M), Eq. 5
            K = self._draw(self.memT.index_select(0, X), u_group)  # Eq. 6: the u-th of S(x)
            pk, qk = Pc[rows, K], Qc[rows, K]
            r = torch.where(pk > 0, (qk / pk).clamp(max=1.0), torch.ones_like(pk))  # Eq. 7
            R = (Qc - Pc).clamp(min=0)  # Eq. 8-9
            R = torch.where(R.sum(-1, keepdim=True) > 0, R, Qc)
            K2 = self._draw(R, u_res)
            return r, self._draw(Q * self.W.index_select(0, K2), u_tok)  # Eq. 10
        px, qx = P[rows, X], Q[rows, X]
        r = torch.where(px > 0, ((qx + self.bias) / px).clamp(max=1.0), torch.ones_like(px))
        R = (Q - P).clamp(min=0)
        R = torch.where(R.sum(-1, keepdim=True) > 0, R, Q)
        return r, self._draw(R, u_res)

    # ------------------------------------------------------------------------------------------- graphs
    def _fn(self, L: int):
        f = self._ar_step if L == 0 else (lambda: self._round(L))
        if self.compile and L == (0 if self.method == "ar" else self.L):
            if L not in self._compiled:
                self._compiled[L] = self.torch.compile(f, fullgraph=True, dynamic=False)
            f = self._compiled[L]
        return f

    def _run(self, L: int) -> None:
        if not self.use_graphs:
            self._fn(L)()
            return
        g = self.graphs.get(L)
        if g is None:
            raise RuntimeError(f"no graph captured for L={L}")
        g.replay()

    def _capture(self) -> None:
        """Capture the AR step and rounds of 1..L drafts (warm-up on a side stream first, as CUDA graphs need);
        the captured work runs on the static buffers, whose contents :meth:`sample` resets afterwards."""
        torch = self.torch
        fns = {L: self._fn(L) for L in ([0] if self.method == "ar" else range(self.L + 1))}
        s = torch.cuda.Stream(self.device)
        s.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(s), torch.no_grad():
            for f in fns.values():
                for _ in range(2):
                    self.pos.zero_()
                    self.round.zero_()
                    f()
        torch.cuda.current_stream(self.device).wait_stream(s)
        with torch.no_grad():
            for L, f in fns.items():
                self.pos.zero_()
                self.round.zero_()
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    f()
                self.graphs[L] = g

    # ------------------------------------------------------------------------------------------- public
    def round_cost(self, cond: np.ndarray, context: int = 100, reps: int = 200) -> dict:
        """Wall time of one AR step and of one round of each L_d this sampler runs, at ``context`` positions into
        ``cond`` (median over ``reps``, the device synchronised around each): {"ms": {L_d: ms} (0 = the AR step),
        "in_ar_steps": {L_d: ms / AR-step ms}} — the cost model of a round (drafts, verification and decisions)."""
        torch = self.torch
        self.sample(cond, 0)  # the utterance's state (conditioning, uniforms) and, on CUDA, the graphs
        context = min(context, len(cond) - self.L - 2)
        sync = (lambda: torch.cuda.synchronize(self.device)) if self.device.type == "cuda" else (lambda: None)
        Ls = [0] if self.method == "ar" else list(range(self.L + 1))
        times: dict = {L: [] for L in Ls}
        with torch.no_grad():
            for r in range(reps):
                for L in Ls:
                    self.pos.fill_(context)
                    self.round.fill_(r)
                    sync()
                    t0 = time.perf_counter()
                    self._run(L)
                    sync()
                    times[L].append(time.perf_counter() - t0)
        ms = {L: float(np.median(v)) * 1e3 for L, v in times.items()}
        return {"context": context, "reps": reps, "ms": {str(L): round(v, 4) for L, v in ms.items()},
                "in_ar_steps": {str(L): round(v / ms[0], 3) for L, v in ms.items()}}

    def sample(self, cond: np.ndarray, seed) -> tuple[np.ndarray, V.SpecStats]:
        """Codes of one utterance.

        Args:
            cond: float32 (n_frames, 385) frame conditioning (:func:`engine.synthesis.codec_lm.frame_conditioning`).
            seed: seeds the utterance's uniforms (anything ``np.random.default_rng`` takes).

        Returns:
            (int64 codes (n_frames,), stats: tokens, seconds, rounds, drafted, accepted, accepted_lengths,
            target/draft passes).
        """
        with self._lock:
            return self._sample(cond, seed)

    def _sample(self, cond: np.ndarray, seed) -> tuple[np.ndarray, V.SpecStats]:
        from engine.synthesis.codec_lm import cond_embedding

        torch = self.torch
        n = len(cond)
        if n + 1 > self.capacity:
            self._alloc(max(2 * self.capacity, n + 1))
        with torch.no_grad():
            if self.use_graphs and not self.graphs:
                t_cap = time.perf_counter()
                self._capture()
                self.capture_s = time.perf_counter() - t_cap
            t0 = time.perf_counter()
            ce = cond_embedding(self.lm, cond)
            self.ce.zero_()
            self.ce[:, :n] = ce[0]
            g = torch.Generator(device=self.device)
            g.manual_seed(int(np.random.default_rng(seed).integers(2**62)))
            self.U.copy_(torch.rand(self.U.shape, generator=g, device=self.device))
            self.pos.zero_()
            self.round.zero_()
            self.last.fill_(self.lm.bos)
            st = V.SpecStats()
            m = 0  # codes emitted so far (= the next input position)
            if self.method == "ar":
                for _ in range(n):
                    self._run(0)
                st.target_passes = n
            else:
                drafted = []  # L_d of each round, in order
                while m < n:
                    L = min(self.L, n - 1 - m)  # verification feeds positions m..m+L, all < n
                    if L == 0:
                        self._run(0)
                        drafted.append(0)
                        m += 1
                        continue
                    # rounds that stay inside the utterance even if every draft is accepted run back to back,
                    # with no read-back between them: one device sync per batch, not per round
                    R = (n - m) // (L + 1)
                    for _ in range(R):
                        self._run(L)
                    drafted += [L] * R
                    m = int(self.pos.item())
                accepted = self.klog[: len(drafted)].cpu().numpy()
                for L, k in zip(drafted, accepted):
                    st.target_passes += 1
                    if L:
                        st.record(L, int(k))
                        st.draft_passes += L
            codes = self.out[:n].cpu().numpy().astype(np.int64)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
        st.tokens = n
        st.seconds = time.perf_counter() - t0
        return codes, st
