"""ASR decoding benchmark: plain AR vs CTC self-speculative decoding (SSD) vs SpecASR, one run, same audio.

Every method decodes the same encoder output of the same Whisper-base model (CTranslate2 int8 encoder, torch
decoder); AR = greedy on that decoder. Per method: WER (jiwer, Whisper English normalisation), %C (utterances
accepted by the CTC entropy test, Eq. 3), %L (accepted by one decoder verification pass, Eq. 5), decoder forward
passes, decoding-stage wall time (draft + verification/AR; the CTC head counts as draft), whole-transcription wall
time (encoder + decoding), speed-ups vs AR, tokens identical to AR. SpecASR methods add the paper's Table II
(draft/target ms per 10 s of audio, rounds, draft steps, tokens predicted/accepted per round).

Input: any WAV/FLAC files, with references from ``--refs refs.json`` ({file name: text}) or a ``.txt`` next to
each file; default: the held-out synthesised utterances (bench/data/heldout_speech, never used to train the CTC
head) and jfk.flac.

Run: ``specvoice bench asr [--methods ar,ssd_acc,ssd_rtfx,...] [files...]``. JSON out.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
JFK_REF = "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country."

SSD_METHODS = {
    # name: (tau_ctc, tau_slm, rejoin)
    "ssd_acc": (0.7, 0.2, False),  # paper Table 1 "high accuracy"
    "ssd_rtfx": (3.0, 0.1, False),  # paper Table 1 "high RTFx"
    "ssd_acc_rejoin": (0.7, 0.2, True),  # + footnote-1 draft re-join
    "ssd_rtfx_rejoin": (3.0, 0.1, True),
}
DEFAULT_METHODS = ["ar", "ssd_acc", "ssd_rtfx", "ssd_acc_rejoin", "ssd_rtfx_rejoin"]


def default_inputs() -> list[tuple[Path, str | None]]:
    d = HERE / "data" / "heldout_speech"
    refs = json.loads((d / "refs.json").read_text())
    items = [(d / k, v) for k, v in sorted(refs.items())]
    jfk = ROOT / "tests" / "data" / "jfk.flac"
    items.append((jfk, JFK_REF))
    return items


def inputs_from(files: list[str], refs_file: str | None) -> list[tuple[Path, str | None]]:
    refs = json.loads(Path(refs_file).read_text()) if refs_file else {}
    out = []
    for f in files:
        p = Path(f)
        ref = refs.get(p.name) or refs.get(str(p))
        if ref is None and p.with_suffix(".txt").exists():
            ref = p.with_suffix(".txt").read_text().strip()
        out.append((p, ref))
    return out


def spec_summary(ms: list[dict], audio_s: float) -> dict:
    """The paper's Table II per 10 s of audio, and per-round counters."""
    per10 = 10.0 / audio_s
    rounds = sum(x["rounds"] for x in ms)
    dec_only = sum(x["decode_s"] - x["draft_encode_s"] for x in ms)
    return {"draft_ms_per_10s": round(1000 * per10 * sum(x["draft_s"] for x in ms), 1),
            "draft_encoder_ms_per_10s": round(1000 * per10 * sum(x["draft_encode_s"] for x in ms), 1),
            "draft_decoder_ms_per_10s": round(1000 * per10 * sum(x["draft_s"] - x["draft_encode_s"] for x in ms), 1),
            "total_ms_per_10s_without_draft_encoder": round(1000 * per10 * dec_only, 1),
            "decode_s_without_draft_encoder": round(dec_only, 3),
            "target_ms_per_10s": round(1000 * per10 * sum(x["target_s"] for x in ms), 1),
            "total_ms_per_10s": round(1000 * per10 * sum(x["decode_s"] for x in ms), 1),
            "rounds": rounds, "draft_steps": sum(x["draft_steps"] for x in ms),
            "avg_draft_steps_per_round": round(sum(x["draft_steps"] for x in ms) / max(rounds, 1), 2),
            "predicted_per_round": round(sum(x["predicted"] for x in ms) / max(rounds, 1), 2),
            "accepted_per_round": round(sum(x["accepted"] for x in ms) / max(rounds, 1), 2),
            "merges": sum(x["merges"] for x in ms)}


def streaming(a) -> int:
    """Live-path comparison: each input is re-decoded as it grows (1 s steps, then the whole), the way the
    streaming ASR does, by faster-whisper's AR backend (``ar``: its transcribe, which decodes with timestamp
    tokens), by the SSD CTranslate2 backend (``ssd``: the CTC head's draft merged with the previous hypothesis) and
    by that backend without a draft (``ar_nots``: the same CTranslate2 calls, greedy AR without timestamp tokens —
    the decoding mode SSD verifies in). Decode time = backend time minus the encoder."""
    import time as _t

    from audio.io import load_audio
    from engine.config import load_config
    from engine.runtime import Runtime
    from engine.asr.ctc_self_speculative import SSDCT2Backend
    from engine.asr.faster_whisper_backend import FasterWhisperBackend
    from engine.asr.whisper_ar import WhisperARBackend

    rt = Runtime(load_config(), progress=True)
    ws = rt.whisper_ssd()
    items = (inputs_from(a.files, a.refs) if a.files else default_inputs())[: a.streaming]
    fwb = FasterWhisperBackend(rt.model("asr_target").path)
    ssd = SSDCT2Backend(ws, 0.7, 0.2)
    # the same CTranslate2 calls without a draft: greedy AR in SSD's own decoding mode (no timestamp tokens),
    # the baseline SSD is lossless against when every draft token must be greedy's
    ar_same = WhisperARBackend(ws)
    names = ("ar", "ar_nots", "ssd")
    out = {k: {"wall_s": 0.0, "encode_s": 0.0, "updates": 0, "stages": {}} for k in names}
    del out["ar"]["stages"]
    finals = {k: [] for k in names}
    for path, _ in items:
        audio = load_audio(path)
        cuts = list(range(16000, len(audio), 16000)) + [len(audio)]
        for name, be in (("ar", fwb), ("ar_nots", ar_same), ("ssd", ssd)):
            for c in cuts:
                t0 = _t.perf_counter()
                r = be.transcribe(audio[:c])
                out[name]["wall_s"] += _t.perf_counter() - t0
                out[name]["updates"] += 1
                if name != "ar":
                    out[name]["encode_s"] += r.stats["encode_s"]
                    st = out[name]["stages"]
                    st[r.stats["stage"]] = st.get(r.stats["stage"], 0) + 1
                else:
                    t1 = _t.perf_counter()
                    ws.fw.encode(ws.fw.feature_extractor(audio[:c], padding=480000 - c)[:, :3000])
                    out[name]["encode_s"] += _t.perf_counter() - t1
            finals[name].append("".join(w.text for w in r.words).strip())
    for k in out:
        out[k]["decode_s"] = round(out[k]["wall_s"] - out[k]["encode_s"], 3)
    out["decode_speedup_ssd_vs_ar"] = round(out["ar"]["decode_s"] / out["ssd"]["decode_s"], 2)
    out["wall_speedup_ssd_vs_ar"] = round(out["ar"]["wall_s"] / out["ssd"]["wall_s"], 2)
    out["decode_speedup_ssd_vs_ar_nots"] = round(out["ar_nots"]["decode_s"] / out["ssd"]["decode_s"], 2)
    out["wall_speedup_ssd_vs_ar_nots"] = round(out["ar_nots"]["wall_s"] / out["ssd"]["wall_s"], 2)
    norm = _normalizer()
    refs = [r for _, r in items]
    if all(refs):
        import jiwer

        for k in names:
            out[k]["final_wer"] = round(100 * jiwer.wer([norm(r) for r in refs], [norm(f) for f in finals[k]]), 2)
    out["ssd_final_equals_ar_nots"] = sum(a == b for a, b in zip(finals["ssd"], finals["ar_nots"]))
    out["inputs"] = len(items)
    p = Path(a.out)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))
    return 0


def _normalizer():
    from transformers.models.whisper.english_normalizer import EnglishTextNormalizer

    return EnglishTextNormalizer({})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="specvoice bench asr", description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", help="WAV/FLAC files (default: held-out synthetic set + jfk.flac)")
    ap.add_argument("--refs", help="JSON {file name: reference text}")
    ap.add_argument("--methods", default=",".join(DEFAULT_METHODS),
                    help="comma list of: ar (torch greedy, the baseline), ar_ct2 (faster-whisper's decoder), "
                         + ", ".join(SSD_METHODS) + ", and SpecASR's "
                         "sd8, sd16, sd8x2, adaptive, recycling, tree, ctc_draft")
    ap.add_argument("--limit", type=int, default=0, help="use only the first N inputs")
    ap.add_argument("--out", default="out/bench_asr.json")
    ap.add_argument("--streaming", type=int, default=0,
                    help="instead: streaming re-decodes (every 1 s of a growing buffer) of the first N inputs with "
                         "faster-whisper AR vs the live SSD backend (CTranslate2), same encoder")
    a = ap.parse_args(argv)
    if a.streaming:
        return streaming(a)

    import jiwer
    import torch

    from audio.io import load_audio
    from engine.config import load_config
    from engine.runtime import Runtime
    from engine.asr.ctc_self_speculative import SSDDecoder

    items = inputs_from(a.files, a.refs) if a.files else default_inputs()
    if a.limit:
        items = items[: a.limit]
    methods = [m.strip() for m in a.methods.split(",") if m.strip()]
    rt = Runtime(load_config(), progress=True)
    ws = rt.whisper_ssd()
    spec = None
    spec_methods = [m for m in methods if m not in SSD_METHODS and m not in ("ar", "ar_ct2")]
    if spec_methods:
        from engine.asr.draft_model_speculative import SpecASR, SPEC_METHODS

        unknown = [m for m in spec_methods if m not in SPEC_METHODS]
        if unknown:
            ap.error(f"unknown methods {unknown}")
        spec = SpecASR(ws.whisper, rt.whisper_ssd("asr_draft"), ctc_head=ws.head if "ctc_draft" in spec_methods else None)
    norm = _normalizer()
    rows = []
    print(f"{len(items)} inputs, methods {methods}, torch threads {torch.get_num_threads()}", flush=True)
    for path, ref in items:
        audio = load_audio(path)
        t0 = time.perf_counter()
        sv, enc = ws.encode(audio)
        enc_s = time.perf_counter() - t0
        prompt = ws.prompt()
        n_frames = int(np.ceil(len(audio) / 320))
        row = {"file": path.name, "audio_s": len(audio) / 16000, "ref": ref, "encode_s": enc_s, "m": {}}
        draft_enc = None
        if spec is not None and any(m != "ctc_draft" for m in spec_methods):
            t1 = time.perf_counter()
            de = spec.d_enc(audio)
            draft_enc = (de, time.perf_counter() - t1)  # counted in every SpecASR method's draft time
        for m in methods:
            if m == "ar_ct2":
                # faster-whisper's own int8 CTranslate2 greedy decoder on the same encoder output (reference)
                t1 = time.perf_counter()
                g = ws.fw.model.generate(sv, [prompt], beam_size=1, max_length=448)[0]
                toks = [t for t in g.sequences_ids[0] if t < ws.whisper.eot]
                row["m"][m] = {"text": ws.whisper.fw_tokenizer.decode(toks), "tokens": toks, "stage": "ar",
                               "n_forward": len(toks) + 1, "decode_s": time.perf_counter() - t1, "draft_s": 0.0}
            elif m == "ar":
                t1 = time.perf_counter()
                r = ws.whisper.greedy(enc, prompt)
                row["m"][m] = {"text": r.text, "tokens": r.tokens, "stage": "ar", "n_forward": r.n_forward,
                               "decode_s": time.perf_counter() - t1, "draft_s": 0.0}
            elif m in SSD_METHODS:
                tc, ts, rj = SSD_METHODS[m]
                t1 = time.perf_counter()
                ctc = ws.head.draft(enc, n_frames)  # per method: the CTC head is part of each method's cost
                ctc_s = time.perf_counter() - t1
                res = SSDDecoder(ws.whisper, tc, ts, rejoin=rj).decode(enc, prompt, ctc.text, ctc.max_entropy)
                row["m"][m] = {"text": res.text, "tokens": res.tokens, "stage": res.stage,
                               "n_forward": res.n_forward, "decode_s": ctc_s + res.decode_s, "draft_s": ctc_s,
                               "accepted": res.accepted, "draft_len": len(res.draft_tokens),
                               "max_entropy": res.max_entropy, "ctc_text": res.ctc_text, "rejoins": res.rejoins,
                               "rejoined": res.rejoined}
            else:
                # SpecASR: the draft model's own encoder pass counts as draft time
                res = spec.decode(audio, enc, prompt, m, draft_enc=None if m == "ctc_draft" else draft_enc)
                row["m"][m] = res
        ar_tokens = row["m"].get("ar", {}).get("tokens")
        for m, r in row["m"].items():
            r["identical_to_ar"] = (r["tokens"] == ar_tokens) if ar_tokens is not None else None
            r["total_s"] = enc_s + r["decode_s"]
        rows.append(row)
        print(f"{path.name}: " + "  ".join(f"{m} {r['decode_s']:.2f}s/{r['n_forward']}p/{r['stage']}"
                                            for m, r in row["m"].items()), flush=True)

    summary = {}
    with_ref = [r for r in rows if r["ref"]]
    audio_s = sum(r["audio_s"] for r in rows)
    for m in methods:
        ms = [r["m"][m] for r in rows]
        dec = sum(x["decode_s"] for x in ms)
        tot = sum(x["total_s"] for x in ms)
        s = {"decode_s": round(dec, 3), "total_s": round(tot, 3), "rtfx_total": round(audio_s / tot, 2),
             "rtfx_decode": round(audio_s / dec, 2) if dec else None,
             "forward_passes": sum(x["n_forward"] for x in ms),
             "pct_C": round(100 * sum(x["stage"] == "ctc" for x in ms) / len(ms), 1),
             "pct_L": round(100 * sum(x["stage"] == "verified" for x in ms) / len(ms), 1),
             "identical_to_ar": sum(bool(x["identical_to_ar"]) for x in ms)}
        if with_ref:
            R = [norm(r["ref"]) for r in with_ref]
            H = [norm(r["m"][m]["text"]) for r in with_ref]
            s["wer"] = round(100 * jiwer.wer(R, H), 2)
        if m in SSD_METHODS:
            s["mean_accepted_prefix"] = round(statistics.mean(x["accepted"] for x in ms), 2)
            s["mean_draft_len"] = round(statistics.mean(x["draft_len"] for x in ms), 2)
            s["rejoins"] = sum(x["rejoins"] for x in ms)
            s["rejoined_tokens"] = sum(x["rejoined"] for x in ms)
        if m in spec_methods:
            s.update(spec_summary(ms, audio_s))
        summary[m] = s
    if "ar" in summary:
        for m, s in summary.items():
            s["speedup_decode_vs_ar"] = round(summary["ar"]["decode_s"] / s["decode_s"], 2) if s["decode_s"] else None
            s["speedup_total_vs_ar"] = round(summary["ar"]["total_s"] / s["total_s"], 2)
    if spec is not None and "ar" in summary:
        for m in spec_methods:
            s = summary[m]
            s["speedup_decode_vs_ar_without_draft_encoder"] = round(
                summary["ar"]["decode_s"] / s["decode_s_without_draft_encoder"], 2)
    if spec is not None:
        sd = [m for m in ("sd8", "sd16", "sd8x2") if m in summary]
        if sd:
            best = min(sd, key=lambda m: summary[m]["decode_s"])
            for m in spec_methods:
                summary[m]["speedup_decode_vs_best_plain_sd"] = round(summary[best]["decode_s"] / summary[m]["decode_s"], 2)
                summary[m]["best_plain_sd"] = best
    report = {"benchmark": "asr", "inputs": len(rows), "audio_s": round(audio_s, 2),
              "encode_s": round(sum(r["encode_s"] for r in rows), 3), "device": ws.device,
              "torch_threads": torch.get_num_threads(), "model": "whisper-base (CT2 int8 encoder, torch fp32 decoder)",
              "summary": summary, "rows": rows}
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, default=float))
    print(json.dumps({"audio_s": report["audio_s"], "encode_s": report["encode_s"], "summary": summary}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
