"""Verification cost curves: what one pass over k tokens costs next to a one-token step, k = 1 … 48.

Every speculative method here verifies k drafted tokens in one pass of the target; it wins by the margin that pass
costs less than k steps. On a 2-core CPU a 16-token pass of the 1.5B LLM costs about 8 steps; on a GPU, where a small
pass is bound by kernel launches and memory traffic rather than arithmetic, it should cost about one. This measures
the curve for the two targets the methods verify with, each after a cached context, on the devices the configuration
places them on (engine/devices.py):

    * the Whisper decoder (torch, the one CTC-SSD and SpecASR verify with), conditioned on jfk.flac's encoder output,
      after the prompt and jfk's greedy transcript (≈ 30 tokens);
    * the LLM (llama.cpp, or transformers bfloat16 on a GPU llama.cpp cannot use), after ``--context`` tokens of
      MT-Bench questions.

Per model and k: the median wall time of a k-token pass over ``--repeats`` runs after one warm-up, in milliseconds
and in steps (÷ the one-token median). Every pass ends with its logits on the host as numpy (the protocol's
``eval``), so on CUDA the time includes the synchronisation and the copy.

Run: ``specvoice bench verify-cost [--ks 1 2 4 8 16 32 48] [--context 256] [--repeats 5] [--only whisper,llm]
[--role llm_target] [--set asr.device=cuda] [--out FILE]``. JSON out.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
JFK = ROOT / "tests" / "data" / "jfk.flac"
CONTEXT_TEXT = HERE / "data" / "mt_bench_questions.jsonl"
KS = (1, 2, 4, 8, 16, 32, 48)


def curve(lm, context: list[int], tokens: list[int], ks, repeats: int, sync=None) -> list[dict]:
    """Time ``lm.eval(tokens[:k])`` after ``context`` (cached once, cropped back to after every pass); ``sync``:
    called before each timed pass (e.g. ``torch.cuda.synchronize``).

    Returns:
        [{"tokens": k, "ms": median ms, "ms_min", "steps": ms / the k = 1 median}] in ``ks`` order (k = 1 is always
        measured, first).

    Raises:
        ValueError: ``tokens`` shorter than the largest k.
    """
    ks = sorted(set(ks) | {1})
    if len(tokens) < ks[-1]:
        raise ValueError(f"{len(tokens)} tokens to verify, {ks[-1]} needed")
    lm.crop(0)
    lm.eval(context)
    base = lm.n_past
    rows = []
    for k in ks:
        times = []
        for r in range(repeats + 1):  # the first pass of each size warms up (allocations, kernel selection)
            lm.crop(base)
            if sync is not None:  # a device's queued work is not this pass's
                sync()
            t0 = time.perf_counter()
            lm.eval(tokens[:k])
            if r:
                times.append(time.perf_counter() - t0)
        rows.append({"tokens": k, "ms": round(1000 * statistics.median(times), 3),
                     "ms_min": round(1000 * min(times), 3)})
    lm.crop(base)
    step = rows[0]["ms"]
    for row in rows:
        row["steps"] = round(row["ms"] / step, 3) if step else None
    return rows


def whisper_curve(rt, ks, repeats: int) -> dict:
    """The Whisper decoder's curve (torch, ``asr.device``), after the prompt and jfk's greedy transcript."""
    from audio.io import load_audio

    tw = rt.torch_whisper(rt.cfg.asr.model_role)
    enc = tw.encode(load_audio(JFK))
    prompt = tw.prompt()
    text = tw.greedy(enc, prompt).tokens
    context = prompt + text
    # tokens to verify: the transcript again, as often as needed (cost does not depend on the values)
    tokens = (text * (max(ks) // max(len(text), 1) + 1))[: max(ks)]
    lm = tw.decoder(enc)
    return {"model": f"Whisper ({rt.cfg.asr.model_role}) decoder", "device": tw.device,
            "dtype": str(tw.dtype).removeprefix("torch."), "context_tokens": len(context),
            "curve": curve(lm, context, tokens, ks, repeats)}


def llm_curve(rt, role: str, context_n: int, ks, repeats: int) -> dict:
    """The LLM's curve (as the runtime places it), after ``context_n`` tokens of MT-Bench questions."""
    lm = rt.llm(role)
    text = " ".join(json.loads(line)["turns"][0] for line in CONTEXT_TEXT.read_text().splitlines() if line.strip())
    ids = lm.tokenize(text)
    need = context_n + max(ks)
    if len(ids) < need:
        raise ValueError(f"{CONTEXT_TEXT} gives {len(ids)} tokens, {need} needed")
    placement = rt.devices()["llm"]
    return {"model": Path(str(rt.model(role).path)).name, "role": role, "adapter": type(lm).__name__,
            "device": placement["device"], "runs": placement["runs"],
            "dtype": str(getattr(lm, "dtype", "")).removeprefix("torch.") or None,
            "context_tokens": context_n, "curve": curve(lm, ids[:context_n], ids[context_n:need], ks, repeats)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="specvoice bench verify-cost", description=__doc__.split("\n\n")[0])
    p.add_argument("--ks", nargs="+", type=int, default=list(KS), help="pass sizes, tokens (1 is always measured)")
    p.add_argument("--context", type=int, default=256, help="LLM tokens cached before each pass")
    p.add_argument("--repeats", type=int, default=5, help="timed passes per size (after one warm-up)")
    p.add_argument("--only", default="whisper,llm", help="comma list: whisper, llm")
    p.add_argument("--role", default="llm_target", help="the LLM role")
    p.add_argument("--config")
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--out", default="out/verify_cost.json")
    a = p.parse_args(argv)
    only = {x.strip() for x in a.only.split(",") if x.strip()}
    if not only <= {"whisper", "llm"} or not only:
        p.error(f"--only takes whisper and/or llm, not {a.only!r}")
    if min(a.ks) < 1 or a.repeats < 1 or a.context < 1:
        p.error("--ks, --repeats and --context must be positive")

    from bench.gpu_suite import machine_info
    from engine.config import ConfigError, load_config
    from engine.runtime import Runtime

    try:
        rt = Runtime(load_config(a.config, None, a.set), progress=True)
        devices = rt.devices()
    except ConfigError as e:  # engine.devices.DeviceError included: one line
        print(f"specvoice bench verify-cost: error: {e}", file=sys.stderr)
        return 2
    report = {"benchmark": "verify_cost", "machine": machine_info(), "devices": devices, "ks": sorted(set(a.ks) | {1}),
              "repeats": a.repeats}
    if "whisper" in only:
        report["whisper"] = whisper_curve(rt, a.ks, a.repeats)
        print(json.dumps(report["whisper"]), flush=True)
    if "llm" in only:
        report["llm"] = llm_curve(rt, a.role, a.context, a.ks, a.repeats)
        print(json.dumps(report["llm"]), flush=True)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
