"""The README's first job, run as written: its job file, connector files and pipeline module are copied from
README.md by this test (so the two cannot drift apart), then run on the real broker; the output must be the JSON
the README says a user gets."""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import datetime
from pathlib import Path

from ethereal_kafka.connectors.kafka.topics import create_topic
from ethereal_kafka.testing import KafkaCluster, produce, read_committed
from ethereal_kafka.testing.plugin import RunJob
from tests.doc_blocks import write_doc_files

BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z, a window boundary
WINDOW_MS = 10_000
OUT_OF_ORDER_MS = 2_000


def _orders() -> list[dict[str, object]]:
    customers = ("alice", "bob", "carol")
    return [
        {
            "order_id": i,
            "customer": customers[i % 3],
            "amount": float((i * 37) % 100),
            "ts": BASE_MS + i * 700,
        }
        for i in range(60)
    ]


def test_the_readme_first_job_runs_as_written(
    tmp_path: Path, kafka_cluster: KafkaCluster, run_job: RunJob
) -> None:
    files = write_doc_files("README.md", tmp_path / "project")
    assert set(files) >= {"job.properties", "orders-source.properties", "my_jobs/orders.py"}, sorted(files)
    bs = kafka_cluster.bootstrap
    for topic in ("orders", "large-orders", "revenue"):
        create_topic(bs, topic, 2)
    orders = _orders()
    produce(bs, "orders", [(str(o["customer"]).encode(), json.dumps(o).encode()) for o in orders])

    run = run_job(
        files["job.properties"],
        env={
            "KAFKA_BOOTSTRAP": bs,
            "STATE_DIR": str(tmp_path / "state"),
            "ETHEREAL_KAFKA_HOME": str(tmp_path / "home"),
        },
    )
    assert run.ok

    # large-orders: each order of 50 or more, exactly as it came in (its fields, no Kafka metadata), keyed by customer.
    large = read_committed(bs, "large-orders")
    want = sorted(
        (str(o["customer"]), json.dumps(o, sort_keys=True)) for o in orders if float(o["amount"]) >= 50
    )  # type: ignore[arg-type]
    got = sorted(((r.key or b"").decode(), json.dumps(r.json(), sort_keys=True)) for r in large)
    assert got == want

    # revenue: per customer and 10 s window, the sum of its orders; every window the final watermark closed.
    sums: dict[tuple[str, int], float] = defaultdict(float)
    for o in orders:
        ts = int(o["ts"])  # type: ignore[call-overload]
        sums[(str(o["customer"]), ts - ts % WINDOW_MS)] += float(o["amount"])  # type: ignore[arg-type]
    watermark = max(int(o["ts"]) for o in orders) - OUT_OF_ORDER_MS  # type: ignore[call-overload]
    closed = {k: v for k, v in sums.items() if k[1] + WINDOW_MS <= watermark}
    revenue = read_committed(bs, "revenue")
    rows = [r.json() for r in revenue]
    assert rows and all(set(row) == {"customer", "window_start", "window_end", "revenue"} for row in rows), (
        rows[:3]
    )
    assert all((r.key or b"").decode() == r.json()["customer"] for r in revenue)
    got_windows = {(row["customer"], _ms(row["window_start"])): row["revenue"] for row in rows}
    assert got_windows == closed


def _ms(value: object) -> int:
    """A window bound as the JSON sink writes a timestamp (ISO 8601, UTC, as the README shows), in epoch ms."""
    return int(datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp() * 1000)
