"""Acceptance traces and their replay (bench.replay): the row summary keeps every decision, and the ASR family's
replay on placeholder weights takes the real models' decisions exactly."""

import copy

import numpy as np
import pytest

from bench.replay import trace as T
from engine.core import verify as V


def _rows(seed=0, n=6, v=5000):
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 2, (n, v)).astype(np.float32)
    x[np.arange(n), rng.integers(0, v, n)] += 12  # a confident row, as a decoder's usually are
    x[1, :] = rng.normal(0, 0.5, v)  # and a flat one
    return x


def test_rebuilt_rows_keep_probabilities_argmax_and_suppression():
    x = _rows()
    mask = np.zeros(x.shape[1], bool)
    mask[4000:] = True  # e.g. Whisper's timestamp tokens
    s = T.summarize(x, mask)
    y = np.empty_like(x)
    T.rebuild(y, s, np.flatnonzero(mask))
    p, q = V.softmax(x), V.softmax(y)
    assert (x.argmax(1) == y.argmax(1)).all()
    keep = p >= T.P_MIN
    assert np.allclose(p[keep], q[keep], atol=2e-4)
    # after suppression (the masked tokens set to -inf) the probabilities are still the real ones
    xs, ys = x.copy(), y.copy()
    xs[:, mask] = ys[:, mask] = -np.inf
    ps, qs = V.softmax(xs), V.softmax(ys)
    assert np.allclose(ps[ps >= T.P_MIN], qs[ps >= T.P_MIN], atol=2e-4)
    # a token below p_min stays below it
    assert (q[~keep & (p < T.P_MIN / 10)] < T.P_MIN).all()


def test_verify_rules_decide_alike_on_rebuilt_rows():
    x = _rows(1, n=9)
    y = np.empty_like(x)
    T.rebuild(y, T.summarize(x))
    draft = [int(np.argsort(r)[-2]) for r in x[:-1]]  # the second-best token: decisions near the boundary
    for rule in (V.greedy, lambda r, d: V.top_k(r, d, 3), lambda r, d: V.prob_threshold(r, d, 0.1),
                 lambda r, d: V.biased(r, d, 0.2)):
        assert rule(x, draft) == rule(y, draft)


def test_scripted_lm_counts_a_call_that_differs():
    class LM:
        n_vocab, n_past = 50, 0

        def eval(self, tokens):
            return np.zeros((len(tokens), 50), np.float32)

    stream = []
    rec = T.RecordingLM(LM(), stream)
    rec.eval([1, 2, 3])
    sc = T.ScriptedLM(LM(), stream)
    sc.eval([1, 2, 4])
    assert sc.counters["diverged"] == 1
    with pytest.raises(T.ReplayDiverged):
        sc.eval([5])


@pytest.fixture(scope="module")
def asr_trace():
    from bench.replay import asr

    return asr.record(limit=1)


def test_asr_replay_on_placeholder_weights_is_exact(asr_trace):
    from bench.replay import asr

    item = asr_trace["items"][0]
    ar = item["m"]["ar"]["tokens"]
    assert ar and item["m"]["tree"]["tokens"] == ar  # SpecASR is lossless
    assert item["m"]["tree"]["calls"]["draft"] and item["m"]["ssd_acc"]["calls"].get("target") is not None
    res = asr.replay(asr_trace, "cpu")
    for m, s in res["methods"].items():
        assert s["items"] == 1 and s["exact"] == 1, m
    assert res["replayed"] and res["methods"]["ar"]["target_passes"] == len(item["m"]["ar"]["calls"]["target"])


def test_asr_replay_reports_a_tampered_trace(asr_trace):
    from bench.replay import asr

    t = copy.deepcopy(asr_trace)
    calls = t["items"][0]["m"]["ar"]["calls"]["target"]
    row = calls[1]["rows"][-1]  # the second greedy step's row: its argmax becomes another token
    row[3::2] = [v - 50.0 for v in row[3::2]]
    res = asr.replay(t, "cpu")
    assert res["methods"]["ar"]["exact"] == 0
    assert res["methods"]["tree"]["exact"] == 1
