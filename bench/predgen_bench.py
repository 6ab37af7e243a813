"""PredGen benchmark: compute-aware simulation of a user speaking, cascade vs PredGen verifiers, one run.

As in the paper (predgen.txt §4.1): simulated time advances by the measured compute of each step, so speculation
only uses time during which the user is still "speaking". Inputs:
    1. prompt lists (MT-Bench first turns, GSM8K) revealed at 600 characters per minute, the last incomplete word
       dropped;
    2. partial-transcript streams ``{"<full prompt>": [["<partial text>", <seconds since start>], ...], ...}``
       (real streaming-ASR partials; the last entry is the final transcript, made by bench/make_partial_streams.py).

Per method — cascade (no speculation, same system prompt), cascade + incremental prefill (``cascade_prefill``: the
KV cache follows each partial prompt as it grows, nothing is speculated — the honest non-speculative baseline),
PredGen greedy / top-k / reflection — all with the same speculation thread budget — per turn:
TTFS (end of input → first complete sentence), NFETFS (LLM forward passes in that interval), audio latency (end of
input → first audio ready: TTS included unless the pre-synthesised audio is used), and for greedy the check that the
final answer equals the cascade's (llama.cpp's batched logits differ slightly from one-at-a-time logits, so a
divergence is reported with the logit gap at that position: a near-tie is numerics, not a lossy verifier).

Run: ``specvoice bench predgen [--prompts mtbench|gsm8k|FILE.jsonl] [--stream FILE.json] [--n 10]``. JSON out.
"""

from __future__ import annotations

import argparse
import os
import json
import re
import statistics
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
CHARS_PER_S = 600 / 60.0


def load_prompts(spec: str, n: int, max_chars: int = 260) -> list[str]:
    path = {"mtbench": HERE / "data" / "mt_bench_questions.jsonl",
            "gsm8k": HERE / "data" / "gsm8k_test_first100.jsonl"}.get(spec, Path(spec))
    out = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        d = json.loads(line)
        q = d["turns"][0] if "turns" in d else d.get("question") or d.get("prompt")
        if q and len(q) <= max_chars and "\n" not in q:
            out.append(q)
        if len(out) >= n:
            break
    return out


def load_streams(path: str, n: int) -> tuple[list[list[tuple[str, float]]], list[dict]]:
    """Read a partial-stream JSON (``{"<prompt>": [["<partial>", <s>], ...], ...}``). Returns (usable streams, skipped
    entries with the reason). A stream is usable when its last entry (the final transcript) has words; partials that
    are empty, not text, or out of time order are dropped, and partials may rewrite earlier words.

    Raises:
        SystemExit: the file is missing or not a JSON object of that shape (one clear message, no traceback).
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise SystemExit(f"cannot read partial streams from {path}: {e}") from None
    if not isinstance(data, dict):
        raise SystemExit(f"{path}: expected a JSON object {{prompt: [[partial, seconds], ...]}}")
    streams, skipped = [], []
    for full, parts in data.items():
        if len(streams) >= n:
            break
        clean: list[tuple[str, float]] = []
        for e in parts if isinstance(parts, list) else []:
            if (isinstance(e, (list, tuple)) and len(e) == 2 and isinstance(e[0], str)
                    and isinstance(e[1], (int, float)) and e[0].strip()):
                if clean and float(e[1]) < clean[-1][1]:
                    continue
                clean.append((e[0].strip(), float(e[1])))
        if not clean:
            skipped.append({"prompt": full, "reason": "no partial or final transcript"})
        elif not re.search(r"\w", clean[-1][0]):
            skipped.append({"prompt": full, "reason": "the final transcript has no words"})
        else:
            streams.append(clean)
    return streams, skipped


def reveal_stream(text: str) -> list[tuple[str, float]]:
    """Partial prompts at 600 characters/minute: a new partial each time a word completes (the last incomplete
    word dropped); the full text at len/rate seconds."""
    out = []
    for m in re.finditer(r"\S+(?=\s)", text):
        out.append((text[: m.end()], m.end() / CHARS_PER_S))
    out.append((text, len(text) / CHARS_PER_S))
    return out


def simulate(pg, stream: list[tuple[str, float]], speculate: bool) -> dict:
    """Run one turn. ``stream``: [(partial, available_at_s)], last = final input. Returns the turn's metrics."""
    final_text, t_final = stream[-1]
    t = 0.0
    last = None
    updates = []
    if speculate:
        partials = stream[:-1]
        while t < t_final and partials:
            avail = [j for j, (_, ta) in enumerate(partials) if ta <= t]
            if not avail:
                t = partials[0][1]
                continue
            j = avail[-1]
            partial = partials[j][0]
            if partial == last:  # nothing new: wait for the next partial (or the end of input)
                t = partials[j + 1][1] if j + 1 < len(partials) else t_final
                continue
            cancel = threading.Event()
            timer = threading.Timer(max(0.0, t_final - t), cancel.set)  # end of input cancels stale work
            timer.start()
            c0 = time.perf_counter()
            st = pg.update(partial, cancel)
            c = time.perf_counter() - c0
            timer.cancel()
            updates.append({"partial": partial, "t": round(t, 3), "compute_s": round(c, 3), "accepted": st.accepted,
                            "previous_len": st.previous_len, "generated": st.generated, "nfe": st.nfe,
                            "first_sentence": st.first_sentence, "cancelled": st.cancelled})
            t += c
            last = partial
    wait = max(0.0, t - t_final)  # an in-flight update that ran past the end of input
    fi = pg.finish(final_text)
    return {"final": final_text, "updates": updates, "n_updates": len(updates), "residual_wait_s": round(wait, 3),
            "ttfs_s": round(wait + fi.ttfs_s, 3), "audio_latency_s": round(wait + fi.audio_latency_s, 3),
            "nfetfs": fi.nfetfs, "presynth_used": fi.presynth_used, "accepted": fi.accepted,
            "first_sentence": fi.first_sentence, "answer": fi.answer, "answer_tokens": fi.answer_tokens}


def _divergence(lm, prompt_tokens, a: list[int], b: list[int]) -> dict | None:
    """First position where two answers differ, with the logit gap between the two tokens there (one sequential
    re-evaluation of the common prefix)."""
    d = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if d is None:
        return None if len(a) == len(b) else {"position": min(len(a), len(b)), "gap": None}
    from engine.llm.generate import LMSession

    s = LMSession(lm)
    row = s.prefill(prompt_tokens + a[:d])
    return {"position": d, "gap": round(float(abs(row[a[d]] - row[b[d]])), 4),
            "top2_gap": round(float(np.sort(row)[-1] - np.sort(row)[-2]), 4)}


def run(args) -> dict:
    from bench.settings import fill_from_config
    from engine.config import load_config
    from engine.answer.predictive import PredGen
    from engine.runtime import Runtime

    cfg = load_config(args.config, {"llm_target": args.model} if args.model else None, args.set)
    fill_from_config(args, cfg, {"top_k": "llm.predgen_top_k", "budget": "llm.predgen_tokens_per_update",
                                 "speculation_threads": "llm.predgen_speculation_threads"})
    rt = Runtime(cfg, progress=True)
    if args.backend == "torch":  # the same weights on an adapter whose batched and sequential logits agree
        from engine.llm.torch_lm import TorchCausalLM

        lm = TorchCausalLM(str(rt.model(args.role).path), device="cpu")
        lm.torch.set_num_threads(cfg.llm.n_threads or os.cpu_count() or 1)
    else:
        lm = rt.llm(args.role)
    tts = rt.tts()
    judge = rt.llm(args.role, instance="judge", n_ctx=1024) if "reflection" in args.methods else None
    streams, skipped = (load_streams(args.stream, args.n) if args.stream
                        else ([reveal_stream(q) for q in load_prompts(args.prompts, args.n)], []))
    for s in skipped:
        print(f"skipped stream {s['prompt'][:60]!r}: {s['reason']}", flush=True)
    if not streams:
        raise SystemExit(f"no usable stream in {args.stream or args.prompts} ({len(skipped)} skipped)")
    threads = args.speculation_threads
    system = cfg.llm.system_prompt
    results: dict[str, list[dict]] = {}
    for method in ["cascade", *[m for m in args.methods if m != "cascade"]]:
        verifier = "greedy" if method in ("cascade", "cascade_prefill") else method
        budget = 0 if method == "cascade_prefill" else args.budget  # 0 tokens: prefill the partial prompt only
        rows = []
        for k, stream in enumerate(streams):
            pg = PredGen(lm, tts, system, verifier=verifier, top_k=args.top_k, tokens_per_update=budget,
                         max_tokens=args.max_tokens, judge_lm=judge, speculation_threads=threads,
                         first_clause_words=cfg.tts.first_clause_words)
            pg.warm()
            r = simulate(pg, stream, speculate=method != "cascade")
            rows.append(r)
            print(f"[{method}] {k + 1}/{len(streams)} latency {r['audio_latency_s']:.2f} s NFETFS {r['nfetfs']} "
                  f"updates {r['n_updates']} presynth {r['presynth_used']}", flush=True)
        results[method] = rows

    def summary(rows):
        lat = [r["audio_latency_s"] for r in rows]
        ttfs = [r["ttfs_s"] for r in rows]
        return {"turns": len(rows), "audio_latency_s_mean": round(statistics.mean(lat), 3),
                "audio_latency_s_median": round(statistics.median(lat), 3),
                "ttfs_s_mean": round(statistics.mean(ttfs), 3),
                "nfetfs_mean": round(statistics.mean(r["nfetfs"] for r in rows), 2),
                "nfetfs_1_share": round(sum(r["nfetfs"] == 1 for r in rows) / len(rows), 3),
                "presynth_share": round(sum(r["presynth_used"] for r in rows) / len(rows), 3),
                "accepted_tokens_mean": round(statistics.mean(r["accepted"] for r in rows), 2),
                "updates_mean": round(statistics.mean(r["n_updates"] for r in rows), 2)}

    base = summary(results["cascade"])
    pre = summary(results["cascade_prefill"]) if "cascade_prefill" in results else None
    report = {"benchmark": "predgen", "backend": args.backend, "model": str(rt.model(args.role).path),
              "input": args.stream or args.prompts,
              "turns": len(streams), "skipped_streams": skipped, "chars_per_minute": 600,
              "tokens_per_update": args.budget, "first_clause_words": cfg.tts.first_clause_words,
              "speculation_threads": threads, "max_tokens": args.max_tokens,
              "top_k": args.top_k, "methods": {}}
    for method, rows in results.items():
        s = summary(rows)
        s["audio_latency_speedup_vs_cascade"] = round(base["audio_latency_s_mean"] / s["audio_latency_s_mean"], 3)
        s["ttfs_speedup_vs_cascade"] = round(base["ttfs_s_mean"] / s["ttfs_s_mean"], 3)
        if pre:
            s["audio_latency_speedup_vs_cascade_prefill"] = round(
                pre["audio_latency_s_mean"] / s["audio_latency_s_mean"], 3)
        if method != "cascade":  # answers compared token by token with the cascade's
            checks = []
            for r, c in zip(rows, results["cascade"]):
                same = r["answer_tokens"] == c["answer_tokens"]
                div = None if same else _divergence(lm, PredGen(lm, None, system).prompt_tokens(c["final"]),
                                                    c["answer_tokens"], r["answer_tokens"])
                checks.append({"identical": same, "divergence": div})
            s["identical_to_cascade_share"] = round(sum(c["identical"] for c in checks) / len(checks), 3)
            gaps = [c["divergence"]["gap"] for c in checks if c["divergence"] and c["divergence"]["gap"] is not None]
            s["divergence_logit_gap_max"] = round(max(gaps), 4) if gaps else None
            s["answer_checks"] = checks
        report["methods"][method] = s
    report["turn_details"] = {m: [{k: v for k, v in r.items() if k != "answer_tokens"} for r in rows]
                              for m, rows in results.items()}
    return report


def main(argv=None) -> int:
    """``--backend remote`` is :mod:`bench.remote_bench` (``specvoice bench predgen --backend remote`` runs it)."""
    p = argparse.ArgumentParser(prog="specvoice bench predgen", description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", default="mtbench", help="mtbench | gsm8k | a .jsonl with 'turns' or 'question'")
    p.add_argument("--stream", help="partial-transcript stream JSON (PredGen simulated-inputs format)")
    p.add_argument("--n", type=int, default=10, help="number of turns")
    p.add_argument("--methods", nargs="+", default=["cascade_prefill", "greedy", "top_k", "reflection"],
                   help="compared with the cascade: cascade_prefill, greedy, top_k, reflection, biased")
    p.add_argument("--speculation-threads", type=int, default=None,
                   help="LLM threads while the user speaks, every method alike "
                        "(default: llm.predgen_speculation_threads)")
    p.add_argument("--top-k", type=int, default=None, help="the top-k verifier's k (default: llm.predgen_top_k)")
    p.add_argument("--budget", type=int, default=None,
                   help="tokens per speculative update (default: llm.predgen_tokens_per_update)")
    p.add_argument("--max-tokens", type=int, default=48, help="answer length generated per turn")
    p.add_argument("--backend", choices=["local", "torch"], default="local",
                   help="(remote: `specvoice bench predgen --backend remote`, bench/remote_bench.py); torch: the "
                        "role's GGUF dequantised into transformers (float32), where greedy PredGen must reproduce the "
                        "cascade token for token (latencies are not comparable with llama.cpp's)")
    p.add_argument("--role", default="llm_target")
    p.add_argument("--model", help="a GGUF path or hub id for the llm_target role")
    p.add_argument("--config")
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--out", default="bench/results/predgen.json")
    args = p.parse_args(argv)
    rep = run(args)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rep, indent=2))
    print(json.dumps({m: {k: v for k, v in s.items() if k != "answer_checks"} for m, s in rep["methods"].items()},
                     indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
