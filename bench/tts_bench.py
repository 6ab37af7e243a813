"""Codec-TTS sampling benchmark: target-only AR vs standard speculative sampling vs SSD-style constant bias (0.3) vs
PCG (pcg_tts.txt Algorithm 1) at a θ sweep, one run, the same held-out sentences and the same seeds.

Per method: codec tokens/s, speed-up vs target-only, acceptance rate, mean accepted length per round, target and
draft passes, real-time factor of token generation (and with the voice's generator), and WER/CER of the audio
transcribed by the Whisper target (faster-whisper base, greedy without temperature fallback, each clip on its own;
corpus-level WER/CER over the sentences after Whisper's English normalisation); ``pass_ms``: the wall time of the
model passes as they ran (role → tokens per pass → [passes, mean ms]). The device is the engine's rule
(``--device auto``: the codec LM in torch on CUDA when present, else ONNX Runtime on the CPU), recorded in the JSON.

θ and L_d of the ``pcg`` row are chosen on a validation split (``--val`` sentences of Multi30k test 2017 after the
test ones: for each (θ, L_d) of ``--select-thetas`` × ``--select-lookaheads``, the fastest with CER within +1 point
of target-only's on that split) and reported on the test split with the fixed sweep (``selection`` in the JSON).

``verification_cost``: one KV-cached target pass over k = 1, 2, 4, 8 new tokens and one draft step, isolated
(context 100), on the engine's runtime (``--threads``), also with the other thread count and on the eager torch
module (the reference implementation), plus the GFLOP/s of the target's linear layers per batch size for torch
(MKL) and ONNX Runtime (MLAS) (``matmul``).

Sentences: Multi30k test 2017 (never used to train the codec TTS), default the first 100. The Piper teacher's own
audio is transcribed the same way as the intelligibility ceiling.

Run: ``specvoice bench tts [--n 100] [--methods ar,sd,ssd,pcg0.38,pcg0.42,pcg0.45]``. JSON out.

``--stages`` (``specvoice bench tts --stages --n 100 --out bench/results/tts_stages.json``): where intelligibility
is lost, stage by stage, on the same sentences (each sentence's first phonemised chunk), each scored the same way:
the teacher (the whole Piper voice, its own noise); the codec round trip (the teacher's latent z → codes →
centroids → the voice's generator); the target LM free-running (target-only AR) on the teacher's own prior and
durations; the full system (a fresh prior and durations from the voice, as in use). Needs the ``onnx`` package
once, to cut the voice's sub-graphs (``pip install -e ".[train]"``).
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import time
from pathlib import Path

import numpy as np

from bench.settings import default_of

HERE = Path(__file__).resolve().parent
MULTI30K = HERE / "data" / "text" / "multi30k"  # shipped (bench/data/text/SOURCES.md)


def sentences(n: int, start: int = 0) -> list[str]:
    """Multi30k test 2017 sentences start..start+n−1."""
    with gzip.open(MULTI30K / "test_2017_flickr.en.gz", "rt") as f:
        lines = [x.strip() for x in f if x.strip()]
    return lines[start : start + n]


def _method(m: str) -> tuple[str, float | None, int | None]:
    """"pcg0.42" → ("pcg", 0.42, None); "pcg0.42L4" → ("pcg", 0.42, 4); "ar" → ("ar", None, None)."""
    if not m.startswith("pcg"):
        return m, None, None
    th, _, L = m[3:].partition("L")
    return "pcg", float(th), int(L) if L else None


def run_methods(tts, ids: list, methods: list[str], seed: int, lookahead: int) -> tuple[dict, dict]:
    """Sample every sentence's codes with each method and render them: (results, clips). The methods take turns
    sentence by sentence (so a change in the machine's load hits them alike; other processes share these cores),
    each sentence with the same seed for every method."""
    groups = {}
    for m in methods:
        method, theta, _ = _method(m)
        if theta is not None:
            groups[m] = tts.groups_for(theta)
            print(f"{m}: {groups[m].M} groups, mean size {groups[m].mean_group_size():.2f}", flush=True)
    keys = ("tokens", "rounds", "drafted", "accepted", "target_passes", "draft_passes", "seconds")
    agg = {m: dict.fromkeys(keys, 0) for m in methods}
    lens: dict = {m: [] for m in methods}
    passes: dict = {m: {} for m in methods}  # method → role → tokens per pass → [passes, seconds]
    audio: dict = {m: [] for m in methods}
    t_voc = dict.fromkeys(methods, 0.0)
    for i, x in enumerate(ids):
        for m in methods:
            method, theta, L = _method(m)
            tts.lookahead = L or lookahead
            tts.rng = np.random.default_rng([seed, i])
            toks, st = tts.tokens(x, method=method, theta=theta)
            for k in keys:
                agg[m][k] += getattr(st, k)
            lens[m] += st.accepted_lengths
            for role, by_size in getattr(st, "passes", {}).items():
                for size, (n_p, sec) in by_size.items():
                    acc_p = passes[m].setdefault(role, {}).setdefault(size, [0, 0.0])
                    acc_p[0] += n_p
                    acc_p[1] += sec
            t0 = time.perf_counter()
            audio[m].append(tts.voice.decode(toks))
            t_voc[m] += time.perf_counter() - t0
    tts.lookahead = lookahead
    results = {}
    for m in methods:
        a, (method, _, L) = agg[m], _method(m)
        audio_s = a["tokens"] * 256 / 22050
        results[m] = {**a, "lookahead": (L or lookahead) if method != "ar" else None,
                      "tokens_per_s": round(a["tokens"] / a["seconds"], 1),
                      "acceptance_rate": round(a["accepted"] / a["drafted"], 4) if a["drafted"] else None,
                      "accepted_per_round": round(a["accepted"] / a["rounds"], 3) if a["rounds"] else None,
                      "mean_accepted_length": round(float(np.mean(lens[m])), 3) if lens[m] else None,
                      "rtf_tokens": round(a["seconds"] / audio_s, 4),
                      "rtf_with_vocoder": round((a["seconds"] + t_voc[m]) / audio_s, 4),
                      "vocoder_s": round(t_voc[m], 2),
                      # in-situ cost of the model passes: role → tokens per pass → [passes, mean ms]
                      "pass_ms": {role: {str(k): [v[0], round(1e3 * v[1] / v[0], 3)] for k, v in sorted(d.items())}
                                  for role, d in passes[m].items()}}
        if m in groups:
            results[m]["mean_group_size"] = round(groups[m].mean_group_size(), 2)
        print(m, json.dumps({k: v for k, v in results[m].items() if k != "pass_ms"}), flush=True)
    if "ar" in results:
        for r in results.values():
            r["speedup_vs_target"] = round(results["ar"]["seconds"] / r["seconds"], 3)
    return results, audio


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="specvoice bench tts", description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--methods", default="ar,sd,ssd,pcg0.38,pcg0.42,pcg0.45")
    ap.add_argument("--lookahead", type=int, default=default_of("tts.lookahead"), help="L_d (default: tts.lookahead)")
    ap.add_argument("--val", type=int, default=30, help="validation sentences for choosing PCG's θ and L_d (0: skip)")
    ap.add_argument("--select-thetas", default="0.3,0.38,0.42,0.45,0.5")
    ap.add_argument("--select-lookaheads", default="2,3,4")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-asr", action="store_true", help="skip the Whisper transcription (speed only)")
    ap.add_argument("--out", default="out/bench_tts.json")
    ap.add_argument("--stages", action="store_true", help="per-stage intelligibility instead of the sampler sweep")
    ap.add_argument("--only", default="", help="--stages: a comma-separated subset of the stages")
    ap.add_argument("--temperature", type=float, default=None, help="sampling temperature (default: the model's)")
    ap.add_argument("--threads", type=int, default=1, help="codec LM inference threads (target session)")
    ap.add_argument("--device", default="auto", help="where the codec LM runs: auto, cpu or cuda")
    a = ap.parse_args(argv)
    if a.stages:
        return stages(a)

    from engine.config import load_config
    from engine.devices import resolve_device
    from engine.synthesis.codec_tts import CodecTTS

    cfg = load_config()
    tts = CodecTTS(dataclasses.replace(cfg.tts, lookahead=a.lookahead), cache_dir=cfg.cache_dir(), threads=a.threads)
    device = resolve_device(a.device, "tts")
    tts.voice.to(device)
    if a.temperature is not None:
        tts.temperature = a.temperature
    sents = sentences(a.n)
    ids = [tts.phoneme_ids(s)[0] for s in sents]  # one sentence each
    methods = [m.strip() for m in a.methods.split(",") if m.strip()]
    selection = None
    if a.val and not a.no_asr:
        vs = sentences(a.val, start=a.n)
        vids = [tts.phoneme_ids(s)[0] for s in vs]
        grid = ["ar"] + [f"pcg{t}L{L}" for t in a.select_thetas.split(",") for L in a.select_lookaheads.split(",")]
        vres, vaudio = run_methods(tts, vids, grid, a.seed + 1, a.lookahead)
        vscore = _scorer(cfg, vs)
        for m in grid:
            vres[m]["wer"], vres[m]["cer"], _ = vscore(vaudio[m])
            print("validation", m, "CER", vres[m]["cer"], "×", vres[m]["speedup_vs_target"], flush=True)
        ok = [m for m in grid[1:] if vres[m]["cer"] <= vres["ar"]["cer"] + 1.0]
        best = max(ok or grid[1:], key=lambda m: vres[m]["speedup_vs_target"])
        selection = {"sentences": len(vs), "first_sentence": a.n, "rule": "fastest with CER <= target-only + 1",
                     "chosen": best, "found_within_1_point": bool(ok),
                     "grid": {m: {k: vres[m][k] for k in ("speedup_vs_target", "tokens_per_s", "acceptance_rate",
                                                          "accepted_per_round", "cer", "wer") if k in vres[m]}
                              for m in grid}}
        if best not in methods:
            methods.append(best)
    results, audio = run_methods(tts, ids, methods, a.seed, a.lookahead)
    if not a.no_asr:
        from piper import PiperVoice

        from engine.models import resolve

        score = _scorer(cfg, sents)
        for m in methods:
            results[m]["wer"], results[m]["cer"], _ = score(audio[m])
            print(m, "WER", results[m]["wer"], "CER", results[m]["cer"], flush=True)
        mv = resolve("tts_voice", cfg)
        pv = PiperVoice.load(str(mv.path), config_path=str(mv.config) if mv.config else None)
        teacher = [next(iter(pv.synthesize(s))).audio_float_array for s in sents]  # the first chunk, as above
        t_wer, t_cer, _ = score(teacher)
        results["piper_teacher"] = {"wer": t_wer, "cer": t_cer}
    from engine.synthesis.codec_lm import ASSET_DIR

    cond = tts.voice.conditioning(max(ids, key=len))
    backend = "onnx" if device == "cpu" else "torch"
    cost = verification_cost(tts.lm, cond, threads=tts.threads, backend=backend)
    keep = ("target_ms", "target_ratio", "target_gflops", "draft_ms", "draft_ratio")
    if device == "cpu":
        alt = verification_cost(tts.lm, cond, threads=2 if tts.threads == 1 else 1)
        cost[f"threads_{alt['threads']}"] = {k: alt[k] for k in keep}
        ref = verification_cost(tts.lm, cond, backend="torch", reps=40)
        cost["torch_eager"] = {"torch_threads": __import__("torch").get_num_threads(), **{k: ref[k] for k in keep}}
        cost["matmul"] = matmul_gflops(tts.lm)
    print("verification cost", json.dumps(cost), flush=True)
    report = {"benchmark": "tts", "device": _device_name(device), "load_average_1min_at_end": _load(),
              "sentences": len(sents), "lookahead": a.lookahead,
              "seed": a.seed, "render": "latent codec + the voice's VITS generator", "temperature": tts.temperature,
              "model": json.loads((ASSET_DIR / "config.json").read_text()), "selection": selection,
              "verification_cost": cost, "results": results}
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(json.dumps(results, indent=1))
    print(f"wrote {out}")
    return 0


def _load() -> float | None:
    """The 1-minute load average (other processes share this machine's cores: timings depend on it)."""
    import os

    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


def _device_name(device: str) -> str:
    import os
    import platform

    if device.startswith("cuda"):
        import torch

        return f"cuda: {torch.cuda.get_device_name(0)}"
    return f"cpu: {platform.processor() or platform.machine()}, {os.cpu_count()} cores"


def _linear_layers(lm, draft: bool = False) -> list:
    """The (weight, bias) of every linear layer one token goes through in the target (or the draft)."""
    blocks = lm.blocks[: lm.draft_layers] if draft else lm.blocks
    head = lm.draft_head if draft else lm.head
    heads = list(head) if hasattr(head, "__getitem__") else [head]  # a low-rank draft head is two layers
    mods = [m for b in blocks for m in (b.qkv, b.proj, b.ff[0], b.ff[2])] + heads
    return [(m.weight.detach().float(), m.bias.detach().float() if m.bias is not None else
             m.weight.new_zeros(m.weight.shape[0]).float()) for m in mods]


def flops_per_token(lm, draft: bool = False) -> int:
    """Multiply-adds × 2 of the linear layers for one token (attention over the cache not counted)."""
    return sum(2 * w.numel() for w, _ in _linear_layers(lm, draft))


def verification_cost(lm, cond: np.ndarray, sizes=(1, 2, 4, 8), context: int = 100, reps: int = 100,
                      backend: str = "onnx", threads: int = 1) -> dict:
    """Wall time of one KV-cached target pass over k new tokens (k in ``sizes``) after ``context`` cached positions,
    and of one draft step (1 token), median over ``reps`` (interleaved, so load changes hit every size alike):
    {"target_ms": {k: ms}, "target_ratio": {k: ms / ms(1)}, "target_gflops": {k: linear-layer GFLOP/s},
    "draft_ms", "draft_ratio"} — the cost model of speculative decoding (a round of L_d drafts costs
    L_d·draft + target(L_d + 1)). ``backend``/``threads``:
    :class:`engine.synthesis.codec_lm_session.CodecLMSession`'s."""
    from engine.synthesis.codec_lm_session import CodecLMSession

    rng = np.random.default_rng(0)
    toks = [int(t) for t in rng.integers(0, lm.bos, context + max(sizes))]
    tgt = CodecLMSession(lm, cond, backend=backend, threads=threads)
    dft = CodecLMSession(lm, cond, draft=True, backend=backend, threads=threads)
    tgt.eval(toks[:context])
    dft.eval(toks[:context])
    times: dict = {k: [] for k in sizes}
    times["draft"] = []
    for _ in range(reps):
        for k in sizes:
            t0 = time.perf_counter()
            tgt.eval(toks[context : context + k])
            times[k].append(time.perf_counter() - t0)
            tgt.crop(context)
        t0 = time.perf_counter()
        dft.eval(toks[context : context + 1])
        times["draft"].append(time.perf_counter() - t0)
        dft.crop(context)
    med = {k: float(np.median(v)) * 1e3 for k, v in times.items()}
    fl = flops_per_token(lm)
    return {"backend": backend, "threads": threads, "context": context, "reps": reps,
            "target_ms": {str(k): round(med[k], 3) for k in sizes},
            "target_ratio": {str(k): round(med[k] / med[1], 3) for k in sizes},
            "target_gflops": {str(k): round(k * fl / med[k] / 1e6, 1) for k in sizes},
            "draft_ms": round(med["draft"], 3), "draft_ratio": round(med["draft"] / med[1], 3)}


def matmul_gflops(lm, sizes=(1, 2, 4, 8, 16), reps: int = 30) -> dict:
    """GFLOP/s of the target's linear layers alone (every layer's qkv, proj, ff1, ff2, + head, float32) on a
    batch of M rows, M in ``sizes``, median over ``reps`` passes through all of them: torch's ``F.linear`` (its
    CPU BLAS, MKL; the torch threads as set) vs ONNX Runtime's MatMul (MLAS, weights prepacked; 1 and 2 threads)
    — the curve behind the choice of runtime."""
    import onnxruntime as ort
    import torch

    from engine.synthesis.codec_lm_onnx import OnnxGraph

    layers = _linear_layers(lm)
    fl = flops_per_token(lm)
    g = OnnxGraph()
    outs = []
    for i, (w, b) in enumerate(layers):
        y = g.op("Add", [g.op("MatMul", [f"x{w.shape[1]}", g.const(w.numpy().T)]), g.const(b.numpy())])
        outs.append((y, "float", ["M", int(w.shape[0])]))
    widths = sorted({int(w.shape[1]) for w, _ in layers})
    model = g.serialize([(f"x{k}", "float", ["M", k]) for k in widths], outs)
    sessions = {}
    for th in (1, 2):
        so = ort.SessionOptions()
        so.intra_op_num_threads = th
        so.log_severity_level = 3
        sessions[f"onnxruntime_mlas_{th}t"] = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    out: dict = {"torch_mkl": {}, **{k: {} for k in sessions}}
    for m in sizes:
        xs = {k: rng.standard_normal((m, k)).astype(np.float32) for k in widths}
        txs = {k: torch.from_numpy(v) for k, v in xs.items()}

        def run_torch():
            with torch.inference_mode():
                for w, b in layers:
                    torch.nn.functional.linear(txs[w.shape[1]], w, b)

        runs = {"torch_mkl": run_torch}
        for name, sess in sessions.items():
            runs[name] = lambda sess=sess: sess.run(None, {f"x{k}": v for k, v in xs.items()})
        for name, f in runs.items():  # one backend at a time: interleaving would evict each other's weights
            f()
            ts = []
            for _ in range(reps):
                t0 = time.perf_counter()
                f()
                ts.append(time.perf_counter() - t0)
            out[name][str(m)] = round(m * fl / float(np.median(ts)) / 1e9, 1)
    return {"flops_per_token": fl, "gflops": out}


def _scorer(cfg, sents):
    """score(clips at 22.05 kHz) → (WER %, CER %, hypotheses): Whisper-base, greedy, no temperature fallback, one
    clip per sentence, corpus-level over Whisper's English normalisation (the sampler sweep's judge)."""
    import jiwer
    from faster_whisper import WhisperModel
    from transformers.models.whisper.english_normalizer import EnglishTextNormalizer

    from audio.io import resample
    from engine.models import resolve

    norm = EnglishTextNormalizer({})
    wm = WhisperModel(str(resolve("asr_target", cfg).path), device="cpu", compute_type="int8", cpu_threads=2)
    refs = [norm(s) for s in sents]

    def score(clips, rate: int = 22050):
        hyps = []
        for c in clips:
            segs, _ = wm.transcribe(resample(np.asarray(c, np.float32), rate, 16000), language="en", beam_size=1,
                                    temperature=0.0, vad_filter=False, condition_on_previous_text=False)
            hyps.append(norm(" ".join(s.text for s in segs)))
        return round(100 * jiwer.wer(refs, hyps), 2), round(100 * jiwer.cer(refs, hyps), 2), hyps

    return score


def stages(a) -> int:
    """Per-stage intelligibility (module docstring, ``--stages``)."""
    import torch

    from engine.config import load_config
    from engine.synthesis.coarse_grained_sampling import ar_generate
    from engine.synthesis.codec_lm import ASSET_DIR, frame_conditioning
    from engine.synthesis.codec_tts import CodecTTS

    torch.set_num_threads(1)
    cfg = load_config()
    tts = CodecTTS(cfg.tts, cache_dir=cfg.cache_dir())
    if a.temperature is not None:
        tts.temperature = a.temperature
    sents = sentences(a.n)
    parts = tts.voice.parts
    clips: dict[str, list] = {k: [] for k in ("teacher", "codec_round_trip", "lm_true_durations",
                                              "lm_predicted_durations")}
    if a.only:
        clips = {k: v for k, v in clips.items() if k in a.only.split(",")}
    t_voc, n_frames, len_ratio = 0.0, 0, []
    for i, s in enumerate(sents):
        ids = tts.phoneme_ids(s)[0]
        tts.rng = np.random.default_rng(a.seed + i)
        t = parts.teacher(ids)  # the whole voice, its own noise: z, the prior and durations it used
        n_frames += len(t["z"])
        if "teacher" in clips:
            clips["teacher"].append(t["audio"])
        if "codec_round_trip" in clips:
            t0 = time.perf_counter()
            clips["codec_round_trip"].append(tts.voice.decode(tts.codec.encode(t["z"])))
            t_voc += time.perf_counter() - t0
        if "lm_true_durations" in clips:
            toks, _ = ar_generate(tts.lm, frame_conditioning(t["m_p"], t["logs_p"], t["dur"]), tts.rng,
                                  tts.temperature)
            clips["lm_true_durations"].append(tts.voice.decode(toks))
        if "lm_predicted_durations" in clips:
            cond = tts.voice.conditioning(ids)
            len_ratio.append(len(cond) / max(len(t["z"]), 1))
            toks, _ = ar_generate(tts.lm, cond, tts.rng, tts.temperature)
            clips["lm_predicted_durations"].append(tts.voice.decode(toks))
        print(f"{i + 1}/{len(sents)} sentences", flush=True)
    score = _scorer(cfg, sents)
    results, examples = {}, {}
    for k, cl in clips.items():
        w, c, hyps = score(cl)
        results[k] = {"wer": w, "cer": c}
        examples[k] = hyps[:3]
        print(k, results[k], flush=True)
    report = {"benchmark": "tts_stages", "load_average_1min_at_end": _load(), "sentences": len(sents), "seed": a.seed,
              "temperature": tts.temperature,
              "render": "latent codec + the voice's VITS generator", "sampler": "target-only AR",
              "model": json.loads((ASSET_DIR / "config.json").read_text()),
              "durations": {"note": "the voice's own duration predictor (sampled with its noise_w) in both LM stages",
                            "length_ratio_fresh_over_teacher": round(float(np.mean(len_ratio)), 3)
                            if len_ratio else None},
              "generator_s_per_audio_s": round(t_voc / (n_frames * 256 / 22050), 4) if t_voc else None,
              "results": results, "examples": {"refs": sents[:3], **examples}}
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(json.dumps({k: v for k, v in report.items() if k != "model"}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
