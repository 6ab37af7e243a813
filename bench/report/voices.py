"""The voices-per-language section (``bench voices``): Whisper-base CER and synthesis RTF of French, German and Spanish
answers read by the English Piper voice (what the product did), espeak-ng and Kokoro-82M, and the gate's verdict.

The section returns Markdown (no trailing newline) and reads only what it prints."""

from __future__ import annotations

from bench.report.markdown import bold, num, produced_by, table
from bench.report.results import Results

NAMES = {"piper_en": "Piper en_US-joe (English voice; the baseline)", "espeak": "espeak-ng (formant voice)"}


def _label(key: str) -> str:
    if key.startswith("kokoro:"):
        return f"Kokoro-82M int8, style {key.split(':', 1)[1]}"
    return NAMES.get(key, key)


def section_voices(r: Results) -> str:
    v = r("voices")
    langs = v["languages"]
    res = v["results"]
    gate, adopted = v["gate"], v["adopted"]
    keys = list(dict.fromkeys(k for lang in langs for k in res[lang]["voices"]))
    rows = []
    for k in keys:
        row = [_label(k)]
        for lang in langs:
            x = res[lang]["voices"].get(k)
            passed = k.startswith("kokoro:") and adopted.get(lang) == k.split(":", 1)[1]
            row.append(bold(f"{num(x['cer'], 1)} % / {num(x['rtf'], 3)}", passed) if x else "—")
        rows.append(row)
    n = sorted({res[lang]["sentences"] for lang in langs})
    verdict = []
    for lang in langs:
        st = adopted.get(lang)
        if st:
            x = res[lang]["voices"][f"kokoro:{st}"]
            verdict.append(f"{lang}: adopted (style {st}, CER {num(x['cer'], 1)} %, RTF {num(x['rtf'], 3)}; "
                           f"`tts.voices={lang}=kokoro`)")
        else:
            ks = {k: x for k, x in res[lang]["voices"].items() if k.startswith("kokoro:")}
            best = min(ks, key=lambda k: ks[k]["cer"]) if ks else None
            verdict.append(f"{lang}: not adopted" + (f" (best style {best.split(':', 1)[1]}: CER "
                                                     f"{num(ks[best]['cer'], 1)} %, RTF {num(ks[best]['rtf'], 3)})"
                                                     if best else " (Kokoro not measured)"))
    th = v["threads"]
    return f"""## Voices per language (`python -m bench.voices_bench`)

With `asr.language=auto` an answer comes in the user's language, but the embedded voice reads it with English
phonemes. {"/".join(map(str, n))} held-out sentences per language (`bench/data/voices/`, written for this benchmark),
synthesised by each voice and transcribed by Whisper base with the language forced ({v["asr"]["decoding"]});
CER over Whisper's basic normaliser (accents kept). RTF = synthesis seconds ÷ audio seconds on this CPU
({v["machine"]["cpu_count"]} cores; Kokoro on {th["kokoro_onnxruntime_intra_op"]} ONNX Runtime thread(s), Piper
{th["piper"]}, espeak-ng {th["espeak"]}). Kokoro is fed espeak-ng's phonemes of the language; its package ships
Japanese speaker styles only. Gate for adopting Kokoro in a language: CER ≤ {num(gate["cer_max"], 0)} % and RTF ≤
{num(gate["rtf_max"], 1)} (bold: passed).

{produced_by("voices.json")}

{table(["voice", *[f"{lang}: CER / RTF" for lang in langs]], rows)}

Verdict: {"; ".join(verdict)}. A language without a voice of its own in `tts.voices` is shown and journalled, not
spoken (the first such answer of a session says which setting adds one)."""
