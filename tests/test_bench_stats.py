"""bench.stats: the percentiles every benchmark reports."""

from bench.stats import pct, percentiles, rnd


def test_percentiles_skip_missing_values():
    xs = [0.5, None, 1.5, 1.0, None, 2.0]
    assert pct(xs, 50) == 1.25 and pct(xs, 90) == 1.85 and pct([None], 50) is None
    assert percentiles(xs) == {"p50": 1.25, "p90": 1.85, "max": 2.0, "n": 4}
    assert percentiles([]) == {"p50": None, "p90": None, "max": None, "n": 0}
    assert rnd(None) is None and rnd(1.23456, 2) == 1.23
