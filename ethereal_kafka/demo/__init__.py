"""The demo job: orders (JSON) → large orders with tax, and revenue per customer per 10 s of event time.

One DataStream pipeline, two queries: the large-orders stream is partition-preserving (each input partition's
offsets commit with its output), the windowed revenue is a Spark-native tumbling window (shuffle, state, progress
markers). The demo starts its own local broker (state in a temporary directory), feeds the input topic, runs the
job from the connector `.properties` files until the input is consumed (`availableNow`), prints what came out
(read_committed), checks it against a plain-Python reference, and stops everything it started.

The job and connector files ship in the package (`ethereal_kafka/demo/job/`, `demo_job_file()`), so the demo runs
from any working directory of an installed package, not only from a repository checkout.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ethereal_kafka.broker import BrokerSettings, LocalBroker
from ethereal_kafka.config import load_job
from ethereal_kafka.connectors.kafka.topics import create_topic, produce, read_committed
from ethereal_kafka.errors import ConfigError

if TYPE_CHECKING:
    from ethereal_kafka.api import StreamExecutionEnvironment

LARGE_ORDER = 50.0
TAX = 0.2
WINDOW_MS = 10_000
OUT_OF_ORDER_MS = 2_000
#: Event time of the first demo order (2026-01-01T00:00:00Z); orders are ~0.7 s apart, a few out of order.
BASE_TS = 1_767_225_600_000


def demo_job_file() -> Path:
    """The demo's job file as shipped in the package (its connector files sit beside it).

    Raises:
        ConfigError: the package was installed without its data files (not a real folder on disk).
    """
    job = Path(str(files(__package__ or "ethereal_kafka.demo") / "job" / "demo-job.properties"))
    if not job.is_file():
        raise ConfigError(f"the demo's job file is missing from the installed package ({job})")
    return job


def demo_orders(count: int) -> list[tuple[bytes, bytes]]:
    """Deterministic demo input: `count` orders as `(customer key, JSON value)`."""
    out = []
    for i in range(count):
        customer = f"customer-{i % 7}"
        jitter = -1_500 if i % 11 == 0 else 0  # every 11th order arrives 1.5 s late (within the 2 s bound)
        order = {
            "order_id": i,
            "customer": customer,
            "amount": round((i * 37) % 100 + 0.5, 2),
            "ts": BASE_TS + i * 700 + jitter,
        }
        out.append((customer.encode(), json.dumps(order).encode()))
    return out


def expected_large(orders: list[tuple[bytes, bytes]]) -> list[dict[str, object]]:
    """Plain-Python reference of the large-orders stream."""
    out = []
    for _, value in orders:
        order = json.loads(value)
        if order["amount"] >= LARGE_ORDER:
            out.append({**order, "total": round(order["amount"] * (1 + TAX), 2)})
    return out


#: The name earlier versions of the demo used.
expected_output = expected_large


def expected_revenue(orders: list[tuple[bytes, bytes]]) -> dict[tuple[str, int], float]:
    """Plain-Python reference of the windowed revenue: per (customer, window start ms), the windows the final
    watermark (largest event time - bound) has closed. The input's lateness stays within the bound, so no order is
    dropped."""
    parsed = [json.loads(v) for _, v in orders]
    watermark = max(o["ts"] for o in parsed) - OUT_OF_ORDER_MS
    revenue: dict[tuple[str, int], float] = defaultdict(float)
    for order in parsed:
        start = order["ts"] - order["ts"] % WINDOW_MS
        if start + WINDOW_MS <= watermark:
            revenue[(order["customer"], start)] += order["amount"]
    return {k: round(v, 2) for k, v in revenue.items()}


def pipeline(env: StreamExecutionEnvironment) -> None:
    """The demo pipeline (named in the demo's job file, `demo_job_file()`)."""
    from pyspark.sql import functions as F

    from ethereal_kafka.api import Time, TumblingEventTimeWindows, WatermarkStrategy

    orders = env.from_source("orders")
    (
        orders.filter(F.col("amount") >= LARGE_ORDER)
        .with_columns(total=F.round(F.col("amount") * (1 + TAX), 2))
        .select("order_id", "customer", "amount", "ts", "total")
        .name("large orders with tax")
        .uid("large-orders-with-tax")
        .key_by("customer")
        .sink_to("large-orders")
    )
    (
        orders.assign_timestamps_and_watermarks(
            WatermarkStrategy.for_bounded_out_of_orderness(
                Time.milliseconds(OUT_OF_ORDER_MS)
            ).with_timestamp_assigner("ts")
        )
        .key_by("customer")
        .window(TumblingEventTimeWindows.of(Time.milliseconds(WINDOW_MS)))
        .agg(F.round(F.sum("amount"), 2).alias("revenue"), F.count("*").alias("orders"))
        .name("revenue per customer per 10 s")
        .uid("revenue-10s")
        .sink_to("revenue")
    )


def demo_topics(loaded: Any) -> list[str]:
    """The topics the demo job reads and writes: its source's first topic, then each sink's topic."""
    return [loaded.sources["orders"].topics[0], *(str(sink.topic) for sink in loaded.sinks.values())]


def create_demo_topics(bootstrap: str, loaded: Any, partitions: int = 2) -> list[str]:
    """Create the demo job's topics (`demo_topics`) that do not exist yet; returns the ones it created.

    Called by `run_demo` on its fresh broker and by `demo.feed` (Docker compose) on a broker that may hold them
    from an earlier `up`.
    """
    from ethereal_kafka.connectors.kafka.clients import admin_client, cluster_metadata

    existing = set(cluster_metadata(admin_client(bootstrap), bootstrap).topics)
    created = [t for t in demo_topics(loaded) if t not in existing]
    for topic in created:
        create_topic(bootstrap, topic, partitions=partitions)
    return created


def run_demo(connectors: Path | None, records: int, bootstrap: str | None = None) -> None:
    """Run the whole demo (see module docstring); raises on any failure so `make demo` exits non-zero.

    It prints what `ethereal-kafka run` prints (the runner's lifecycle lines on stderr, among them the web UI's
    address; Spark's and the JVM's own output in the run's log folder) and its own `[demo]` lines on stdout: the
    broker, the job in one line, each query's epochs, the output checked against the reference, and what to try
    next.

    Args:
        connectors: A folder holding `demo-job.properties` and its connector files; None = the package's.
        records: Orders to feed.
        bootstrap: A running broker to use (its topics named by `DEMO_*_TOPIC`, default `demo-*`); None = start a
            local broker in a temporary folder, and stop it at the end.
    """
    state = Path(tempfile.mkdtemp(prefix="ethereal-kafka-demo-"))
    broker = None
    if bootstrap is None:
        broker = LocalBroker(BrokerSettings(name="demo", state_dir=state / "broker"))
        began = time.monotonic()
        status = broker.start()
        assert status.bootstrap is not None
        bootstrap = status.bootstrap
        print(f"[demo] broker: {status.describe()} in {time.monotonic() - began:.1f}s", flush=True)
    try:
        os.environ["ETHEREAL_KAFKA_BOOTSTRAP"] = bootstrap
        os.environ["ETHEREAL_KAFKA_STATE"] = str(state)
        os.environ["DEMO_RUN"] = state.name.rsplit("-", 1)[-1]  # a fresh app.id (and history) per demo run
        loaded = load_job(demo_job_file() if connectors is None else connectors / "demo-job.properties")
        source = loaded.sources["orders"]
        print(f"[demo] job {describe_job(loaded)}", flush=True)
        create_demo_topics(bootstrap, loaded)
        orders = demo_orders(records)
        produce(bootstrap, source.topics[0], orders)
        print(f"[demo] fed {len(orders)} orders into {source.topics[0]}", flush=True)
        _run_job(loaded)
        large_topic = str(loaded.sinks["large-orders"].topic)
        revenue_topic = str(loaded.sinks["revenue"].topic)
        _check_large(bootstrap, large_topic, expected_large(orders))
        _check_revenue(bootstrap, revenue_topic, expected_revenue(orders))
        print(
            f"[demo] try next: .venv/bin/ethereal-kafka ui {loaded.job.app_id} (this run's stream graph and "
            'epochs in the web UI), then write your own job: README.md, "A first job" (from Flink: '
            "docs/from-flink.md)"
        )
    finally:
        from ethereal_kafka.connectors.kafka.clients import close_cached_clients

        close_cached_clients()  # the job's cached clients would otherwise keep calling the stopped broker
        if broker is not None:
            broker.destroy()
            print("[demo] broker stopped")


def describe_job(loaded: Any) -> str:
    """The demo job in one line: `APP: orders (topic) -> large-orders (topic), revenue (topic); exactly-once`."""
    sources = ", ".join(f"{n} ({', '.join(c.topics)})" for n, c in loaded.sources.items())
    sinks = ", ".join(f"{n} ({c.topic})" for n, c in loaded.sinks.items())
    return f"{loaded.job.app_id}: {sources} -> {sinks}; {loaded.job.delivery_guarantee}"


#: What each of the demo's queries is, for its epoch lines.
QUERY_NOTES = {
    "partition-preserving": "each input partition's offsets commit with its output in its sink task's transaction",
    "shuffling": "stateful; the input offsets commit in phase two, once every sink task committed",
}


def _run_job(loaded: Any) -> None:
    """Run the job as `ethereal-kafka run --available-now` does (`runtime.runner.run_loaded`), then print each
    query's epochs from the app's checkpoint history."""
    from ethereal_kafka.checkpoint.history import CheckpointHistory
    from ethereal_kafka.runtime.logs import configure_python_logging, default_log_dir
    from ethereal_kafka.runtime.runner import run_loaded

    logs = default_log_dir(loaded.job.app_id)
    configure_python_logging(logs)
    began = time.monotonic()
    run_loaded(loaded, logs, available_now=True)
    sys.stderr.flush()
    print(f"[demo] job finished in {time.monotonic() - began:.1f}s; its epochs, per query:", flush=True)
    with CheckpointHistory(loaded.job.app_id, read_only=True) as history:
        entries = history.records()
    for query in sorted({e.query for e in entries}):
        mine = [e for e in entries if e.query == query]
        print(f"[demo] query {query} ({mine[0].mode}: {QUERY_NOTES.get(mine[0].mode, mine[0].mode)})")
        for entry in mine:
            print(
                f"[demo]   {query} epoch {entry.epoch}: {entry.outcome_detail}, in {entry.records_in} out "
                f"{entry.records_out}, {entry.tasks} task transaction(s), {entry.duration_ms} ms"
            )


def _check_large(bootstrap: str, topic: str, expected: list[dict[str, object]]) -> None:
    got = read_committed(bootstrap, topic, expected=len(expected))
    print(f"[demo] {topic} (read_committed): {len(got)} records, expected {len(expected)}")
    for record in got[:5]:
        print(f"  p{record.partition}@{record.offset} {record.key!r} {record.value!r}")
    seen = sorted(json.loads(r.value or b"{}")["order_id"] for r in got)
    want = sorted(int(str(e["order_id"])) for e in expected)
    if seen != want:
        raise SystemExit(f"[demo] {topic} differs from the reference: {len(seen)} vs {len(want)} records")
    print(f"[demo] {topic} matches the plain-Python reference")


def _check_revenue(bootstrap: str, topic: str, expected: dict[tuple[str, int], float]) -> None:
    got = read_committed(bootstrap, topic, expected=len(expected))
    print(f"[demo] {topic} (read_committed): {len(got)} closed windows, expected {len(expected)}")
    for record in got[:5]:
        print(f"  p{record.partition}@{record.offset} {record.key!r} {record.value!r}")
    seen = {}
    for record in got:
        window = json.loads(record.value or b"{}")
        start = _epoch_ms(str(window["window_start"]))
        seen[(window["customer"], start)] = round(float(window["revenue"]), 2)
    if seen != expected or len(got) != len(expected):
        raise SystemExit(f"[demo] {topic} differs from the reference: {len(got)} vs {len(expected)} windows")
    print(f"[demo] {topic} matches the plain-Python reference (windows past the final watermark stay open)")


def _epoch_ms(iso: str) -> int:
    import datetime

    return round(datetime.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)
