"""Bucketed histograms of the job's metrics, and the quantiles a reader derives from them.

`Histogram` is what `runtime.metrics` keeps per metric and label set (and exports to Prometheus); `quantile` is the
estimate Prometheus' `histogram_quantile()` computes from the same buckets. A histogram may also know the smallest
and largest value observed (`low`, `high`: exact, kept by whoever feeds it); `Histogram.quantile` then clamps the
estimate into `[low, high]`, so it never shows a figure outside what was observed (one record of 65 s in the
`(60, 120]` bucket is 65 s, not the interpolated 90 s at p50 and 119.4 s at p99). Without known extremes it is the
Prometheus figure.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from typing import Any


class Histogram:
    """Bucket counts, count and sum of observations (non-cumulative buckets; `+Inf` last), and the smallest and
    largest value observed (`low`, `high`) when every observation's value was known exactly (else None)."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.buckets = [0] * (len(self.bounds) + 1)
        self.count = 0
        self.sum = 0.0
        self.low: float | None = None
        self.high: float | None = None
        self._unknown = False  # an observation's value was not known exactly: no extremes

    def observe(self, value: float, n: int = 1) -> None:
        """Add `n` observations of `value` (bucket, count, sum and extremes)."""
        self.place(value, n)
        self.sum += value * n
        self.extend(value, value)

    def place(self, value: float, n: int = 1) -> None:
        """Add `n` observations of `value` to its bucket and the count only: the caller keeps the sum exact, and
        the extremes with `extend` (`place` alone leaves them as they were)."""
        self.buckets[bisect.bisect_left(self.bounds, value)] += n
        self.count += n

    def extend(self, low: float | None, high: float | None) -> None:
        """Widen the extremes to cover `[low, high]`, the exact extremes of values added with `place`; None for
        either means they are not known, and the histogram has no extremes from then on."""
        if low is None or high is None or self._unknown:
            self._unknown = True
            self.low = self.high = None
            return
        self.low = low if self.low is None else min(self.low, low)
        self.high = high if self.high is None else max(self.high, high)

    def add(self, other: Histogram) -> None:
        """Add `other`'s observations (same bounds) to this histogram (extremes: both known, or none).

        Raises:
            ValueError: the bounds differ.
        """
        if other.bounds != self.bounds:
            raise ValueError("cannot add histograms with different bucket bounds")
        self.buckets = [a + b for a, b in zip(self.buckets, other.buckets, strict=True)]
        self.count += other.count
        self.sum += other.sum
        if other.count:
            self.extend(other.low, other.high)

    def cumulative(self) -> list[tuple[str, float]]:
        """`(le, cumulative count)` pairs in Prometheus form, ending with `+Inf`."""
        out = []
        running = 0
        for bound, n in zip((*self.bounds, float("inf")), self.buckets, strict=True):
            running += n
            out.append(("+Inf" if bound == float("inf") else repr(float(bound)), float(running)))
        return out

    def quantile(self, q: float) -> float | None:
        """The `q`-quantile estimated from the buckets (see `quantile`), clamped into `[low, high]` when the
        extremes are known; None without observations."""
        estimate = quantile(self.bounds, self.buckets, q)
        if estimate is None or self.low is None or self.high is None:
            return estimate
        return min(self.high, max(self.low, estimate))

    def to_dict(self) -> dict[str, Any]:
        """`{"bounds", "counts", "sum"}`, plus `"low"`, `"high"` when known (JSON-friendly; `from_dict` reads it
        back)."""
        out: dict[str, Any] = {"bounds": list(self.bounds), "counts": list(self.buckets), "sum": self.sum}
        if self.low is not None and self.high is not None:
            out["low"], out["high"] = self.low, self.high
        return out

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> Histogram:
        """A histogram from `to_dict` output (one written without extremes has none).

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
        low, high = value.get("low"), value.get("high")
        if hist.count:
            hist.extend(float(low) if low is not None else None, float(high) if high is not None else None)
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
