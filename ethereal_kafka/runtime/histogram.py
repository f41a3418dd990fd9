"""Bucketed histograms of the job's metrics, and the quantiles a reader derives from them.

`Histogram` is what `runtime.metrics` keeps per metric and label set (and exports to Prometheus); `quantile` is the
estimate Prometheus' `histogram_quantile()` computes from the same buckets, so a figure shown by the web UI is the
figure a Prometheus query over the endpoint gives.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from typing import Any


class Histogram:
    """Bucket counts, count and sum of observations (non-cumulative buckets; `+Inf` last)."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.buckets = [0] * (len(self.bounds) + 1)
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float, n: int = 1) -> None:
        """Add `n` observations of `value` (bucket, count and sum)."""
        self.place(value, n)
        self.sum += value * n

    def place(self, value: float, n: int = 1) -> None:
        """Add `n` observations of `value` to its bucket and the count only (the caller keeps the sum exact)."""
        self.buckets[bisect.bisect_left(self.bounds, value)] += n
        self.count += n

    def add(self, other: Histogram) -> None:
        """Add `other`'s observations (same bounds) to this histogram.

        Raises:
            ValueError: the bounds differ.
        """
        if other.bounds != self.bounds:
            raise ValueError("cannot add histograms with different bucket bounds")
        self.buckets = [a + b for a, b in zip(self.buckets, other.buckets, strict=True)]
        self.count += other.count
        self.sum += other.sum

    def cumulative(self) -> list[tuple[str, float]]:
        """`(le, cumulative count)` pairs in Prometheus form, ending with `+Inf`."""
        out = []
        running = 0
        for bound, n in zip((*self.bounds, float("inf")), self.buckets, strict=True):
            running += n
            out.append(("+Inf" if bound == float("inf") else repr(float(bound)), float(running)))
        return out

    def quantile(self, q: float) -> float | None:
        """The `q`-quantile estimated from the buckets (see `quantile`); None without observations."""
        return quantile(self.bounds, self.buckets, q)

    def to_dict(self) -> dict[str, Any]:
        """`{"bounds", "counts", "sum"}` (JSON-friendly; `from_dict` reads it back)."""
        return {"bounds": list(self.bounds), "counts": list(self.buckets), "sum": self.sum}

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> Histogram:
        """A histogram from `to_dict` output.

        Raises:
            ValueError: the counts do not match the bounds.
        """
        hist = cls([float(b) for b in value["bounds"]])
        counts = [int(n) for n in value["counts"]]
        if len(counts) != len(hist.buckets):
            raise ValueError(f"{len(counts)} counts for {len(hist.bounds)} bucket bounds")
        hist.buckets = counts
        hist.count = sum(counts)
        hist.sum = float(value.get("sum") or 0.0)
        return hist


def quantile(bounds: Sequence[float], counts: Sequence[int], q: float) -> float | None:
    """Estimate the `q`-quantile (0 <= q <= 1) of observations counted in buckets, as Prometheus'
    `histogram_quantile()` does: find the bucket holding rank `q * total` and interpolate linearly inside it (the
    lowest bucket starts at 0); a rank in the overflow bucket gives the highest finite bound.

    Args:
        bounds: Upper bounds of the finite buckets, ascending.
        counts: Non-cumulative counts, one per bound plus the overflow (`+Inf`) bucket last.

    Returns:
        The estimate, or None when there are no observations.
    """
    total = sum(counts)
    if total <= 0 or math.isnan(q):
        return None
    q = min(1.0, max(0.0, q))
    rank = q * total
    below = 0
    for i, n in enumerate(counts):
        if below + n >= rank and n > 0:
            if i >= len(bounds):
                return float(bounds[-1]) if bounds else None
            start = 0.0 if i == 0 else float(bounds[i - 1])
            end = float(bounds[i])
            if i == 0 and end <= 0:
                return end
            return start + (end - start) * ((rank - below) / n)
        below += n
    return float(bounds[-1]) if bounds else None
