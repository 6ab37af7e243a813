"""The shared verification module: each verifier's acceptance rule on hand-made logits."""

import numpy as np

from engine import verify as V


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
