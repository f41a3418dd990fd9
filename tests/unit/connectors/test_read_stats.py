"""Read reports: the age sketch, the tally of one read task, and delivery to the driver's channel."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from pyspark.accumulators import _accumulatorRegistry

from ethereal_kafka.connectors.kafka.read_stats import (
    AGE_GAMMA,
    REPORTS_ACCUMULATOR_ID,
    ReadReport,
    ReadTally,
    ReportChannel,
    _ReportsParam,
    age_bucket,
    age_buckets,
    bucket_age,
    publish,
)


@pytest.mark.parametrize("age", [-5000.0, -1.5, 0.0, 0.4, 1.0, 1.7, 37.0, 999.0, 1e4, 3.6e6, 8.64e7])
def test_a_bucket_represents_its_ages_within_one_percent(age: float) -> None:
    value = bucket_age(age_bucket(age))
    if abs(age) < 1:
        assert value == 0.0
    else:
        assert abs(value - age) <= (AGE_GAMMA - 1) / (AGE_GAMMA + 1) * abs(age) + 1e-9


def test_vectorized_buckets_equal_the_scalar_ones() -> None:
    rng = np.random.default_rng(3)
    ages = np.concatenate([rng.integers(-10_000, 10_000, 3000), rng.integers(0, 10**10, 3000), [0, 1, -1]])
    expected: dict[int, int] = {}
    for age in ages:
        expected[age_bucket(float(age))] = expected.get(age_bucket(float(age)), 0) + 1
    assert age_buckets(ages.astype(np.int64)) == expected
    assert age_buckets(np.array([], dtype=np.int64)) == {}


def test_a_tally_counts_records_and_sketches_timestamps() -> None:
    tally = ReadTally("events", "orders", 1, 10, 15)
    tally.read_ms = 10_000
    stamps = pa.array([9_000_000, None, 9_990_000, 10_000_000, 10_005_000], pa.timestamp("us", tz="UTC"))
    tally.observe(pa.RecordBatch.from_pydict({"timestamp": stamps}))
    report = tally.report(dead_lettered=1, skipped=0)
    assert (report.records, report.timestamped, report.timestamp_sum_ms) == (
        5,
        4,
        9000 + 9990 + 10000 + 10005,
    )
    assert report.ages == {age_bucket(1000): 1, age_bucket(10): 1, 0: 1, age_bucket(-5): 1}
    assert (report.topic, report.partition, report.start, report.until, report.dead_lettered) == (
        "orders",
        1,
        10,
        15,
        1,
    )


def _report() -> ReadReport:
    return ReadTally("events", "orders", 0, 0, 1).report()


def test_reports_reach_an_open_channel_as_the_accumulator_server_delivers_them() -> None:
    got: list[ReadReport] = []
    channel = ReportChannel(got.extend)
    channel.open()
    try:
        # What PySpark's accumulator server does with a task's update: `registry[aid] += update`.
        _accumulatorRegistry[REPORTS_ACCUMULATOR_ID] += [_report(), _report()]
        publish(_report())  # outside a Spark task: straight to the channel of this process
        assert len(got) == 3
    finally:
        channel.close()
    assert REPORTS_ACCUMULATOR_ID not in _accumulatorRegistry
    publish(_report())  # no channel: dropped, and nothing is registered
    assert len(got) == 3 and REPORTS_ACCUMULATOR_ID not in _accumulatorRegistry


def test_a_failing_receiver_never_fails_the_sender() -> None:
    def broken(_reports: list[ReadReport]) -> None:
        raise RuntimeError("boom")

    channel = ReportChannel(broken)
    channel.open()
    try:
        publish(_report())
        assert channel.errors == 1
    finally:
        channel.close()


def test_task_side_values_are_lists_that_extend() -> None:
    param = _ReportsParam()
    value = param.zero(None)
    value = param.addInPlace(value, [_report()])
    assert len(param.addInPlace(value, [_report()])) == 2
