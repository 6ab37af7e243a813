"""Summary statistics shared by the benchmarks (rounding, percentiles over lists that may hold None)."""

from __future__ import annotations

from typing import Iterable

import numpy as np


def rnd(x, n: int = 3) -> float | None:
    """``x`` rounded to ``n`` decimals as a plain float; None stays None."""
    return None if x is None else round(float(x), n)


def pct(xs: Iterable[float | None], q: float, n: int = 3) -> float | None:
    """The ``q``-th percentile (0–100, numpy's linear interpolation) of the values that are not None, rounded to
    ``n`` decimals; None when there are none."""
    vals = [float(x) for x in xs if x is not None]
    return rnd(np.percentile(vals, q), n) if vals else None


def percentiles(xs: Iterable[float | None]) -> dict:
    """{"p50", "p90", "max", "n"} of the values that are not None (None entries when there are none)."""
    vals = [float(x) for x in xs if x is not None]
    if not vals:
        return {"p50": None, "p90": None, "max": None, "n": 0}
    return {"p50": pct(vals, 50), "p90": pct(vals, 90), "max": rnd(max(vals)), "n": len(vals)}
