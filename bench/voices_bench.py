"""Voices per language: is an answer in French, German or Spanish intelligible, and fast enough, in each voice?

For each language of ``--languages`` (default fr, de, es), the 50 held-out sentences of ``bench/data/voices/<lang>.txt``
(written for this benchmark, see its README) are synthesised by

* ``piper_en``: the embedded English voice (Piper en_US-joe-medium, ``models.tts_voice``) — what the product did
  before ``tts.voices``: every answer read with English phonemes (the baseline);
* ``espeak``: espeak-ng's own formant voice of the language (``espeak-ng -v <lang>``, one process per sentence);
* ``kokoro:<style>``: Kokoro-82M int8 (:mod:`engine.synthesis.kokoro_tts`) on espeak-ng's phonemes of the language,
  with each speaker style of ``--styles`` (at most 2; the package ships Japanese styles only),

then transcribed by Whisper base (the product's ASR model, faster-whisper on CTranslate2 with ``asr.compute_type``,
the language forced, greedy, no temperature fallback, each clip on its own at 16 kHz). Per language and voice:

* ``cer`` / ``wer``: corpus-level character / word error rate, %, of the transcripts against the sentences, both sides
  through Whisper's basic normaliser (:func:`bench.conversation_scoring.normalise`, ``english=False``: lower case,
  punctuation and symbols dropped, accents kept);
* ``rtf``: synthesis seconds ÷ audio seconds over the sentences (text in → samples out, phonemisation included; each
  voice's first sentence of the run is synthesised once before timing so that no load or first-call allocation is
  counted), on this CPU with ``--threads`` intra-op threads for the ONNX Runtime voices (Piper's own session uses
  onnxruntime's default, one thread per core).

The voices take turns sentence by sentence, so a slow stretch of the machine falls on all of them. Gate
(:data:`engine.synthesis.kokoro_tts.GATE`): Kokoro is adopted for a language only with CER ≤ 10 % and RTF ≤ 0.3 on 2
cores; ``adopted`` in the JSON names, per language, the style that passed (the lower CER of those that did) or null.
The sha256 of every model file used is recorded and was checked before loading.

Run: ``python -m bench.voices_bench [--languages fr,de,es] [--n 50] [--styles jf_alpha,jm_kumo] [--threads 2]
[--out bench/results/voices.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "voices"
LANGUAGES = ("fr", "de", "es")


def sentences(language: str, n: int = 50) -> list[str]:
    """The first ``n`` held-out sentences of ``language`` (``bench/data/voices/<language>.txt``)."""
    lines = [x.strip() for x in (DATA / f"{language}.txt").read_text(encoding="utf-8").splitlines() if x.strip()]
    return lines[:n]


class EspeakVoice:
    """espeak-ng's formant voice of ``language``: float32 (n,) at 22,050 Hz, one ``espeak-ng`` process per text."""

    sample_rate = 22050

    def __init__(self, language: str):
        self.language = language

    def synthesize(self, text: str) -> np.ndarray:
        import io

        import soundfile as sf

        wav = subprocess.run(["espeak-ng", "-v", self.language, "--stdout", text], check=True,
                             capture_output=True).stdout
        audio, rate = sf.read(io.BytesIO(wav), dtype="float32")
        if rate != self.sample_rate:
            from audio.io import resample

            audio = resample(audio, rate, self.sample_rate)
        return audio


def _scorer(model_path: Path, compute_type: str, threads: int):
    """transcribe(audio, rate, language) → text: Whisper base, the language forced, greedy, no fallback."""
    from faster_whisper import WhisperModel

    from audio.io import resample

    wm = WhisperModel(str(model_path), device="cpu", compute_type=compute_type, cpu_threads=threads)

    def transcribe(audio: np.ndarray, rate: int, language: str) -> str:
        if not len(audio):
            return ""
        segs, _ = wm.transcribe(resample(np.asarray(audio, np.float32), rate, 16000), language=language,
                                beam_size=1, temperature=0.0, vad_filter=False, condition_on_previous_text=False)
        return " ".join(s.text.strip() for s in segs).strip()

    return transcribe


def error_rates(refs: list[str], hyps: list[str]) -> tuple[float, float]:
    """Corpus-level (CER %, WER %) over Whisper's basic normaliser (accents kept)."""
    import jiwer

    from bench.conversation_scoring import normalise

    R = [normalise(r, english=False) for r in refs]
    H = [normalise(h, english=False) for h in hyps]
    return round(100 * jiwer.cer(R, H), 2), round(100 * jiwer.wer(R, H), 2)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.voices_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--languages", default=",".join(LANGUAGES))
    ap.add_argument("--n", type=int, default=50, help="sentences per language (at most 50)")
    ap.add_argument("--styles", default="jf_alpha,jm_kumo", help="Kokoro speaker styles, at most 2 (empty: none)")
    ap.add_argument("--threads", type=int, default=2, help="intra-op threads of Kokoro's ONNX Runtime session")
    ap.add_argument("--asr-threads", type=int, default=2, help="Whisper's CPU threads")
    ap.add_argument("--config", default=None, help="TOML configuration (default: the usual one)")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    ap.add_argument("--out", default=str(HERE / "results" / "voices.json"))
    a = ap.parse_args(argv)

    from engine.config import ConfigError, load_config
    from engine.models import ModelError
    from engine.runtime import Runtime
    from engine.synthesis import kokoro_tts

    try:
        cfg = load_config(a.config, sets=a.set)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    langs = [x.strip() for x in a.languages.split(",") if x.strip()]
    styles = [x.strip() for x in a.styles.split(",") if x.strip()]
    if len(styles) > 2:
        print("error: --styles: at most 2", file=sys.stderr)
        return 2
    rt = Runtime(cfg, progress=False)
    try:
        piper = rt.tts(cfg.tts)
        whisper = rt.model("asr_target")
        kokoro_path = kokoro_tts.resolve_model(cfg.cache_dir()) if styles else None
    except ModelError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    transcribe = _scorer(Path(whisper.path), cfg.asr.compute_type, a.asr_threads)
    files = {"piper_en": {"path": str(rt.model("tts_voice").path), "sha256": rt.model("tts_voice").sha256},
             "whisper_base": {"path": str(whisper.path), "sha256": whisper.sha256}}
    if kokoro_path is not None:
        files.update(kokoro_tts.used_files(kokoro_path))

    load_before = [round(x, 2) for x in os.getloadavg()]  # other work on the CPU inflates every RTF
    results: dict = {}
    for lang in langs:
        sents = sentences(lang, a.n)
        voices = {"piper_en": piper, "espeak": EspeakVoice(lang)}
        for st in styles:
            voices[f"kokoro:{st}"] = kokoro_tts.KokoroTTS(kokoro_path, lang, style=st, threads=a.threads)
        for v in voices.values():  # first-call allocation and lazy loads are not the voice's speed
            v.synthesize(sents[0])
        clips: dict[str, list[np.ndarray]] = {k: [] for k in voices}
        synth_s = {k: 0.0 for k in voices}
        for s in sents:
            for k, v in voices.items():
                t0 = time.perf_counter()
                audio = v.synthesize(s)
                synth_s[k] += time.perf_counter() - t0
                clips[k].append(np.asarray(audio, np.float32))
        out = {}
        for k, v in voices.items():
            hyps = [transcribe(c, v.sample_rate, lang) for c in clips[k]]
            cer, wer = error_rates(sents, hyps)
            audio_s = sum(len(c) for c in clips[k]) / v.sample_rate
            out[k] = {"cer": cer, "wer": wer, "rtf": round(synth_s[k] / audio_s, 4) if audio_s else None,
                      "synthesis_s": round(synth_s[k], 3), "audio_s": round(audio_s, 2),
                      "sample_rate": int(v.sample_rate), "hypotheses": hyps}
            print(f"{lang} {k}: CER {cer} %  WER {wer} %  RTF {out[k]['rtf']}", flush=True)
        results[lang] = {"sentences": len(sents), "voices": out}

    gate = kokoro_tts.GATE
    adopted = {}
    for lang, r in results.items():
        ok = {k: v for k, v in r["voices"].items() if k.startswith("kokoro:")
              and v["cer"] <= gate["cer_max"] and v["rtf"] is not None and v["rtf"] <= gate["rtf_max"]}
        adopted[lang] = min(ok, key=lambda k: ok[k]["cer"]).split(":", 1)[1] if ok else None
    rep = {
        "benchmark": "voices",
        "languages": langs,
        "sentences": {lang: f"bench/data/voices/{lang}.txt" for lang in langs},
        "asr": {"model": "whisper base (asr_target)", "compute_type": cfg.asr.compute_type, "threads": a.asr_threads,
                "decoding": "language forced, greedy, no temperature fallback, each clip alone, 16 kHz",
                "normaliser": "Whisper BasicTextNormalizer (bench.conversation_scoring.normalise, english=False)"},
        "threads": {"kokoro_onnxruntime_intra_op": a.threads, "piper": "onnxruntime default (one per core)",
                    "espeak": "one process per sentence"},
        "styles": styles,
        "gate": gate,
        "adopted": adopted,
        "files": files,
        "machine": {"cpu_count": os.cpu_count(), "processor": platform.machine(), "python": platform.python_version(),
                    "load_average_1_5_15_min": {"start": load_before, "end": [round(x, 2) for x in os.getloadavg()]}},
        "results": results,
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(rep, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"adopted: {adopted}; wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
