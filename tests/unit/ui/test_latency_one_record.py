"""Whole-run latency of a stopped app whose last run read one record (issue 24, item 9).

The record waited 65 s from its Kafka timestamp to its epoch's commit (a record produced while the job was still
starting). Its latency lands in the (60 s, 120 s] bucket, where interpolating as Prometheus' `histogram_quantile`
does put p50 at 90 s and p99 at 119.4 s: figures no record had. The percentiles of what was observed must lie within
the observed latencies (exact here: one record, 65 s).
"""

from __future__ import annotations

import pytest

from ethereal_kafka.ui.views import epoch_json, latency_from_epochs
from tests.ui_records import LATENCY_S, one_record_epoch


def test_one_record_stopped_app_shows_its_own_latency_not_the_bucket_interpolation() -> None:
    record = one_record_epoch()
    whole = latency_from_epochs([record])["q"]
    assert whole["count"] == 1
    for name in ("p50", "p95", "p99"):
        assert whole[name] == pytest.approx(LATENCY_S, abs=0.01), (name, whole)
    one = epoch_json(0, record)
    assert one["p50"] == pytest.approx(LATENCY_S, abs=0.01) and one["p99"] == pytest.approx(
        LATENCY_S, abs=0.01
    )


def test_live_figures_of_one_record_are_its_latency_too() -> None:
    from ethereal_kafka.ui.views import latency_from_figures

    record = one_record_epoch()
    assert record.latency is not None
    live = latency_from_figures({"queries": {"q": {"latency": record.latency}}})["q"]
    assert live["p99"] == pytest.approx(LATENCY_S, abs=0.01)
