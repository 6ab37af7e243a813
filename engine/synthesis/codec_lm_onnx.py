"""The codec LM (:class:`engine.synthesis.codec_lm.CodecLM`) as ONNX graphs, and their ONNX Runtime sessions.

Sampling runs the codec LM on onnxruntime (already a dependency: Piper) rather than eager torch: eager torch spends
most of a step in per-op dispatch (~25 small ops per layer), and its CPU BLAS (MKL, on this AMD CPU) runs the
model's few-row matmuls at a quarter of the GFLOP/s of ORT's MLAS with prepacked weights (bench/results/tts.json,
verification_cost.matmul). :func:`codec_lm_onnx` writes one KV-cached pass of the target or the draft from the
module's weights with ``onnx.helper`` (:class:`OnnxGraph`); :class:`CodecLMRuntime` holds the sessions of one module
and :func:`runtime_for` rebuilds them when its weights change. The torch module stays the reference (training,
``CodecLMSession(backend="torch")``, the tests' equality checks); a graph computes the same as its forward in
float32, up to rounding.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class OnnxGraph:
    """An ONNX model under construction: nodes, initializers, typed inputs and outputs (``onnx.helper`` protos).

    ``op(type, inputs, n_out=1, outputs=None, domain="", **attrs)`` appends a node (int, float or int-list
    attributes; "" for an omitted optional input) and returns its output name(s), named ``<type><n>_<i>`` unless
    given; ``const(array)`` adds an initializer (any numpy dtype, a 0-d array a scalar) named ``c<n>`` unless given;
    ``model(inputs, outputs)`` → ``onnx.ModelProto`` and ``serialize(inputs, outputs)`` → its bytes, for
    ``onnxruntime.InferenceSession`` (IR 8, ONNX opset 17, ``com.microsoft`` opset 1 when used), with inputs and
    outputs given as (name, "float"|"int32"|"int64", dims) where a dim is an int or a symbolic name.
    """

    DTYPES = {"float": TensorProto.FLOAT, "int32": TensorProto.INT32, "int64": TensorProto.INT64}

    def __init__(self, name: str = "codec_lm"):
        self.name = name
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._n = 0
        self.domains = {""}

    def const(self, arr, name: str | None = None) -> str:
        arr = np.array(arr, order="C")  # (ascontiguousarray would turn a 0-d scalar into shape (1,))
        name = name or f"c{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def op(self, op_type: str, inputs, n_out: int = 1, outputs=None, domain: str = "", **attrs):
        outputs = list(outputs or [f"{op_type.lower()}{self._n}_{i}" for i in range(n_out)])
        self._n += 1
        # the default domain is left unset rather than written as "" (the same node either way)
        self.nodes.append(helper.make_node(op_type, list(inputs), outputs, domain=domain or None, **attrs))
        self.domains.add(domain)
        return outputs[0] if len(outputs) == 1 else outputs

    def model(self, inputs, outputs) -> onnx.ModelProto:
        def vi(name, dtype, dims):
            return helper.make_tensor_value_info(name, self.DTYPES[dtype], list(dims))

        graph = helper.make_graph(self.nodes, self.name, [vi(*v) for v in inputs], [vi(*v) for v in outputs],
                                  initializer=self.inits)
        opsets = [helper.make_opsetid(dom, 17 if dom == "" else 1) for dom in sorted(self.domains)]
        return helper.make_model(graph, ir_version=8, opset_imports=opsets)

    def serialize(self, inputs, outputs) -> bytes:
        return self.model(inputs, outputs).SerializeToString()


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
        below = g.op("Cast", [g.op("LessOrEqual", [cdf, g.op("Mul", ["uniform", total])])], to=TensorProto.INT64)
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
