"""PredGen over an LLM server vs in-process: the same partial-transcript streams through greedy PredGen, once on the
in-process llama.cpp model and once on :class:`engine.llm.remote.adapter.RemoteLM` (a ``llama_cpp.server`` the benchmark
starts on the same GGUF, or any server given by ``--base-url``).

Per backend and turn, with the compute-aware simulation of bench/predgen_bench.py (``simulate``: simulated time
advances by each step's measured compute, so speculation only uses time in which the user is still speaking):
audio latency (end of input → first audio ready, TTS included unless the pre-synthesised audio is used), TTFS,
NFETFS, and whether the answer equals the in-process one (a divergence is reported with the in-process logit gap).
For the remote backend also: HTTP requests per speculative update (split into verification requests, which carry
prompt log-probs, and pre-fill/decoding requests, which do not), bytes sent and received per update, and the prompt
tokens the server evaluated per verification (its prefix-cache misses: reported by the server when it says so —
SGLang ``cached_tokens``, vLLM ``prompt_tokens_details`` — else estimated with llama-cpp-python's single-slot
prefix cache; the JSON says which). An analytic note gives how many speaking users one server carries at the
measured tokens per update.

Run: ``python -m bench.remote_bench [--stream FILE.json] [--n 10] [--role llm_target] [--base-url URL]``. JSON out.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np

from bench.settings import fill_from_config

HERE = Path(__file__).resolve().parent
# options left unset take these settings of the loaded configuration (--config, --set)
CONFIG_DEFAULTS = {"top_n": "llm.remote_top_n", "budget": "llm.predgen_tokens_per_update", "n_ctx": "llm.n_ctx",
                   "speculation_threads": "llm.predgen_speculation_threads"}


def start_llama_server(gguf: str, threads: int, n_ctx: int, timeout_s: float = 300.0):
    """``python -m llama_cpp.server --logits_all true`` on a free 127.0.0.1 port (it inherits this process's
    niceness). Returns (process, url).

    Raises:
        SystemExit: the server extras are missing or it does not come up within ``timeout_s``.
    """
    try:
        import llama_cpp.server.app  # noqa: F401
    except ImportError as e:
        raise SystemExit(f"llama-cpp-python's server extras are missing ({e}): pip install 'specvoice[server]'")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    threads = threads or os.cpu_count() or 1
    cmd = [sys.executable, "-m", "engine.llm.llama_server", "--model", gguf, "--logits_all", "true",
           "--n_threads", str(threads), "--n_threads_batch", str(threads), "--n_ctx", str(n_ctx),
           "--host", "127.0.0.1", "--port", str(port), "--verbose", "false"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    t_end = time.monotonic() + timeout_s
    while time.monotonic() < t_end:
        if proc.poll() is not None:
            raise SystemExit(f"llama_cpp.server exited: {proc.stderr.read().decode()[-1500:]}")
        try:
            urllib.request.urlopen(url + "/v1/models", timeout=2).read()
            return proc, url
        except OSError:
            time.sleep(0.5)
    proc.terminate()
    raise SystemExit(f"llama_cpp.server did not start within {timeout_s} s")


def _delta(a: dict, b: dict) -> dict:
    return {k: b[k] - a[k] for k in a if isinstance(a[k], (int, float))}


def run_backend(lm, tts, system: str, streams, args, remote: bool) -> list[dict]:
    """Greedy PredGen over ``streams`` on ``lm``; per turn the simulate() metrics plus, for a RemoteLM, the HTTP
    counters of every update and of the final step."""
    from bench.predgen_bench import simulate
    from engine.answer.predictive import PredGen

    rows = []
    for k, stream in enumerate(streams):
        pg = PredGen(lm, tts, system, verifier="greedy", tokens_per_update=args.budget, max_tokens=args.max_tokens,
                     speculation_threads=args.speculation_threads)
        pg.warm()
        per_update: list[dict] = []
        if remote:
            update = pg.update

            def counted(partial, cancel=None, _u=update):
                s0 = lm.stats.snapshot()
                st = _u(partial, cancel)
                per_update.append(_delta(s0, lm.stats.snapshot()))
                return st

            pg.update = counted
            final_http: dict = {}
            finish = pg.finish

            def counted_finish(*a, _f=finish, **kw):
                s0 = lm.stats.snapshot()
                fi = _f(*a, **kw)
                final_http.update(_delta(s0, lm.stats.snapshot()))
                return fi

            pg.finish = counted_finish
            s_turn = lm.stats.snapshot()
        t0 = time.perf_counter()
        r = simulate(pg, stream, speculate=True)
        r["wall_s"] = round(time.perf_counter() - t0, 3)
        if remote:
            total = _delta(s_turn, lm.stats.snapshot())
            r["http_updates"] = per_update
            r["http_final"] = final_http
            r["http_turn"] = total
        rows.append(r)
        print(f"[{'remote' if remote else 'local'}] {k + 1}/{len(streams)} audio latency {r['audio_latency_s']:.2f} s "
              f"NFETFS {r['nfetfs']} updates {r['n_updates']} presynth {r['presynth_used']}", flush=True)
    return rows


def summarize(rows: list[dict]) -> dict:
    def mean(xs):
        xs = list(xs)
        return round(statistics.mean(xs), 3) if xs else None

    s = {"turns": len(rows), "audio_latency_s_mean": mean(r["audio_latency_s"] for r in rows),
         "audio_latency_s_median": round(statistics.median(r["audio_latency_s"] for r in rows), 3),
         "ttfs_s_mean": mean(r["ttfs_s"] for r in rows), "nfetfs_mean": mean(r["nfetfs"] for r in rows),
         "presynth_share": mean(float(r["presynth_used"]) for r in rows),
         "updates_mean": mean(r["n_updates"] for r in rows), "wall_s_mean": mean(r["wall_s"] for r in rows)}
    ups = [u for r in rows for u in r.get("http_updates", [])]
    if rows and "http_turn" in rows[0]:
        # verifications: those of the speculative updates and the final one (end of input)
        verifs = [u for u in ups + [r["http_final"] for r in rows] if u["echo_requests"]]
        s["http"] = {
            "updates": len(ups),
            "verifications": sum(u["echo_requests"] for u in verifs),
            "final_step_requests_mean": mean(r["http_final"]["requests"] for r in rows),
            "final_step_verification_requests_mean": mean(r["http_final"]["echo_requests"] for r in rows),
            "final_step_streamed_decode_requests_mean": mean(r["http_final"]["stream_requests"] for r in rows),
            "final_step_other_scoring_requests_mean": mean(
                r["http_final"]["eval_requests"] - r["http_final"]["echo_requests"] for r in rows),
            "final_step_streamed_tokens_mean": mean(r["http_final"]["stream_tokens"] for r in rows),
            "requests_per_update": mean(u["eval_requests"] for u in ups),
            "verification_requests_per_update": mean(u["echo_requests"] for u in ups),
            "bytes_sent_per_verification": mean(u["echo_bytes_sent"] / u["echo_requests"] for u in verifs),
            "bytes_received_per_verification": mean(u["echo_bytes_received"] / u["echo_requests"] for u in verifs),
            "prefill_or_decode_requests_per_update": mean(u["eval_requests"] - u["echo_requests"] for u in ups),
            "bytes_sent_per_update": mean(u["bytes_sent"] for u in ups),
            "bytes_received_per_update": mean(u["bytes_received"] for u in ups),
            "http_s_per_update": mean(u["http_s"] for u in ups),
            "prompt_tokens_per_verification": mean(u["echo_prompt_tokens"] / u["echo_requests"] for u in verifs),
            "reprocessed_tokens_per_verification": mean(u["echo_reprocessed_tokens"] / u["echo_requests"]
                                                        for u in verifs),
            "reprocessed_tokens_per_update": mean(u["reprocessed_tokens"] for u in ups),
            "turn_requests_mean": mean(r["http_turn"]["eval_requests"] for r in rows),
            "turn_bytes_sent_mean": mean(r["http_turn"]["bytes_sent"] for r in rows),
            "turn_bytes_received_mean": mean(r["http_turn"]["bytes_received"] for r in rows),
        }
    return s


def scaling_note(http: dict, streams, budget: int, prefill_tok_s: float | None) -> dict:
    """How many users one server can carry while they speak, from the measured tokens per update."""
    gaps = [b[1] - a[1] for s in streams for a, b in zip(s[:-1], s[1:]) if b[1] > a[1]]
    interval = statistics.mean(gaps) if gaps else 1.0
    r = http.get("reprocessed_tokens_per_verification") or 0.0
    p = http.get("prompt_tokens_per_verification") or 0.0
    per_update = r + budget  # the verification pass + at most `budget` decode steps, in token evaluations
    note = {
        "mean_seconds_between_partials": round(interval, 3),
        "token_evaluations_per_update_prefix_cached": round(per_update, 1),
        "token_evaluations_per_update_no_prefix_cache": round(p + budget, 1),
        "formula": ("concurrent speaking users ≈ server token throughput (tokens/s, prefill and batched decode "
                    "together) × seconds between partials / token evaluations per update. With a prefix cache "
                    "that serves the shared prompt (SGLang with logprob_start_len; llama.cpp-style single slot per "
                    "user) an update costs the reprocessed tokens of its verification plus the decode budget; vLLM "
                    "ignores its prefix cache for requests with prompt log-probs, so there an update costs the whole "
                    "prompt plus the draft (the 'no_prefix_cache' figure)."),
        "users_per_1000_tokens_per_s_prefix_cached": round(1000 * interval / max(per_update, 1e-9), 1),
        "users_per_1000_tokens_per_s_no_prefix_cache": round(1000 * interval / max(p + budget, 1e-9), 1),
    }
    if prefill_tok_s:
        note["this_server_prefill_tokens_per_s"] = round(prefill_tok_s, 1)
        note["this_server_users_prefix_cached"] = round(prefill_tok_s * interval / max(per_update, 1e-9), 2)
    note["caveat"] = ("decode steps of several users batch on a GPU server, so the decode part costs less than a "
                      "prefill token each there; the CPU llama_cpp.server used here serves one sequence at a time "
                      "and spends most of a verification sorting the vocabulary in Python for every echoed "
                      "position, which no GPU server does")
    return note


def measure_server_costs(lm, local, ns=(1, 2, 5, 20), decode_tokens: int = 24) -> dict:
    """What a llama-cpp-python-style server spends per request kind, on one short chat prompt + answer:

    * ONE verification (echo) request over the whole prompt at ``top_n`` = each of ``ns`` (1 is below what
      :class:`RemoteLM` allows; set here only to measure it): its wall time, and whether the per-position argmax
      of the rows :class:`RemoteLM` builds from it — all that greedy verification reads — equals the in-process
      model's (a differing position is reported with its in-process logit gap: a near-tie or not);
    * a last-row request with and without log-probs;
    * a greedy answer of at most ``decode_tokens`` tokens decoded one last-row request per token (the decoding
      path before streaming) vs ONE streamed request, and whether the tokens are the same.
    Every figure is the wall time of ONE run on the loaded CPU (seconds)."""
    from engine.llm.generate import LMSession, greedy_stream

    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    chat = lm.tokenize(lm.chat_prompt(msgs), special=True)
    prompt = chat + lm.tokenize("The capital of France is Paris, a city on the Seine.")
    want = LMSession(local).eval_draft(prompt[:2], prompt[2:])  # rows after positions 1 .. n-1
    want_top = np.argmax(want, 1)
    out: dict = {"prompt_tokens": len(prompt), "verification_by_top_n": []}
    LMSession(lm).prefill(prompt)  # the prompt in the server's cache: the echo requests below re-evaluate 1 token
    top_n = lm.top_n
    try:
        for n in ns:
            lm.top_n = n
            s = LMSession(lm)
            r0, t0 = lm.stats.echo_requests, time.perf_counter()
            rows = np.asarray(s.eval_draft(prompt[:2], prompt[2:]))
            dt = time.perf_counter() - t0
            got_top = np.argmax(rows, 1)
            diff = [int(i) for i in np.flatnonzero(got_top != want_top)]
            out["verification_by_top_n"].append({
                "top_n": n, "requests": lm.stats.echo_requests - r0, "s": round(dt, 3),
                "s_per_prompt_token": round(dt / len(prompt), 4), "positions": len(want_top),
                "argmax_equal_to_in_process": len(want_top) - len(diff),
                "differing_positions_logit_gap": [round(float(want[i].max() - want[i][got_top[i]]), 4)
                                                  for i in diff]})
            print(f"[costs] top_n {n}: {dt:.1f} s, argmax differs at {len(diff)} of {len(want_top)}", flush=True)
    finally:
        lm.top_n = top_n
    for name, extra in (("last_row_with_logprobs_s", {"logprobs": lm.top_n}), ("last_row_without_logprobs_s", {})):
        body = {"prompt": lm.tok.render(prompt) if not lm.ids_prompt else prompt, "max_tokens": 1,
                "temperature": 0.0, **extra}
        t0 = time.perf_counter()
        lm._http.call("POST", "/v1/completions", body)
        out[name] = round(time.perf_counter() - t0, 3)
    s = LMSession(lm)
    s.prefill(chat)
    r0, t0 = lm.stats.requests, time.perf_counter()
    per_token = []
    row = s.prefill(chat)
    while len(per_token) < decode_tokens:  # the decoding path before streaming: one last-row request per token
        tok = int(np.argmax(row))
        if tok in lm.eos_ids:
            break
        per_token.append(tok)
        row = s.eval([tok])[-1]
    out["decode_per_token_requests"] = {"tokens": len(per_token), "requests": lm.stats.requests - r0,
                                        "s": round(time.perf_counter() - t0, 3)}
    r0, t0 = lm.stats.requests, time.perf_counter()
    streamed = list(greedy_stream(LMSession(lm), chat, decode_tokens, lm.eos_ids))
    out["decode_streamed"] = {"tokens": len(streamed), "requests": lm.stats.requests - r0,
                              "s": round(time.perf_counter() - t0, 3)}
    out["decode_same_tokens"] = streamed == per_token
    lm.crop(0)
    return out


def measure_prefill(lm, n: int = 64) -> float | None:
    """Server prefill throughput, tokens/s: one uncached last-row request of ``n`` tokens (0 cache hits)."""
    toks = lm.tokenize(" ".join(["benchmark"] * n))[:n]
    lm.crop(0)
    t0 = time.perf_counter()
    lm.eval(toks)[-1]
    dt = time.perf_counter() - t0
    lm.crop(0)
    return len(toks) / dt if dt > 0 else None


def run_costs(args, rep: dict) -> dict:
    """``--costs-only``: start a server as :func:`run` does and (re)measure ``server_costs`` into ``rep``."""
    from engine.config import load_config
    from engine.llm.llama_cpp_lm import LlamaCppLM
    from engine.llm.remote import RemoteLM
    from engine.runtime import Runtime

    cfg = load_config(args.config, None, args.set)
    fill_from_config(args, cfg, CONFIG_DEFAULTS)
    gguf = str(Runtime(cfg, progress=True).model(args.role).path)
    proc, url = (None, args.base_url) if args.base_url else start_llama_server(gguf, args.server_threads, args.n_ctx)
    try:
        remote = RemoteLM(url, model=args.served_model, tokenizer=args.tokenizer or gguf, n_ctx=args.n_ctx,
                          top_n=args.top_n, api_key_env=args.api_key_env, timeout_s=args.timeout)
        local = LlamaCppLM(gguf, n_ctx=args.n_ctx, n_threads=args.local_threads)
        costs = measure_server_costs(remote, local)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
    costs["scope"] = (f"measured by --costs-only at {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: "
                      f"{Path(gguf).name}, " + (f"llama_cpp.server with {args.server_threads} thread(s)" if not
                                                 args.base_url else f"server {args.base_url}") +
                      f", in-process reference with {args.local_threads} thread(s); nice {os.nice(0)}, "
                      f"{os.cpu_count()} cores shared with other jobs")
    rep["server_costs"] = costs
    return rep


def run(args) -> dict:
    from bench.predgen_bench import _divergence, load_streams
    from engine.config import load_config
    from engine.llm.llama_cpp_lm import LlamaCppLM
    from engine.answer.predictive import PredGen
    from engine.llm.remote import RemoteLM
    from engine.runtime import Runtime

    t_start = time.perf_counter()
    cfg = load_config(args.config, None, args.set)
    fill_from_config(args, cfg, CONFIG_DEFAULTS)
    rt = Runtime(cfg, progress=True)
    gguf = str(rt.model(args.role).path)
    streams, skipped = load_streams(args.stream, args.n)
    if not streams:
        raise SystemExit(f"no usable stream in {args.stream} ({len(skipped)} skipped)")
    tts = None if args.no_tts else rt.tts()
    system = cfg.llm.system_prompt
    local = LlamaCppLM(gguf, n_ctx=args.n_ctx, n_threads=args.local_threads)
    proc = None
    url = args.base_url
    if not url:
        proc, url = start_llama_server(gguf, args.server_threads, args.n_ctx)
    try:
        remote = RemoteLM(url, model=args.served_model, tokenizer=args.tokenizer or gguf, n_ctx=args.n_ctx,
                          top_n=args.top_n, api_key_env=args.api_key_env, timeout_s=args.timeout)
        connect_stats = remote.stats.snapshot()
        remote.reset_stats()
        res_local = run_backend(local, tts, system, streams, args, remote=False)
        res_remote = run_backend(remote, tts, system, streams, args, remote=True)
        prefill_tok_s = measure_prefill(remote)
        costs = measure_server_costs(remote, local) if remote.tokenize_path == "/extras/tokenize" else None
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
    checks = []
    for a, b in zip(res_local, res_remote):
        same = a["answer_tokens"] == b["answer_tokens"]
        div = None if same else _divergence(local, PredGen(local, None, system).prompt_tokens(a["final"]),
                                            a["answer_tokens"], b["answer_tokens"])
        checks.append({"identical": same, "divergence": div})
    s_local, s_remote = summarize(res_local), summarize(res_remote)
    s_remote["identical_to_local_share"] = round(sum(c["identical"] for c in checks) / len(checks), 3)
    s_remote["answer_checks"] = checks
    s_remote["audio_latency_vs_local"] = round(s_remote["audio_latency_s_mean"] / s_local["audio_latency_s_mean"], 3)
    return {
        "benchmark": "predgen_remote",
        "scope": (f"{len(streams)} partial-transcript streams (the first of {args.stream}), greedy PredGen, "
                  f"{Path(gguf).name} on both backends; " + (
                      f"llama_cpp.server started by the benchmark on 127.0.0.1 with {args.server_threads} thread(s), "
                      f"in-process llama.cpp with {args.local_threads} thread(s)" if not args.base_url else
                      f"server {args.base_url}") + f"; nice {os.nice(0)}, OMP_NUM_THREADS="
                  f"{os.environ.get('OMP_NUM_THREADS', 'unset')}, {os.cpu_count()} cores shared with other jobs"),
        "model": gguf, "input": args.stream, "turns": len(streams),
        "skipped_streams": skipped, "server": url if args.base_url else "llama_cpp.server started by the benchmark",
        "server_api": remote.api, "logprob_layout": remote.layout, "prompt_as_token_ids": remote.ids_prompt,
        "top_n": args.top_n, "tokens_per_update": args.budget, "max_tokens": args.max_tokens,
        "server_threads": None if args.base_url else args.server_threads, "local_threads": args.local_threads,
        "speculation_threads": args.speculation_threads, "tts": not args.no_tts,
        "reprocessed_tokens_source": remote.stats.reprocessed_source, "connect_http": connect_stats,
        "backends": {"local": s_local, "remote": s_remote},
        "scaling": scaling_note(s_remote.get("http", {}), streams, args.budget, prefill_tok_s),
        "server_costs": costs,
        "wall_s": round(time.perf_counter() - t_start, 1),
        "turn_details": {"local": [{k: v for k, v in r.items() if k != "answer_tokens"} for r in res_local],
                         "remote": [{k: v for k, v in r.items() if k != "answer_tokens"} for r in res_remote]},
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="specvoice bench predgen --backend remote", description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=["remote"], default="remote", help=argparse.SUPPRESS)  # predgen_bench hook
    p.add_argument("--stream", default=str(HERE / "data" / "voice_asr_partials.json"),
                   help="partial-transcript stream JSON {prompt: [[partial, seconds], ...]}")
    p.add_argument("--n", type=int, default=10, help="number of turns")
    p.add_argument("--role", default="llm_target", help="model role of the GGUF (both backends)")
    p.add_argument("--base-url", help="an already running server (default: start llama_cpp.server on the GGUF)")
    p.add_argument("--served-model", help="model name for OpenAI requests (default: the server's first)")
    p.add_argument("--tokenizer", help="the served model's tokenizer (.gguf or directory; default: the role's GGUF)")
    p.add_argument("--api-key-env", help="environment variable holding the server's API key")
    p.add_argument("--top-n", type=int, default=None, help="log-probs per position (default: llm.remote_top_n)")
    p.add_argument("--budget", type=int, default=None,
                   help="tokens per speculative update (default: llm.predgen_tokens_per_update)")
    p.add_argument("--max-tokens", type=int, default=48, help="answer length generated per turn")
    p.add_argument("--n-ctx", type=int, default=None, help="context length of both backends (default: llm.n_ctx)")
    p.add_argument("--server-threads", type=int, default=0,
                   help="threads of the started llama_cpp.server (0 = all cores, as the in-process final step)")
    p.add_argument("--local-threads", type=int, default=0, help="threads of the in-process model (0 = all cores)")
    p.add_argument("--speculation-threads", type=int, default=None,
                   help="PredGen speculation threads, 0 = as loaded (default: llm.predgen_speculation_threads)")
    p.add_argument("--timeout", type=float, default=300.0, help="per-request time-out, seconds")
    p.add_argument("--no-tts", action="store_true", help="no speech synthesis (audio latency = TTFS)")
    p.add_argument("--config")
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--out", default="bench/results/predgen_remote.json")
    p.add_argument("--costs-only", action="store_true",
                   help="only (re)measure the per-request server costs into the existing --out JSON")
    args = p.parse_args(argv)
    out = Path(args.out)
    if args.costs_only:
        rep = run_costs(args, json.loads(out.read_text()) if out.exists() else {})
        out.write_text(json.dumps(rep, indent=2))
        print(json.dumps(rep["server_costs"], indent=2))
        print(f"wrote {out}")
        return 0
    rep = run(args)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rep, indent=2))
    print(json.dumps({"backends": {b: {k: v for k, v in s.items() if k != "answer_checks"}
                                   for b, s in rep["backends"].items()}, "scaling": rep["scaling"]}, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
