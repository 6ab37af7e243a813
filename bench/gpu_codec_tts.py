"""The codec-TTS sampler benchmark on a GPU machine that has torch but not the voice's packages (Piper, espeak-ng):
``specvoice bench tts`` split in three steps around the GPU run.

    specvoice bench gpu-codec-tts prepare --n 40 --val 10 --out out/gpu_codec_tts   # here: the voice's prior
    python -m bench.gpu_codec_tts run --inputs out/gpu_codec_tts --device cuda     # on the GPU machine: eager torch
    python -m bench.gpu_codec_tts run ... --sampler graphs [--compile]             # or rounds as CUDA graphs
    specvoice bench gpu-codec-tts score --inputs out/gpu_codec_tts                  # here: CER of what it sampled

``prepare`` phonemises the first ``--n`` sentences of Multi30k test 2017 (the test split of ``bench tts``) and the
``--val`` after them (its validation split) and writes, per sentence, the voice's prior — m_p and logs_p per phoneme
(float16) and frames per phoneme, the inputs of :func:`engine.synthesis.codec_lm.frame_conditioning` — to
``inputs.npz`` (a few MB, plus the texts). ``run`` needs only numpy, torch and the repository: it loads the codec LM
(assets/codec_tts) on ``--device`` (the torch module there:
:class:`engine.synthesis.codec_lm_session.CodecLMSession`'s torch backend with host-side draws, or with
``--sampler graphs`` :class:`engine.synthesis.device_sampling.DeviceRoundSampler`, whole rounds on the device
replayed as CUDA graphs, the product's path on a GPU),
samples every sentence with each method (target-only AR, exact SD, SSD bias 0.3 and PCG over θ × L_d; the methods
take turns sentence by sentence, the same seed per sentence for every method), measures the verification cost
curve (1/2/4/8 tokens in target steps, :func:`bench.tts_bench.verification_cost`), and writes ``run.json`` (speed,
acceptance, accepted per round, per-pass wall time) and ``codes.npz`` (the sampled codes). ``score`` renders the
codes with the voice's generator and transcribes them with the Whisper target (as ``bench tts``), chooses θ and L_d
on the validation split by ``bench tts``'s rule (the fastest PCG setting within one CER point of target-only),
and writes the result JSON (default ``bench/results/gpu/<device>/tts_eager.json``, ``tts_graphs.json`` for
``run --sampler graphs``, ``tts_graphs_compiled.json`` with ``--compile``). ``run --max-seconds S`` takes no further
test sentence once S seconds are spent (a device lease is short: the JSON says how many sentences ran), ``--cost-reps``
sets the repetitions of each cost-curve timing.

The device's speeds never mix with the CPU's: the JSON names the device ``run`` saw.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from bench.settings import default_of

ROOT = Path(__file__).resolve().parent.parent
# what ``score`` writes under bench/results/gpu/<device>/, by the run's sampler
OUTPUTS = {"eager": "tts_eager.json", "graphs": "tts_graphs.json", "graphs_compiled": "tts_graphs_compiled.json"}
GRID_THETAS = (0.42, 0.5, 0.6)
GRID_LOOKAHEADS = (2, 3, 4)


def _methods(thetas, lookaheads) -> list[str]:
    return ["ar", "sd", "ssd"] + [f"pcg{t}L{L}" for t in thetas for L in lookaheads]


def prepare(a) -> int:
    from bench.tts_bench import sentences
    from engine.config import load_config
    from engine.synthesis.codec_tts import CodecTTS

    cfg = load_config()
    tts = CodecTTS(cfg.tts, cache_dir=cfg.cache_dir())
    texts = {"test": sentences(a.n), "val": sentences(a.val, start=a.n)}
    arrays = {}
    for split, ss in texts.items():
        for i, s in enumerate(ss):
            m, logs, dur = tts.voice.prior(tts.phoneme_ids(s)[0])
            arrays[f"{split}_{i}_m"] = m.astype(np.float16)
            arrays[f"{split}_{i}_logs"] = logs.astype(np.float16)
            arrays[f"{split}_{i}_dur"] = np.asarray(dur, np.int16)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out / "inputs.npz", **arrays)
    (out / "texts.json").write_text(json.dumps({**texts, "temperature": tts.temperature}, indent=1))
    print(f"wrote {out / 'inputs.npz'} ({(out / 'inputs.npz').stat().st_size / 1e6:.1f} MB): "
          f"{len(texts['test'])} test + {len(texts['val'])} validation sentences")
    return 0


COUNTERS = ("tokens", "seconds", "rounds", "drafted", "accepted", "target_passes", "draft_passes")  # SpecStats


def _summarise(agg: dict) -> dict:
    """Add each method's rates to its summed counters (in place; returns ``agg``): codes/s, × target-only
    (``agg["ar"]``'s seconds over the method's), acceptance rate and accepted drafts per round."""
    for r in agg.values():
        r["tokens_per_s"] = round(r["tokens"] / r["seconds"], 1)
        r["speedup_vs_target"] = round(agg["ar"]["seconds"] / r["seconds"], 3)
        r["acceptance_rate"] = round(r["accepted"] / r["drafted"], 4) if r["drafted"] else None
        r["accepted_per_round"] = round(r["accepted"] / r["rounds"], 3) if r["rounds"] else None
    return agg


def _write(out: dict, codes: dict, inp: Path) -> int:
    """Write ``run.json`` and ``codes.npz`` into ``inp`` and print the test split's rows."""
    (inp / "run.json").write_text(json.dumps(out, indent=1))
    np.savez_compressed(inp / "codes.npz", **codes)
    print(json.dumps(out["splits"]["test"], indent=1))
    print(f"wrote {inp / 'run.json'} and {inp / 'codes.npz'}")
    return 0


def _keep(codes: dict, sums: dict, key: str, toks: np.ndarray, st) -> None:
    """Keep one sentence's sampled codes under ``key`` (int16, for ``codes.npz``) and add its
    :class:`engine.core.verify.SpecStats` counters to its method's ``sums``."""
    codes[key] = toks.astype(np.int16)
    for k in COUNTERS:
        sums[k] += getattr(st, k)


def _time_is_up(a, split: str, done: int, total: int, t_start: float) -> bool:
    """Print the progress of ``run`` after ``done`` of ``total`` sentences of ``split``; True when ``--max-seconds``
    is spent on the test split (no further sentence is taken)."""
    spent = time.perf_counter() - t_start
    print(f"{split} {done}/{total} ({spent:.0f} s)", flush=True)
    if a.max_seconds and split == "test" and spent > a.max_seconds:
        print(f"stopping after {done} test sentences: --max-seconds {a.max_seconds} spent", flush=True)
        return True
    return False


def _cost_reps(a) -> dict:
    """The cost curves' ``reps`` keyword from ``--cost-reps`` (none: each curve's own default)."""
    return {"reps": a.cost_reps} if a.cost_reps else {}


def _conditioning(z, split: str, n: int) -> list[np.ndarray]:
    from engine.synthesis.codec_lm import frame_conditioning

    return [frame_conditioning(z[f"{split}_{i}_m"].astype(np.float32), z[f"{split}_{i}_logs"].astype(np.float32),
                               z[f"{split}_{i}_dur"].astype(np.int64)) for i in range(n)]


def run(a) -> int:
    import torch

    from engine.core import verify as V
    from engine.synthesis.coarse_grained_sampling import AcousticGroups, ar_generate, speculative_generate
    from engine.synthesis.codec_lm import code_embeddings, load_lm

    inp = Path(a.inputs)
    texts = json.loads((inp / "texts.json").read_text())
    z = np.load(inp / "inputs.npz")
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu-codec-tts: --device cuda but torch sees no CUDA device", file=sys.stderr)
        return 2
    lm = load_lm().to(a.device)
    cfg = json.loads((ROOT / "assets" / "codec_tts" / "config.json").read_text())
    T = a.temperature or texts["temperature"]
    emb = code_embeddings(lm, cfg)
    thetas = [float(t) for t in a.thetas.split(",")]
    lookaheads = [int(x) for x in a.lookaheads.split(",")]
    groups = {t: AcousticGroups.cached(emb, t, inp / "asg") for t in thetas}
    methods = _methods(thetas, lookaheads)
    if a.pcg_only:
        keep = {f"pcg{x}" for x in a.pcg_only.split(",")}
        methods = [m for m in methods if not m.startswith("pcg") or m in keep]
    steps = {"sd": lambda x, p, q, rng: V.sd_step(x, p, q, rng),
             "ssd": lambda x, p, q, rng: V.sd_step(x, p, q, rng, bias=0.3)}
    out: dict = {"backend": "torch eager (CodecLMSession)" if a.sampler == "eager" else
                 "CUDA graphs (DeviceRoundSampler)" if a.device.startswith("cuda") else "torch (DeviceRoundSampler)",
                 "device": a.device, "device_name": torch.cuda.get_device_name() if a.device.startswith("cuda")
                 else "cpu", "torch": torch.__version__, "temperature": T, "splits": {}}
    codes: dict[str, np.ndarray] = {}
    conds_of = {split: _conditioning(z, split, len(texts[split])) for split in ("val", "test")}
    if a.sampler == "graphs":
        return _run_device_rounds(a, lm, T, groups, methods, conds_of, out, inp)
    t_start = time.perf_counter()
    out["sentences"] = {}
    for split, conds in conds_of.items():
        if conds:  # warm the device (kernels, allocator) on the first sentence, untimed
            ar_generate(lm, conds[0][:32], np.random.default_rng(0), T)
        agg = {m: dict.fromkeys(COUNTERS, 0) for m in methods}
        for i, c in enumerate(conds):
            for m in methods:
                rng = np.random.default_rng([a.seed, i])
                if m == "ar":
                    toks, st = ar_generate(lm, c, rng, T)
                else:
                    L = int(m.split("L")[1]) if m.startswith("pcg") else a.lookahead
                    if m.startswith("pcg"):
                        G = groups[float(m[3:].split("L")[0])]
                        acc = lambda x, p, q, rng, G=G: V.pcg_step(x, p, q, G, rng)  # noqa: E731
                    else:
                        acc = steps[m]
                    toks, st = speculative_generate(lm, c, rng, acc, L, T)
                _keep(codes, agg[m], f"{split}_{i}_{m}", toks, st)
            out["sentences"][split] = i + 1
            if _time_is_up(a, split, i + 1, len(conds), t_start):
                break
        out["splits"][split] = _summarise(agg)
    from bench.tts_bench import verification_cost

    longest = max(conds_of["test"][: out["sentences"]["test"]], key=len)
    out["verification_cost"] = verification_cost(lm, longest, backend="torch" if a.device != "cpu" else "onnx",
                                                  **_cost_reps(a))
    return _write(out, codes, inp)


def _run_device_rounds(a, lm, T, groups, methods, conds_of, out, inp) -> int:
    """``run --sampler graphs``: every method on :class:`engine.synthesis.device_sampling.DeviceRoundSampler` (passes,
    draws and decisions on the device, one graph replay per AR step or per round), one sampler per method and
    setting, captured before its first sentence (capture time reported, not counted), the methods taking turns
    sentence by sentence with the same seed per sentence."""
    from engine.synthesis.device_sampling import DeviceRoundSampler

    cap = max(len(c) for cs in conds_of.values() for c in cs) + 1
    samplers = {}
    kw = {"capacity": cap, "compile": a.compile}
    for m in methods:
        if m == "ar":
            samplers[m] = DeviceRoundSampler(lm, T, 1, "ar", **kw)
        elif m in ("sd", "ssd"):
            samplers[m] = DeviceRoundSampler(lm, T, a.lookahead, m, bias=0.3, **kw)
        else:
            th, L = m[3:].split("L")
            samplers[m] = DeviceRoundSampler(lm, T, int(L), "pcg", groups=groups[float(th)], **kw)
    if a.compile:
        out["backend"] += " + torch.compile"
    out["pcg_only"] = a.pcg_only or None
    t_start = time.perf_counter()
    out["sentences"], codes = {}, {}
    for split, conds in conds_of.items():
        agg = {m: dict.fromkeys(COUNTERS, 0) for m in methods}
        if split == "val":  # capture every sampler's graphs and warm them on a short prefix, untimed
            for m, s in samplers.items():
                try:
                    s.sample(conds[0][:32], 0)
                except RuntimeError as e:  # a compile or capture the device refuses: uncompiled, then eager
                    print(f"{m}: {'compile' if s.compile else 'graph capture'} failed ({e})", flush=True)
                    out.setdefault("failed", {})[m] = str(e)[:300]
                    if s.compile:
                        s.compile, s._compiled, s.graphs = False, {}, {}
                    else:
                        s.use_graphs, s.graphs = False, {}
                    s.sample(conds[0][:32], 0)
        for i, c in enumerate(conds):
            for m in methods:
                toks, st = samplers[m].sample(c, [a.seed, i])
                _keep(codes, agg[m], f"{split}_{i}_{m}", toks, st)
            out["sentences"][split] = i + 1
            if _time_is_up(a, split, i + 1, len(conds), t_start):
                break
        for m, r in _summarise(agg).items():
            r["capture_s"] = round(samplers[m].capture_s, 3)
        out["splits"][split] = agg
    longest = max(conds_of["test"][: out["sentences"]["test"]], key=len)
    out["round_cost"] = {m: samplers[m].round_cost(longest, **_cost_reps(a))
                         for m in methods if m.startswith("pcg") or m == "sd"}
    out["round_cost"]["ar"] = samplers["ar"].round_cost(longest, **_cost_reps(a))
    print(json.dumps(out["round_cost"], indent=1))
    return _write(out, codes, inp)


def score(a) -> int:
    from bench.tts_bench import _scorer
    from engine.config import load_config
    from engine.synthesis.codec_tts import CodecTTS

    inp = Path(a.inputs)
    res = json.loads((inp / "run.json").read_text())
    texts = json.loads((inp / "texts.json").read_text())
    z = np.load(inp / "codes.npz")
    cfg = load_config()
    tts = CodecTTS(cfg.tts, cache_dir=cfg.cache_dir())
    n_of = {split: res.get("sentences", {}).get(split, len(texts[split])) for split in ("val", "test")}
    for split in ("val", "test"):
        agg = res["splits"][split]
        sc = _scorer(cfg, texts[split][: n_of[split]])
        for m, r in agg.items():
            audio = [tts.voice.decode(z[f"{split}_{i}_{m}"].astype(np.int64)) for i in range(n_of[split])]
            r["wer"], r["cer"], _ = sc(audio)
            print(split, m, "CER", r["cer"], "×", r["speedup_vs_target"], flush=True)
    val = res["splits"]["val"]
    pcg = [m for m in val if m.startswith("pcg")]
    ok = [m for m in pcg if val[m]["cer"] <= val["ar"]["cer"] + 1.0]
    chosen = max(ok or pcg, key=lambda m: val[m]["speedup_vs_target"])
    report = {"benchmark": "tts", "device": res["device_name"], "torch": res["torch"],
              "temperature": res["temperature"], "sentences": n_of["test"], "seed": a.seed,
              "backend": res.get("backend", "torch eager (CodecLMSession)"),
              "selection": {"sentences": n_of["val"], "rule": "fastest with CER <= target-only + 1",
                            "chosen": chosen, "found_within_1_point": bool(ok), "grid": val},
              "verification_cost": res.get("verification_cost"), "round_cost": res.get("round_cost"),
              "results": res["splits"]["test"],
              "scored": time.strftime("%Y-%m-%d")}
    slug = "".join(ch if ch.isalnum() else "-" for ch in res["device_name"].lower()).strip("-")
    backend = res.get("backend", "")
    kind = ("graphs_compiled" if "compile" in backend else "graphs") if "graphs" in backend else "eager"
    out = Path(a.out or ROOT / "bench" / "results" / "gpu" / slug / OUTPUTS[kind])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(f"chosen {chosen}: × {res['splits']['test'][chosen]['speedup_vs_target']} on the test split; wrote {out}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="specvoice bench gpu-codec-tts", description=__doc__.split("\n\n")[0])
    ap.add_argument("step", choices=["prepare", "run", "score"])
    ap.add_argument("--n", type=int, default=40, help="prepare: test sentences")
    ap.add_argument("--val", type=int, default=10, help="prepare: validation sentences (after the test ones)")
    ap.add_argument("--out", default=None, help="prepare: the folder to write; score: the result JSON")
    ap.add_argument("--inputs", default="out/gpu_codec_tts", help="run, score: the folder prepare wrote")
    ap.add_argument("--device", default="cuda", help="run: where the codec LM runs (cuda, cuda:1, cpu)")
    ap.add_argument("--thetas", default=",".join(map(str, GRID_THETAS)))
    ap.add_argument("--lookaheads", default=",".join(map(str, GRID_LOOKAHEADS)))
    ap.add_argument("--lookahead", type=int, default=default_of("tts.lookahead"),
                    help="run: L_d of exact SD and SSD (default: tts.lookahead)")
    ap.add_argument("--temperature", type=float, default=None, help="run: default the model's")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--compile", action="store_true", help="run --sampler graphs: torch.compile each step first")
    ap.add_argument("--pcg-only", default="", help="run: only these PCG settings of the grid (e.g. 0.42L4,0.42L5)")
    ap.add_argument("--sampler", choices=["eager", "graphs"], default="eager",
                    help="run: eager torch sessions with host-side draws, or rounds resident on the device "
                         "(CUDA graphs where the device is CUDA)")
    ap.add_argument("--cost-reps", type=int, default=0,
                    help="run: repetitions of each timing of the cost curves (0: 100 per verification size, 200 per "
                         "round length)")
    ap.add_argument("--max-seconds", type=float, default=0,
                    help="run: take no further test sentence once this many seconds are spent (0: all of them)")
    a = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    if a.step == "prepare":
        a.out = a.out or "out/gpu_codec_tts"
        return prepare(a)
    return run(a) if a.step == "run" else score(a)


if __name__ == "__main__":
    raise SystemExit(main())
