"""The shared verification module: each verifier's acceptance rule on hand-made logits."""

import numpy as np
import pytest

from engine.core import verify as V


def rows_from(probs):
    return np.log(np.asarray(probs, dtype=np.float64) + 1e-12)


P = rows_from([
    [0.70, 0.20, 0.10, 0.00],  # before draft[0]
    [0.10, 0.60, 0.25, 0.05],  # before draft[1]
    [0.05, 0.15, 0.30, 0.50],  # before draft[2]
    [0.40, 0.30, 0.20, 0.10],  # bonus row
])


def test_greedy_accepts_argmax_prefix_and_returns_correction():
    assert V.greedy(P, [0, 1, 3]) == V.Verdict(3, 0)  # all accepted, bonus = argmax of the last row
    assert V.greedy(P, [0, 2, 3]) == V.Verdict(1, 1)
    assert V.greedy(P[:3], [0, 1, 3]) == V.Verdict(3, None)


def test_top_k_accepts_ranked_tokens():
    # token 1 ranks 2nd in row 0, token 2 ranks 2nd in row 1, token 2 ranks 2nd in row 2
    assert V.top_k(P, [1, 2, 2], k_top=1).accepted == 0
    assert V.top_k(P, [1, 2, 2], k_top=2) == V.Verdict(3, 0)
    assert V.top_k(P, [1, 2, 2], k_top=3) == V.Verdict(3, 0)
    assert V.top_k(P, [3, 0], k_top=3) == V.Verdict(0, 0)


def test_prob_threshold_is_tau_slm():
    assert V.prob_threshold(P, [0, 1, 2], tau=0.2).accepted == 3
    assert V.prob_threshold(P, [0, 1, 2], tau=0.3).accepted == 2
    assert V.prob_threshold(P, [1], tau=0.25) == V.Verdict(0, 0)


def test_biased_eq5_flips_near_ties_only():
    # P' = (1-β)P + β·onehot(d): d wins iff (1-β)p_d + β > (1-β)p_max
    assert V.biased(P, [1], beta=0.0).accepted == 0
    assert V.biased(P, [1], beta=0.5).accepted == 1  # 0.5*0.2+0.5=0.6 > 0.35
    assert V.biased(P, [2, 2], beta=0.2).accepted == 0  # 0.8*0.1+0.2=0.28 < 0.56
    assert V.biased(P, [0, 2, 3], beta=0.3) == V.Verdict(3, 0)  # row1: 0.7*0.25+0.3=0.475 > 0.42


def test_greedy_tree_follows_the_targets_choice():
    # tree: 0 → 1 → 2 and 0 → 3; rows after each node; the target picks 0, then 2 (node 3), then 1 (no child)
    row0 = np.array([5.0, 0, 0, 0])
    rows = np.array([[0, 0, 9.0, 0], [0, 0, 0, 9.0], [9.0, 0, 0, 0], [0, 9.0, 0, 0]])
    path, nxt = V.greedy_tree(row0, rows, [0, 1, 3, 2], [-1, 0, 1, 0])
    assert path == [0, 3] and nxt == 1
    # pick applies the caller's transform (e.g. suppression) with the path depth
    path, nxt = V.greedy_tree(row0, rows, [0, 1, 3, 2], [-1, 0, 1, 0], pick=lambda r, d: 0 if d == 0 else 1)
    assert path == [0, 1] and nxt == 1
    assert V.greedy_tree(row0, None, [], []) == ([], 0)


def test_threshold_rule_reads_lazily_up_to_the_first_rejection():
    seen = []

    def probs():
        for p in (0.9, 0.5, 0.1, 0.99):
            seen.append(p)
            yield p

    assert V.threshold_accepted(probs(), 0.2) == 2 and seen == [0.9, 0.5, 0.1]
    assert V.threshold_accepted([0.3, 0.2], 0.2) == 1  # strictly greater than τ


def test_softmax_lcp_and_cache_sync():
    x = np.array([[1.0, 2.0, -np.inf], [1000.0, 1000.0, 0.0]])
    np.testing.assert_allclose(V.softmax(x).sum(-1), 1.0)
    assert V.softmax(x)[0, 2] == 0.0 and np.isfinite(V.softmax(x)).all()
    np.testing.assert_allclose(np.exp(V.log_softmax(x)), V.softmax(x), atol=1e-12)
    np.testing.assert_allclose(V.softmax(np.array([0.0, 1.0]), temperature=1e-9), [0.0, 1.0])
    assert V.common_prefix([1, 2, 3], [1, 2, 4, 5]) == 2 and V.common_prefix("ab", "abc") == 2

    class Cache:
        n = 5

        def crop(self, n):
            assert 0 <= n <= self.n
            self.n = n

    c, held = Cache(), [1, 2, 3, 4, 5]
    assert V.sync_cache(c, held, [1, 2, 9]) == [9] and c.n == 2 and held == [1, 2]
    held, c.n = [1, 2, 3], 3
    assert V.sync_cache(c, held, [1, 2, 3]) == [3] and c.n == 2  # the last token is fed again for its row


def test_spec_stats_record_and_add():
    a = V.SpecStats()
    a.record(4, 3)
    a.record(4, 0)
    b = V.SpecStats(tokens=5, target_passes=2)
    b.record(2, 2)
    a.add(b)
    assert (a.rounds, a.drafted, a.accepted, a.tokens, a.target_passes) == (3, 10, 5, 5, 2)
    assert a.acceptance_rate == 0.5 and a.mean_accepted_length == pytest.approx(5 / 3)
    assert V.SpecStats().acceptance_rate == 0.0
