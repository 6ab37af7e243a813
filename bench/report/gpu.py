"""What ``bench gpu-codec-tts`` measured on each GPU (bench/results/gpu/<device>/tts_*.json): the codec-TTS
samplers per backend for the TTS section, and the README's rows for the CUDA-graphs backend."""

from __future__ import annotations

import json
from typing import Callable

from bench.report.markdown import bold, num, table
from bench.report.results import Results


GPU_TTS_BACKENDS = {"tts_eager.json": "torch eager, host-side draws",
                    "tts_graphs.json": "rounds on the device, CUDA graphs",
                    "tts_graphs_compiled.json": "rounds on the device, CUDA graphs + torch.compile"}


def devices(r: Results) -> list:
    """The folders of bench/results/gpu/ (one per device a GPU suite ran on), sorted; [] where there is none."""
    return sorted(p for p in (r.folder / "gpu").glob("*") if p.is_dir())


def section_gpu_tts(r: Results, label: Callable[[str], str]) -> str:
    """The codec-TTS sampler on each GPU that ``bench gpu-codec-tts`` ran on (bench/results/gpu/<device>/tts_*.json)."""
    parts = []
    for dev in devices(r):
        files = [f for f in GPU_TTS_BACKENDS if (dev / f).exists()]
        if not files:
            continue
        rows, costs, first = [], [], None
        for f in files:
            g = json.loads((dev / f).read_text(encoding="utf-8"))
            first = first or g
            chosen = g["selection"]["chosen"]
            for k, v in g["results"].items():
                rows.append([GPU_TTS_BACKENDS[f] if k == "ar" else "", bold(label(k) + (" (chosen)" if k == chosen
                                                                                         else ""), k == chosen),
                             num(v["speedup_vs_target"]), num(v["tokens_per_s"], 0), num(v["acceptance_rate"]),
                             num(v["accepted_per_round"]), num(v["cer"], 1), num(v["wer"], 1)])
            if g.get("verification_cost"):
                vc = g["verification_cost"]
                costs.append(f"{GPU_TTS_BACKENDS[f]}: a target pass over 1/2/4/8 tokens costs "
                             + " / ".join(num(vc["target_ratio"][k]) for k in ("1", "2", "4", "8"))
                             + f" single-token steps ({num(vc['target_ms']['1'])} ms); a draft step "
                             f"{num(vc['draft_ratio'])} of a target step")
            if g.get("round_cost"):
                rc = g["round_cost"]
                best = rc.get(chosen) or next(iter(rc.values()))
                Ls = [L for L in sorted(best["ms"], key=int) if L != "0"]
                costs.append(f"{GPU_TTS_BACKENDS[f]}: one AR step (pass and draw) takes "
                             f"{num(rc['ar']['ms']['0'], 3)} ms; "
                             f"a whole round of {label(chosen)} with L_d = " + "/".join(Ls) + " drafts costs "
                             + " / ".join(num(best["in_ar_steps"][L]) for L in Ls) + " AR steps"
                             + (" (the AR step and the full-length round are compiled; the shorter rounds, which only "
                                "an utterance's last frames use, are not)" if "compile" in g["backend"] else ""))
        sel = first["selection"]
        parts.append(f"""#### {first["device"]} (torch {first["torch"]})

{first["sentences"]} held-out sentences of the same test split (the first {first["sentences"]} of the CPU table's),
temperature {num(first["temperature"], 1)}, the methods taking turns sentence by sentence with the same seed per
sentence; exact SD and SSD at L_d = 3; θ and L_d of the chosen PCG row picked per backend on {sel["sentences"]}
validation sentences ({sel["rule"]}). CER is Whisper-base's on the rendered audio, scored on the CPU. Every row of
each backend is from one run on one card (`bench/results/gpu/{dev.name}/`; `specvoice bench gpu-codec-tts prepare`
here, `python -m bench.gpu_codec_tts run --device cuda` with `--sampler eager`, `--sampler graphs` or
`--sampler graphs --compile` there, `specvoice bench gpu-codec-tts score` here).

{table(["backend", "sampler", "× target-only", "codes/s", "acceptance", "accepted per round", "CER %", "WER %"], rows)}

""" + "\n".join(f"* {c}." for c in costs))
    if not parts:
        return ""
    return "### On a GPU\n\n" + "\n\n".join(parts) + "\n"


def readme_rows(r: Results) -> list[list[str]]:
    """The README's rows for each device's CUDA-graphs run (``tts_graphs.json``): [what, baseline, specvoice, the
    file under bench/results/]; [] where no device has one."""
    rows = []
    f = "tts_graphs.json"
    for dev in devices(r):
        if not (dev / f).exists():
            continue
        g = json.loads((dev / f).read_text(encoding="utf-8"))
        ch = g["selection"]["chosen"]
        pc, ar = g["results"][ch], g["results"]["ar"]
        rows.append([f"codec TTS on an {g['device']} ({GPU_TTS_BACKENDS[f]}): codes/s, PCG ({ch}, chosen on "
                     "validation) vs target-only",
                     f"target-only: {num(ar['tokens_per_s'], 0)}/s (CER {num(ar['cer'], 1)} %)",
                     f"PCG: {num(pc['speedup_vs_target'], 2)}× (CER {num(pc['cer'], 1)} %)", f"gpu/{dev.name}/{f}"])
    return rows
