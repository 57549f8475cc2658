"""Percentiles and summaries of latency samples."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def percentile(samples: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` percentile (0 < q <= 100) of ``samples``; NaN when there are none.

    Nearest rank, not interpolation: the answer is always a value that was measured, and the p99
    of fewer than 100 samples is simply the largest one.
    """
    if not samples:
        return math.nan
    ordered = sorted(samples)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def summary(samples_ms: Sequence[float]) -> dict[str, Any]:
    """n, p50, p90, p99, mean and max of millisecond samples (rounded for the report)."""
    if not samples_ms:
        return {"n": 0}
    return {
        "n": len(samples_ms),
        "p50": round(percentile(samples_ms, 50), 3),
        "p90": round(percentile(samples_ms, 90), 3),
        "p99": round(percentile(samples_ms, 99), 3),
        "mean": round(sum(samples_ms) / len(samples_ms), 3),
        "max": round(max(samples_ms), 3),
    }
