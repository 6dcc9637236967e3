"""Medians, percentiles and spreads of small samples."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); a sample of one is its own percentile."""
    if not values:
        raise ValueError("percentile of an empty sample: the measurement produced nothing")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def summary(values: Sequence[float]) -> dict[str, Any]:
    """Median and spread (min, max) of per-round values."""
    if not values:
        raise ValueError("no rounds: the measurement produced nothing")
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "rounds": list(values),
    }


def ratio(mine: Sequence[float], base: Sequence[float]) -> dict[str, Any]:
    """summary() of ``mine / base`` round by round: each round's two trials ran back to
    back, so their ratio is fairer than a ratio of two medians."""
    return summary([m / b for m, b in zip(mine, base, strict=True)])
