"""Codec-TTS sampling benchmark: target-only AR vs standard speculative sampling vs SSD-style constant bias (0.3) vs
PCG at θ ∈ {0.38, 0.42, 0.45} (pcg_tts.txt Table 1), one run, the same held-out sentences and the same seeds.

Per method: codec tokens/s, speed-up vs target-only, acceptance rate, mean accepted length per round, target and
draft passes, real-time factor of token generation (and with the Griffin-Lim vocoder), and WER/CER of the audio
transcribed by the Whisper target (faster-whisper base, greedy without temperature fallback, each clip on its own;
corpus-level WER/CER over the sentences after Whisper's English normalisation).

Sentences: Multi30k test 2017 (never used to train the codec TTS), default 100. Also the Piper teacher's own audio
is transcribed the same way as the intelligibility ceiling.

Run: ``specvoice bench tts [--n 100] [--methods ar,sd,ssd,pcg0.38,pcg0.42,pcg0.45]``. JSON out.
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
    a = ap.parse_args(argv)

    import jiwer
    from faster_whisper import WhisperModel
    from transformers.models.whisper.english_normalizer import EnglishTextNormalizer

    from audio.io import resample
    from engine.config import load_config
    from engine.models import resolve
    from engine.pcg import CodecTTS

    cfg = load_config()
    tts = CodecTTS(lookahead=a.lookahead, cache_dir=cfg.cache_dir())
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
        clips = []
        t_voc = 0.0
        for x in ids:
            toks, st = tts.tokens(x, method=method, theta=theta)
            for k in agg:
                agg[k] += getattr(st, k)
            lens += st.accepted_lengths
            t0 = time.perf_counter()
            clips.append(tts.codec.decode(toks))
            t_voc += time.perf_counter() - t0
        audio[m] = clips
        audio_s = agg["tokens"] * 0.02
        results[m] = {**agg, "tokens_per_s": round(agg["tokens"] / agg["seconds"], 1),
                      "acceptance_rate": round(agg["accepted"] / agg["drafted"], 4) if agg["drafted"] else None,
                      "mean_accepted_length": round(float(np.mean(lens)), 3) if lens else None,
                      "rtf_tokens": round(agg["seconds"] / audio_s, 4),
                      "rtf_with_vocoder": round((agg["seconds"] + t_voc) / audio_s, 4), "vocoder_s": round(t_voc, 2)}
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

    report = {"benchmark": "tts", "sentences": len(sents), "lookahead": a.lookahead, "seed": a.seed,
              "temperature": tts.temperature, "model": json.loads((ASSET_DIR / "config.json").read_text()),
              "results": results}
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(json.dumps(results, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
