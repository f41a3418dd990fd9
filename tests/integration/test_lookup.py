"""The stream-table lookup join on the real broker: enrichment as of the table offsets pinned per epoch, a replayed
epoch seeing the table it saw the first time although the table changed since, later epochs seeing the updates,
tombstones, left and inner joins; checked against a plain-Python reference built from the table's records."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

from ethereal_kafka.checkpoint.history import CheckpointHistory
from ethereal_kafka.connectors.kafka.topics import ReadRecord, produce, read_all
from ethereal_kafka.runtime.logs import default_log_dir
from ethereal_kafka.testing.cluster import KafkaCluster
from ethereal_kafka.testing.epochs import read_epochs, split_by_epochs
from ethereal_kafka.testing.plugin import RunJob, TopicFactory
from tests.integration.api_helpers import ApiJob, read_json, write_api_job
from tests.integration.join_helpers import run_to_end
from tests.integration.pipelines_joins import FAIL_AT_ENV

TABLE = "customers"


def _table_partition(key: str) -> int:
    return int(key[1:]) % 2


def _put_table(bootstrap: str, topic: str, rows: dict[str, dict[str, Any] | None]) -> None:
    """Write table records (None: a tombstone), each key to its fixed partition."""
    for partition in (0, 1):
        records = [
            (k.encode(), None if v is None else json.dumps(v).encode())
            for k, v in sorted(rows.items())
            if _table_partition(k) == partition
        ]
        if records:
            produce(bootstrap, topic, records, partition=partition)


def _ends(bootstrap: str, topic: str) -> dict[int, int]:
    records = read_all(bootstrap, topic)
    return {p: 1 + max((r.offset for r in records if r.partition == p), default=-1) for p in (0, 1)}


def _epoch_pins(query_checkpoint: Path) -> dict[int, dict[int, int]]:
    """Per epoch, the table pins the source logged (`@table/customers`)."""
    out = {}
    for path in sorted((query_checkpoint / "offsets").iterdir(), key=lambda p: p.name):
        if path.name.isdigit():
            lines = path.read_text(encoding="utf-8").splitlines()
            logged = json.loads(lines[2])
            out[int(path.name)] = {int(p): o for p, o in logged.get(f"@table/{TABLE}", {}).items()}
    return out


def _table_at(records: list[ReadRecord], pins: dict[int, int]) -> dict[str, dict[str, Any]]:
    """The reference: each key's last value below the pinned offset of its partition (tombstones delete)."""
    table: dict[str, dict[str, Any]] = {}
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        if r.offset < pins.get(r.partition, 0):
            key = (r.key or b"").decode()
            if r.value is None:
                table.pop(key, None)
            else:
                table[key] = json.loads(r.value)
    return table


def _log(job: ApiJob) -> str:
    """The job's full log (its failures' causes), from the default log folder."""
    path = default_log_dir(job.app_id) / "ethereal-kafka.log"
    return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""


def _orders(rng: random.Random, first: int, count: int, keys: int) -> list[tuple[int, dict[str, Any]]]:
    return [
        (i % 2, {"order_id": i, "customer": f"c{rng.randrange(keys)}", "amount": rng.randrange(1, 500)})
        for i in range(first, first + count)
    ]


def _expected(
    job: ApiJob, query: str, orders_topic: str, bootstrap: str, table_records: list[ReadRecord], inner: bool
) -> tuple[Counter[str], dict[int, dict[int, int]], dict[int, int]]:
    """The expected output records of `query` (JSON text), the pins per epoch, and each order's epoch."""
    epochs = read_epochs(job.checkpoint / query)
    pins = _epoch_pins(job.checkpoint / query)
    read = read_all(bootstrap, orders_topic)
    per_epoch = split_by_epochs(read, lambda r: (r.topic, r.partition, r.offset), epochs)
    expected: Counter[str] = Counter()
    epoch_of = {}
    for epoch, records in zip(epochs, per_epoch, strict=True):
        table = _table_at(table_records, pins[epoch.batch_id])
        for record in records:
            order = json.loads(record.value or b"{}")
            epoch_of[order["order_id"]] = epoch.batch_id
            row = table.get(order["customer"])
            if inner and row is None:
                continue
            prefix = "" if inner else "c_"
            enriched = {**order, **{f"{prefix}{f}": (row or {}).get(f) for f in ("name", "tier")}}
            expected[json.dumps(enriched, sort_keys=True)] += 1
    return expected, pins, epoch_of


def test_lookup_join_pins_the_table_per_epoch_and_replays_it(
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    run_job: RunJob,
) -> None:
    bs = kafka_cluster.bootstrap
    rng = random.Random(5)
    table_topic = topic_factory(partitions=2, config={"cleanup.policy": "compact"})
    orders_topic = topic_factory(partitions=2)
    left_topic, inner_topic = topic_factory(partitions=2), topic_factory(partitions=2)
    (tmp_path / "customers.table.properties").write_text(
        f"connector.class=kafka-table\nname={TABLE}\nbootstrap.servers={bs}\ntopic={table_topic}\n"
        f"key.format=string\nvalue.format=json\nvalue.schema=name string, tier long\n"
        f"store.dir={tmp_path / 'tables'}\n"
    )
    job = write_api_job(
        tmp_path,
        bs,
        "tests.integration.pipelines_joins:lookup",
        {
            "orders": (
                orders_topic,
                "value.format=json\nvalue.schema=order_id long, customer string, amount long\n",
            )
        },
        {"left": (left_topic, "value.format=json\n"), "inner": (inner_topic, "value.format=json\n")},
        max_records=60,
        extra_job="tables=customers.table.properties\n",
    )

    def feed(orders: list[tuple[int, dict[str, Any]]]) -> None:
        for p in (0, 1):
            produce(
                bs, orders_topic, [(None, json.dumps(o).encode()) for q, o in orders if q == p], partition=p
            )

    # Version 1 of the table, then a first run over 100 orders.
    _put_table(bs, table_topic, {f"c{i}": {"name": f"n{i}-v1", "tier": 1} for i in range(20)})
    v1 = _ends(bs, table_topic)
    feed(_orders(rng, 0, 100, 24))
    run_to_end(run_job, job)

    # Version 2 (updates, tombstones, new keys); a second run fails on order 160, mid-way through its epochs.
    _put_table(
        bs,
        table_topic,
        {
            **{f"c{i}": {"name": f"n{i}-v2", "tier": 2} for i in range(0, 12)},
            **{f"c{i}": None for i in range(12, 16)},
            **{f"c{i}": {"name": f"n{i}-v2", "tier": 2} for i in range(20, 23)},
        },
    )
    v2 = _ends(bs, table_topic)
    feed(_orders(rng, 100, 120, 24))
    for _ in range(3):  # on a loaded machine a run may die earlier for another reason: run again until 160
        failed = run_job(job.path, env={FAIL_AT_ENV: "160"}, check=False)
        assert not failed.ok, "the run was meant to fail on order 160"
        if "test failure at order 160" in str(failed.error) + _log(job):
            break
    else:
        raise AssertionError(f"the run never reached order 160: {failed.error}")

    # Version 3 changes the same keys again; the restart replays the failed epoch (pinned to version 2), then
    # reads on with version 3.
    _put_table(
        bs,
        table_topic,
        {
            **{f"c{i}": {"name": f"n{i}-v3", "tier": 3} for i in range(0, 12)},
            **{f"c{i}": None for i in range(16, 18)},
        },
    )
    v3 = _ends(bs, table_topic)
    feed(_orders(rng, 220, 60, 24))
    run_to_end(run_job, job)

    table_records = read_all(bs, table_topic)
    replayed_v2 = []
    for query, topic, inner in (("left", left_topic, False), ("inner", inner_topic, True)):
        expected, pins, epoch_of = _expected(job, query, orders_topic, bs, table_records, inner)
        outputs = read_json(bs, topic)
        got = Counter(json.dumps(v, sort_keys=True) for v in outputs)
        assert got == expected, (
            query,
            sorted((got - expected).items())[:3],
            sorted((expected - got).items())[:3],
        )
        assert len(epoch_of) == 280, "every order was read"
        assert pins[epoch_of[0]] == v1 and pins[epoch_of[99]] == v1
        # Epochs planned after the restart see version 3.
        assert pins[epoch_of[279]] == v3
        if pins[epoch_of[160]] == v2:
            # The epoch that failed was planned under version 2 and replayed after version 3 was written: its
            # orders of customers changed by version 3 still carry version 2.
            epoch = epoch_of[160]
            changed = [o for o in outputs if epoch_of[o["order_id"]] == epoch and o["customer"] in _V3_KEYS]
            replayed_v2.append(query)
            assert changed and all(o.get("c_tier", o.get("tier")) == 2 for o in changed), changed[:3]
    assert replayed_v2, "the query that failed on order 160 replays its epoch with the table pinned before"
    # The lookup is stateless for Spark and does not shuffle: input offsets commit with the output, per partition.
    with CheckpointHistory(job.app_id, read_only=True) as history:
        assert {record.mode for record in history.records()} == {"partition-preserving"}
    left = read_json(bs, left_topic)
    assert any(o["c_name"] is None and o["customer"] in {f"c{i}" for i in range(12, 16)} for o in left)
    assert any(o["c_tier"] == 3 for o in left)


_V3_KEYS = {f"c{i}" for i in range(0, 12)}
