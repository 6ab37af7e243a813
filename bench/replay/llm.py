"""LLM family of the replay (:mod:`bench.replay`): PredGen vs the cascade, and SSBD vs AR re-translation, on the
product's LLM (Qwen2.5-Coder-Instruct: the 1.5B target, the 0.5B for the CPU validation).

**PredGen** (Li & Grover, "PredGen: Accelerated Inference of Large Language Models through Input-Time Speculation
for Real-Time Speech Interaction", 2025; :mod:`engine.answer.predictive`), greedy verifier, against the cascade (no
speculation) and the cascade with incremental prefill (``cascade_prefill``: the KV cache follows each partial
prompt, nothing is speculated — the second, honest non-speculative baseline), on the voice benchmark's
spoken-question partial-transcript streams (``bench/data/voice_asr_partials.json``, read with
:func:`bench.predgen_bench.load_streams`; PredGen built and warmed as :func:`bench.predgen_bench.run` does). Metric
per question: **end of input → first sentence ready**, compute seconds (``FinalInfo.ttfs_s`` of
:meth:`PredGen.finish`, the "TTFS" of the benchmark; the answer's first sentence, TTS left out: the replay measures
the LLM). Speed-up = cascade seconds / method seconds (sums over the questions).

**SSBD** (Zeng et al., "Self-Speculative Biased Decoding for Faster Live Translation", 2025;
:mod:`engine.translate.biased_retranslation`), β = 0.2, display-only mask-k, against AR re-translation, on Multi30k
test 2016 en→de streamed lag-3 (:func:`bench.ssbd_bench.multi30k`, :func:`bench.ssbd_bench.lag_k`; one translator
per method over all sentences, as :func:`bench.ssbd_bench.run_stream` drives it). Metric: total re-translation
compute seconds (Σ ``SSBDUpdate.compute_s``); speed-up = AR / SSBD.

Schedule (PredGen). :func:`bench.predgen_bench.simulate` chooses which partial to speculate on, and cancels an
update at the end of input, from wall-clock time: a trace could not pin those choices down on another device. The
replayed schedule is the one of a device that keeps up with the speaker: every new partial in turn gets a whole
update (``update(partial, cancel)`` with a cancel event that is never set — the chunked, cancellable path of a live
update), then ``finish(final)``. ``wait_s`` reports what that schedule would have cost on the device that ran it:
updates run one after another, each starting when its partial arrives or the previous update ended, and ``wait_s``
= how far the last one ran past the end of input (≈ 0 on a GPU; on a 2-core CPU the product would have skipped
partials instead). TTS: a silent stand-in (:class:`SilentTTS`, a 1-sample array at once), so the product's
pre-synthesised path is taken exactly as with a voice.

Models. Recording: the real weights — llama.cpp (:class:`engine.llm.llama_cpp_lm.LlamaCppLM`, the product's CPU
runtime) or :class:`engine.llm.torch_lm.TorchCausalLM` on the same GGUF dequantised — wrapped in
:class:`bench.replay.trace.RecordingLM` (``generate`` and ``eval_cancellable`` hidden, so the per-pass loop runs and
every pass is recorded). Replay: ``transformers`` Qwen2ForCausalLM built from the real model's configuration
(``bench/data/replay/models/qwen2.5-coder-{0.5b,1.5b}.json``, from the GGUF's metadata), seeded random weights,
bfloat16 on CUDA and float32 on the CPU (as :func:`engine.runtime.Runtime.llm` loads the real ones on a GPU without a
CUDA llama.cpp), in :class:`engine.llm.torch_lm.TorchCausalLM`, wrapped in :class:`bench.replay.trace.ScriptedLM`
with the trace's tape answering tokenize / detokenize / chat_prompt (no tokenizer files). Every pass runs on the
placeholder with the same shapes and KV cache as the product's; its rows are then rebuilt from the trace, so the
product's loops take the recorded decisions.

Timing: ``seconds`` are the product's own wall-clock measures (``FinalInfo.ttfs_s``, ``SSBDUpdate.compute_s``;
CUDA: every pass copies its rows to the host, which synchronises), minus the rows' rebuilding
(``ScriptedLM.counters["overhead_s"]``); ``speedups`` are computed from them. ``cpu_seconds`` are the process's CPU
time over the same spans (same subtraction) and ``speedups_cpu_time`` their ratios: on a CPU shared with other work
the wall clock measures the neighbours as much as the model (a 0.5B pass took 0.1–0.5 s from one minute to the
next here), the CPU time does not — :func:`validate` reports both. With ``repeats`` > 1, each item's seconds are the
minimum over the repeats. The model is warmed up with a few passes first; :func:`validate` runs the real and the
placeholder model taking turns item by item, so a change of load falls on both.

Trace (gzip JSON, ``bench/data/replay/{predgen,ssbd}.json.gz``)::

    {"family": "predgen" | "ssbd", "version": 1, "model": "qwen2.5-coder-1.5b", "arch": {transformers config},
     "recorded_with": {"backend", "dtype", "gguf", "seconds", "rows": {"p_min", "top"},
                       "code": {product file: SHA-256 prefix} (code_fingerprint)},
     "lm": {"n_vocab", "eos_ids", "n_ctx"},
     "settings": {...the loop's settings...},
     "items": [{"stream": [[partial, seconds], ...]}] (predgen) | [{"sources": [...], "reference": str}] (ssbd),
     "methods": {name: {"calls": [recorded call, ...] (bench.replay.trace format, one stream per method),
                        "items": [{"calls": calls of this item, "output": {...tokens produced...}}]}},
     "tape": {call: answer}}

Outputs: predgen ``{"answer_tokens", "first_sentence"}`` per question; ssbd ``{"tokens": [[...] per update],
"final"}`` per sentence. A replay is ``exact`` when no call diverged, it made the recorded number of calls and it
produced those outputs; ``code_matches_trace`` says whether the product code is still the one recorded.

CLI::

    python -m bench.replay.llm arch --model 0.5b|1.5b                 # writes bench/data/replay/models/*.json
    python -m bench.replay.llm record --method predgen|ssbd --model 1.5b --backend llama_cpp --limit N --out F
    python -m bench.replay.llm replay --trace F --device cpu|cuda [--limit K] [--repeats R] [--out J]
    python -m bench.replay.llm real --trace F --device cpu [--limit K] [--out J]
    python -m bench.replay.llm trim --trace F --limit K --out G                # its first K items
    python -m bench.replay.llm validate --method predgen|ssbd [--model 0.5b] [--limit N] [--repeats R] [--out J]
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from bench.replay.trace import P_MIN, TOP, RecordingLM, ReplayDiverged, ScriptedLM, Tape, new_counters

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "bench" / "data"
MODELS_DIR = DATA / "replay" / "models"
TRACES = {"predgen": DATA / "replay" / "predgen.json.gz", "ssbd": DATA / "replay" / "ssbd.json.gz"}
VOICE_STREAMS = DATA / "voice_asr_partials.json"
#: --model → (config role, architecture name)
MODELS = {"1.5b": ("llm_target", "qwen2.5-coder-1.5b"), "0.5b": ("llm_draft", "qwen2.5-coder-0.5b")}
METHODS = {"predgen": ("cascade", "cascade_prefill", "predgen"), "ssbd": ("ar", "ssbd")}
BASELINE = {"predgen": "cascade", "ssbd": "ar"}
#: hidden from the loops: the whole-answer and cancellable paths (the per-pass loop runs, every pass through eval()),
#: and thread changes (PredGen.finish asks for all cores; the recording keeps the threads it was given)
HIDE = ("generate", "eval_cancellable", "set_threads")
#: the CPU validation's subset (``validate`` / :func:`validation_trace`): questions, sentences — each family takes
#: ≈ 6–12 min of CPU time for the record, real and replayed runs on a 2-core CPU with one torch thread (the wall
#: clock doubles or triples when other work shares the CPU)
VALIDATION_LIMIT = {"predgen": 3, "ssbd": 5}
_NEVER = threading.Event()  # a live update's cancel event that the replayed schedule never sets
#: the product code whose decisions a trace records, per family (:func:`code_fingerprint`)
CODE = {"predgen": ("engine/answer/predictive.py", "engine/answer/sentences.py", "engine/llm/chat.py",
                    "engine/llm/generate.py", "engine/core/verify.py"),
        "ssbd": ("engine/translate/biased_retranslation.py", "engine/translate/translator.py",
                 "engine/llm/generate.py", "engine/core/verify.py")}


class SilentTTS:
    """The TTS stand-in of the replay: ``synthesize`` returns one silent sample at once (the LLM is measured)."""

    sample_rate = 24000

    def synthesize(self, text: str) -> np.ndarray:
        return np.zeros(1, np.float32)


# ------------------------------------------------------------------------------------------------ models
def architecture(model: str, gguf: str | Path | None = None) -> dict:
    """The placeholder's architecture for ``model`` ("1.5b" | "0.5b" or its name): ``{"model", "source",
    "config"}``, ``config`` = the transformers config the GGUF's metadata gives
    (``load_gguf_checkpoint(path, return_tensors=False)["config"]``). Read from ``bench/data/replay/models/`` when
    committed, else computed from ``gguf`` (default: the role's GGUF, :class:`engine.runtime.Runtime`) and written
    there."""
    name = MODELS[model][1] if model in MODELS else model
    path = MODELS_DIR / f"{name}.json"
    if path.is_file() and gguf is None:
        return json.loads(path.read_text())
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    gguf = Path(gguf) if gguf else _gguf_path(model)
    cfg = dict(load_gguf_checkpoint(str(gguf), return_tensors=False)["config"])
    cfg.pop("_model_name_or_path", None)
    arch = {"model": name, "source": gguf.name, "config": cfg}
    MODELS_DIR.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(arch, indent=1) + "\n")
    return arch


def _gguf_path(model: str) -> Path:
    from engine.config import load_config
    from engine.runtime import Runtime

    key = model if model in MODELS else next(k for k, (_, n) in MODELS.items() if n == model)
    return Path(Runtime(load_config(), progress=False).model(MODELS[key][0]).path)


def shrunk(cfg: dict, layers: int) -> dict:
    """The configuration ``cfg`` cut for a self-test of a script (not a measurement): its first ``layers`` decoder
    layers, each 64 wide (2 attention heads of 32, one KV head), the vocabulary unchanged (the trace's token ids
    index it). A replay on it follows the trace's decisions as on the full model; only the cost differs."""
    cfg = dict(cfg)
    cfg["num_hidden_layers"] = int(layers)
    cfg.pop("layer_types", None)  # one entry per layer: rebuilt from the new count
    cfg.update(hidden_size=64, intermediate_size=128, num_attention_heads=2, num_key_value_heads=1, head_dim=32)
    return cfg


def placeholder_lm(arch: dict, device: str = "cpu", dtype: str | None = None, seed: int = 0, n_ctx: int = 0,
                   eos_ids=None, layers: int | None = None):
    """:class:`engine.llm.torch_lm.TorchCausalLM` over a transformers causal LM of architecture ``arch`` (its
    ``config``) with seeded random weights, built on ``device`` in ``dtype`` (default: bfloat16 on CUDA, float32 on
    the CPU — :func:`engine.devices.torch_dtype_name`), no tokenizer (a tape answers the text calls).

    Args:
        eos_ids: the recorded LM's end ids (the real adapter's set; the config names only one).
        layers: fewer and narrower decoder layers (:func:`shrunk`; self-tests only: a replay is then exact but not
            timed as the product).
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from engine.devices import resolve_device, torch_dtype_name
    from engine.llm.torch_lm import TorchCausalLM

    cfg = dict(arch.get("config", arch))
    cfg.pop("_model_name_or_path", None)
    if layers:
        cfg = shrunk(cfg, layers)
    dev = resolve_device(device, "llm", "torch")
    dt = getattr(torch, dtype or torch_dtype_name(dev, "llm"))
    torch.manual_seed(seed)
    with torch.device(dev):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**cfg), dtype=dt)
    lm = TorchCausalLM(model, None, device=dev, n_ctx=n_ctx)
    if eos_ids is not None:
        lm.eos_ids = frozenset(int(i) for i in eos_ids)
    return lm


_REAL: dict = {}  # loaded real LMs, kept for the process (validate records, then times the same weights)


def real_lm(model: str = "1.5b", backend: str = "llama_cpp", device: str = "cpu", dtype: str | None = None,
            threads: int | None = None):
    """The real weights of ``model`` ("1.5b" | "0.5b" or its name) as the product loads them: ``llama_cpp`` =
    :class:`engine.llm.llama_cpp_lm.LlamaCppLM` with the configuration's context and threads (no GPU layers);
    ``torch`` = :class:`engine.llm.torch_lm.TorchCausalLM` on the GGUF dequantised (cached under the configuration's
    ``cache_dir``), float32 on the CPU, bfloat16 on CUDA. Kept for the process.

    ``threads``: llama.cpp's threads (default: the configuration's); on a CPU shared with other work, all cores
    make llama.cpp's threads wait on each other (a 0.5B pass 0.3–2 s instead of 0.07 s with one thread)."""
    from engine.config import load_config

    key = model if model in MODELS else next(k for k, (_, n) in MODELS.items() if n == model)
    k = (key, backend, device, dtype)
    if k in _REAL:
        if threads and hasattr(_REAL[k], "set_threads"):
            _REAL[k].set_threads(threads)
        return _REAL[k]
    cfg = load_config()
    path = _gguf_path(key)
    if backend == "llama_cpp":
        from engine.llm.llama_cpp_lm import LlamaCppLM

        lm = LlamaCppLM(path, n_ctx=cfg.llm.n_ctx, n_threads=threads or cfg.llm.n_threads, n_gpu_layers=0)
    elif backend == "torch":
        from engine.llm.torch_lm import TorchCausalLM

        lm = TorchCausalLM(str(path), device=device, dtype=dtype, n_ctx=cfg.llm.n_ctx, cache_dir=cfg.cache_dir())
    else:
        raise ValueError(f"unknown backend {backend!r} (llama_cpp | torch)")
    _REAL[k] = lm
    return lm


def _warm(lm) -> None:
    """A few passes so the first timed one does not pay for lazy initialisation; leaves the cache empty."""
    lm.crop(0)
    lm.eval(list(range(100, 164)))
    for _ in range(3):
        lm.eval([100])
    lm.crop(0)
    lm._session_owner = None


# ------------------------------------------------------------------------------------------------ inputs
def settings(family: str, max_tokens: int | None = None) -> dict:
    """The loop's settings, from the product configuration (:func:`engine.config.load_config`): PredGen as
    ``specvoice bench predgen`` runs it (answer of ``max_tokens`` = 48 tokens), SSBD at β = 0.2 into German."""
    from engine.config import load_config

    cfg = load_config()
    if family == "predgen":
        return {"system_prompt": cfg.llm.system_prompt, "tokens_per_update": cfg.llm.predgen_tokens_per_update,
                "top_k": cfg.llm.predgen_top_k, "speculation_threads": cfg.llm.predgen_speculation_threads,
                "first_clause_words": cfg.tts.first_clause_words, "max_tokens": max_tokens or 48,
                "verifier": "greedy", "schedule": "every partial, whole updates"}
    return {"target": "German", "max_tokens": max_tokens or cfg.caption.max_tokens, "beta": 0.2, "mask_k": 0,
            "display_only": True, "input": "multi30k test_2016_flickr en-de, lag-3"}


def inputs(family: str, limit: int = 0) -> list[dict]:
    """The benchmark's items: predgen ``{"stream": [[partial, s], ...]}`` (last = final transcript), ssbd
    ``{"sources": [...], "reference"}``."""
    if family == "predgen":
        from bench.predgen_bench import load_streams

        streams, _ = load_streams(str(VOICE_STREAMS), limit or 10**9)
        return [{"stream": [[p, t] for p, t in s]} for s in streams]
    from bench.ssbd_bench import MULTI30K, lag_k, multi30k

    return [{"sources": lag_k(en), "reference": de} for en, de in multi30k(limit or 10**9, MULTI30K)]


def code_fingerprint(family: str) -> dict:
    """{path: first 12 hex digits of its SHA-256} of the product code a ``family`` trace's decisions come from: a
    replay on other code may take other decisions (it is then reported diverged, or ``code_matches_trace`` False)."""
    import hashlib

    return {p: hashlib.sha256((ROOT / p).read_bytes()).hexdigest()[:12] for p in CODE[family]}


# ------------------------------------------------------------------------------------------------ loops
def _predgen_item(lm, item: dict, s: dict, method: str, overhead: Callable[[], float]) -> dict:
    """One question: PredGen built as the benchmark builds it, every new partial a whole update, then ``finish``.
    Returns seconds (end of input → first sentence, minus rebuild overhead; cpu_seconds: the process's CPU time
    over the same span), passes, and what it produced."""
    from engine.answer.predictive import PredGen

    speculate = method != "cascade"
    budget = 0 if method == "cascade_prefill" else s["tokens_per_update"]
    pg = PredGen(lm, SilentTTS(), s["system_prompt"], verifier=s["verifier"], top_k=s["top_k"],
                 tokens_per_update=budget, max_tokens=s["max_tokens"], speculation_threads=s["speculation_threads"],
                 first_clause_words=s["first_clause_words"])
    pg.warm()
    stream = [(p, float(t)) for p, t in item["stream"]]
    final, t_final = stream[-1]
    t, last, n_up, up_s = 0.0, None, 0, 0.0
    if speculate:
        for partial, avail in stream[:-1]:
            if partial == last:
                continue
            o0, c0 = overhead(), time.perf_counter()
            pg.update(partial, _NEVER)
            c = time.perf_counter() - c0 - (overhead() - o0)
            t = max(t, avail) + c
            up_s += c
            n_up += 1
            last = partial
    mark: dict = {}

    def on_sentence(i, text, audio, presynth):
        if i == 0:
            mark["o"], mark["cpu"] = overhead(), time.process_time()

    o0, cpu0 = overhead(), time.process_time()
    fi = pg.finish(final, on_sentence=on_sentence)
    over = mark.get("o", overhead()) - o0
    ttfs = fi.ttfs_s - over
    cpu = mark.get("cpu", time.process_time()) - cpu0 - over
    return {"seconds": ttfs, "cpu_seconds": cpu, "passes": pg.session.n_eval, "wait_s": max(0.0, t - t_final),
            "updates": n_up, "update_s": up_s, "nfetfs": fi.nfetfs, "presynth": bool(fi.presynth_used),
            "accepted": fi.accepted,
            "output": {"answer_tokens": [int(x) for x in fi.answer_tokens], "first_sentence": fi.first_sentence}}


def _ssbd_translator(lm, method: str, s: dict):
    from engine.translate.biased_retranslation import ARRetranslator, SSBDTranslator

    if method == "ar":
        return ARRetranslator(lm, s["target"], s["max_tokens"], mask_k=s["mask_k"])
    return SSBDTranslator(lm, s["target"], s["max_tokens"], s["beta"], s["mask_k"], s["display_only"])


def _ssbd_item(tr, item: dict, overhead: Callable[[], float]) -> dict:
    """One sentence's updates, the loop of :func:`bench.ssbd_bench.run_stream` (without its NE, which needs
    sacrebleu, absent from the device image). Seconds = Σ compute_s minus rebuild overhead; cpu_seconds = the
    process's CPU time over the updates minus that overhead."""
    tr.reset()
    n0, o0 = tr.session.n_eval, overhead()
    srcs = item["sources"]
    cpu = 0.0
    for i, src in enumerate(srcs):
        c0 = time.process_time()
        tr.translate_ssbd(src, final=i == len(srcs) - 1)
        cpu += time.process_time() - c0
    ups = tr.stream.updates
    over = overhead() - o0
    return {"seconds": sum(u.compute_s for u in ups) - over, "cpu_seconds": cpu - over,
            "passes": tr.session.n_eval - n0,
            "updates": len(ups), "draft": sum(u.draft for u in ups), "accepted_tokens": sum(u.accepted for u in ups),
            "output_tokens": sum(u.output for u in ups),
            "output": {"tokens": [[int(x) for x in u.tokens] for u in ups], "final": ups[-1].text}}


def _runner(family: str, method: str, s: dict, lm, overhead: Callable[[], float]) -> Callable[[dict], dict]:
    """``item → row``: one method's loop over successive items on ``lm`` (SSBD: one translator for all of them,
    as the benchmark keeps it, so the unchanged prompt prefix stays cached)."""
    if family == "ssbd":
        tr = _ssbd_translator(lm, method, s)
        return lambda item: _ssbd_item(tr, item, overhead)
    return lambda item: _predgen_item(lm, item, s, method, overhead)


def _run_methods(family: str, items: list[dict], s: dict, wraps: dict, progress: bool = False) -> dict:
    """Each method over ``items`` on every model of ``wraps`` ({weights: wrap}, ``wrap(method)`` → (lm,
    overhead(), calls())), the models taking turns item by item (the first one alternates), so a load change on a
    shared CPU falls on both. Returns {weights: {method: {"rows": [per item], "calls": [calls after each item],
    "error": str | None}}} (a replay that diverged stops its method)."""
    out: dict = {w: {} for w in wraps}
    for m in METHODS[family]:
        st = {}
        for w, wrap in wraps.items():
            lm, overhead, calls = wrap(m)
            st[w] = {"lm": lm, "overhead": overhead, "count": calls, "run": None,
                     "res": {"rows": [], "calls": [], "error": None}}
        for i, item in enumerate(items):
            order = list(st) if i % 2 == 0 else list(st)[::-1]
            for w in order:
                x = st[w]
                if x["res"]["error"]:
                    continue
                try:
                    if x["run"] is None:
                        x["run"] = _runner(family, m, s, x["lm"], x["overhead"])
                    x["res"]["rows"].append(x["run"](item))
                    x["res"]["calls"].append(x["count"]())
                    if progress:
                        print(f"{family} {m} [{w}] {i + 1}/{len(items)}", file=sys.stderr, flush=True)
                except ReplayDiverged as e:
                    x["res"]["error"] = str(e)
        for w in st:
            out[w][m] = st[w]["res"]
    return out


# ------------------------------------------------------------------------------------------------ record
def record(method: str, model: str = "1.5b", backend: str = "llama_cpp", limit: int = 0,
           max_tokens: int | None = None, lm=None, items: list[dict] | None = None, threads: int | None = None) -> dict:
    """Record a trace: ``method``'s family ("predgen" | "ssbd": the method and its baselines) on the first
    ``limit`` items (0 = all) of the benchmark's inputs (or of ``items``, in :func:`inputs`' format), the real
    weights of ``model`` on ``backend`` (or ``lm``, e.g. one loaded already) on the CPU; ``threads``: llama.cpp's
    (:func:`real_lm`; the decisions do not depend on them).

    Raises:
        ValueError: an unknown method.
        RuntimeError: a method failed while recording.
    """
    family = method
    if family not in METHODS:
        raise ValueError(f"unknown method {method!r} (predgen | ssbd)")
    code = code_fingerprint(family)  # before the run: the code this process runs (an edit later is not in it)
    s = settings(family, max_tokens)
    items = list(items)[: limit or None] if items is not None else inputs(family, limit)
    real = lm if lm is not None else real_lm(model, backend, "cpu", threads=threads)
    tape = Tape(recording=True)
    streams: dict[str, list] = {}

    def wrap(m):
        st = streams[m] = []
        return RecordingLM(real, st, hide=HIDE, tape=tape), (lambda: 0.0), (lambda: len(st))

    t0 = time.perf_counter()
    res = _run_methods(family, items, s, {"real": wrap}, progress=True)["real"]
    for m, r in res.items():
        if r["error"]:
            raise RuntimeError(f"recording {m} failed: {r['error']}")
    arch = architecture(model)
    trace = {"family": family, "version": 1, "model": arch["model"], "arch": arch["config"],
             "recorded_with": {"backend": type(real).__name__, "dtype": _dtype(real) or "gguf",
                               "gguf": arch.get("source"), "seconds": round(time.perf_counter() - t0, 1),
                               "rows": {"p_min": P_MIN, "top": TOP}, "code": code},
             "lm": {"n_vocab": int(real.n_vocab), "eos_ids": sorted(int(i) for i in real.eos_ids),
                    "n_ctx": int(getattr(real, "n_ctx", 0) or 0)},
             "settings": s, "items": items, "methods": {}, "tape": tape.entries}
    for m, r in res.items():
        prev = [0] + r["calls"][:-1]
        trace["methods"][m] = {"calls": streams[m],
                               "items": [{"calls": b - a, "output": row["output"]}
                                         for a, b, row in zip(prev, r["calls"], r["rows"])]}
    return trace


def save(trace: dict, path: str | Path) -> int:
    """Write ``trace`` as gzip JSON; returns its size in bytes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8", compresslevel=9) as f:
        json.dump(trace, f, separators=(",", ":"), ensure_ascii=False)
    return path.stat().st_size


def load(path: str | Path) -> dict:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def trim(trace: dict, k: int) -> dict:
    """The trace of its first ``k`` items (each method's calls cut after its k-th item's; the tape kept whole)."""
    out = dict(trace, items=trace["items"][:k], methods={})
    for m, d in trace["methods"].items():
        n = sum(it["calls"] for it in d["items"][:k])
        out["methods"][m] = {"calls": d["calls"][:n], "items": d["items"][:k]}
    return out


def cost(trace: dict) -> dict:
    """Per method: forward passes (calls) and tokens fed, the work a replay repeats on a device."""
    return {m: {"passes": len(d["calls"]), "tokens": sum(c["n"] for c in d["calls"])}
            for m, d in trace["methods"].items()}


# ------------------------------------------------------------------------------------------------ replay, real
def _norm(x):
    return json.loads(json.dumps(x))


def _dtype(lm) -> str | None:
    d = getattr(lm, "dtype", None)
    return None if d is None else str(d).removeprefix("torch.")


def _collect(trace: dict, bases: dict, limit: int, repeats: int) -> list[dict]:
    """``repeats`` runs of the trace's methods on each model of ``bases`` ({"placeholder" | "real": lm}; with both,
    they take turns item by item). Returns per repeat {weights: {method: result}, "counters": {method: the
    ScriptedLM counters}}."""
    family = trace["family"]
    items = trace["items"][:limit] if limit else trace["items"]
    tape = Tape(trace["tape"])
    for base in bases.values():
        _warm(base)
    runs = []
    for _ in range(max(1, repeats)):
        counters: dict = {}

        def wrap(m, base, placeholder, counters=counters):
            if placeholder:
                c = counters[m] = new_counters()
                lm = ScriptedLM(base, trace["methods"][m]["calls"], hide=HIDE, counters=c, tape=tape)
                return lm, (lambda: c["overhead_s"]), (lambda: c["calls"])
            return base, (lambda: 0.0), (lambda: 0)

        wraps = {w: (lambda m, b=b, w=w: wrap(m, b, w == "placeholder")) for w, b in bases.items()}
        res = _run_methods(family, items, trace["settings"], wraps, progress=True)
        res["counters"] = counters
        runs.append(res)
    return runs


def _summary(trace: dict, runs: list[dict], weights: str, device: str, dtype: str | None, limit: int) -> dict:
    """The package's result format from :func:`_collect`'s runs, for the model ``weights``. Seconds per item: the
    minimum over the repeats."""
    family = trace["family"]
    k = len(trace["items"][:limit] if limit else trace["items"])
    methods, tot = {}, {}  # tot: unrounded (seconds, cpu seconds, seconds with wait) for the ratios
    for m in METHODS[family]:
        rec = trace["methods"][m]["items"][:k]
        n = min(len(r[weights][m]["rows"]) for r in runs)
        rows = runs[0][weights][m]["rows"][:n]
        secs = [min(r[weights][m]["rows"][i]["seconds"] for r in runs) for i in range(n)]
        cpus = [min(r[weights][m]["rows"][i]["cpu_seconds"] for r in runs) for i in range(n)]
        same = [_norm(row["output"]) == r["output"] for row, r in zip(rows, rec)]
        errors = [r[weights][m]["error"] for r in runs if r[weights][m]["error"]]
        tot[m] = (sum(secs), sum(cpus), sum(secs) + sum(r["wait_s"] for r in rows) if family == "predgen" else 0)
        res = {"seconds": round(sum(secs), 6), "items": n, "passes": sum(r["passes"] for r in rows),
               "outputs_match_trace": sum(same), "error": errors[0] if errors else None,
               "per_item_s": [round(x, 6) for x in secs], "cpu_seconds": round(sum(cpus), 6)}
        if weights == "placeholder":
            cs = [r["counters"][m] for r in runs]
            diverged = max(c["diverged"] for c in cs)
            calls_ok = all(c["calls"] == sum(r["calls"] for r in rec) for c in cs)
            res.update(exact=bool(not errors and diverged == 0 and calls_ok and n == k and all(same)),
                       diverged=diverged, calls=cs[0]["calls"],
                       overhead_s=round(sum(c["overhead_s"] for c in cs) / len(cs), 4))
        else:  # the real weights: exact when they produced what the trace recorded
            res.update(exact=bool(not errors and n == k and all(same)), overhead_s=0.0)
        if family == "predgen":
            wait = sum(r["wait_s"] for r in rows)
            res.update(wait_s=round(wait, 3), seconds_with_wait=round(sum(secs) + wait, 4),
                       update_s=round(sum(r["update_s"] for r in rows), 3),
                       nfetfs_mean=round(float(np.mean([r["nfetfs"] for r in rows])), 2) if rows else None,
                       presynth_share=round(float(np.mean([r["presynth"] for r in rows])), 3) if rows else None)
        else:
            res.update(updates=sum(r["updates"] for r in rows), draft_tokens=sum(r["draft"] for r in rows),
                       accepted_tokens=sum(r["accepted_tokens"] for r in rows),
                       output_tokens=sum(r["output_tokens"] for r in rows))
        methods[m] = res
    base_name = BASELINE[family]

    def ratio(b, x):
        return round(b / x, 3) if b > 0 and x > 0 else None

    out = {"family": family, "device": device, "dtype": dtype, "weights": weights,
           "replayed": weights == "placeholder", "model": trace["model"], "baseline": base_name, "items": k,
           "repeats": len(runs),
           "code_matches_trace": trace["recorded_with"].get("code") == code_fingerprint(family), "methods": methods,
           "speedups": {m: ratio(tot[base_name][0], tot[m][0]) for m in methods if m != base_name},
           "speedups_cpu_time": {m: ratio(tot[base_name][1], tot[m][1]) for m in methods if m != base_name}}
    if family == "predgen":
        out["speedups_vs_cascade_prefill"] = {"predgen": ratio(tot["cascade_prefill"][0], tot["predgen"][0])}
        out["speedups_cpu_time"]["predgen_vs_cascade_prefill"] = ratio(tot["cascade_prefill"][1], tot["predgen"][1])
        out["speedups_with_wait"] = {m: ratio(tot["cascade"][2], tot[m][2]) for m in methods if m != "cascade"}
    return out


def _torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def _placeholder_for(trace: dict, device: str, seed: int = 0, layers: int | None = None):
    lm = placeholder_lm({"config": trace["arch"]}, device, seed=seed, n_ctx=trace["lm"]["n_ctx"],
                        eos_ids=trace["lm"]["eos_ids"], layers=layers)
    if int(lm.n_vocab) != int(trace["lm"]["n_vocab"]):
        raise ValueError(f"placeholder vocabulary {lm.n_vocab} != recorded {trace['lm']['n_vocab']}")
    return lm


def replay(trace: dict, device: str = "cpu", limit: int = 0, repeats: int = 1, lm=None, seed: int = 0,
           layers: int | None = None) -> dict:
    """The trace's methods on placeholder weights of its architecture on ``device`` (the first ``limit`` items, 0 =
    all), every decision from the trace (module docstring). ``lm``: a placeholder built already
    (:func:`placeholder_lm`). JSON-ready result in the package's format: ``methods`` {name: {"seconds", "items",
    "exact", "passes", "overhead_s", ...}}, ``speedups`` {method: baseline seconds / method seconds}.

    Raises:
        ValueError: the placeholder's vocabulary is not the recorded one.
    """
    lm = lm if lm is not None else _placeholder_for(trace, device, seed, layers)
    runs = _collect(trace, {"placeholder": lm}, limit, repeats)
    return _summary(trace, runs, "placeholder", str(lm.device), _dtype(lm), limit)


def real(trace: dict, device: str = "cpu", limit: int = 0, repeats: int = 1, lm=None, backend: str = "torch") -> dict:
    """The trace's methods on the real weights (``backend``: torch as the replay runs, or llama_cpp), timed as
    :func:`replay` times; ``exact``: they produced the recorded outputs."""
    if lm is None:
        lm = real_lm(trace["model"], backend, device)
    runs = _collect(trace, {"real": lm}, limit, repeats)
    return _summary(trace, runs, "real", device, _dtype(lm) or backend, limit)


def validation_trace(family: str, limit: int = 0) -> dict:
    """A trace the CPU can validate with (:mod:`bench.gpu_replay` ``validate``): the 0.5B's real weights in torch
    (float32), recorded now on the first ``limit`` items (default :data:`VALIDATION_LIMIT`) — the committed 1.5B
    traces were recorded with llama.cpp, whose numerics torch does not reproduce token for token, and the 1.5B in
    float32 is too slow for a small CPU."""
    return record(family, "0.5b", "torch", limit or VALIDATION_LIMIT[family], lm=real_lm("0.5b", "torch", "cpu"))


def validate(method: str, limit: int = 0, model: str = "0.5b", repeats: int = 1, threads: int | None = 1) -> dict:
    """The issue's CPU check: record with the real weights in torch (float32), then time the real run (no wrappers)
    and the replay (placeholder weights, same architecture and dtype) on the same inputs in this process, the two
    taking turns item by item. Returns both results, each method's speed-ups and their ratio (replayed / real;
    the replay is believed where it is within ±10 %). ``threads``: torch's CPU threads for the whole check (default
    1: on a CPU shared with other work, fewer threads than cores keep the timing steady; None = torch's default)."""
    limit = limit or VALIDATION_LIMIT[method]
    if threads:
        import torch

        torch.set_num_threads(threads)
    t0 = time.perf_counter()
    lm = real_lm(model, "torch", "cpu")
    trace = record(method, model, "torch", limit, lm=lm)
    t_rec = time.perf_counter() - t0
    placeholder = _placeholder_for(trace, "cpu")
    runs = _collect(trace, {"real": lm, "placeholder": placeholder}, 0, repeats)
    r = _summary(trace, runs, "real", "cpu", _dtype(lm), 0)
    p = _summary(trace, runs, "placeholder", "cpu", _dtype(placeholder), 0)
    keys = [("speedups", m, m) for m in r["speedups"]] + [("speedups_cpu_time", m, m + "_cpu_time")
                                                         for m in r["speedups_cpu_time"]]
    if method == "predgen":
        keys += [("speedups_vs_cascade_prefill", "predgen", "predgen_vs_cascade_prefill"),
                 ("speedups_with_wait", "predgen", "predgen_with_wait")]
    sp = {}
    for group, m, name in keys:
        a, b = r[group].get(m), p[group].get(m)
        q = round(b / a, 3) if a and b else None
        sp[name] = {"real": a, "replayed": b, "ratio": q, "within_10pct": q is not None and abs(q - 1) <= 0.10}
    return {"benchmark": "replay_validation", "family": method, "model": trace["model"], "backend": "torch",
            "device": "cpu", "items": limit, "repeats": repeats, "torch_threads": _torch_threads(),
            "record_s": round(t_rec, 1),
            "seconds": round(time.perf_counter() - t0, 1),
            "trace_bytes": len(gzip.compress(json.dumps(trace, separators=(",", ":")).encode())),
            "speedups": sp, "real": r, "replayed": p}


# ------------------------------------------------------------------------------------------------ CLI
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.replay.llm", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("arch", help="write bench/data/replay/models/<model>.json from the GGUF")
    a.add_argument("--model", choices=tuple(MODELS), required=True)
    r = sub.add_parser("record", help="record a trace with the real weights (CPU)")
    r.add_argument("--method", choices=tuple(METHODS), required=True)
    r.add_argument("--model", choices=tuple(MODELS), default="1.5b")
    r.add_argument("--backend", choices=("llama_cpp", "torch"), default="llama_cpp")
    r.add_argument("--limit", type=int, default=0, help="questions / sentences (0 = all)")
    r.add_argument("--max-tokens", type=int, default=None, help="answer / translation length (default: settings)")
    r.add_argument("--threads", type=int, default=None,
                   help="llama.cpp threads (default: llm.n_threads; 1 on a CPU shared with other work)")
    r.add_argument("--out")
    for name in ("replay", "real"):
        x = sub.add_parser(name, help="time the trace's methods: placeholder weights (replay) or the real ones")
        x.add_argument("--trace", required=True)
        x.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
        x.add_argument("--limit", type=int, default=0, help="first K items (0 = all)")
        x.add_argument("--repeats", type=int, default=1)
        x.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
        if name == "real":
            x.add_argument("--backend", choices=("torch", "llama_cpp"), default="torch")
        x.add_argument("--out")
    t = sub.add_parser("trim", help="keep a trace's first K items")
    t.add_argument("--trace", required=True)
    t.add_argument("--limit", type=int, required=True)
    t.add_argument("--out", required=True)
    v = sub.add_parser("validate", help="CPU: real vs replayed speed-ups in one process")
    v.add_argument("--method", choices=tuple(METHODS), required=True)
    v.add_argument("--model", choices=tuple(MODELS), default="0.5b")
    v.add_argument("--limit", type=int, default=0, help=f"items (default {VALIDATION_LIMIT})")
    v.add_argument("--repeats", type=int, default=1)
    v.add_argument("--threads", type=int, default=1, help="torch CPU threads (0 = torch's default)")
    v.add_argument("--out")
    args = ap.parse_args(argv)
    if args.cmd == "arch":
        print(json.dumps(architecture(args.model, _gguf_path(args.model)), indent=1))
        return 0
    if args.cmd == "record":
        trace = record(args.method, args.model, args.backend, args.limit, args.max_tokens, threads=args.threads)
        out = Path(args.out or TRACES[args.method])
        n = save(trace, out)
        print(json.dumps({"out": str(out), "bytes": n, "items": len(trace["items"]), "cost": cost(trace),
                          "seconds": trace["recorded_with"]["seconds"]}))
        return 0
    if args.cmd == "trim":
        trace = trim(load(args.trace), args.limit)
        n = save(trace, args.out)
        print(json.dumps({"out": args.out, "bytes": n, "items": len(trace["items"]), "cost": cost(trace)}))
        return 0
    if args.cmd in ("replay", "real"):
        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        trace = load(args.trace)
        if args.cmd == "replay":
            res = replay(trace, args.device, args.limit, args.repeats)
        else:
            res = real(trace, args.device, args.limit, args.repeats, backend=args.backend)
    else:
        res = validate(args.method, args.limit, args.model, args.repeats, args.threads or None)
    text = json.dumps(res, indent=1)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
    print(text if args.cmd != "validate" else json.dumps(res["speedups"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
