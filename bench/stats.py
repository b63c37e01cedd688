"""The one percentile rule every bench reports with, so their p50/p95 figures compare."""

from __future__ import annotations


def pct(values: list[float], q: float) -> float:
    """The nearest-rank q-quantile (q in 0..1) of `values`; 0.0 when there are none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]
