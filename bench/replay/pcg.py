"""PCG's acceptance traces and their replay: speculative sampling of codec tokens with Principled Coarse-Graining
(Yanuka et al., "Principled Coarse-Grained Acceptance for Speculative Decoding in Speech", 2025, arXiv:2511.13732,
Algorithm 1: :func:`engine.synthesis.coarse_grained_sampling.speculative_generate`) against target-only sampling
(:func:`~engine.synthesis.coarse_grained_sampling.ar_generate`) on the codec LM of assets/codec_tts.

PCG's draws are stochastic (on the CPU they are taken inside the ORT graphs), so logits-row summaries
(:mod:`bench.replay.trace`) do not pin its decisions down; its ``accept(x, p, q, rng) → StepResult`` calls do:

    * :func:`record` — real weights, CPU: Multi30k test 2017 sentences through the voice's prior (as ``bench tts``),
      seed ``[seed, i]`` for both methods, the product's settings (:class:`engine.config.TtsConfig` defaults θ, L_d,
      temperature; ORT threads 1) and accept (``pcg_step`` with the groups at θ, as ``CodecTTS.tokens``), wrapped to
      keep per call the draft token x, the emitted group, accepted or not and, on a rejection, the emitted token and
      the residual sampler's trials. Kept: per sentence the conditioning's shape (float32 (n_frames, 385)) — not its
      values —, the accepted length and drafts of every round, the passes; the architecture and the Eq. 1 groups.
    * :func:`replay` — a CodecLM of that architecture with placeholder weights (seeded init, float32) on ``device``
      (CPU: the ORT path, CUDA: torch; ``uses_onnx`` decides), random conditioning of each recorded shape. Each
      ``accept`` call runs the REAL ``pcg_step`` on the loop's p, q with the recorded x and a scripted generator that
      sends it down the recorded branch (accept; or reject and the recorded number of residual trials: the same
      Python work), then returns the recorded decision — the emitted token being the replay's own draft on an
      acceptance (so the KV caches stay consistent) and the recorded token on a rejection.
    * :func:`real` — the same with the real weights; given the recorded conditioning (:func:`validate_fresh`), the
      product's accept runs free on the recorded seeds and reproduces the trace. :func:`validate`: (replayed, real)
      taking turns item by item in one run, as :mod:`bench.gpu_replay` calls it.

An item is exact when its rounds (drafts and accepted length of each), passes and accept calls are the recorded ones
and so are its rejection tokens (a free run: every token an accept emitted). Seconds: ``time.perf_counter`` around
each generate call after one warm-up (the loops read every pass back to the host, so CUDA is synchronised); with
``repeats`` the median per item. On a GPU the product samples whole rounds in CUDA graphs
(:mod:`engine.synthesis.device_sampling`), which no ``accept`` hook reaches: this replays the torch eager loop.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from engine.core import verify as V
from engine.synthesis.coarse_grained_sampling import (
    AcousticGroups,
    ar_generate,
    speculative_generate,
)

TRACE = Path(__file__).resolve().parents[2] / "bench" / "data" / "replay" / "pcg.json.gz"
COND_DIM = 385  # engine.synthesis.codec_lm.COND_DIM
METHODS = ("ar", "pcg")


def settings() -> dict:
    """The product's PCG settings: TtsConfig defaults (θ, L_d, temperature) and CodecTTS's codec-LM threads (1)."""
    from engine.config import TtsConfig

    t = TtsConfig()
    return {"theta": t.theta, "lookahead": t.lookahead, "temperature": t.temperature, "threads": 1}


def product_accept(G):
    """The accept CodecTTS.tokens passes to ``speculative_generate`` for PCG."""
    return lambda x, p, q, rng: V.pcg_step(x, p, q, G, rng)


def encode_groups(G) -> dict:
    """Eq. 1 groups → JSON: per token t the members of G(t) after t, delta-coded (s ∈ G(t) ⇔ t ∈ G(s); all of G(t)
    from −1 if the relation is not symmetric)."""
    nv = int(G.V)
    m = np.zeros((nv, nv), bool)
    for t, k in enumerate(G.group_of_token):
        m[t, G.groups[k]] = True
    sym = bool((m == m.T).all())
    start = (lambda t: t) if sym else (lambda t: -1)
    rows = [np.diff(np.flatnonzero(m[t]), prepend=start(t))[np.flatnonzero(m[t]) > start(t)].tolist()
            for t in range(nv)]
    return {"theta": float(G.theta), "V": nv, "symmetric": sym, "rows": rows}


def decode_groups(d: dict):
    """:func:`encode_groups` → :class:`engine.synthesis.coarse_grained_sampling.AcousticGroups`."""
    nv, sym = d["V"], d["symmetric"]
    m = np.eye(nv, dtype=bool)
    for t, r in enumerate(d["rows"]):
        m[t, np.cumsum([t if sym else -1] + r)[1:]] = True
    if sym:
        m |= m.T
    uniq, inv = np.unique(m, axis=0, return_inverse=True)
    G = AcousticGroups.__new__(AcousticGroups)
    G._set(uniq, np.asarray(inv).reshape(-1), d["theta"])  # as AcousticGroups.load does
    return G


def record_items(lm, G, conds, s: dict, seed: int = 0, texts=None) -> list[dict]:
    """Trace items of ``conds`` (float32 (n_frames, 385) each) on ``lm`` (real weights, CPU) with groups ``G``."""
    acc, items = product_accept(G), []
    for i, c in enumerate(conds):
        calls = []

        def keep(x, p, q, rng, calls=calls):
            r = acc(x, p, q, rng)
            calls.append((int(x), int(r.group), bool(r.accepted), int(r.token), int(r.trials)))
            return r

        _, sa = ar_generate(lm, c, np.random.default_rng([seed, i]), s["temperature"], s["threads"])
        _, st = speculative_generate(lm, c, np.random.default_rng([seed, i]), keep, s["lookahead"],
                                     s["temperature"], s["threads"])
        ends = np.cumsum(np.asarray(st.accepted_lengths) + 1)  # tokens emitted after each round
        drafted = [min(s["lookahead"], len(c) - k - 1) for k in [0, *ends[:-1].tolist()]]
        assert sum(min(a + 1, L) for a, L in zip(st.accepted_lengths, drafted)) == len(calls)
        rej = [k for k in calls if not k[2]]
        items.append({"text": texts[i] if texts else None, "n_frames": len(c), "cond_shape": list(c.shape),
                      "seed": [seed, i], "ar": {"target_passes": sa.target_passes},
                      "pcg": {"rounds": st.accepted_lengths, "drafted": drafted,
                              "x": [k[0] for k in calls], "group": [k[1] for k in calls],
                              "accepted": "".join("01"[k[2]] for k in calls),
                              "token": [k[3] for k in rej], "trials": [k[4] for k in rej],
                              "target_passes": st.target_passes, "draft_passes": st.draft_passes}})
    return items


def trace_of(arch: dict, G, s: dict, items: list[dict]) -> dict:
    """The trace (JSON-ready): architecture (config.json "arch"), dtype, settings, groups, items."""
    return {"family": "pcg", "version": 1, "arch": arch, "dtype": "float32", "settings": s,
            "groups": encode_groups(G), "items": items}


def record(n: int = 10, seed: int = 0, start: int = 0, with_conds: bool = False):
    """The trace of Multi30k test sentences start..start+n−1 (the real codec LM, CPU; needs Piper and espeak-ng);
    ``with_conds``: (trace, their float32 (n_frames, 385) conditionings, which the trace does not keep)."""
    from bench.tts_bench import sentences
    from engine.config import TtsConfig, load_config
    from engine.synthesis.codec_tts import CodecTTS

    s = settings()
    tts = CodecTTS(TtsConfig(), cache_dir=load_config().cache_dir(), threads=s["threads"])
    texts = sentences(n, start=start)
    conds = [tts.voice.conditioning(tts.phoneme_ids(t)[0]) for t in texts]
    trace = trace_of(tts.voice.config["arch"], tts.groups, s, record_items(tts.lm, tts.groups, conds, s, seed, texts))
    return (trace, conds) if with_conds else trace


def _calls(item: dict) -> list[tuple]:
    """(x, group, accepted, token, trials) per recorded accept call (token x, trials 0 when accepted)."""
    p, rej = item["pcg"], iter(zip(item["pcg"]["token"], item["pcg"]["trials"]))
    return [(x, k, a == "1", *((x, 0) if a == "1" else next(rej, (x, 1))))
            for x, k, a in zip(p["x"], p["group"], p["accepted"])]


def _positions(item: dict) -> list[int]:
    """Output position of each recorded accept call."""
    out, k = [], 0
    for a, L in zip(item["pcg"]["rounds"], item["pcg"]["drafted"]):
        out += range(k, k + min(a + 1, L))
        k += a + 1
    return out


def scripted_accept(acc, G, calls: list[tuple], seed: int = 0):
    """An accept replaying ``calls``: ``acc`` (the real ``pcg_step``) runs on the loop's p, q with the recorded x
    and a generator whose ``random()`` values (prepared here, before the timing) force the recorded branch —
    accepted: the proposal draw picks the recorded group, then −1 < r; rejected: 1 ≥ r, then ``trials`` residual
    trials (y, K, 1 ≥ a; the last −1 < a) and the token draw —; the recorded decision is returned. Returns (accept,
    state {"i": calls consumed, "over": calls past the recording, answered by ``acc`` itself})."""
    u = np.random.default_rng(seed).random(6 * len(calls) + 6).tolist()
    vals = []
    for j, (x, k, ok, _, trials) in enumerate(calls):
        S, v = G.S[x], u[6 * j : 6 * j + 6]
        if ok:
            vals.append([(int(np.flatnonzero(S == k)[0]) + 0.5) / len(S) if k in S else v[0], -1.0])
        else:
            vals.append([v[0], 1.0] + [v[1], v[2], 1.0] * (trials - 1) + [v[3], v[4], -1.0, v[5]])
    proxy, state = SimpleNamespace(), {"i": 0, "over": 0}

    def accept(x, p, q, rng):
        i = state["i"]
        if i >= len(calls):
            state["over"] += 1
            return acc(x, p, q, rng)
        state["i"] = i + 1
        xr, k, ok, tok, trials = calls[i]
        proxy.random = iter(vals[i]).__next__
        acc(xr, p, q, proxy)  # the rule's own work, down the recorded branch
        return V.StepResult(x if ok else tok, ok, k, trials)

    return accept, state


def _random_cond(shape, seed: int) -> np.ndarray:
    """float32 conditioning of ``shape``: N(0, 1) prior channels, progress in [0, 1) (the cost is value-free)."""
    r = np.random.default_rng(seed)
    c = r.standard_normal(shape).astype(np.float32)
    c[:, -1] = r.random(shape[0])
    return c


def _warm(lm, G, s: dict) -> None:
    """One untimed AR and PCG run of 48 frames (ORT export and sessions, CUDA kernels and allocator)."""
    c = _random_cond((48, COND_DIM), 0)
    ar_generate(lm, c, np.random.default_rng(0), s["temperature"], s["threads"])
    speculative_generate(lm, c, np.random.default_rng(0), product_accept(G), s["lookahead"], s["temperature"],
                         s["threads"])


def _one(u: dict, it: dict, i: int, s: dict) -> dict:
    """Item ``it`` on setup ``u`` ({"lm", "G", "conds": None → decisions from the trace on random conditioning, else
    free on conds[i]}): {method: (wall s, process CPU s, SpecStats, exact)}."""
    free, calls, p = u["conds"] is not None, _calls(it), it["pcg"]
    c = u["conds"][i] if free else _random_cond(tuple(it["cond_shape"]), i)
    t0, c0 = time.perf_counter(), time.process_time()
    _, sa = ar_generate(u["lm"], c, np.random.default_rng(it["seed"]), s["temperature"], s["threads"])
    out = {"ar": (time.perf_counter() - t0, time.process_time() - c0, sa,
                  sa.target_passes == it["ar"]["target_passes"] == len(c))}
    acc, state = (product_accept(u["G"]), None) if free else scripted_accept(product_accept(u["G"]), u["G"], calls, i)
    t0, c0 = time.perf_counter(), time.process_time()
    toks, st = speculative_generate(u["lm"], c, np.random.default_rng(it["seed"]), acc, s["lookahead"],
                                    s["temperature"], s["threads"])
    dt, dc = time.perf_counter() - t0, time.process_time() - c0
    want = [(q, k[3]) for q, k in zip(_positions(it), calls) if free or not k[2]]
    ok = (st.accepted_lengths == p["rounds"] and st.drafted == sum(p["drafted"])
          and (st.target_passes, st.draft_passes) == (p["target_passes"], p["draft_passes"])
          and (free or (state["i"], state["over"]) == (len(calls), 0)) and all(int(toks[q]) == t for q, t in want))
    out["pcg"] = (dt, dc, st, ok)
    return out


def _run(trace: dict, setups: list[dict], device: str, limit=None, repeats: int = 1) -> list[dict]:
    """The output contract per setup (:func:`_one`). Setups and methods take turns item by item and each of the
    ``repeats`` passes goes over every item, so a change in the machine's load hits them alike; an item's time is
    its median over the passes (the fastest would favour whichever setup met a quiet moment)."""
    s, items = trace["settings"], trace["items"][: limit or None]
    for u in setups:
        _warm(u["lm"], u["G"], s)
    runs = [[{m: [] for m in METHODS} for _ in items] for _ in setups]
    for _ in range(repeats):
        for i, it in enumerate(items):
            for u, r in zip(setups, runs):
                for m, v in _one(u, it, i, s).items():
                    r[i][m].append(v)
    keys = ("target_passes", "draft_passes", "tokens", "rounds", "drafted", "accepted")
    out = []
    for u, r in zip(setups, runs):
        agg = {}
        for m in METHODS:
            med = [(float(np.median([v[0] for v in x[m]])), float(np.median([v[1] for v in x[m]]))) for x in r]
            a = agg[m] = {"seconds": sum(w for w, _ in med), "cpu_seconds": sum(c for _, c in med),
                          "items": len(items), "exact": sum(int(x[m][-1][3]) for x in r),
                          **{k: sum(getattr(x[m][-1][2], k) for x in r) for k in keys},
                          "item_seconds": [round(w, 5) for w, _ in med]}
            a["mean_accepted_length"] = a["accepted"] / a["rounds"] if a["rounds"] else None
            a["acceptance_rate"] = a["accepted"] / a["drafted"] if a["drafted"] else None
        out.append({"family": "pcg", "device": device, "weights": u["weights"],
                    "replayed": u["weights"] == "placeholder", "baseline": "ar",
                    "decisions": "trace" if u["conds"] is None else "free (recorded conditioning and seeds)",
                    "settings": s, "repeats": repeats, "methods": agg,
                    "speedups": {"pcg": agg["ar"]["seconds"] / agg["pcg"]["seconds"]},
                    "cpu_speedups": {"pcg": agg["ar"]["cpu_seconds"] / agg["pcg"]["cpu_seconds"]}})
    return out


def placeholder_setup(trace: dict, device: str = "cpu", seed: int = 0) -> dict:
    """A CodecLM of the trace's architecture, placeholder weights (``torch.manual_seed(seed)`` init, float32 — the
    product's dtype on the CPU and on CUDA), on ``device``; the trace's groups."""
    import torch

    from engine.synthesis.codec_lm import CodecLM

    torch.manual_seed(seed)
    return {"lm": CodecLM(**trace["arch"]).to(device).eval(), "G": decode_groups(trace["groups"]),
            "weights": "placeholder", "conds": None}


def real_setup(trace: dict, device: str = "cpu", conds=None) -> dict:
    """The real codec LM (assets/codec_tts, float32) on ``device``, the product's groups at the trace's θ; with
    ``conds`` (:func:`record` ``with_conds``) the product's accept runs free."""
    from engine.synthesis.codec_lm import ASSET_DIR, code_embeddings, load_lm

    lm = load_lm()
    G = AcousticGroups(code_embeddings(lm, json.loads((ASSET_DIR / "config.json").read_text())),
                       trace["settings"]["theta"])
    return {"lm": lm.to(device), "G": G, "weights": "real", "conds": conds,
            "groups_match_trace": encode_groups(G) == trace["groups"]}


def replay(trace: dict, device: str = "cpu", limit: int = 0, repeats: int = 1) -> dict:
    """The trace (its first ``limit`` items; 0: all) replayed on placeholder weights on ``device``."""
    return _run(trace, [placeholder_setup(trace, device)], device, limit, repeats)[0]


def real(trace: dict, device: str = "cpu", limit: int = 0, conds=None, repeats: int = 1) -> dict:
    """The trace on the real weights on ``device``."""
    u = real_setup(trace, device, conds)
    return {**_run(trace, [u], device, limit, repeats)[0], "groups_match_trace": u["groups_match_trace"]}


def validate(trace: dict, device: str = "cpu", limit: int = 0, repeats: int = 3, conds=None) -> tuple[dict, dict]:
    """(replayed, real) in one run, taking turns item by item (:func:`_run`); without ``conds`` the real run's
    decisions come from the trace too (on random conditioning), with them it is the product's own."""
    u = real_setup(trace, device, conds)
    r, p = _run(trace, [u, placeholder_setup(trace, device)], device, limit, repeats)
    return p, {**r, "groups_match_trace": u["groups_match_trace"]}


def ratios(p: dict, r: dict) -> dict:
    """PCG's speed-up real and replayed, and replayed/real (target 1 ± 0.1), by wall and by process CPU time."""
    out = {}
    for k in ("", "cpu_"):
        a, b = r[k + "speedups"]["pcg"], p[k + "speedups"]["pcg"]
        out |= {f"{k}speedup_real": a, f"{k}speedup_replay": b, f"{k}ratio": b / a}
    return out


def validate_fresh(n: int = 3, repeats: int = 3) -> dict:
    """The CPU check in one process: record ``n`` sentences, then time the product's own run on their conditioning
    and seeds (real weights) and the replay, taking turns; :func:`ratios`."""
    trace, conds = record(n, with_conds=True)
    p, r = validate(trace, "cpu", 0, repeats, conds)
    return {"items": n, "real": r, "replay": p, **ratios(p, r)}


def load(path=TRACE) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.replay.pcg", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("--n", type=int, default=40)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--out", default=str(TRACE))
    for name in ("replay", "real", "validate"):
        x = sub.add_parser(name)
        x.add_argument("--trace", default=None if name == "validate" else str(TRACE))
        x.add_argument("--limit", type=int, default=0, help="first items of the trace (0: all)")
        x.add_argument("--repeats", type=int, default=3 if name == "validate" else 1)
        x.add_argument("--out")
        if name == "validate":
            x.add_argument("--n", type=int, default=3, help="sentences to record (without --trace)")
        else:
            x.add_argument("--device", default="cpu")
    a = ap.parse_args(argv)
    if a.cmd == "record":
        trace = record(a.n, a.seed)
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(a.out, "wt") as f:
            json.dump(trace, f, separators=(",", ":"))
        print(f"wrote {a.out} ({Path(a.out).stat().st_size / 1e3:.1f} kB, {len(trace['items'])} items)")
        return 0
    trace = load(a.trace) if a.trace else None
    if a.cmd == "validate":
        if trace is None:
            res = validate_fresh(a.n, a.repeats)
        else:
            p, r = validate(trace, "cpu", a.limit, a.repeats)
            res = {"items": p["methods"]["pcg"]["items"], "real": r, "replay": p, **ratios(p, r)}
        brief = {k: v for k, v in res.items() if k not in ("real", "replay")}
    else:
        res = (replay if a.cmd == "replay" else real)(trace, a.device, a.limit, repeats=a.repeats)
        brief = {"speedups": res["speedups"], **{m: {k: res["methods"][m][k] for k in ("seconds", "items", "exact")}
                                                 for m in METHODS}}
    print(json.dumps(brief, indent=1))
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
