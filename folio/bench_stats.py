"""Small statistics for benchmarks: percentiles over latency samples."""

from __future__ import annotations

from collections.abc import Sequence


def percentile(samples: Sequence[float], p: float) -> float:
    """Nearest-rank percentile; 0.0 for no samples."""
    if not samples:
        return 0.0
    ordered = sorted(samples)
    rank = max(0, min(len(ordered) - 1, round(p / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]
