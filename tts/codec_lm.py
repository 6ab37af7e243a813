"""The codec-token TTS models (pcg_tts.txt needs an autoregressive codec-token TTS): an AR target conditioned on the
Piper voice's own VITS prior, its layer-subset draft, and the voice that bundles them with the latent codec.

Pipeline: text → phoneme ids (Piper's espeak-ng phonemiser) → the voice's text encoder and duration predictor
(:class:`tts.vits_latent.VitsParts`, cut out of the voice's ONNX file): per phoneme the prior's mean m_p and log
standard deviation logs_p (192 channels each) and its frames w_ceil → the prior expanded to frames
(:func:`frame_conditioning`) → latent-codec tokens sampled autoregressively by :class:`CodecLM` (one per 256-sample
frame, ≈ 86 tokens/s) → centroid latents → the voice's HiFi-GAN generator (:class:`tts.codec.LatentCodec`), 22.05 kHz.

The LM's input at frame i is Emb(code_{i−1}) + C(prior)_i, where C projects [m_p, logs_p] to the model width, mixes
neighbouring frames with two residual convolutions (the whole utterance's prior is known before sampling starts) and
adds an embedding of the frame's progress through its phoneme (8 buckets: the prior is constant over a phoneme).
There is no absolute position embedding: the causal mask orders the frames and the conditioning says where they are,
so sentences longer than any in training are not out of range. The LM models what the prior does not fix — VITS
samples z_p = m_p + ε·exp(logs_p)·noise_scale and the codec's tokens carry that variation — so it stays a
generative model, sampled at a temperature (its per-frame entropy is in assets/codec_tts/config.json).

The draft is the target's first ``draft_layers`` transformer layers with its own norm and head (the paper's draft is
a 3-layer subset of LLaSA-8B). Both are driven through :class:`CodecLMSession`, which follows the project's
causal-LM protocol (``eval(tokens) → logits at every position``, ``crop(n)``). The samplers that drive it —
target-only AR, standard speculative sampling, SSD-style constant bias, PCG (Algorithm 1) — live with the other
speculative algorithms, in :mod:`engine.speech.coarse_grained_sampling`; this package holds models only. Sessions
run the model on ONNX Runtime (:class:`CodecLMRuntime`: the module's weights written as an ONNX graph, KV cache
updated in place), the torch module being the reference; a module moved to a GPU (:meth:`CodecVoice.to`, with the
device string the caller resolved) runs in torch there.
"""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

import numpy as np

ASSET_DIR = Path(__file__).resolve().parent.parent / "assets" / "codec_tts"
N_PROG = 8
COND_DIM = 2 * 192 + 1  # [m_p, logs_p, progress through the phoneme in [0, 1)]
ARCH = {"n_codes": 2048, "d": 192, "layers": 4, "heads": 4, "ff": 768, "draft_layers": 1, "draft_rank": 64}  # shipped


def frame_conditioning(m_p: np.ndarray, logs_p: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """The prior expanded to frames by the durations (VITS's hard alignment), with each frame's progress through its
    phoneme: float32 (sum(dur), 385) = [m_p (192), logs_p (192), f / dur] for frame f of a phoneme of dur frames.

    Args:
        m_p, logs_p: float (n, 192) per phoneme id; dur: int (n,) frames per id (the voice's w_ceil)."""
    dur = np.asarray(dur, np.int64)
    prior = np.repeat(np.concatenate([np.asarray(m_p, np.float32), np.asarray(logs_p, np.float32)], 1), dur, 0)
    starts = np.repeat(np.cumsum(dur) - dur, dur)
    prog = (np.arange(int(dur.sum())) - starts) / np.repeat(np.maximum(dur, 1), dur)
    return np.concatenate([prior, prog[:, None].astype(np.float32)], 1)


def _torch():
    import torch

    return torch


def build_modules():
    torch = _torch()
    from torch import nn

    class Block(nn.Module):
        def __init__(self, d, heads, ff):
            super().__init__()
            self.h = heads
            self.ln1 = nn.LayerNorm(d)
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)
            self.ln2 = nn.LayerNorm(d)
            self.ff = nn.Sequential(nn.Linear(d, ff), nn.GELU(), nn.Linear(ff, d))

        def forward(self, x, cache=None, mask=None):
            """x (B, T, d); ``cache``: {"k", "v": (B, h, capacity, d/h) buffers allocated on first use, "n": cached
            positions, "capacity": positions the caller will ever feed}; ``mask``: bool (T, S) attention mask or
            None (attend to every key)."""
            B, T, D = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.h, D // self.h).permute(2, 0, 3, 1, 4)
            if cache is not None:  # write into a preallocated buffer: no per-step concatenation, O(1) crop
                n = cache["n"]
                if cache["k"] is None:
                    shape = (B, self.h, cache["capacity"], D // self.h)
                    cache["k"], cache["v"] = k.new_zeros(shape), v.new_zeros(shape)
                cache["k"][:, :, n : n + T] = k
                cache["v"][:, :, n : n + T] = v
                cache["n"] = n + T
                k, v = cache["k"][:, :, : n + T], cache["v"][:, :, : n + T]
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            x = x + self.proj(a.transpose(1, 2).reshape(B, T, D))
            return x + self.ff(self.ln2(x))

    class CodecLM(nn.Module):
        """Decoder-only transformer over codec tokens; input at frame i = Emb(code_{i−1}) + C(prior)_i (module
        docstring)."""

        def __init__(self, n_codes=1024, d=256, layers=4, heads=4, ff=1024, draft_layers=1, cond_dim=COND_DIM,
                     draft_rank=None):
            super().__init__()
            self.bos = n_codes
            self.draft_layers = draft_layers
            self.code = nn.Embedding(n_codes + 1, d)
            self.cond_in = nn.Linear(cond_dim - 1, d)
            self.cond_convs = nn.ModuleList(nn.Conv1d(d, d, 5, padding=2) for _ in range(2))
            self.prog = nn.Embedding(N_PROG, d)
            self.blocks = nn.ModuleList(Block(d, heads, ff) for _ in range(layers))
            self.norm = nn.LayerNorm(d)
            self.head = nn.Linear(d, n_codes)
            self.draft_norm = nn.LayerNorm(d)
            # a rank-r head (d → r → n_codes) costs the draft r·(d + n_codes) multiply-adds instead of d·n_codes:
            # with one layer, the head is half of a full-rank draft's work
            self.draft_head = (nn.Linear(d, n_codes) if not draft_rank else
                               nn.Sequential(nn.Linear(d, draft_rank, bias=False), nn.Linear(draft_rank, n_codes)))

        def cond_embed(self, cond):
            """cond float (B, T, 385) of whole utterances (zero rows = padding) → float (B, T, d)."""
            real = (cond[..., :-1].abs().sum(-1, keepdim=True) > 0).to(cond.dtype).transpose(1, 2)  # (B, 1, T)
            h = self.cond_in(cond[..., :-1]).transpose(1, 2) * real
            for c in self.cond_convs:  # padding frames stay zero, as past a sentence's end at inference
                h = (h + torch.nn.functional.gelu(c(h))) * real
            prog = (cond[..., -1] * N_PROG).long().clamp(0, N_PROG - 1)
            return h.transpose(1, 2) + self.prog(prog)

        def forward(self, x, cond=None, draft: bool = False, caches=None, ce=None):
            """x (B, T) int64 inputs at positions start..start+T−1; ``cond`` float (B, T, 385) for whole utterances
            (T frames from 0), or ``ce`` float (B, T, d) those positions' rows of :meth:`cond_embed` of the whole
            utterance (KV-cached passes) → logits (B, T, n_codes) float."""
            h = self.code(x) + (self.cond_embed(cond) if ce is None else ce)
            T = x.shape[1]
            S = T if caches is None else caches[0]["n"] + T
            # causal over the new queries, which sit at the end of the S keys (one query sees every key)
            mask = None if T == 1 else torch.ones(T, S, dtype=torch.bool, device=x.device).tril(S - T)
            # index the layers (slicing a ModuleList builds a new module on every call: per-token overhead)
            for i in range(self.draft_layers if draft else len(self.blocks)):
                h = self.blocks[i](h, None if caches is None else caches[i], mask)
            if draft:
                return self.draft_head(self.draft_norm(h))
            return self.head(self.norm(h))

    return CodecLM


def CodecLM(**kw):  # noqa: N802 - factory keeps torch out of import time
    return build_modules()(**kw)


def code_embeddings(lm, config: dict) -> np.ndarray:
    """Emb_q for PCG's Eq. 1, float32 (n_codes, d): the table ``config`` (config.json) names in
    ``group_embeddings`` — the target's input code embeddings ("input") or its output embeddings, the head's rows
    ("output", the default) — chosen at training time as the one whose groups at θ = 0.42 are non-trivial
    (engine.training.codec_tts ``calibrate``)."""
    if config.get("group_embeddings", "output") == "input":
        return lm.code.weight[: lm.bos].detach().float().cpu().numpy()
    return lm.head.weight.detach().float().cpu().numpy()


def cond_embedding(lm, cond: np.ndarray):
    """:meth:`CodecLM.cond_embed` of one utterance's frame conditioning (float32 (n_frames, 385)), on the module's
    device and dtype: torch tensor (1, n_frames, d), computed once per utterance by the sessions."""
    torch = _torch()
    p = next(lm.parameters())
    with torch.inference_mode():
        c = torch.from_numpy(np.ascontiguousarray(cond, np.float32)).to(p.device)
        return lm.cond_embed(c[None].to(p.dtype))


def load_lm(path: str | Path | None = None, dtype=None):
    """The target + draft from ``path``/lm.safetensors (fp16 on disk) with the architecture in config.json.

    Raises:
        FileNotFoundError: no trained model at ``path``."""
    from safetensors.torch import load_file

    torch = _torch()
    path = Path(path or ASSET_DIR)
    if not (path / "lm.safetensors").exists():
        raise FileNotFoundError(f"no codec TTS at {path} (train it: python -m engine.training.codec_tts all)")
    cfg = json.loads((path / "config.json").read_text())
    lm = CodecLM(**cfg["arch"])
    lm.load_state_dict({k: v.to(dtype or torch.float32) for k, v in load_file(str(path / "lm.safetensors")).items()})
    return lm.eval()


# ------------------------------------------------------------------------------------- ONNX Runtime inference
# Sampling runs the codec LM on onnxruntime (already a dependency: Piper) rather than eager torch: eager torch spends
# most of a step in per-op dispatch (~25 small ops per layer), and its CPU BLAS (MKL, on this AMD CPU) runs the
# model's few-row matmuls at a quarter of the GFLOP/s of ORT's MLAS with prepacked weights (bench/results/tts.json,
# verification_cost.matmul). The graph is written directly as ONNX protobuf (no `onnx` package needed); the torch
# module stays the reference (training, ``CodecLMSession(backend="torch")``, the tests' equality checks).


def _pb_varint(v: int) -> bytes:
    v &= (1 << 64) - 1  # int64 two's complement (negative attributes such as axis=-1)
    out = bytearray()
    while True:
        b, v = v & 0x7F, v >> 7
        out.append(b | 0x80 if v else b)
        if not v:
            return bytes(out)


def _pb_int(field: int, v: int) -> bytes:
    return _pb_varint(field << 3) + _pb_varint(int(v))


def _pb_bytes(field: int, payload) -> bytes:
    payload = payload.encode() if isinstance(payload, str) else payload
    return _pb_varint(field << 3 | 2) + _pb_varint(len(payload)) + payload


class OnnxGraph:
    """A minimal ONNX (protobuf) model writer: nodes, float32/int32/int64 initializers, typed inputs and outputs.

    ``op(type, inputs, n_out=1, outputs=None, domain="", **attrs)`` appends a node (int, float or int-list
    attributes; "" for an omitted optional input) and returns its output name(s); ``const(array)`` adds an
    initializer; ``serialize(inputs, outputs)`` → bytes for ``onnxruntime.InferenceSession`` (IR 8, ONNX opset 17,
    ``com.microsoft`` opset 1 when used), with inputs/outputs given as (name, "float"|"int32"|"int64", dims) where a
    dim is an int or a symbolic name."""

    _DT = {"float": 1, "int32": 6, "int64": 7}

    def __init__(self):
        self.nodes: list[bytes] = []
        self.inits: list[bytes] = []
        self._n = 0
        self.domains = {""}

    def const(self, arr, name: str | None = None) -> str:
        arr = np.array(arr, order="C")  # (ascontiguousarray would turn a 0-d scalar into shape (1,))
        dt = {np.dtype(np.float32): 1, np.dtype(np.int32): 6, np.dtype(np.int64): 7}[arr.dtype]
        name = name or f"c{len(self.inits)}"
        self.inits.append(b"".join(_pb_int(1, d) for d in arr.shape) + _pb_int(2, dt) + _pb_bytes(8, name)
                          + _pb_bytes(9, arr.tobytes()))
        return name

    def op(self, op_type: str, inputs, n_out: int = 1, outputs=None, domain: str = "", **attrs):
        outputs = list(outputs or [f"{op_type.lower()}{self._n}_{i}" for i in range(n_out)])
        self._n += 1
        a = b""
        for k, v in attrs.items():
            if isinstance(v, float):
                body = _pb_bytes(1, k) + _pb_varint(2 << 3 | 5) + struct.pack("<f", v) + _pb_int(20, 1)
            elif isinstance(v, int):
                body = _pb_bytes(1, k) + _pb_int(3, v) + _pb_int(20, 2)
            else:
                body = _pb_bytes(1, k) + b"".join(_pb_int(8, i) for i in v) + _pb_int(20, 7)
            a += _pb_bytes(5, body)
        self.nodes.append(b"".join(_pb_bytes(1, i) for i in inputs) + b"".join(_pb_bytes(2, o) for o in outputs)
                          + _pb_bytes(4, op_type) + a + (_pb_bytes(7, domain) if domain else b""))
        self.domains.add(domain)
        return outputs[0] if len(outputs) == 1 else outputs

    def serialize(self, inputs, outputs) -> bytes:
        def vi(name, dtype, dims):
            shape = b"".join(_pb_bytes(1, _pb_int(1, d) if isinstance(d, int) else _pb_bytes(2, d)) for d in dims)
            return _pb_bytes(1, name) + _pb_bytes(2, _pb_bytes(1, _pb_int(1, self._DT[dtype]) + _pb_bytes(2, shape)))

        g = (b"".join(_pb_bytes(1, n) for n in self.nodes) + _pb_bytes(2, "codec_lm")
             + b"".join(_pb_bytes(5, t) for t in self.inits)
             + b"".join(_pb_bytes(11, vi(*v)) for v in inputs) + b"".join(_pb_bytes(12, vi(*v)) for v in outputs))
        opsets = b"".join(_pb_bytes(8, _pb_bytes(1, dom) + _pb_int(2, 17 if dom == "" else 1))
                          for dom in sorted(self.domains))
        return _pb_int(1, 8) + _pb_bytes(7, g) + opsets


PARTS = ("target", "draft")


def codec_lm_onnx(lm, part: str = "target", sample: bool = False) -> bytes:
    """One KV-cached pass of ``lm`` as an ONNX model: the target (``part="target"``: every layer, ``norm``,
    ``head``) or the draft (``"draft"``: the first ``draft_layers``, ``draft_norm``, ``draft_head``, full or
    low-rank).

    Inputs: ``x`` int64 (1, T) codes/BOS; ``ce`` float (1, T, d) the positions' conditioning embeddings
    (:meth:`CodecLM.cond_embed` of the whole utterance, computed once per utterance); ``seqlens_k`` int32 (1,)
    = S − 1 and ``total_len`` int32 () = S, the keys after this pass; ``past_k{i}``/``past_v{i}`` float
    (1, heads, C, d/heads) layer i's KV buffers (capacity C) for every layer the part runs.
    Outputs: ``logits`` (1, T, n_codes); ``present_k{i}``/``present_v{i}``: the same buffers, bound to the same
    memory as the inputs, so ORT's GroupQueryAttention (packed QKV, causal over the new queries, which follow the
    S − T cached keys) writes the new keys in place — no concatenation or copy of the cache, and a crop is a
    smaller ``total_len``.

    ``sample=True`` adds sampling to the graph, so a step needs no Python over the vocabulary: input
    ``temperature`` float () and ``uniform`` float (1,) in [0, 1); outputs ``probs`` float (1, T, n_codes) =
    softmax(logits / temperature) and ``token`` int64 (1, 1), a draw from the last position's probs by inverse-CDF
    sampling with u (exact up to float32 rounding of the CDF, as :func:`engine.core.verify.sample_categorical`).

    Same weights and operations as :class:`CodecLM`'s forward (float32; only rounding differs).

    Raises:
        ValueError: unknown ``part``."""
    if part not in PARTS:
        raise ValueError(f"unknown codec LM part {part!r} ({', '.join(PARTS)})")
    sd = {k: v.detach().float().cpu().numpy() for k, v in lm.state_dict().items()}
    d = sd["code.weight"].shape[1]
    h = lm.blocks[0].h
    g = OnnxGraph()

    def linear(x, p):  # x @ W^T + b, W^T stored (in, out); MLAS prepacks it when the session is created
        return g.op("Add", [g.op("MatMul", [x, g.const(sd[p + ".weight"].T)]), g.const(sd[p + ".bias"])])

    def norm(x, p):
        return g.op("LayerNormalization", [x, g.const(sd[p + ".weight"]), g.const(sd[p + ".bias"])], axis=-1,
                    epsilon=1e-5)

    def block(x, i):
        p = f"blocks.{i}"
        qkv = linear(norm(x, p + ".ln1"), p + ".qkv")  # [q | k | v], the packed-QKV layout GQA takes
        a = g.op("GroupQueryAttention", [qkv, "", "", f"past_k{i}", f"past_v{i}", "seqlens_k", "total_len"],
                 outputs=[f"att{i}", f"present_k{i}", f"present_v{i}"], domain="com.microsoft", num_heads=h,
                 kv_num_heads=h)[0]
        x = g.op("Add", [x, linear(a, p + ".proj")])
        f = g.op("Gelu", [linear(norm(x, p + ".ln2"), p + ".ff.0")], domain="com.microsoft")  # exact (erf) GELU
        return g.op("Add", [x, linear(f, p + ".ff.2")])

    x = g.op("Add", [g.op("Gather", [g.const(sd["code.weight"]), "x"]), "ce"])  # (1, T, d)
    layers = range(lm.draft_layers) if part == "draft" else range(len(lm.blocks))
    for i in layers:
        x = block(x, i)
    if part == "draft":
        x = norm(x, "draft_norm")
        if "draft_head.0.weight" in sd:  # low-rank head: d → r (no bias) → n_codes
            x = g.op("MatMul", [x, g.const(sd["draft_head.0.weight"].T)])
            head = "draft_head.1"
        else:
            head = "draft_head"
    else:
        x, head = norm(x, "norm"), "head"
    n_codes = int(sd[head + ".weight"].shape[0])
    logits = g.op("Identity", [linear(x, head)], outputs=["logits"])
    inputs = [("x", "int64", [1, "T"]), ("ce", "float", [1, "T", d]), ("seqlens_k", "int32", [1]),
              ("total_len", "int32", [])]
    outputs = [(logits, "float", [1, "T", n_codes])]
    if sample:
        probs = g.op("Softmax", [g.op("Div", [logits, "temperature"])], outputs=["probs"], axis=-1)
        last = g.op("Slice", [probs, g.const(np.array([-1], np.int64)), g.const(np.array([2**62], np.int64)),
                              g.const(np.array([1], np.int64))])  # (1, 1, n_codes): the last position
        cdf = g.op("CumSum", [last, g.const(np.array(-1, np.int64))])
        total = g.op("Slice", [cdf, g.const(np.array([-1], np.int64)), g.const(np.array([2**62], np.int64)),
                               g.const(np.array([2], np.int64))])
        # inverse-CDF draw: the number of codes whose CDF is ≤ u·total (numpy's searchsorted(side="right")), kept
        # in range when rounding puts u·total at the very top
        below = g.op("Cast", [g.op("LessOrEqual", [cdf, g.op("Mul", ["uniform", total])])], to=7)
        count = g.op("ReduceSum", [below, g.const(np.array([-1], np.int64))], keepdims=0)
        g.op("Min", [count, g.const(np.array([n_codes - 1], np.int64))], outputs=["token"])
        inputs += [("temperature", "float", []), ("uniform", "float", [1])]
        outputs += [("probs", "float", [1, "T", n_codes]), ("token", "int64", [1, 1])]
    kv = [1, h, "C", d // h]
    for i in layers:
        inputs += [(f"past_k{i}", "float", kv), (f"past_v{i}", "float", kv)]
        outputs += [(f"present_k{i}", "float", kv), (f"present_v{i}", "float", kv)]
    return g.serialize(inputs, outputs)


class CodecLMRuntime:
    """ONNX Runtime sessions of one :class:`CodecLM` (:func:`codec_lm_onnx`), built from its weights as they are
    now: ``session(part, sample)``, created on first use (the protocol's passes use ``("target", False)`` and
    ``("draft", False)``, the samplers' fast path the sampling graphs).

    Args:
        lm: the module.
        threads: intra-op threads of the target's sessions (1: no thread pool; more: ORT's pool, whose workers spin
            between passes). The draft's session always runs on the calling thread: a second spinning pool would
            compete with the target's for the same cores. bench/results/tts.json (``verification_cost``) has the
            cost of a pass with 1 and 2 threads on the benchmark machine.
    """

    def __init__(self, lm, threads: int = 1):
        self.lm = lm
        self.threads = threads
        self._sessions: dict = {}
        self.heads = lm.blocks[0].h
        self.d = lm.code.weight.shape[1]
        self.n_codes = int(lm.bos)
        self.draft_layers = lm.draft_layers
        self.session(False)
        self.session(True)

    def session(self, part, sample: bool = False):
        """The ``onnxruntime.InferenceSession`` of ``part`` ("target", "draft"; True/False = draft/target)."""
        import onnxruntime as ort

        part = {True: "draft", False: "target"}.get(part, part)
        key = (part, sample)
        if key not in self._sessions:
            so = ort.SessionOptions()
            so.intra_op_num_threads = 1 if part == "draft" else self.threads
            so.inter_op_num_threads = 1
            so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            so.log_severity_level = 3
            self._sessions[key] = ort.InferenceSession(codec_lm_onnx(self.lm, part, sample), so,
                                                       providers=["CPUExecutionProvider"])
        return self._sessions[key]


def _weights_key(lm) -> tuple:
    """Changes when a parameter is modified in place (its version counter) or replaced (its storage)."""
    return tuple((p.data_ptr(), p._version) for p in lm.parameters())


def runtime_for(lm, threads: int = 1) -> CodecLMRuntime:
    """The :class:`CodecLMRuntime` of ``lm`` (built once per module and thread count; rebuilt when the weights have
    changed since)."""
    key = _weights_key(lm)
    cache = lm.__dict__.setdefault("_ort_runtimes", {})  # threads → (weights key, runtime)
    if threads not in cache or cache[threads][0] != key:
        cache[threads] = (key, CodecLMRuntime(lm, threads))
    return cache[threads][1]


class CodecLMSession:
    """:class:`engine.llm.protocol.CausalLM` over one utterance of the codec LM.

    ``eval(tokens)`` feeds inputs at positions n_past.. (tokens are codec ids 0..n_codes−1 or BOS = n_codes; the
    per-frame conditioning of those positions is added) and returns float32 logits (len(tokens), n_codes);
    ``crop(n)`` drops cached positions ≥ n (O(1): the KV buffers are preallocated). ``draft=True`` runs the draft
    layers and head. Tokens are their own text: ``tokenize``/``detokenize`` are not meaningful here.

    One ``eval`` is one pass of the model over all its tokens (a verification of L_d drafts + 1 is one pass), made
    by :meth:`_forward`. ``backend="onnx"``: :class:`CodecLMRuntime` on the CPU, with this session's KV buffers
    bound once (IO binding) as the graph's past and present tensors, so a pass binds only its tokens, their
    conditioning rows and two lengths, and writes the logits into a preallocated array; ``backend="torch"``: the
    module's own forward on the module's device (the reference: the same numbers up to float rounding; on CUDA,
    where a verification pass of a few tokens costs about one step, this is how the LM runs). The default (None)
    is "torch" for a module on a GPU (:meth:`CodecVoice.to`), "onnx" for one on the CPU. Logits come back as
    numpy on the CPU either way.

    Args:
        lm: a :class:`CodecLM` module; cond: float32 (n_frames, 385) frame conditioning (:func:`frame_conditioning`);
        threads: the target's ORT intra-op threads (:class:`CodecLMRuntime`).

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
            torch = _torch()
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
    graphs (:func:`codec_lm_onnx` with ``sample=True``), inputs and outputs bound once (a pass is one ORT call), and
    one KV cache for the draft's layers, which are the target's first ``draft_layers`` layers (self-speculative
    decoding: Zhang et al., "Draft & Verify: Lossless Large Language Model Acceleration via Self-Speculative
    Decoding", ACL 2024): the target's verification writes the same keys there as the draft did.

    A round at cache position n (every layer holds positions < n; ``c`` is the last committed token, not yet fed):
    :meth:`draft_step` L times (c, x1, …, x_{L−1} through the draft at positions n..n+L−1), :meth:`verify` (one
    target pass over c, x1..x_L: the target distributions of positions n..n+L and a draw from the last),
    :meth:`commit` (k of the L drafts accepted: positions < n+k+1 stay). Target-only AR is :meth:`target_step`.

    Args:
        lm: :class:`CodecLM`; cond: float32 (n_frames, 385) frame conditioning; temperature: sampling temperature;
        rng: numpy Generator of the in-graph draws' uniform numbers; threads: the target's ORT threads.

    Attributes:
        n: cached positions; n_target / n_draft: passes run; pass_time: {"target"|"draft": {tokens per pass:
        [passes, seconds]}}.

    Raises:
        ValueError (draft_step, verify, target_step): a pass past the utterance's frames, or too many drafts.
    """

    MAX_DRAFTS = 15

    def __init__(self, lm, cond: np.ndarray, temperature: float, rng: np.random.Generator, threads: int = 1):
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


class CodecVoice:
    """The trained codec TTS: target + draft LM, the latent codec, and the Piper voice's own parts it builds on
    (phonemiser, text encoder + duration predictor, generator).

    Args:
        path: assets/codec_tts (codec.npz, lm.safetensors, config.json); default ASSET_DIR.
        phonemizer: an object with Piper's ``phonemize(text) → [[phoneme]]`` and ``phonemes_to_ids(phonemes)``
            (a loaded ``piper.PiperVoice``), or None to load one from ``voice_model`` on first use.
        voice_model / voice_config: the Piper voice (.onnx, .onnx.json) the codec TTS was trained on; the caller
            resolves the paths.
        cache_dir: where the voice's extracted sub-graphs are cached (tts/vits_latent.py).
        device: where the codec LM runs, "cpu" (ONNX Runtime sessions) or a torch device such as "cuda" (the torch
            module there); the caller decides (this package reads no settings). The voice's prior and generator run
            on ONNX Runtime on the CPU.
        threads: ONNX Runtime threads of the voice's prior and generator.

    Raises:
        FileNotFoundError: the model files are missing. ValueError: ``voice_model`` is not the voice the codec TTS
            was trained on (its sha256 differs from config.json's ``voice_sha256``).
    """

    sample_rate = 22050

    def __init__(self, path: str | Path | None = None, phonemizer=None, voice_model: str | Path | None = None,
                 voice_config: str | Path | None = None, cache_dir: str | Path | None = None, device: str = "cpu",
                 threads: int = 1):
        from .codec import LatentCodec
        from .vits_latent import VitsParts, sha256_file

        self.path = Path(path or ASSET_DIR)
        self.lm = load_lm(self.path)
        self.config = json.loads((self.path / "config.json").read_text())
        self.codec = LatentCodec.load(self.path / "codec.npz")
        if voice_model is None:
            raise ValueError("CodecVoice needs the Piper voice_model it was trained on")
        sha = sha256_file(voice_model)
        if self.config.get("voice_sha256") not in (None, sha):
            raise ValueError(f"{voice_model} (sha256 {sha[:12]}…) is not the voice this codec TTS was trained on "
                             f"({self.config['voice_sha256'][:12]}…)")
        inf = json.loads(Path(voice_config).read_text()).get("inference", {}) if voice_config else {}
        cache_dir = Path(cache_dir) if cache_dir else Path.home() / ".cache" / "specvoice"
        self.parts = VitsParts(voice_model, cache_dir / "codec_tts", inf.get("noise_scale", 0.667),
                               inf.get("length_scale", 1.0), inf.get("noise_w", 0.8), sha256=sha, threads=threads)
        self.phonemizer = phonemizer
        self.voice_model, self.voice_config = voice_model, voice_config
        self.device = "cpu"
        self.to(device)

    def to(self, device: str) -> CodecVoice:
        """Move the codec LM to ``device`` ("cpu", "cuda", "cuda:1", ...) in place; every later
        :class:`CodecLMSession` of it runs there. Returns self.

        Raises:
            RuntimeError: torch cannot use ``device`` (the caller resolves the device first).
        """
        self.lm.to(device)
        self.device = str(device)
        return self

    def phoneme_ids(self, text: str) -> list[np.ndarray]:
        """Per sentence, Piper's phoneme ids (int64; espeak-ng phonemes, BOS/EOS/pad as Piper uses them)."""
        if self.phonemizer is None:
            from piper import PiperVoice

            self.phonemizer = PiperVoice.load(str(self.voice_model),
                                              config_path=str(self.voice_config) if self.voice_config else None)
        v = self.phonemizer
        return [np.asarray(v.phonemes_to_ids(ph), np.int64) for ph in v.phonemize(text) if ph]

    def prior(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The voice's prior of one sentence: m_p, logs_p float32 (n, 192) and frames per id int64 (n,) (its own
        duration predictor, sampled with its noise_w)."""
        return self.parts.prior(ids)

    def conditioning(self, ids: np.ndarray) -> np.ndarray:
        """float32 (n_frames, 385) frame conditioning of one sentence (:func:`frame_conditioning` of :meth:`prior`)."""
        return frame_conditioning(*self.prior(ids))

    def decode(self, tokens) -> np.ndarray:
        """Codec tokens (T,) → float32 audio (256 T,) at 22.05 kHz."""
        return self.codec.decode(tokens, self.parts)

    def code_embeddings(self) -> np.ndarray:
        """Emb_q for PCG's Eq. 1 (:func:`code_embeddings` of this voice's LM and config)."""
        return code_embeddings(self.lm, self.config)
