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
