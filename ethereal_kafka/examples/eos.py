"""Pipelines used by the exactly-once kill tests and benchmarks, with their plain-Python references.

Input records: key `k<n>`, JSON value `{"id": int, "key": str, "seq": int, "amount": int, "ts": epoch ms}`, keyed
so that every key lives in one partition (per-key order = offset order).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

EVENT_DDL = "id bigint, key string, seq bigint, amount bigint, ts bigint"
WINDOW_MS = 10_000
LATENESS_MS = 5_000


def events(count: int, keys: int = 13, base_ts: int = 1_800_000_000_000) -> list[tuple[bytes, bytes]]:
    """Deterministic input: `count` events over `keys` keys, event time advancing ~300 ms per event."""
    seqs: dict[str, int] = defaultdict(int)
    out = []
    for i in range(count):
        key = f"k{(i * 7) % keys}"
        seqs[key] += 1
        value = {"id": i, "key": key, "seq": seqs[key], "amount": (i * 31) % 97, "ts": base_ts + i * 300}
        out.append((key.encode(), json.dumps(value, separators=(",", ":")).encode()))
    return out


def _parsed(frame: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    return frame.select(F.from_json(F.col("value").cast("string"), EVENT_DDL).alias("e")).select("e.*")


def three_queries(sources: Mapping[str, DataFrame]) -> dict[str, DataFrame]:
    """`stateless`, `running_total` and `windowed_count` as three queries of one job, each over its own source
    (`stateless_in`, `running_total_in`, `windowed_count_in`) into the sink named after it: one process runs all
    three, so one SIGKILL lands in three queries' protocols at once (the kill tests' shared run)."""
    queries = {"stateless": stateless, "running_total": running_total, "windowed_count": windowed_count}
    return {name: query({name: sources[f"{name}_in"]}) for name, query in queries.items()}


# -- stateless map/filter (partition-preserving) ------------------------------------------------------------------
def stateless(sources: Mapping[str, DataFrame]) -> DataFrame:
    """Keep events whose amount is not a multiple of 3; emit them with the amount doubled."""
    from pyspark.sql import functions as F

    (frame,) = sources.values()
    e = _parsed(frame).where(F.col("amount") % 3 != 0)
    return e.select(
        F.col("key"),
        F.to_json(F.struct("id", "key", "seq", (F.col("amount") * 2).alias("doubled"))).alias("value"),
    )


def stateless_reference(inputs: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """Plain-Python `stateless`."""
    out = []
    for key, raw in inputs:
        e = json.loads(raw)
        if e["amount"] % 3 != 0:
            value = {"id": e["id"], "key": e["key"], "seq": e["seq"], "doubled": e["amount"] * 2}
            out.append((key, json.dumps(value, separators=(",", ":")).encode()))
    return out


# -- keyed running aggregate (stateful, update mode) -------------------------------------------------------------
def running_total(sources: Mapping[str, DataFrame]) -> DataFrame:
    """Per key: the running count and sum of amounts, one update per key per epoch in which it changed."""
    from pyspark.sql import functions as F

    (frame,) = sources.values()
    agg = _parsed(frame).groupBy("key").agg(F.count("*").alias("count"), F.sum("amount").alias("total"))
    return agg.select(F.col("key"), F.to_json(F.struct("key", "count", "total")).alias("value"))


def running_total_reference(inputs: list[tuple[bytes, bytes]]) -> dict[str, list[int]]:
    """Per key, the running totals after each event (index c-1 holds the total after c events)."""
    totals: dict[str, list[int]] = defaultdict(list)
    for _, raw in inputs:
        e = json.loads(raw)
        running = totals[e["key"]]
        running.append((running[-1] if running else 0) + e["amount"])
    return totals


# -- windowed count (event time, append mode) ---------------------------------------------------------------------
def windowed_count(sources: Mapping[str, DataFrame]) -> DataFrame:
    """Tumbling 10 s event-time windows per key, watermark 5 s; each window emitted once, when it closes."""
    from pyspark.sql import functions as F

    (frame,) = sources.values()
    e = _parsed(frame).withColumn("event_time", F.timestamp_millis(F.col("ts")))
    counts = (
        e.withWatermark("event_time", f"{LATENESS_MS // 1000} seconds")
        .groupBy(F.window("event_time", f"{WINDOW_MS // 1000} seconds"), F.col("key"))
        .agg(F.count("*").alias("count"))
    )
    return counts.select(
        F.col("key"),
        F.to_json(F.struct("key", F.unix_millis(F.col("window.start")).alias("window_start"), "count")).alias(
            "value"
        ),
    )


def windowed_count_reference(
    inputs: list[tuple[bytes, bytes]], closed_before_ms: int
) -> dict[tuple[str, int], int]:
    """Counts per (key, window start) for the windows that end at or before `closed_before_ms`."""
    counts: dict[tuple[str, int], int] = defaultdict(int)
    for _, raw in inputs:
        e = json.loads(raw)
        start = e["ts"] - e["ts"] % WINDOW_MS
        if start + WINDOW_MS <= closed_before_ms:
            counts[(e["key"], start)] += 1
    return dict(counts)
