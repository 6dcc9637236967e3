"""Exponential backoff with full jitter (AWS Architecture Blog, "Exponential Backoff and Jitter").

Full jitter spreads the retries of many failing workflows uniformly over the
window, so replicas that failed together do not retry together.
"""

from __future__ import annotations

import random


def backoff_cap(attempt: int, base_s: float, cap_s: float) -> float:
    """The window after failed attempt ``attempt`` (1-based): base * 2^(attempt-1), capped."""
    return float(min(cap_s, base_s * (2 ** (attempt - 1))))


def full_jitter(attempt: int, base_s: float, cap_s: float, rng: random.Random) -> float:
    """A wait drawn uniformly from [0, backoff_cap(attempt)]."""
    return rng.uniform(0.0, backoff_cap(attempt, base_s, cap_s))
