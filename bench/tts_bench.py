"""Codec-TTS sampling benchmark: target-only AR vs standard speculative sampling vs SSD-style constant bias (0.3) vs
PCG at θ ∈ {0.38, 0.42, 0.45} (pcg_tts.txt Table 1), one run, the same held-out sentences and the same seeds.

Per method: codec tokens/s, speed-up vs target-only, acceptance rate, mean accepted length per round, target and
draft passes, real-time factor of token generation (and with the Griffin-Lim vocoder), and WER/CER of the audio
transcribed by the Whisper target (faster-whisper base, greedy without temperature fallback, each clip on its own;
corpus-level WER/CER over the sentences after Whisper's English normalisation); ``pass_ms``: the wall time of the
model passes as they ran (role → tokens per pass → [passes, mean ms]).

``verification_cost``: one KV-cached target pass over k = 1, 2, 4, 8 new tokens and one draft step, isolated
(context 100), on the engine's runtime (ONNX Runtime, ``--threads``), also with the other thread count and on the
eager torch module (the reference implementation), plus the GFLOP/s of the target's linear layers per batch size
for torch (MKL) and ONNX Runtime (MLAS) (``matmul``).

Sentences: Multi30k test 2017 (never used to train the codec TTS), default 100. Also the Piper teacher's own audio
is transcribed the same way as the intelligibility ceiling.

Run: ``specvoice bench tts [--n 100] [--methods ar,sd,ssd,pcg0.38,pcg0.42,pcg0.45]``. JSON out.

``--stages`` (``specvoice bench tts --stages --n 30 --out bench/results/tts_stages.json``): where the
intelligibility is lost, stage by stage, on the same sentences (Piper's first sentence chunk of each, with its
phoneme alignments — needs the ``onnx`` package, ``pip install -e ".[train]"``), each scored the same way:
teacher audio; Griffin-Lim of the teacher's own magnitude spectrum (the vocoder alone); codec round trip (encode →
decode); the teacher's codes time-warped phoneme by phoneme to the duration model's lengths; the target LM
free-running (target-only AR) on the true (Piper-alignment) durations; the full system (predicted durations).
Also the duration model's error against Piper's alignments. With a learned decoder (decoder.safetensors), the round
trip's codes and the full system's codes are also rendered by the centroid spectra (``*_centroid_render``), so the
decoder's effect is measured on the same codes. ``--only`` picks stages (a JSON of a subset says which).
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
MULTI30K = HERE / "data" / "text" / "multi30k"  # shipped (bench/data/text/SOURCES.md)


def sentences(n: int) -> list[str]:
    with gzip.open(MULTI30K / "test_2017_flickr.en.gz", "rt") as f:
        lines = [x.strip() for x in f if x.strip()]
    return lines[:n]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="specvoice bench tts", description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--methods", default="ar,sd,ssd,pcg0.38,pcg0.42,pcg0.45")
    ap.add_argument("--lookahead", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-asr", action="store_true", help="skip the Whisper transcription (speed only)")
    ap.add_argument("--out", default="out/bench_tts.json")
    ap.add_argument("--stages", action="store_true", help="per-stage intelligibility instead of the sampler sweep")
    ap.add_argument("--only", default="", help="--stages: a comma-separated subset of the stages")
    ap.add_argument("--temperature", type=float, default=None, help="sampling temperature (default: the engine's)")
    ap.add_argument("--threads", type=int, default=1, help="codec LM inference threads (target session)")
    ap.add_argument("--centroid-render", action="store_true",
                    help="render codes with their centroid spectra, not the learned decoder (decoder.safetensors)")
    a = ap.parse_args(argv)
    if a.stages:
        return stages(a)

    import jiwer
    from faster_whisper import WhisperModel
    from transformers.models.whisper.english_normalizer import EnglishTextNormalizer

    from audio.io import resample
    from engine.config import load_config
    from engine.models import resolve
    from engine.speech.coarse_grained_sampling import CodecTTS

    cfg = load_config()
    tts = CodecTTS(lookahead=a.lookahead, cache_dir=cfg.cache_dir(), threads=a.threads)
    if a.temperature is not None:
        tts.temperature = a.temperature
    if a.centroid_render:
        tts.codec.decoder = None
    sents = sentences(a.n)
    ids = [tts.phoneme_ids(s)[0] for s in sents]  # one sentence each
    methods = [m.strip() for m in a.methods.split(",") if m.strip()]
    results, audio = {}, {}
    for m in methods:
        method, theta = ("pcg", float(m[3:])) if m.startswith("pcg") else (m, None)
        if theta is not None:
            g = tts.groups_for(theta)
            print(f"{m}: {g.M} groups, mean size {g.mean_group_size():.1f}", flush=True)
        tts.rng = np.random.default_rng(a.seed)
        agg = {"tokens": 0, "rounds": 0, "drafted": 0, "accepted": 0, "target_passes": 0, "draft_passes": 0,
               "seconds": 0.0}
        lens: list[int] = []
        passes: dict = {}  # role → tokens per pass → [passes, seconds]
        clips = []
        t_voc = 0.0
        for x in ids:
            toks, st = tts.tokens(x, method=method, theta=theta)
            for k in agg:
                agg[k] += getattr(st, k)
            lens += st.accepted_lengths
            for role, by_size in getattr(st, "passes", {}).items():
                for size, (n_p, sec) in by_size.items():
                    acc_p = passes.setdefault(role, {}).setdefault(size, [0, 0.0])
                    acc_p[0] += n_p
                    acc_p[1] += sec
            t0 = time.perf_counter()
            clips.append(tts.codec.decode(toks))
            t_voc += time.perf_counter() - t0
        audio[m] = clips
        audio_s = agg["tokens"] * 0.02
        results[m] = {**agg, "tokens_per_s": round(agg["tokens"] / agg["seconds"], 1),
                      "acceptance_rate": round(agg["accepted"] / agg["drafted"], 4) if agg["drafted"] else None,
                      "mean_accepted_length": round(float(np.mean(lens)), 3) if lens else None,
                      "rtf_tokens": round(agg["seconds"] / audio_s, 4),
                      "rtf_with_vocoder": round((agg["seconds"] + t_voc) / audio_s, 4), "vocoder_s": round(t_voc, 2),
                      # in-situ cost of the model passes: role → tokens per pass → [passes, mean ms]
                      "pass_ms": {role: {str(k): [v[0], round(1e3 * v[1] / v[0], 3)] for k, v in sorted(d.items())}
                                  for role, d in passes.items()}}
        print(m, json.dumps(results[m]), flush=True)
    if "ar" in results:
        for m, r in results.items():
            r["speedup_vs_target"] = round(results["ar"]["seconds"] / r["seconds"], 3)
    if not a.no_asr:
        norm = EnglishTextNormalizer({})
        wm = WhisperModel(str(resolve("asr_target", cfg).path), device="cpu", compute_type="int8")
        refs = [norm(s) for s in sents]

        def score(clips):
            hyps = []
            for c in clips:  # one clip per sentence, corpus-level WER/CER over all of them
                segs, _ = wm.transcribe(c, language="en", beam_size=1, temperature=0.0, vad_filter=False,
                                        condition_on_previous_text=False)
                hyps.append(norm(" ".join(s.text for s in segs)))
            return round(100 * jiwer.wer(refs, hyps), 2), round(100 * jiwer.cer(refs, hyps), 2)

        for m in methods:
            results[m]["wer"], results[m]["cer"] = score(audio[m])
            print(m, "WER", results[m]["wer"], "CER", results[m]["cer"], flush=True)
        from piper import PiperVoice

        mv = resolve("tts_voice", cfg)
        pv = PiperVoice.load(str(mv.path), config_path=str(mv.config) if mv.config else None)
        teacher = [resample(np.concatenate([c.audio_float_array for c in pv.synthesize(s)]),
                            int(pv.config.sample_rate), 16000) for s in sents]
        t_wer, t_cer = score(teacher)
        results["piper_teacher"] = {"wer": t_wer, "cer": t_cer}
    from tts.codec_lm import ASSET_DIR

    cond = tts.voice.conditioning(max(ids, key=len))
    cost = verification_cost(tts.lm, cond, threads=tts.threads)
    keep = ("target_ms", "target_ratio", "target_gflops", "draft_ms", "draft_ratio")
    alt = verification_cost(tts.lm, cond, threads=2 if tts.threads == 1 else 1)
    cost[f"threads_{alt['threads']}"] = {k: alt[k] for k in keep}
    ref = verification_cost(tts.lm, cond, backend="torch", reps=40)
    cost["torch_eager"] = {"torch_threads": __import__("torch").get_num_threads(), **{k: ref[k] for k in keep}}
    cost["matmul"] = matmul_gflops(tts.lm)
    print("verification cost", json.dumps(cost), flush=True)
    report = {"benchmark": "tts", "sentences": len(sents), "lookahead": a.lookahead, "seed": a.seed,
              "render": "learned decoder + Griffin-Lim" if tts.codec.decoder is not None
              else "centroid spectra + Griffin-Lim",
              "temperature": tts.temperature, "model": json.loads((ASSET_DIR / "config.json").read_text()),
              "verification_cost": cost, "results": results}
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(json.dumps(results, indent=1))
    print(f"wrote {out}")
    return 0


def _linear_layers(lm, draft: bool = False) -> list:
    """The (weight, bias) of every linear layer one token goes through in the target (or the draft)."""
    blocks = lm.blocks[: lm.draft_layers] if draft else lm.blocks
    mods = [m for b in blocks for m in (b.qkv, b.proj, b.ff[0], b.ff[2])] + [lm.draft_head if draft else lm.head]
    return [(m.weight.detach().float(), m.bias.detach().float()) for m in mods]


def flops_per_token(lm, draft: bool = False) -> int:
    """Multiply-adds × 2 of the linear layers for one token (attention over the cache not counted)."""
    return sum(2 * w.numel() for w, _ in _linear_layers(lm, draft))


def verification_cost(lm, cond: np.ndarray, sizes=(1, 2, 4, 8), context: int = 100, reps: int = 100,
                      backend: str = "onnx", threads: int = 1) -> dict:
    """Wall time of one KV-cached target pass over k new tokens (k in ``sizes``) after ``context`` cached positions,
    and of one draft step (1 token), median over ``reps`` (interleaved, so load changes hit every size alike):
    {"target_ms": {k: ms}, "target_ratio": {k: ms / ms(1)}, "target_gflops": {k: linear-layer GFLOP/s},
    "draft_ms", "draft_ratio"} — the cost model of speculative decoding (a round of L_d drafts costs
    L_d·draft + target(L_d + 1)). ``backend``/``threads``: :class:`tts.codec_lm.CodecLMSession`'s."""
    from tts.codec_lm import CodecLMSession

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
    """GFLOP/s of the target's linear layers alone (6 × qkv, proj, ff1, ff2, + head: 23 MB of float32 weights) on a
    batch of M rows, M in ``sizes``, median over ``reps`` passes through all of them: torch's ``F.linear`` (its
    CPU BLAS, MKL; the torch threads as set) vs ONNX Runtime's MatMul (MLAS, weights prepacked; 1 and 2 threads)
    — the curve behind the choice of runtime."""
    import onnxruntime as ort
    import torch

    from tts.codec_lm import OnnxGraph

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
    """score(clips) → (WER %, CER %): Whisper-base, greedy, no temperature fallback, one clip per sentence,
    corpus-level over Whisper's English normalisation (the sampler sweep's judge)."""
    import jiwer
    from faster_whisper import WhisperModel
    from transformers.models.whisper.english_normalizer import EnglishTextNormalizer

    from engine.models import resolve

    norm = EnglishTextNormalizer({})
    wm = WhisperModel(str(resolve("asr_target", cfg).path), device="cpu", compute_type="int8", cpu_threads=1)
    refs = [norm(s) for s in sents]

    def score(clips):
        hyps = []
        for c in clips:
            segs, _ = wm.transcribe(c, language="en", beam_size=1, temperature=0.0, vad_filter=False,
                                    condition_on_previous_text=False)
            hyps.append(norm(" ".join(s.text for s in segs)))
        return round(100 * jiwer.wer(refs, hyps), 2), round(100 * jiwer.cer(refs, hyps), 2), hyps

    return score


def warp_codes(codes: np.ndarray, true_dur: np.ndarray, new_dur: np.ndarray) -> np.ndarray:
    """The codes of each phoneme's frames (``true_dur`` frames per id) resampled (nearest frame) to ``new_dur``
    frames; a phoneme with no true frames borrows the frame at its boundary."""
    out = []
    ends = np.cumsum(true_dur)
    for j, (n, m) in enumerate(zip(true_dur, new_dur)):
        if m <= 0:
            continue
        s0 = int(ends[j] - n)
        if n > 0:
            idx = s0 + np.minimum((np.arange(m) * n / m).astype(np.int64), n - 1)
        else:
            idx = np.full(m, min(s0, len(codes) - 1))
        out.append(codes[idx])
    return np.concatenate(out) if out else np.zeros(0, np.int64)


def stages(a) -> int:
    """Per-stage intelligibility (module docstring, ``--stages``)."""
    import torch
    from piper import PiperVoice

    from audio.io import resample
    from engine.config import load_config
    from engine.models import resolve
    from engine.speech.coarse_grained_sampling import CodecTTS, ar_generate
    from tts.codec import SYN_HOP, griffin_lim, log_magnitude
    from tts.codec_lm import ASSET_DIR, frame_conditioning, frames_per_id

    torch.set_num_threads(1)
    cfg = load_config()
    mv = resolve("tts_voice", cfg)
    pv = PiperVoice.load(str(mv.path), config_path=str(mv.config) if mv.config else None, include_alignments=True)
    rate = int(pv.config.sample_rate)
    tts = CodecTTS(cache_dir=cfg.cache_dir(), phonemizer=pv)
    if a.temperature is not None:
        tts.temperature = a.temperature
    if a.centroid_render:
        tts.codec.decoder = None
    sents = sentences(a.n)
    rows = []
    for s in sents:  # the first sentence chunk with its alignment (the sweep also speaks the first chunk only)
        c = next(iter(pv.synthesize(s, include_alignments=True)))
        rows.append({"ids": np.asarray(c.phoneme_ids, np.int64), "samples": np.asarray(c.phoneme_id_samples),
                     "audio": resample(c.audio_float_array, rate, 16000).astype(np.float32)})
    clips: dict[str, list] = {k: [] for k in ("teacher", "vocoder_only", "codec_round_trip",
                                              "teacher_codes_predicted_durations", "lm_true_durations",
                                              "lm_predicted_durations")}
    centroid = None
    if tts.codec.decoder is not None:  # the same codes also rendered by the centroid spectra (decoder's effect)
        from tts.codec import SpectralCodec

        centroid = SpectralCodec.load(ASSET_DIR / "codec.npz", decoder=False)
        clips.update({"codec_round_trip_centroid_render": [], "lm_predicted_durations_centroid_render": []})
    if a.only:
        clips = {k: v for k, v in clips.items() if k in a.only.split(",")}
    dur_err, dur_corr, len_ratio = [], [], []
    t_voc = 0.0
    for i, r in enumerate(rows):
        tts.rng = np.random.default_rng(a.seed + i)
        if "teacher" in clips:
            clips["teacher"].append(r["audio"])
        if "vocoder_only" in clips:
            clips["vocoder_only"].append(griffin_lim(np.exp(log_magnitude(r["audio"], SYN_HOP)).T))
        codes = tts.codec.encode(r["audio"])
        t0 = time.perf_counter()
        if "codec_round_trip" in clips:
            clips["codec_round_trip"].append(tts.codec.decode(codes))
        t_voc += time.perf_counter() - t0
        if "codec_round_trip_centroid_render" in clips:
            clips["codec_round_trip_centroid_render"].append(centroid.decode(codes))
        true = frames_per_id(r["samples"], rate, len(codes))
        pred = tts.durations(r["ids"])
        dur_err.append(np.abs(pred - true).mean())
        dur_corr.append(np.corrcoef(pred, true)[0, 1] if pred.std() > 0 and true.std() > 0 else 0.0)
        len_ratio.append(pred.sum() / max(true.sum(), 1))
        if "teacher_codes_predicted_durations" in clips:
            clips["teacher_codes_predicted_durations"].append(tts.codec.decode(warp_codes(codes, true, pred)))
        if "lm_true_durations" in clips:
            toks, _ = ar_generate(tts.lm, frame_conditioning(r["ids"], true)[: tts.lm.pos.num_embeddings], tts.rng,
                                  tts.temperature)
            clips["lm_true_durations"].append(tts.codec.decode(toks))
        if "lm_predicted_durations" in clips:
            toks, _ = ar_generate(tts.lm, tts.voice.conditioning(r["ids"]), tts.rng, tts.temperature)
            clips["lm_predicted_durations"].append(tts.codec.decode(toks))
            if "lm_predicted_durations_centroid_render" in clips:
                clips["lm_predicted_durations_centroid_render"].append(centroid.decode(toks))
        print(f"{i + 1}/{len(rows)} sentences", flush=True)
    score = _scorer(cfg, sents)
    results, examples = {}, {}
    for k, cl in clips.items():
        w, c, hyps = score(cl)
        results[k] = {"wer": w, "cer": c}
        examples[k] = hyps[:3]
        print(k, results[k], flush=True)
    report = {"benchmark": "tts_stages", "sentences": len(sents), "seed": a.seed, "temperature": tts.temperature,
              "render": "learned decoder + Griffin-Lim" if tts.codec.decoder is not None
              else "centroid spectra + Griffin-Lim",
              "sampler": "target-only AR", "model": json.loads((ASSET_DIR / "config.json").read_text()),
              "durations": {"mean_abs_error_frames": round(float(np.mean(dur_err)), 3),
                            "per_sentence_correlation": round(float(np.mean(dur_corr)), 3),
                            "length_ratio_pred_over_true": round(float(np.mean(len_ratio)), 3)},
              "vocoder_s_per_audio_s": round(t_voc / (sum(len(r["audio"]) for r in rows) / 16000), 4),
              "results": results, "examples": {"refs": sents[:3], **examples}}
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(json.dumps({k: v for k, v in report.items() if k != "model"}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
