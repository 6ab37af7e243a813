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
    "pcg": ("pcg", "PCG vs target-only sampling (torch eager loop)", "1.4× (Yanuka et al. 2025, GPU)", 1.3),
}


# what each family's speed-up is a ratio of
METRIC = {"asr": "decoding stage per utterance", "pcg": "codec tokens sampled per sentence",
          "predgen": "end of input → first sentence ready (compute)", "ssbd": "re-translation compute per stream"}


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


def _mean_item_s(fam_result: dict | None, method: str) -> float | None:
    m = ((fam_result or {}).get("methods") or {}).get(method) or {}
    return m["seconds"] / m["items"] if m.get("items") else None


def compose_voice_to_voice(r: Results, dev: Path) -> list[list[str]] | None:
    """End of speech → first answer audio on the device of ``dev``, composed from its replayed stage times, beside
    the CPU's measured figure (bench/results/voice.json, PredGen): the VAD's silence (the setting, the same on any
    device) + the final ASR decode (replayed AR greedy, mean per utterance) + PredGen's end of input → first sentence
    (replayed, mean per question) + the first piece's synthesis (Piper runs on the CPU on every machine: the CPU's
    measured first token → first audio). None when a stage's file is missing."""
    from engine.config import Config

    asr = (_load(dev / "replay_asr.json") or {}).get("replayed")
    pg = (_load(dev / "replay_predgen.json") or {}).get("replayed")
    if not asr or not pg or not (r.folder / "voice.json").exists():
        return None
    v = r("voice")
    turns = [t for t in v["turns"].get("predgen", []) if t.get("eos_to_first_audio_s") and t.get("eos_to_first_token_s")]
    if not turns:
        return None
    import statistics

    tts = statistics.median(t["eos_to_first_audio_s"] - t["eos_to_first_token_s"] for t in turns)
    cpu = v["methods"]["predgen"]
    silence = Config().vad.min_silence_s
    dec, first = _mean_item_s(asr, "ar"), _mean_item_s(pg, "predgen")
    if dec is None or first is None:
        return None
    total = silence + dec + first + tts
    return [["VAD silence (vad.min_silence_s)", num(silence, 2), "the same"],
            ["final ASR decode (AR greedy, torch Whisper base)", num(dec, 3) + " replayed", "in the next row"],
            ["PredGen: end of input → first sentence", num(first, 3) + " replayed", "in the next row"],
            ["first piece synthesised (Piper, on the CPU)", num(tts, 2) + " (CPU, measured)", "—"],
            ["**end of speech → first answer audio**", f"**{num(total, 2)}** (composed)",
             f"{num(cpu.get('eos_to_first_audio_s_p50'), 2)} p50, {num(cpu.get('eos_to_first_audio_s_p90'), 2)} p90 "
             "(measured, bench/results/voice.json)"]]


def _cost_table(vc: dict) -> str:
    ks = vc["ks"]
    rows = [[name, t["dtype"], t["context_tokens"]] + [num(c["steps"], 2) for c in t["curve"]]
            for name, t in vc["targets"].items()]
    return table(["target", "dtype", "context (tokens)"] + [f"k={k}" for k in ks], rows)


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
            ex, n = s_rep.get("exact", 0), s_rep.get("items", 0)
            exact = (f"{n}/{n}" if ex else "no") if isinstance(ex, bool) else f"{ex}/{n}"
            rows.append([fam, METRIC.get(fam, ""), f"`{m}` vs `{rep.get('baseline')}`",
                         num(real["speedups"].get(m), 2) + "×", num(rep["speedups"].get(m), 2) + "×",
                         num(ratio, 3), "yes" if abs(ratio - 1) <= 0.10 else "**no**", exact])
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
            cost_parts.append(f"Verification cost on the {info.get('name', dev.name)} (one pass over k tokens in "
                              f"one-token steps, placeholder weights):\n\n" + _cost_table(vc))
        v2v = compose_voice_to_voice(r, dev)
        if v2v:
            cost_parts.append(f"End of speech → first answer audio on the {info.get('name', dev.name)}, composed from "
                              "the replayed stage times (seconds), beside this CPU's measured figure:\n\n"
                              + table(["stage", info.get("name", dev.name), "this CPU"], v2v))
    if runs:
        gpu_text = table(["device", "method", "seed's result", "target", "replayed", "real weights", "meets target"],
                         gpu_rows) + "\n\n" + "\n\n".join(cost_parts)
    else:
        gpu_text = ("No GPU has run the device script yet: `bash bench/gpu_run.sh` on a machine with a CUDA GPU writes "
                    "`bench/results/gpu/<device>/` (device.json, replay_asr/predgen/ssbd/pcg.json, verify_cost.json), "
                    "and this section then shows each method's replayed speed-up there beside the seed's result and "
                    "the target, the verification cost curves (k = 1 … 48) of each target, and PCG with the real "
                    "codec-LM weights beside its replay.")
    val_table = table(["family", "timed", "method", "real weights", "replayed", "replayed / real", "within ±10 %",
                       "exact replays"], rows)
    cpu_cost = ""
    if v.get("verify_cost"):
        cpu_cost = ("Verification cost on this CPU (one pass over k tokens after a cached context, in one-token steps; "
                    "placeholder weights, float32):\n\n" + _cost_table(v["verify_cost"]))
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
inputs and the same torch backend (one thread), in one run, real and replayed taking turns item by item: the
replayed speed-up must be within ±10 % of the real one. ASR replays the committed trace (16 held-out utterances;
the SSD rows include the CTC head, the SpecASR rows the draft's encoder). PredGen and SSBD record the 0.5B's real
weights in torch on their first items and replay that (the committed 1.5B traces the GPU replays were recorded with
llama.cpp, whose numerics torch does not reproduce token for token, and the 1.5B in float32 is too slow here); PCG
replays its committed trace (the product's accept runs for its cost, the trace forces its branch).

{produced_by("replay_validation.json")}

{val_table}

{cpu_cost}

### On a GPU

{gpu_text}"""
