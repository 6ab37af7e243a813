"""The GPU section of docs/benchmarks.md: every speculative method against its baseline, replayed from acceptance
traces (bench/results/replay_validation.json on the CPU; bench/results/gpu/<device>/replay_*.json and
verify_cost.json where ``bash bench/gpu_run.sh`` ran)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.report.markdown import num, produced_by, table
from bench.report.results import Results

# method → (family, label, the seed's result, the target this product holds it to)
METHODS = {
    "ssd_acc": ("asr", "CTC-SSD, high accuracy (τ_CTC 0.7, τ_SLM 0.2)", "4.4× RTFx (Saon et al. 2026, GPU)", 3.0),
    "ssd_rtfx": ("asr", "CTC-SSD, high RTFx (τ_CTC 3.0, τ_SLM 0.1)", "4.4× RTFx (Saon et al. 2026, GPU)", 3.0),
    "adaptive": ("asr", "SpecASR adaptive drafting", "3.04–3.79× (Wei et al. 2025, GPU)", 2.5),
    "recycling": ("asr", "SpecASR + draft recycling", "3.04–3.79× (Wei et al. 2025, GPU)", 2.5),
    "tree": ("asr", "SpecASR + sparse token tree", "3.04–3.79× (Wei et al. 2025, GPU)", 2.5),
    "predgen": ("predgen", "PredGen (greedy) vs the cascade", "1.6–1.9× (Li & Grover 2025, GPU)", 1.8),
    "ssbd": ("ssbd", "SSBD β = 0.2 vs AR re-translation", "1.3–1.7× (SSBD paper, GPU)", 1.3),
    "pcg": ("pcg", "PCG vs target-only sampling", "1.4× (Yanuka et al. 2025, GPU)", 1.3),
}


def gpu_runs(r: Results) -> list[Path]:
    """Device folders under bench/results/gpu/ that hold a replay run (device.json from bench/gpu_replay.py)."""
    return sorted(p for p in (r.folder / "gpu").glob("*") if (p / "device.json").exists()
                  and json.loads((p / "device.json").read_text()).get("replayed"))


def _load(p: Path) -> dict | None:
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def _speedup(fam_result: dict | None, method: str) -> float | None:
    if not fam_result:
        return None
    return (fam_result.get("speedups") or {}).get(method)


def section_gpu_replay(r: Results) -> str:
    """The section, from replay_validation.json and every GPU run's files; "" before any validation ran."""
    if not (r.folder / "replay_validation.json").exists():
        return ""
    v = r("replay_validation")
    fams = v["families"]
    rows = []
    for fam, d in fams.items():
        rep, real = d["replayed"], d["real"]
        for m, ratio in d["ratio"].items():
            if m == rep.get("baseline"):
                continue
            s_rep = rep["methods"].get(m, {})
            rows.append([fam, f"`{m}`", num(real["speedups"].get(m), 2) + "×", num(rep["speedups"].get(m), 2) + "×",
                         num(ratio, 3), "yes" if abs(ratio - 1) <= 0.10 else "**no**",
                         f"{s_rep.get('exact', 0)}/{s_rep.get('items', 0)}"])
    runs = gpu_runs(r)
    gpu_rows, cost_parts = [], []
    for dev in runs:
        info = _load(dev / "device.json") or {}
        res = {fam: _load(dev / f"replay_{fam}.json") for fam in ("asr", "predgen", "ssbd", "pcg")}
        for m, (fam, label, seed, target) in METHODS.items():
            rr = res.get(fam) or {}
            rep = _speedup(rr.get("replayed"), m)
            real = _speedup(rr.get("real"), m)
            gpu_rows.append([info.get("name", dev.name), label, seed, f"≥ {num(target, 1)}×",
                             (num(rep, 2) + "×") if rep else "not run", (num(real, 2) + "×") if real else "—",
                             "yes" if rep and rep >= target else "no" if rep else "—"])
        vc = _load(dev / "verify_cost.json")
        if vc:
            ks = vc["ks"]
            cost_rows = [[name, t["dtype"], t["context_tokens"]] + [num(c["steps"], 2) for c in t["curve"]]
                         for name, t in vc["targets"].items()]
            cost_parts.append(f"Verification cost on the {info.get('name', dev.name)} (one pass over k tokens in "
                              f"one-token steps, placeholder weights):\n\n"
                              + table(["target", "dtype", "context"] + [f"k={k}" for k in ks], cost_rows))
    if runs:
        gpu_text = table(["device", "method", "seed's result", "target", "replayed", "real weights", "meets target"],
                         gpu_rows) + "\n\n" + "\n\n".join(cost_parts)
    else:
        gpu_text = ("No GPU has run the device script yet: `bash bench/gpu_run.sh` on a machine with a CUDA GPU writes "
                    "`bench/results/gpu/<device>/` (device.json, replay_asr/predgen/ssbd/pcg.json, verify_cost.json), "
                    "and this section then shows each method's replayed speed-up there beside the seed's result and "
                    "the target, the verification cost curves (k = 1 … 48) of each target, and PCG with the real "
                    "codec-LM weights beside its replay.")
    val_table = table(["family", "method", "real weights", "replayed", "replayed / real", "within ±10 %",
                       "exact replays"], rows)
    return f"""## On a GPU: every method replayed from acceptance traces

A lent GPU machine has torch but none of the model packages, and a call carries at most 64 MiB, so the methods are
measured there by replay (bench/replay/): each method and its baseline runs once on the CPU with the real models,
and every forward pass's logits rows are recorded in a compact form that keeps every decision the acceptance rules
take (argmax, second best, every probability ≥ 0.01, the log-sum-exp, Whisper's suppressed tokens apart). On the
device the product's own decode loops run over models of the same architectures with placeholder weights; each
pass runs for real and its rows are rebuilt from the trace, so the loops take the recorded decisions and issue the
recorded passes. Every replayed figure is labelled replayed; a replay is exact when every call matched the
recorded one and it produced the recorded tokens.

### The replay against the real weights, on this CPU

Before a replayed GPU number is believed, the same replay runs on this CPU beside the real weights, on the same
inputs and the same torch backend, in one run: the replayed speed-up must be within ±10 % of the real one.
{fams.get('predgen', {}).get('real', {}).get('model_note', '')}

{produced_by("replay_validation.json")}

{val_table}

### On a GPU

{gpu_text}"""
