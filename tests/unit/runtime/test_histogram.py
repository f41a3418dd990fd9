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


def test_known_extremes_bound_the_quantiles() -> None:
    # One observation of 65 s in the (60, 120] bucket: Prometheus interpolates 90 s at p50; the observed value wins.
    bounds = [30.0, 60.0, 120.0]
    one = Histogram(bounds)
    one.observe(65.0)
    assert quantile(bounds, one.buckets, 0.5) == pytest.approx(90.0)
    assert one.quantile(0.5) == one.quantile(0.99) == pytest.approx(65.0)
    assert (one.low, one.high) == (65.0, 65.0)
    back = Histogram.from_dict(one.to_dict())
    assert (back.low, back.high, back.quantile(0.99)) == (65.0, 65.0, pytest.approx(65.0))


def test_extremes_merge_and_unknown_ones_stay_unknown() -> None:
    a, b = Histogram([1.0, 10.0]), Histogram([1.0, 10.0])
    a.observe(2.0)
    b.observe(7.0)
    a.add(b)
    assert (a.low, a.high) == (2.0, 7.0)
    a.add(Histogram([1.0, 10.0]))  # an empty histogram changes nothing
    assert (a.low, a.high) == (2.0, 7.0)
    legacy = Histogram.from_dict(
        {"bounds": [1.0, 10.0], "counts": [0, 1, 0], "sum": 5.0}
    )  # written without them
    assert legacy.low is None
    a.add(legacy)
    assert (a.low, a.high) == (None, None)
    assert a.quantile(0.5) == quantile(a.bounds, a.buckets, 0.5)  # the Prometheus figure, unclamped
    a.observe(3.0)
    assert a.low is None  # once unknown, always unknown
