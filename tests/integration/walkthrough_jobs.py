"""Pipelines of `test_fraud_walkthrough` that port Flink code the way a Flink engineer would, mistakes included:
a process function and a map without `output_type`, whose yielded fields differ from their input's (issue 24,
item 1). Input elements: `{"account_id", "amount", "ts"}` (JSON), event time `ts`, 5 s out of order.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ethereal_kafka.api import (
    KeyedContext,
    KeyedProcessFunction,
    StreamExecutionEnvironment,
    Time,
    WatermarkStrategy,
)

TRANSACTION_DDL = "account_id long, amount double, ts long"
LARGE = 500.00


class LargeAlerts(KeyedProcessFunction):
    """An alert per large transaction, in fields the input type does not have (`alert_ts`)."""

    def process_element(self, value: dict[str, Any], ctx: KeyedContext) -> Iterator[dict[str, Any]]:
        if value["amount"] > LARGE:
            yield {"account_id": ctx.get_current_key(), "alert_ts": ctx.timestamp()}


def _transactions(env: StreamExecutionEnvironment) -> Any:
    return env.from_source("transactions").assign_timestamps_and_watermarks(
        WatermarkStrategy.for_bounded_out_of_orderness(Time.seconds(5)).with_timestamp_assigner("ts")
    )


def process_without_output_type(env: StreamExecutionEnvironment) -> None:
    """`.process(LargeAlerts())` with the output type left to its default (the input's)."""
    _transactions(env).key_by("account_id").process(LargeAlerts()).sink_to("alerts")


def map_without_output_type(env: StreamExecutionEnvironment) -> None:
    """A map to cents with the output type left to its default (the input's)."""
    _transactions(env).map(
        lambda e: {"account_id": e["account_id"], "cents": round(e["amount"] * 100), "ts": e["ts"]}
    ).sink_to("alerts")
