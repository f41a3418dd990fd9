"""Keyed state, process functions, timers, TTL and rolling aggregates end to end on the real broker, each checked
against a plain-Python reference (`ref_keyed`) fed with the epochs Spark logged.

Inputs: seeded random events over 2 partitions, out of order within the watermark bound, with late events; a
small `max.records.per.epoch` gives several epochs. Outputs are compared per key, in the order a read_committed
consumer sees them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ethereal_kafka.runtime.spark import STATE_STORE_KEY, STATE_STORE_PROVIDERS
from ethereal_kafka.testing.cluster import KafkaCluster
from ethereal_kafka.testing.epochs import split_by_epochs
from ethereal_kafka.testing.plugin import RunJob, TopicFactory
from tests.integration import ref_keyed as ref
from tests.integration.api_helpers import (
    ApiJob,
    base_ts,
    feed_events,
    read_json,
    read_records,
    write_api_job,
)
from tests.integration.keyed_jobs import EVENT_DDL

SOURCE = f"value.format=json\nvalue.schema={EVENT_DDL}\n"
SINK = "value.format=json\nkey.format=string\n"


def _job(
    folder: Path,
    bootstrap: str,
    pipeline: str,
    source: str,
    sinks: dict[str, str],
    max_records: int = 40,
    extra_job: str = "",
) -> ApiJob:
    return write_api_job(
        folder,
        bootstrap,
        f"tests.integration.keyed_jobs:{pipeline}",
        {"events": (source, SOURCE)},
        {name: (topic, SINK) for name, topic in sinks.items()},
        max_records=max_records,
        extra_job=extra_job,
    )


def _feed(
    kafka: KafkaCluster, topic_factory: TopicFactory, seed: int, count: int, users: int, flush: bool = False
) -> tuple[str, list[ref.Event]]:
    source = topic_factory(partitions=2)
    events = ref.make_events(seed, count, users, base_ts())
    if flush:
        events = ref.with_flush(events)
    feed_events(kafka.bootstrap, source, ref.feed_list(events))
    return source, events


def _split(job: ApiJob, query: str, events: list[ref.Event], source: str) -> tuple[list, list]:
    epochs = ref.committed_epochs(job.checkpoint / query)
    split = ref.by_epoch(events, epochs, source)
    ref.check_watermarks(split, epochs)
    return split, epochs


def _assert_per_key(got: dict[Any, list[dict[str, Any]]], expected: dict[Any, list[dict[str, Any]]]) -> None:
    """Each key's records, as multisets: the sink writes an epoch's records sorted (so a replay writes them in the
    same order), not in emission order; the records' running values carry the order the operator saw."""
    assert sorted(got) == sorted(expected)
    for key, records in expected.items():
        mine, theirs = sorted(map(ref.dumps, got[key])), sorted(map(ref.dumps, records))
        missing = [r for r in theirs if r not in mine][:2]
        extra = [r for r in mine if r not in theirs][:2]
        assert mine == theirs, (key, len(mine), len(theirs), missing, extra)


def test_every_kind_of_state_in_event_time(
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    run_job: RunJob,
) -> None:
    source, events = _feed(kafka_cluster, topic_factory, seed=5, count=160, users=6)
    out = topic_factory(partitions=2)
    job = _job(tmp_path, kafka_cluster.bootstrap, "state_kinds", source, {"out": out})
    run_job(job.path)
    split, _ = _split(job, "out", events, source)
    assert sum(1 for s in split if s) >= 4, "several epochs"
    got = ref.per_user(read_json(kafka_cluster.bootstrap, out))
    _assert_per_key(got, ref.state_kinds(split))


def test_event_time_timers_side_output_and_replay(
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    run_job: RunJob,
) -> None:
    bs = kafka_cluster.bootstrap
    source, events = _feed(kafka_cluster, topic_factory, seed=11, count=180, users=5)
    runs = []
    for attempt in range(2):
        out, cancelled = topic_factory(partitions=2), topic_factory(partitions=2)
        job = _job(
            tmp_path / f"run{attempt}", bs, "slot_timers", source, {"out": out, "cancelled": cancelled}
        )
        run_job(job.path)
        runs.append((job, out, cancelled))
    job, out, cancelled = runs[0]
    split, epochs = _split(job, "cancelled+out", events, source)
    main, cancels = ref.slot_timers(split, epochs)
    got = ref.per_user(read_json(bs, out))
    _assert_per_key(got, main)
    _assert_per_key(ref.per_user(read_json(bs, cancelled)), cancels)
    late = sum(1 for r in read_json(bs, out) if r["kind"] == "element" and r["at"] <= r["wm"])
    timers = sum(1 for rs in main.values() for r in rs if r["kind"] == "timer")
    assert late > 0 and timers > 0 and sum(len(c) for c in cancels.values()) > 0
    # A replay of the same offsets (fresh checkpoint, fresh output topics) writes the same records.
    first, second = (
        [[(r.partition, r.key, r.value) for r in read_records(bs, topic)] for topic in (o, c)]
        for _, o, c in runs
    )
    assert first == second


def test_event_time_timers_polled_in_processing_time_mode(
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    run_job: RunJob,
) -> None:
    bs = kafka_cluster.bootstrap
    source, events = _feed(kafka_cluster, topic_factory, seed=13, count=140, users=4)
    out, cancelled = topic_factory(partitions=2), topic_factory(partitions=2)
    job = _job(tmp_path, bs, "slot_timers_polled", source, {"out": out, "cancelled": cancelled})
    run_job(job.path)
    split, epochs = _split(job, "cancelled+out", events, source)
    main, cancels = ref.slot_timers(split, epochs)
    _assert_per_key(ref.per_user(read_json(bs, out)), main)
    _assert_per_key(ref.per_user(read_json(bs, cancelled)), cancels)


def test_processing_time_timers_and_ttl(
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    run_job: RunJob,
) -> None:
    bs = kafka_cluster.bootstrap
    source, events = _feed(kafka_cluster, topic_factory, seed=17, count=120, users=4)
    out = topic_factory(partitions=2)
    # Epochs at least ~1 s apart, TTL 300 ms: a value outlives its epoch only within it.
    job = _job(tmp_path, bs, "expiring", source, {"out": out}, extra_job="min.pause.between.epochs.ms=1000\n")
    run_job(job.path)
    epochs = ref.committed_epochs(job.checkpoint / "out")
    split = ref.by_epoch(events, epochs, source, event_time=False)
    expected = ref.expiring(split, epochs, with_timers=True)
    _assert_per_key(ref.per_user(read_json(bs, out)), expected)
    records = [r for rs in expected.values() for r in rs]
    assert any(r["kind"] == "timer" for r in records)
    assert any(r["prev"] is not None for r in records) and any(r["prev"] is None for r in records[5:])


def test_ttl_in_event_time_mode(
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    run_job: RunJob,
) -> None:
    bs = kafka_cluster.bootstrap
    source, events = _feed(kafka_cluster, topic_factory, seed=19, count=120, users=4)
    out = topic_factory(partitions=2)
    job = _job(
        tmp_path,
        bs,
        "expiring_event_mode",
        source,
        {"out": out},
        extra_job="min.pause.between.epochs.ms=1000\n",
    )
    run_job(job.path)
    split, epochs = _split(job, "out", events, source)
    expected = ref.expiring(split, epochs, with_timers=False)
    _assert_per_key(ref.per_user(read_json(bs, out)), expected)


def test_rolling_sum_reduce_and_aggregate(
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    run_job: RunJob,
) -> None:
    bs = kafka_cluster.bootstrap
    source, events = _feed(kafka_cluster, topic_factory, seed=23, count=150, users=5)
    out = topic_factory(partitions=2)
    job = _job(tmp_path, bs, "rolling", source, {"out": out})
    run_job(job.path)
    split, _ = _split(job, "out", events, source)
    got = ref.group(read_json(bs, out), lambda r: (r["kind"], r["user"]))
    expected = ref.rolling(split)
    _assert_per_key(got, expected)


def _recorded_store(folder: Path) -> str:
    """The state store Spark recorded in the one query checkpoint under `folder` (its first offset log entry)."""
    [first] = folder.rglob("offsets/0")
    return str(json.loads(first.read_text().splitlines()[1])["conf"][STATE_STORE_KEY])


@pytest.mark.parametrize("backend", ["auto", "memory", "rocksdb"])
def test_state_backends_run_native_operators_and_memory_refuses_framework_ones(
    backend: str,
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    run_job: RunJob,
) -> None:
    bs = kafka_cluster.bootstrap
    source, events = _feed(kafka_cluster, topic_factory, seed=29, count=150, users=4, flush=True)
    out = topic_factory(partitions=2)
    job = _job(tmp_path, bs, "native_counts", source, {"out": out}, extra_job=f"state.backend={backend}\n")
    run_job(job.path)
    split, epochs = _split(job, "out", events, source)
    expected = ref.native_counts(split, epochs)
    got = {(r["user"], r["start"]): r["count"] for r in read_json(bs, out)}
    assert got == expected
    kind = "rocksdb" if backend == "rocksdb" else "memory"  # auto: a window under a watermark runs in memory
    assert _recorded_store(tmp_path) == STATE_STORE_PROVIDERS[kind]
    if backend == "memory":
        refused = _job(
            tmp_path / "refused", bs, "state_kinds", source, {"out": out}, extra_job="state.backend=memory\n"
        )
        result = run_job(refused.path, check=False)
        last = str(result.error)
        assert not result.ok and "\n" not in last
        assert "process#" in last and "state.backend=rocksdb" in last, last


def test_fraud_example(
    kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path, run_job: RunJob
) -> None:
    from ethereal_kafka.examples import fraud

    bs = kafka_cluster.bootstrap
    source, alerts, rejected = (topic_factory(partitions=2) for _ in range(3))
    txs = ref.fraud_input(fraud.transactions(200, cards=3, seed=3, start_ms=base_ts()), seed=3)
    feed_events(bs, source, [(t.partition, t.value["card"], t.value, t.value["ts"]) for t in txs])
    job = write_api_job(
        tmp_path,
        bs,
        "ethereal_kafka.examples.fraud:build",
        {"transactions": (source, f"value.format=json\nvalue.schema={fraud.TRANSACTION_DDL}\n")},
        {"alerts": (alerts, SINK), "rejected": (rejected, SINK)},
        max_records=50,
    )
    run_job(job.path)
    epochs = ref.committed_epochs(job.checkpoint / "alerts+rejected")
    split = split_by_epochs(txs, lambda t: (source, t.partition, t.offset), epochs)
    assert sum(len(s) for s in split) == len(txs)
    expected_alerts, expected_rejected = ref.fraud(split, epochs)
    _assert_per_key(ref.group(read_json(bs, alerts), lambda r: r["card"]), expected_alerts)
    _assert_per_key(ref.group(read_json(bs, rejected), lambda r: r["card"]), expected_rejected)
    assert sum(map(len, expected_alerts.values())) >= 3
