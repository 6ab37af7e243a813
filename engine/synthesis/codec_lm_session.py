"""The codec LM over one utterance: the project's causal-LM protocol (:class:`CodecLMSession`, target or draft,
on ONNX Runtime or torch) and the self-speculative fast path of the samplers (:class:`SelfSpeculativeSession`:
target and draft sharing one KV cache, sampling inside the graphs).

Both take the utterance's frame conditioning (float32 (n_frames, 385),
:func:`engine.synthesis.codec_lm.frame_conditioning`), turn it into the module's conditioning embeddings once, and
feed codes (int64 ids 0..n_codes−1, or BOS = n_codes) at increasing positions; KV buffers hold n_frames + 1
positions, allocated up front, so a crop is O(1). The samplers that drive them are
:mod:`engine.synthesis.coarse_grained_sampling`.
"""

from __future__ import annotations

import time

import numpy as np

from engine.synthesis.codec_lm import cond_embedding


class CodecLMSession:
    """:class:`engine.llm.protocol.CausalLM` over one utterance of the codec LM.

    ``eval(tokens)`` feeds inputs at positions n_past.. (tokens are codec ids 0..n_codes−1 or BOS = n_codes; the
    per-frame conditioning of those positions is added) and returns float32 logits (len(tokens), n_codes);
    ``crop(n)`` drops cached positions ≥ n (O(1): the KV buffers are preallocated). ``draft=True`` runs the draft
    layers and head. Tokens are their own text: ``tokenize``/``detokenize`` are not meaningful here.

    One ``eval`` is one pass of the model over all its tokens (a verification of L_d drafts + 1 is one pass), made
    by :meth:`_forward`. ``backend="onnx"``: :class:`engine.synthesis.codec_lm_onnx.CodecLMRuntime` on the CPU,
    with this session's KV buffers bound once (IO binding) as the graph's past and present tensors, so a pass binds
    only its tokens, their conditioning rows and two lengths, and writes the logits into a preallocated array;
    ``backend="torch"``: the module's own forward on the module's device (the reference: the same numbers up to
    float rounding; on CUDA, where a verification pass of a few tokens costs about one step, this is how the LM
    runs). The default (None) is "torch" for a module on a GPU (:meth:`engine.synthesis.codec_tts.CodecVoice.to`),
    "onnx" for one on the CPU. Logits come back as numpy on the CPU either way.

    Args:
        lm: a :class:`engine.synthesis.codec_lm.CodecLM` module; cond: float32 (n_frames, 385) frame conditioning
        (:func:`engine.synthesis.codec_lm.frame_conditioning`); draft: run the draft's layers and head; backend:
        "onnx", "torch" or None (above); threads: the target's ORT intra-op threads (``CodecLMRuntime``).

    Raises:
        ValueError (eval): empty ``tokens`` or positions past the utterance's frames; (crop): n out of range;
        (init): unknown backend.
    """

    def __init__(self, lm, cond: np.ndarray, draft: bool = False, backend: str | None = None, threads: int = 1):
        self.device = next(lm.parameters()).device
        if backend is None:
            backend = "onnx" if self.device.type == "cpu" else "torch"
        if backend not in ("onnx", "torch"):
            raise ValueError(f"unknown codec LM backend {backend!r} (onnx, torch)")
        self.lm = lm
        self.n_frames = len(cond)
        self.draft = draft
        self.backend = backend
        n = lm.draft_layers if draft else len(lm.blocks)
        cap = self.n_frames + 1
        self.ce = cond_embedding(lm, cond)  # (1, n_frames, d): every frame's conditioning, once per utterance
        if backend == "onnx":
            # imported here: the torch backend (a GPU machine with torch alone) needs neither onnx nor onnxruntime
            from engine.synthesis.codec_lm_onnx import runtime_for

            rt = runtime_for(lm, threads)
            self.runtime = rt
            self._sess = rt.session(draft)
            self._ce = np.ascontiguousarray(self.ce.float().cpu().numpy())  # (1, n_frames, d)
            self._kv = [np.zeros((1, rt.heads, cap, rt.d // rt.heads), np.float32) for _ in range(2 * n)]
            self._logits = np.empty((1, cap, rt.n_codes), np.float32)
            self._io = io = self._sess.io_binding()
            for i in range(n):
                for j, kv in enumerate("kv"):
                    buf = self._kv[2 * i + j]
                    io.bind_input(f"past_{kv}{i}", "cpu", 0, np.float32, buf.shape, buf.ctypes.data)
                    io.bind_output(f"present_{kv}{i}", "cpu", 0, np.float32, buf.shape, buf.ctypes.data)
        else:
            self.caches = [{"k": None, "v": None, "n": 0, "capacity": cap} for _ in range(n)]
        self.n_past = 0
        self.n_forward = 0
        self.pass_time: dict[int, list] = {}  # tokens per pass → [passes, seconds] (wall time of eval)
        self.n_vocab = int(lm.bos)  # codes 0..n_codes−1 (BOS is an input only)
        self.eos_ids: frozenset[int] = frozenset()

    def eval(self, tokens) -> np.ndarray:
        x = np.asarray(tokens, np.int64).reshape(1, -1)
        if not x.shape[1]:
            raise ValueError("eval() needs at least one token")
        if self.n_past + x.shape[1] > self.n_frames:
            raise ValueError("eval past the end of the utterance's frames")
        t0 = time.perf_counter()
        logits = self._forward(x, self.n_past)
        pt = self.pass_time.setdefault(x.shape[1], [0, 0.0])
        pt[0] += 1
        pt[1] += time.perf_counter() - t0
        self.n_past += x.shape[1]
        self.n_forward += 1
        return logits

    def _forward(self, x: np.ndarray, n0: int) -> np.ndarray:
        """One pass over x (int64 (1, T)) at positions n0..n0+T−1 → float32 logits (T, n_codes)."""
        T = x.shape[1]
        if self.backend == "torch":
            import torch

            with torch.inference_mode():
                return self.lm(torch.from_numpy(x).to(self.device), draft=self.draft, caches=self.caches,
                               ce=self.ce[:, n0 : n0 + T])[0].float().cpu().numpy()
        io, S = self._io, n0 + T
        io.bind_cpu_input("seqlens_k", np.array([S - 1], np.int32))
        io.bind_cpu_input("total_len", np.array(S, np.int32))
        io.bind_cpu_input("x", x)
        io.bind_cpu_input("ce", self._ce[:, n0:S])
        out = self._logits[:, :T]
        io.bind_output("logits", "cpu", 0, np.float32, out.shape, out.ctypes.data)
        self._sess.run_with_iobinding(io)
        return out[0].copy()

    def crop(self, n: int) -> None:
        if not 0 <= n <= self.n_past:
            raise ValueError(f"crop({n}) outside 0..{self.n_past}")
        if self.backend == "torch":
            for c in self.caches:
                c["n"] = min(c["n"], n)
        self.n_past = n

    def tokenize(self, text: str, special: bool = False) -> list[int]:
        raise NotImplementedError("codec tokens come from phonemes and audio, not text")

    def detokenize(self, ids) -> str:
        return " ".join(str(int(i)) for i in ids)


class SelfSpeculativeSession:
    """The target and its draft over one utterance on ONNX Runtime, for the samplers' fast path: sampling inside the
    graphs (:func:`engine.synthesis.codec_lm_onnx.codec_lm_onnx` with ``sample=True``), inputs and outputs bound
    once (a pass is one ORT call), and one KV cache for the draft's layers, which are the target's first
    ``draft_layers`` layers (self-speculative decoding: Zhang et al., "Draft & Verify: Lossless Large Language Model
    Acceleration via Self-Speculative Decoding", ACL 2024): the target's verification writes the same keys there as
    the draft did.

    A round at cache position n (every layer holds positions < n; ``c`` is the last committed token, not yet fed):
    :meth:`draft_step` L times (c, x1, …, x_{L−1} through the draft at positions n..n+L−1), :meth:`verify` (one
    target pass over c, x1..x_L: the target distributions of positions n..n+L and a draw from the last),
    :meth:`commit` (k of the L drafts accepted: positions < n+k+1 stay). Target-only AR is :meth:`target_step`.

    Args:
        lm: :class:`engine.synthesis.codec_lm.CodecLM`; cond: float32 (n_frames, 385) frame conditioning;
        temperature: sampling temperature (softmax(logits / T));
        rng: numpy Generator of the in-graph draws' uniform numbers; threads: the target's ORT threads.

    Attributes:
        n: cached positions; n_target / n_draft: passes run; pass_time: {"target"|"draft": {tokens per pass:
        [passes, seconds]}}.

    Raises:
        ValueError (draft_step, verify, target_step): a pass past the utterance's frames, or too many drafts.
    """

    MAX_DRAFTS = 15

    def __init__(self, lm, cond: np.ndarray, temperature: float, rng: np.random.Generator, threads: int = 1):
        from engine.synthesis.codec_lm_onnx import PARTS, runtime_for

        rt = runtime_for(lm, threads)
        self.rng = rng
        self.n_frames = len(cond)
        self.V = rt.n_codes
        cap = self.n_frames + 1
        self._ce = np.ascontiguousarray(cond_embedding(lm, cond).float().cpu().numpy())  # (1, n_frames, d)
        self._kv = [np.zeros((1, rt.heads, cap, rt.d // rt.heads), np.float32) for _ in range(2 * len(lm.blocks))]
        self._layers = {"target": len(lm.blocks), "draft": rt.draft_layers}
        # built now, not inside the first timed pass
        self._sess = {part: rt.session(part, sample=True) for part in PARTS}
        # inputs shared by every binding, updated in place (OrtValues over these arrays)
        self._shared = {"seqlens_k": np.zeros(1, np.int32), "total_len": np.zeros((), np.int32),
                        "temperature": np.array(temperature, np.float32), "uniform": np.zeros(1, np.float32)}
        self._token = np.zeros((1, 1), np.int64)
        self._draft_probs = np.empty((self.MAX_DRAFTS, self.V), np.float32)
        self._bind: dict = {}  # (part, T) → (io, x, ce, probs, arrays and OrtValues the binding points at)
        self.n = 0
        self._nd = 0  # drafts fed in this round
        self.n_target = self.n_draft = 0
        self.pass_time: dict[str, dict[int, list]] = {"target": {}, "draft": {}}

    def _binding(self, part: str, T: int):
        """The IO binding of ``part`` for passes of T tokens, made once: the KV buffers as past and present, the
        shared inputs, and this shape's own x, ce, logits and probs arrays."""
        key = (part, T)
        if key not in self._bind:
            import onnxruntime as ort

            io = self._sess[part].io_binding()
            for i in range(self._layers[part]):
                for j, kv in enumerate("kv"):
                    buf = self._kv[2 * i + j]
                    io.bind_input(f"past_{kv}{i}", "cpu", 0, np.float32, buf.shape, buf.ctypes.data)
                    io.bind_output(f"present_{kv}{i}", "cpu", 0, np.float32, buf.shape, buf.ctypes.data)
            x, ce = np.zeros((1, T), np.int64), np.zeros((1, T, self._ce.shape[2]), np.float32)
            logits, probs = np.empty((1, T, self.V), np.float32), np.empty((1, T, self.V), np.float32)
            values = {name: ort.OrtValue.ortvalue_from_numpy(arr) for name, arr in {"x": x, "ce": ce,
                                                                                    **self._shared}.items()}
            for name, v in values.items():  # the binding does not own them: kept alive with it
                io.bind_ortvalue_input(name, v)
            for name, arr in (("logits", logits), ("probs", probs), ("token", self._token)):
                io.bind_output(name, "cpu", 0, arr.dtype, arr.shape, arr.ctypes.data)
            self._bind[key] = (io, x, ce, probs, (logits, values))
        return self._bind[key]

    def _run(self, part: str, tokens, pos: int) -> tuple[np.ndarray, int]:
        """One pass of ``part`` feeding ``tokens`` at positions pos.. → (probs float32 (T, V) of those positions,
        valid until the next pass of this shape; the in-graph draw from the last)."""
        T = len(tokens)
        S = pos + T
        if S > self.n_frames:
            raise ValueError("a pass past the end of the utterance's frames")
        t0 = time.perf_counter()
        io, x, ce, probs, _ = self._binding(part, T)
        x[0] = tokens
        ce[0] = self._ce[0, pos:S]
        self._shared["seqlens_k"][0] = S - 1
        self._shared["total_len"][...] = S
        self._shared["uniform"][0] = self.rng.random()
        self._sess[part].run_with_iobinding(io)
        pt = self.pass_time[part].setdefault(T, [0, 0.0])
        pt[0] += 1
        pt[1] += time.perf_counter() - t0
        return probs[0], int(self._token[0, 0])

    def target_step(self, token: int) -> int:
        """Target-only AR: feed ``token`` at position n; returns a draw from the target's next distribution."""
        _, out = self._run("target", [token], self.n)
        self.n += 1
        self.n_target += 1
        return out

    def draft_step(self, token: int) -> tuple[int, np.ndarray]:
        """Feed ``token`` through the draft at position n + (drafts fed this round) → (a draw x from the draft,
        the draft's distribution p float32 (V,) it was drawn from; valid until the next round)."""
        j = self._nd
        if j >= self.MAX_DRAFTS:
            raise ValueError(f"at most {self.MAX_DRAFTS} drafts per round")
        probs, x = self._run("draft", [token], self.n + j)
        p = self._draft_probs[j]
        p[:] = probs[0]
        self._nd += 1
        self.n_draft += 1
        return x, p

    def verify(self, c: int, drafts) -> tuple[np.ndarray, int]:
        """One target pass over [c, x1..x_L] (``drafts`` = the L tokens :meth:`draft_step` returned after being fed
        c and x1..x_{L−1}) → (target distributions q float32 (L+1, V) of positions n..n+L, a draw from q[L])."""
        if len(drafts) != self._nd:
            raise ValueError(f"verify() of {len(drafts)} drafts after {self._nd} draft steps")
        qs, tok = self._run("target", [c, *drafts], self.n)
        self.n_target += 1
        return qs, tok

    def commit(self, accepted: int) -> None:
        """End the round: c and the first ``accepted`` drafts stay cached (their keys are valid in every layer)."""
        self.n += accepted + 1
        self._nd = 0
