"""PCG's acceptance traces (bench/replay/pcg.py): a recording with the real codec LM (assets/codec_tts) on the CPU,
replayed on placeholder weights, takes the same rounds, accepted lengths and rejection tokens; a corrupted trace is
reported as not exact; the scripted accept drives the real ``pcg_step`` down the recorded branch; the checked-in
trace is consistent and small. No wall-clock assertions."""

import copy
import gzip
import json

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from bench.replay import pcg as P
from engine.core import verify as V

N_FRAMES = 60


@pytest.fixture(scope="module")
def recorded():
    from engine.synthesis.coarse_grained_sampling import AcousticGroups
    from engine.synthesis.codec_lm import ASSET_DIR, code_embeddings, load_lm

    if not (ASSET_DIR / "lm.safetensors").exists():
        pytest.skip("no codec LM in assets/codec_tts")
    cfg = json.loads((ASSET_DIR / "config.json").read_text())
    lm = load_lm()
    s = P.settings()
    G = AcousticGroups(code_embeddings(lm, cfg), s["theta"])
    # a random conditioning of a short sentence's shape: the decisions come from the trace, the cost from the shape
    cond = P._random_cond((N_FRAMES, P.COND_DIM), 7)
    trace = P.trace_of(cfg["arch"], G, s, P.record_items(lm, G, [cond], s, seed=3))
    return trace, G, cond


@pytest.fixture(scope="module")
def replayed(recorded):
    trace = recorded[0]
    return P._run(trace, [P.placeholder_setup(trace)], "cpu")[0]


def test_record_keeps_rounds_calls_and_shapes_only(recorded):
    trace, _, _ = recorded
    it = trace["items"][0]
    p = it["pcg"]
    assert it["n_frames"] == N_FRAMES and it["cond_shape"] == [N_FRAMES, P.COND_DIM]
    assert sum(a + 1 for a in p["rounds"]) == N_FRAMES  # every round emits its accepted drafts + one token
    assert all(0 <= a <= L <= trace["settings"]["lookahead"] for a, L in zip(p["rounds"], p["drafted"]))
    calls = P._calls(it)
    assert len(calls) == sum(min(a + 1, L) for a, L in zip(p["rounds"], p["drafted"]))
    assert p["accepted"].count("0") == len(p["token"]) == len(p["trials"]) > 0  # the sentence has rejections
    assert all(t >= 1 for t in p["trials"])
    assert p["target_passes"] == len(p["rounds"]) and it["ar"]["target_passes"] == N_FRAMES
    json.dumps(trace)  # JSON-ready; no conditioning values in it
    assert "cond" not in it


def test_groups_round_trip(recorded):
    _, G, _ = recorded
    H = P.decode_groups(P.encode_groups(G))
    assert H.M == G.M and np.array_equal(H.N, G.N)
    for t in (0, 5, 777, G.V - 1):
        assert np.array_equal(H.groups[H.group_of_token[t]], G.groups[G.group_of_token[t]])


def test_replay_on_placeholder_weights_is_exact(recorded, replayed):
    trace = recorded[0]
    p = trace["items"][0]["pcg"]
    assert replayed["replayed"] is True and replayed["weights"] == "placeholder" and replayed["baseline"] == "ar"
    m = replayed["methods"]
    assert m["pcg"]["exact"] == m["pcg"]["items"] == 1 and m["ar"]["exact"] == 1
    assert m["pcg"]["rounds"] == len(p["rounds"]) and m["pcg"]["accepted"] == sum(p["rounds"])
    assert (m["pcg"]["target_passes"], m["pcg"]["draft_passes"]) == (p["target_passes"], p["draft_passes"])
    assert m["ar"]["target_passes"] == m["ar"]["tokens"] == N_FRAMES
    assert m["pcg"]["mean_accepted_length"] == pytest.approx(np.mean(p["rounds"]))
    assert replayed["speedups"]["pcg"] > 0 and m["pcg"]["seconds"] > 0


def test_validate_runs_the_product_free_on_the_recorded_conditioning(recorded):
    trace, _, cond = recorded
    p, r = P.validate(trace, device="cpu", limit=0, repeats=1, conds=[cond])  # as bench.gpu_replay calls it
    assert r["replayed"] is False and r["weights"] == "real" and r["groups_match_trace"] is True
    assert r["methods"]["pcg"]["exact"] == 1 and p["methods"]["pcg"]["exact"] == 1  # the free run is the trace
    assert set(P.ratios(p, r)) >= {"speedup_real", "speedup_replay", "ratio"}


def test_replay_is_exact_on_the_two_session_loop(recorded, monkeypatch):
    """The loop a GPU runs (two CodecLMSession, host-side draws, KV caches synced to the context): the replay's own
    drafts as accepted tokens keep the caches consistent, so it makes the recorded passes."""
    import engine.synthesis.coarse_grained_sampling as C

    monkeypatch.setattr(C, "uses_onnx", lambda lm: False)  # the sessions still run on ORT on the CPU
    trace = recorded[0]
    r = P._run(trace, [P.placeholder_setup(trace)], "cpu")[0]
    assert r["methods"]["pcg"]["exact"] == 1 and r["methods"]["ar"]["exact"] == 1


@pytest.mark.parametrize("corrupt", ["round", "call"])
def test_corrupted_trace_is_not_exact(recorded, corrupt):
    trace = copy.deepcopy(recorded[0])
    p = trace["items"][0]["pcg"]
    if corrupt == "round":  # one accepted length changed
        k = next(i for i, (a, L) in enumerate(zip(p["rounds"], p["drafted"])) if a < L)
        p["rounds"][k] += 1
    else:  # one rejection turned into an acceptance: the loop takes other rounds than the recorded ones
        j = p["accepted"].index("0")
        p["accepted"] = p["accepted"][:j] + "1" + p["accepted"][j + 1:]
    r = P._run(trace, [P.placeholder_setup(trace)], "cpu")[0]
    assert r["methods"]["pcg"]["exact"] == 0 and r["methods"]["ar"]["exact"] == 1


def test_scripted_accept_takes_the_recorded_branch(recorded):
    trace, G, _ = recorded
    calls = P._calls(trace["items"][0])
    inner = []

    def spy(x, p, q, rng):
        r = V.pcg_step(x, p, q, G, rng)
        inner.append(r)
        return r

    acc, state = P.scripted_accept(spy, G, calls)
    rng = np.random.default_rng(0)
    for x, k, ok, tok, trials in calls:
        p, q = rng.dirichlet(np.ones(G.V)), rng.dirichlet(np.ones(G.V))  # other distributions than recorded
        out = acc(123, p, q, rng)
        assert (out.accepted, out.group, out.trials) == (ok, k, trials)
        assert out.token == (123 if ok else tok)  # the replay's own draft when accepted
        r = inner[-1]
        assert r.accepted == ok and (r.trials == trials if not ok else r.group == k)
    assert state == {"i": len(calls), "over": 0}
    acc(5, p, q, rng)  # past the recording: answered by the rule itself, counted
    assert state["over"] == 1


def test_checked_in_trace_is_small_and_consistent():
    from engine.synthesis.codec_lm import ASSET_DIR

    if not P.TRACE.exists():
        pytest.skip("no recorded trace")
    assert P.TRACE.stat().st_size <= 300_000
    with gzip.open(P.TRACE, "rt") as f:
        trace = json.load(f)
    assert trace["family"] == "pcg" and trace["settings"] == P.settings()
    assert trace["arch"] == json.loads((ASSET_DIR / "config.json").read_text())["arch"]
    for it in trace["items"]:
        p = it["pcg"]
        assert sum(a + 1 for a in p["rounds"]) == it["n_frames"] == it["cond_shape"][0]
        assert len(P._calls(it)) == sum(min(a + 1, L) for a, L in zip(p["rounds"], p["drafted"]))
