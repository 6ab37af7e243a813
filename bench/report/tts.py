"""The codec-TTS section (``bench tts``): intelligibility stage by stage, the samplers (target-only, SD, SSD, PCG),
the cost of verification, the codec voice in the assistant and, where measured, the samplers on a GPU.

The section returns Markdown (no trailing newline) and reads only what it prints."""

from __future__ import annotations

from bench.report.gpu import section_gpu_tts
from engine.devices import resolve_method
from bench.report.markdown import bold, key_number, num, pct, produced_by, sec, signed, table, times, trio
from bench.report.results import Results, asset, defaults


def section_tts(r: Results) -> str:
    st = r("tts_stages")
    before = asset("assets/codec_tts/stages_before.json")
    names = {"teacher": "Piper teacher", "codec_round_trip": "codec round trip",
             "lm_true_durations": "target LM free-running on the teacher's own prior and durations",
             "lm_predicted_durations": "full system"}
    srows = [[names.get(k, k), pct(before["results"][k]["cer"] / 100, 1) if k in before["results"] else "—",
              pct(v["cer"] / 100, 1), pct(v["wer"] / 100, 1)] for k, v in st["results"].items()]
    t = r("tts")
    res = t["results"]
    dflt = defaults().tts
    tnames = {"ar": "target-only AR", "sd": "standard SD", "ssd": "SSD constant bias", "piper_teacher": "Piper teacher"}

    def label(k):
        if not k.startswith("pcg"):
            return tnames.get(k, k)
        th, _, L = k[3:].partition("L")
        return f"PCG θ {th}" + (f", L_d {L}" if L else "")

    trows = []
    for k, v in res.items():
        lab = label(k)
        m = resolve_method("tts.codec_method", dflt.codec_method, "cpu")  # this page's figures are the CPU's
        is_def = (k == m) or (m == "pcg" and k == f"pcg{dflt.theta:g}")
        if "tokens_per_s" not in v:
            trows.append([lab, "—", "—", "—", "—", "—", "—", num(v["wer"], 1), num(v["cer"], 1)])
            continue
        trows.append([bold(lab + (" (default)" if is_def else ""), is_def), num(v["speedup_vs_target"]),
                      num(v["tokens_per_s"], 0), num(v["acceptance_rate"]), num(v["mean_accepted_length"]),
                      str(v["target_passes"]), f"{num(v['rtf_tokens'], 3)} / {num(v['rtf_with_vocoder'], 3)}",
                      num(v["wer"], 1), num(v["cer"], 1)])
    vc = t["verification_cost"]
    ks = sorted(vc["target_ms"], key=int)
    vrows = [[f"ONNX Runtime, {vc['threads']} thread", *[num(vc["target_ratio"][k]) for k in ks],
              num(vc["target_ms"]["1"]), num(vc["draft_ratio"])],
             [f"ONNX Runtime, {key_number(vc, 'threads_')} threads",
              *[num(vc["threads_2"]["target_ratio"][k]) for k in ks],
              num(vc["threads_2"]["target_ms"]["1"]), num(vc["threads_2"]["draft_ratio"])],
             [f"torch eager, {vc['torch_eager']['torch_threads']} threads",
              *[num(vc["torch_eager"]["target_ratio"][k]) for k in ks], num(vc["torch_eager"]["target_ms"]["1"]),
              num(vc["torch_eager"]["draft_ratio"])]]
    mm = vc["matmul"]["gflops"]
    mk = sorted(mm["torch_mkl"], key=int)
    mrows = [[name, *[num(v[k], 1) for k in mk]] for name, v in mm.items()]
    ar = res["ar"]
    sel = t.get("selection") or {}
    chosen = res.get(sel.get("chosen", ""), {})
    spec = {k: v for k, v in res.items() if "speedup_vs_target" in v and k != "ar"}
    fastest = max(spec, key=lambda k: spec[k]["speedup_vs_target"])
    sd = res["sd"]
    pm = sd["pass_ms"]["target"][str(t["lookahead"] + 1)][1]
    dm = sd["pass_ms"]["draft"]["1"][1]
    vcd = r("voice_codec")
    vm = vcd["methods"]
    vrows2 = []
    for k, lab in (("predgen", "Piper (default)"), ("predgen_codec", "codec TTS, target-only"),
                   ("predgen_codec_pcg", f"codec TTS, PCG θ {num(dflt.theta)}")):
        v = vm[k]
        vs = ("1.00 / 1.00" if k == "predgen"
              else f"{num(v['p50_speedup_vs_predgen'])} / {num(v['mean_speedup_vs_predgen'])}")
        vrows2.append([lab, trio(v, "eos_to_first_audio_s"), vs, sec(v["final_to_first_audio_s_p50"]),
                       num(v["tts_rtf"], 3),
                       f"{round(v['presynth_rate'] * v['files'])} / {v['files']}"])
    return f"""## Codec TTS and PCG (`specvoice bench tts`)

The codec-token TTS (`assets/codec_tts/`, trained here on the Piper voice's own parts: its text encoder and
duration predictor condition a codec LM over k-means tokens of the voice's VITS latent, which the voice's generator
renders) with target-only AR, standard speculative sampling, SSD-style constant bias and PCG (group-level
acceptance). Intelligibility is Whisper-base's WER / CER on the synthesised audio.

### Where intelligibility is lost

Whisper-base CER stage by stage on the same {st["sentences"]} held-out sentences (`tts_stages.json`, temperature
{num(st["temperature"], 1)}); "before" = `assets/codec_tts/stages_before.json`, the previous codec TTS (log-mel
codec, Griffin-Lim, phoneme-id LM; {before["sentences"]} sentences, temperature {num(before["temperature"], 1)}):

{produced_by("tts_stages.json")}

{table(["stage", "CER before", "CER", "WER"], srows)}

### Sampling

{t["sentences"]} held-out sentences, the same seeds, the methods taking turns sentence by sentence, temperature
{num(t["temperature"], 1)}, lookahead L_d = {t["lookahead"]} unless named (`tts.json`, {t.get("device", "cpu")}).
PCG's θ and L_d for the selected row were chosen on {sel.get("sentences", "—")} validation sentences
({sel.get("rule", "—")}): {label(sel["chosen"]) if sel else "—"}. Target and draft run on ONNX Runtime
(`engine/synthesis/codec_lm_onnx.py` writes their graphs from the weights: pre-transposed MatMuls,
`GroupQueryAttention` over preallocated KV buffers updated in place, one call per pass).

{produced_by("tts.json")}

{table(["sampler", "× target-only", "tokens/s", "acceptance", "accepted length", "target passes",
        "RTF (tokens / + vocoder)", "WER %", "CER %"], trows)}

Cost of one KV-cached target pass over {ks[0]}…{ks[-1]} new tokens, in single-token steps, and a draft step as a share
of
a target step (`verification_cost` in the JSON):

{table(["backend", *[f"{k} token{'s' if k != '1' else ''}" for k in ks], "1 token (ms)", "draft ÷ target"], vrows)}

Matrix-multiply throughput (GFLOP/s) by rows per call:

{table(["library", *mk], mrows)}

Target-only runs at {num(ar["tokens_per_s"], 0)} tokens/s (RTF {num(ar["rtf_tokens"], 3)},
{num(ar["rtf_with_vocoder"], 3)}
with the voice's generator) at CER {num(ar["cer"], 1)} % (Piper {num(res["piper_teacher"]["cer"], 1)} %). The fastest
speculative row is {label(fastest)} at {times(spec[fastest]["speedup_vs_target"])}; the selected PCG row
{times(chosen.get("speedup_vs_target"))} at {signed(chosen["cer"] - ar["cer"], 1) if chosen else "—"} CER points,
accepting {num(chosen.get("acceptance_rate"))} of its drafts. On this CPU the 1-layer draft is not cheap next to a
4-layer target of this size (a draft step is {num(vc["draft_ratio"])} of a target step: the per-call cost and the
2048-code head dominate), and inside a run a {t["lookahead"] + 1}-token verification takes {num(pm)} ms against
{num(ar["pass_ms"]["target"]["1"][1])} ms for a target-only step, plus draft steps of {num(dm)} ms (`pass_ms`).

{section_gpu_tts(r, label)}
### The codec voice in the assistant

The {len(vcd["files"])} spoken questions of the voice benchmark answered by PredGen through the whole live pipeline
(VAD → streaming ASR → PredGen → sentence-streamed TTS, pre-synthesis included), spoken by Piper and by the codec
TTS (`--set tts.engine=codec`), each file through all three in turn, one run (`voice_codec.json`):

{produced_by("voice_codec.json")}

{table(["voice", "EOS → first answer audio p50 / p90 / mean", "× Piper (p50 / mean)",
        "final transcript → first audio p50", "voice RTF (synthesis s ÷ answer audio s)",
        "pre-synthesised first piece used"], vrows2)}

The codec voice works end to end (tests/test_codec_tts.py) and costs
{sec(vm["predgen_codec"]["eos_to_first_audio_s_p50"] - vm["predgen"]["eos_to_first_audio_s_p50"])} more to the first
audio than Piper at the median: its synthesis runs at RTF {num(vm["predgen_codec"]["tts_rtf"])} on the answer
thread's share of the CPU while PredGen and the ASR run too, against {num(vm["predgen"]["tts_rtf"])} for Piper. PCG
does not make it sooner (the sampler is not faster, table above)."""
