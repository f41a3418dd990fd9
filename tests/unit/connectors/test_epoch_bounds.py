"""Epoch bounds of a source: defaults under exactly-once, the byte budget from the measured size, the start check."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from ethereal_kafka.config.connectors import KafkaSourceConfig
from ethereal_kafka.connectors.kafka import epoch_bounds as eb
from ethereal_kafka.errors import ConfigError


def _source(tmp_path: Path | None = None, **settings: object) -> KafkaSourceConfig:
    values: dict[str, object] = {"bootstrap.servers": "b:9092", "topics": "t", "group.id": "g"}
    if tmp_path is not None:
        values["checkpoint.location"] = str(tmp_path)
    values.update(settings)
    return KafkaSourceConfig.from_properties(values, source="test")


def test_defaults_fit_half_of_what_the_transaction_timeout_leaves() -> None:
    assert eb.default_bounds(60_000, 1_000) == (eb.EOS_MAX_RECORDS, int(29.5 * eb.FLOOR_BYTES_PER_S))
    records, size = eb.default_bounds(2_000, 200)
    assert records == int(0.9 * eb.FLOOR_RECORDS_PER_S) and size == int(0.9 * eb.FLOOR_BYTES_PER_S)
    source = _source(**{"max.records.per.epoch": records, "max.bytes.per.epoch": size})
    eb.check_bounds_fit([source], 2_000, 200)  # the defaults always pass the start-up check


def test_the_byte_budget_becomes_records_through_the_measured_size(tmp_path: Path) -> None:
    source = _source(tmp_path, **{"max.records.per.epoch": 10_000, "max.bytes.per.epoch": 100_000})
    assert eb.records_bound(source) == 100_000 // eb.ASSUMED_RECORD_BYTES  # nothing measured yet
    eb.measured(source, 500, 500 * 200)  # records of 200 bytes
    assert eb.record_size(source) == 200
    assert eb.records_bound(source) == 500
    eb.measured(source, 100, 100 * 5)
    assert eb.records_bound(source) == 10_000  # small records: the records bound rules


def test_the_start_check_refuses_bounds_the_timeout_cannot_commit_and_unbounded_sources() -> None:
    big = _source(**{"max.records.per.epoch": 200_000})
    with pytest.raises(
        ConfigError, match=r"transaction.timeout.ms=60000 is too short for source source's epochs"
    ):
        eb.check_bounds_fit([big], 60_000, 1_000)
    eb.check_bounds_fit([big], 120_000, 1_000)
    with pytest.raises(ConfigError, match="exactly-once needs bounded epochs"):
        eb.check_bounds_fit([_source()], 60_000, 1_000)


def test_adaptive_sources_are_bounded_in_bytes_and_by_the_sizer_not_at_the_floor_rates() -> None:
    """With adaptive sizing the epoch sizer keeps an epoch's duration within the transaction timeout at the rate
    it measures, so the start-up check does not hold its records bound to the floor rates (a 50,000-record cap
    halved Nexmark q5's throughput); it still needs a bound, and fixed sizing is still checked."""
    assert eb.default_bounds(60_000, 1_000, adaptive=True) == (0, eb.ADAPTIVE_MAX_BYTES)
    big = _source(
        **{
            "max.records.per.epoch": 500_000,
            "max.bytes.per.epoch": eb.ADAPTIVE_MAX_BYTES,
            "epoch.sizing": "adaptive",
        }
    )
    eb.check_bounds_fit([big], 60_000, 1_000)
    with pytest.raises(ConfigError, match="too short for source source's epochs"):
        eb.check_bounds_fit([dataclasses.replace(big, epoch_sizing="fixed")], 60_000, 1_000)
    with pytest.raises(ConfigError, match="exactly-once needs bounded epochs"):
        eb.check_bounds_fit([_source(**{"epoch.sizing": "adaptive"})], 60_000, 1_000)
