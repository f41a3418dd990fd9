"""The demo job: orders (JSON) → large orders with tax, keyed by customer, topic to topic on embedded Spark.

It starts its own local broker (state in a temporary directory), feeds the input topic, runs the job from the
connector `.properties` files until the input is consumed (`availableNow`), prints what came out on the output topic
(read_committed) and stops everything it started.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ethereal_kafka.broker import BrokerSettings, LocalBroker
from ethereal_kafka.config import load_job
from ethereal_kafka.testing.kafka_io import create_topic, produce, read_committed

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

LARGE_ORDER = 50.0
TAX = 0.2


def demo_orders(count: int) -> list[tuple[bytes, bytes]]:
    """Deterministic demo input: `count` orders as `(customer key, JSON value)`."""
    out = []
    for i in range(count):
        customer = f"customer-{i % 7}"
        order = {"order_id": i, "customer": customer, "amount": round((i * 37) % 100 + 0.5, 2)}
        out.append((customer.encode(), json.dumps(order).encode()))
    return out


def expected_output(orders: list[tuple[bytes, bytes]]) -> list[dict[str, object]]:
    """The plain-Python reference of the demo job."""
    out = []
    for _, value in orders:
        order = json.loads(value)
        if order["amount"] >= LARGE_ORDER:
            out.append({**order, "total": round(order["amount"] * (1 + TAX), 2)})
    return out


def large_orders(sources: Mapping[str, DataFrame]) -> DataFrame:
    """The demo pipeline (named in `connectors/demo-job.properties`): JVM-side JSON, no per-record Python."""
    from pyspark.sql import functions as F

    schema = "order_id long, customer string, amount double"
    orders = (
        sources["orders"].select(F.from_json(F.col("value").cast("string"), schema).alias("o")).select("o.*")
    )
    large = orders.where(F.col("amount") >= LARGE_ORDER).withColumn(
        "total", F.round(F.col("amount") * (1 + TAX), 2)
    )
    return large.select(
        F.col("customer").alias("key"),
        F.to_json(F.struct("order_id", "customer", "amount", "total")).alias("value"),
    )


def run_demo(connectors: Path, records: int) -> None:
    """Run the whole demo (see module docstring); raises on any failure so `make demo` exits non-zero."""
    from ethereal_kafka.runtime.runner import start
    from ethereal_kafka.runtime.spark import local_session

    state = Path(tempfile.mkdtemp(prefix="ethereal-kafka-demo-"))
    broker = LocalBroker(BrokerSettings(name="demo", state_dir=state / "broker"))
    began = time.monotonic()
    status = broker.start()
    assert status.bootstrap is not None
    print(f"[demo] broker: {status.describe()} in {time.monotonic() - began:.1f}s")
    try:
        os.environ["ETHEREAL_KAFKA_BOOTSTRAP"] = status.bootstrap
        os.environ["ETHEREAL_KAFKA_STATE"] = str(state)
        os.environ["DEMO_RUN"] = state.name.rsplit("-", 1)[-1]  # a fresh app.id (and history) per demo run
        loaded = load_job(connectors / "demo-job.properties")
        source = loaded.sources["orders"]
        sink = loaded.sinks["large-orders"]
        print(f"[demo] job:    {loaded.job!r}")
        print(f"[demo] source: {source!r}")
        print(f"[demo] sink:   {sink!r}")
        create_topic(status.bootstrap, source.topics[0], partitions=2)
        assert sink.topic is not None
        create_topic(status.bootstrap, sink.topic, partitions=2)
        orders = demo_orders(records)
        produce(status.bootstrap, source.topics[0], orders)
        print(f"[demo] fed {len(orders)} orders into {source.topics[0]}")

        spark = local_session(
            "ethereal-kafka-demo", conf={"spark.sql.warehouse.dir": str(state / "warehouse")}
        )
        try:
            began = time.monotonic()
            running, coordinator = start(spark, loaded, available_now=True)
            running.await_termination()
            epochs = sum(len(q.recentProgress) for q in running.queries.values())
            print(
                f"[demo] job finished ({loaded.job.delivery_guarantee}, {coordinator.shapes['large-orders'].mode}): "
                f"{epochs} epoch(s) in {time.monotonic() - began:.1f}s"
            )
            if coordinator.history is not None:
                for entry in coordinator.history.records():
                    print(
                        f"[demo]   epoch {entry.epoch}: {entry.outcome}, in {entry.records_in} out "
                        f"{entry.records_out}, {entry.tasks} task transaction(s), {entry.duration_ms} ms"
                    )
        finally:
            spark.stop()

        expected = expected_output(orders)
        got = read_committed(status.bootstrap, sink.topic, expected=len(expected))
        print(f"[demo] {sink.topic} (read_committed): {len(got)} records, expected {len(expected)}")
        for record in got[:10]:
            print(f"  p{record.partition}@{record.offset} {record.key!r} {record.value!r}")
        seen = sorted(json.loads(r.value or b"{}")["order_id"] for r in got)
        want = sorted(int(str(e["order_id"])) for e in expected)
        if seen != want:
            raise SystemExit(f"[demo] output differs from the reference: {len(seen)} vs {len(want)} records")
        print("[demo] output matches the plain-Python reference")
    finally:
        broker.destroy()
        print("[demo] broker stopped")
