"""Quantiles from histogram buckets, as Prometheus' histogram_quantile computes them."""

from __future__ import annotations

import pytest

from ethereal_kafka.runtime.histogram import Histogram, quantile


def test_quantile_interpolates_inside_the_bucket_holding_the_rank() -> None:
    # 10 observations in (0, 1], 10 in (1, 2]: the median is the top of the first bucket, p75 half-way up the second.
    assert quantile([1.0, 2.0], [10, 10, 0], 0.5) == pytest.approx(1.0)
    assert quantile([1.0, 2.0], [10, 10, 0], 0.75) == pytest.approx(1.5)
    assert quantile([1.0, 2.0], [10, 10, 0], 0.25) == pytest.approx(0.5)


def test_quantile_in_the_overflow_bucket_is_the_highest_bound() -> None:
    assert quantile([1.0, 2.0], [1, 0, 9], 0.99) == 2.0


def test_quantile_skips_empty_buckets_and_needs_observations() -> None:
    assert quantile([1.0, 2.0, 4.0], [0, 0, 4, 0], 0.5) == pytest.approx(3.0)
    assert quantile([1.0], [0, 0], 0.5) is None


def test_histogram_add_and_dict_round_trip() -> None:
    a, b = Histogram([0.1, 1.0]), Histogram([0.1, 1.0])
    a.observe(0.05, 3)
    b.observe(0.5)
    a.add(b)
    assert (a.buckets, a.count, a.sum) == ([3, 1, 0], 4, pytest.approx(0.65))
    back = Histogram.from_dict(a.to_dict())
    assert (back.buckets, back.count, back.sum) == (a.buckets, a.count, a.sum)
    with pytest.raises(ValueError):
        a.add(Histogram([1.0]))
