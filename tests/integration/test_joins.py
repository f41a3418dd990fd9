"""Windowed joins (inner, left, right, full outer, semi, anti; tumbling and sliding windows) and the interval join on
the real broker, over seeded random inputs with out-of-order and late events read in several epochs; each checked
against the plain-Python reference of its engine (`ref_joins`), and replayed (the same input into a fresh output
topic with a fresh checkpoint) to the same records, partition by partition."""

from __future__ import annotations

import dataclasses
import datetime
import json
import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ethereal_kafka.checkpoint.history import CheckpointHistory
from ethereal_kafka.connectors.kafka.topics import read_all
from ethereal_kafka.examples import orders as example
from ethereal_kafka.testing.cluster import KafkaCluster
from ethereal_kafka.testing.epochs import Epoch, split_by_epochs
from ethereal_kafka.testing.plugin import RunJob, TopicFactory
from tests.integration import ref_joins as ref
from tests.integration.api_helpers import (
    ApiJob,
    base_ts,
    feed_events,
    read_json,
    read_records,
    write_api_job,
)
from tests.integration.join_helpers import run_to_end
from tests.integration.pipelines_joins import GAP_MS, GROUPS, LOWER_MS, UPPER_MS, WINDOW_MS, WINDOWED

#: Admission per source and epoch: the inputs (about 110 records a side) take 4 epochs, so rows arrive after a
#: watermark has formed (epoch 0 runs with none, and lateness is judged against the previous epoch's).
MAX_RECORDS = 35
EVENT_SCHEMA = "value.format=json\nvalue.schema=k string, id string, ts long\n"
Events = list[tuple[int, str, dict[str, Any], int]]


def _side(rng: random.Random, side: str, count: int, base: int) -> Events:
    """Events roughly in time order, jittered by up to 1.2 s, one in ten far behind (late), on 2 partitions."""
    events: Events = []
    for i in range(count):
        ts = base + i * 150 + rng.randint(-1200, 300)
        if rng.random() < 0.1:
            ts -= rng.randint(4 * WINDOW_MS // 2, 3 * WINDOW_MS)
        key = f"k{rng.randrange(4)}"
        events.append((rng.randrange(2), key, {"k": key, "id": f"{side}{i}", "ts": ts}, ts))
    last = max(ts for *_, ts in events)
    for p in (0, 1):  # pushes the watermark past every window, so outer and anti rows are emitted
        flush = last + 5 * WINDOW_MS
        events.append((p, "flush", {"k": "flush", "id": f"{side}-flush{p}", "ts": flush}, flush))
    return events


def _job(
    folder: Path, bs: str, pipeline: str, topics: tuple[str, str], sinks: dict[str, str], max_records: int
) -> ApiJob:
    return write_api_job(
        folder,
        bs,
        pipeline,
        {"left": (topics[0], EVENT_SCHEMA), "right": (topics[1], EVENT_SCHEMA)},
        {name: (topic, "value.format=json\nkey.format=string\n") for name, topic in sinks.items()},
        max_records=max_records,
    )


def _run_and_replay(
    tmp_path: Path,
    run_job: RunJob,
    bs: str,
    topic_factory: TopicFactory,
    pipeline: str,
    sinks: tuple[str, ...],
    inputs: tuple[str, str],
) -> tuple[ApiJob, dict[str, str]]:
    """Run the job, then the same job from scratch into fresh output topics; assert both wrote the same records."""
    outputs = {name: topic_factory(partitions=2) for name in sinks}
    job = _job(tmp_path / "run", bs, pipeline, inputs, outputs, MAX_RECORDS)
    run_to_end(run_job, job)
    replay_outputs = {name: topic_factory(partitions=2) for name in sinks}
    replay = _job(tmp_path / "replay", bs, pipeline, inputs, replay_outputs, MAX_RECORDS)
    run_to_end(run_job, replay)
    for name in sinks:
        first = [(r.partition, r.key, r.value) for r in read_records(bs, outputs[name])]
        second = [(r.partition, r.key, r.value) for r in read_records(bs, replay_outputs[name])]
        assert first == second, f"{name}: the replay wrote other records"
        assert [e.ends for e in job.epochs(name)] == [e.ends for e in replay.epochs(name)]
    return job, outputs


def _arrivals(
    bs: str, topic: str, epochs: list[Epoch], parse: Callable[[dict[str, Any]], ref.Event] | None = None
) -> list[ref.Event]:
    """The input events of `topic`, each with the epoch it was read in (the source reading `topic`)."""
    source = next(i for i, ends in enumerate(epochs[-1].ends) if any(t == topic for t, _ in ends))
    records = read_all(bs, topic)
    per_epoch = split_by_epochs(records, lambda r: (r.topic, r.partition, r.offset), epochs, source)
    out = []
    for epoch, chunk in zip(epochs, per_epoch, strict=True):
        for record in chunk:
            value = json.loads(record.value or b"{}")
            event = parse(value) if parse is not None else ref.Event(value["k"], value["id"], value["ts"], 0)
            out.append(
                dataclasses.replace(
                    event, epoch=epoch.batch_id, partition=record.partition, offset=record.offset
                )
            )
    assert len(out) == len(records), "every input record was read"
    return out


def _ms(text: str) -> int:
    return int(datetime.datetime.fromisoformat(text).timestamp() * 1000)


def _windowed_rows(elements: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    """Default-merge output elements as `(left id, right id, key, window start, window end)`."""
    return Counter(
        (
            e.get("id"),
            e.get("right_id"),
            e.get("k") if e.get("k") is not None else e.get("right_k"),
            _ms(e["window_start"]),
            _ms(e["window_end"]),
        )
        for e in elements
    )


def _check_windowed(
    bs: str, job: ApiJob, outputs: dict[str, str], inputs: tuple[str, str], sink: str
) -> Counter:
    how, windows, function = WINDOWED[sink]
    epochs = job.epochs(sink)
    lefts, rights = _arrivals(bs, inputs[0], epochs), _arrivals(bs, inputs[1], epochs)
    watermarks = [e.watermark_ms for e in epochs]
    if windows == "session":
        expected = ref.framework_session_join(how, lefts, rights, GAP_MS, watermarks)
    else:
        assign = ref.sliding(2 * WINDOW_MS, WINDOW_MS) if windows == "sliding" else ref.tumbling(WINDOW_MS)
        model = ref.framework_window_join if how == "anti" else ref.native_window_join
        expected = model(how, lefts, rights, assign, watermarks)
    elements = read_json(bs, outputs[sink])
    if function:
        got = Counter((e["lid"], e["rid"], e["k"]) for e in elements)
        expected = Counter({(a, b, k): n for (a, b, k, _, _), n in expected.items()})
    else:
        got = _windowed_rows(elements)
    assert got == expected, (sink, sorted((got - expected).items())[:4], sorted((expected - got).items())[:4])
    assert len(epochs) >= 4, f"{sink}: several epochs"
    return got


def test_windowed_inner_and_outer_joins(
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    run_job: RunJob,
) -> None:
    bs = kafka_cluster.bootstrap
    rng = random.Random(11)
    inputs = (topic_factory(partitions=2), topic_factory(partitions=2))
    base = base_ts()
    feed_events(bs, inputs[0], _side(rng, "L", 110, base))
    feed_events(bs, inputs[1], _side(rng, "R", 110, base))
    job, outputs = _run_and_replay(
        tmp_path,
        run_job,
        bs,
        topic_factory,
        "tests.integration.pipelines_joins:outer",
        GROUPS["outer"],
        inputs,
    )
    results = {sink: _check_windowed(bs, job, outputs, inputs, sink) for sink in GROUPS["outer"]}
    # The inputs exercise what the references model: late rows dropped, null-padded rows on both sides.
    assert any(b is None for _, b, *_ in results["left_sliding"])
    assert any(a is None for a, *_ in results["right_fn"])
    assert (
        {a is None for a, *_ in results["full"]}
        == {True, False}
        == {b is None for _, b, *_ in results["full"]}
    )


def test_windowed_semi_and_anti_joins(
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    run_job: RunJob,
) -> None:
    bs = kafka_cluster.bootstrap
    rng = random.Random(23)
    inputs = (topic_factory(partitions=2), topic_factory(partitions=2))
    base = base_ts()
    feed_events(bs, inputs[0], _side(rng, "L", 110, base))
    feed_events(bs, inputs[1], _side(rng, "R", 70, base))
    job, outputs = _run_and_replay(
        tmp_path,
        run_job,
        bs,
        topic_factory,
        "tests.integration.pipelines_joins:filtering",
        GROUPS["filtering"],
        inputs,
    )
    results = {sink: _check_windowed(bs, job, outputs, inputs, sink) for sink in GROUPS["filtering"]}
    assert all(results.values()), "every kind emitted rows"


def test_interval_join(
    kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path, run_job: RunJob
) -> None:
    bs = kafka_cluster.bootstrap
    rng = random.Random(37)
    inputs = (topic_factory(partitions=2), topic_factory(partitions=2))
    base = base_ts()
    feed_events(bs, inputs[0], _side(rng, "L", 110, base))
    feed_events(bs, inputs[1], _side(rng, "R", 110, base))
    job, outputs = _run_and_replay(
        tmp_path,
        run_job,
        bs,
        topic_factory,
        "tests.integration.pipelines_joins:interval",
        ("interval",),
        inputs,
    )
    epochs = job.epochs("interval")
    lefts, rights = _arrivals(bs, inputs[0], epochs), _arrivals(bs, inputs[1], epochs)
    expected = ref.interval_join(lefts, rights, LOWER_MS, UPPER_MS, [e.watermark_ms for e in epochs])
    got = Counter((e["id"], e["right_id"], e["k"]) for e in read_json(bs, outputs["interval"]))
    assert got == expected, (sorted((got - expected).items())[:4], sorted((expected - got).items())[:4])
    late = [e for e in lefts + rights if e.ts <= (epochs[e.epoch - 1].watermark_ms if e.epoch else 0)]
    assert late and len(epochs) >= 4, "the input has late rows and spans several epochs"


def test_orders_shipments_example(
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    run_job: RunJob,
) -> None:
    """The example job (ethereal_kafka.examples.orders) against the reference of a native inner window join."""
    bs = kafka_cluster.bootstrap
    orders_topic, shipments_topic, out = (topic_factory(partitions=2) for _ in range(3))
    orders, shipments = example.orders_and_shipments(160, seed=9, start_ms=base_ts())
    feed_events(bs, orders_topic, [(o["order_id"] % 2, str(o["order_id"]), o, o["ts"]) for o in orders])
    feed_events(bs, shipments_topic, [(s["order_id"] % 2, str(s["order_id"]), s, s["ts"]) for s in shipments])
    job = write_api_job(
        tmp_path,
        bs,
        "ethereal_kafka.examples.orders:build",
        {
            "orders": (orders_topic, f"value.format=json\nvalue.schema={example.ORDER_DDL}\n"),
            "shipments": (shipments_topic, f"value.format=json\nvalue.schema={example.SHIPMENT_DDL}\n"),
        },
        {"latencies": (out, "value.format=json\nkey.format=string\n")},
        max_records=50,
    )
    run_to_end(run_job, job)
    epochs = job.epochs("latencies")
    by_order = {str(o["order_id"]): o for o in orders}
    by_shipment = {str(s["shipment_id"]): s for s in shipments}

    def events(topic: str, id_field: str) -> list[ref.Event]:
        return _arrivals(
            bs, topic, epochs, lambda v: ref.Event(str(v["order_id"]), str(v[id_field]), v["ts"], 0)
        )

    pairs = ref.native_window_join(
        "inner",
        events(orders_topic, "order_id"),
        events(shipments_topic, "shipment_id"),
        ref.tumbling(example.WINDOW.millis),
        [e.watermark_ms for e in epochs],
    )
    expected = Counter(
        json.dumps(example.latency(by_order[a], by_shipment[b]), sort_keys=True)
        for (a, b, *_), n in pairs.items()
        for _ in range(n)
    )
    records = read_records(bs, out)
    got = Counter(json.dumps(json.loads(r.value or b"{}"), sort_keys=True) for r in records)
    assert got == expected, (sorted((got - expected).items())[:3], sorted((expected - got).items())[:3])
    assert len(got) > 60 and all(
        r.key == str(json.loads(r.value or b"{}")["order_id"]).encode() for r in records
    )
    # Each epoch's per-operator figures, read from the plan it ran: the inputs' event-time carriers (a union branch
    # each, `plan.event_time`) are no operators of the graph, and figures are there in every epoch.
    with CheckpointHistory(job.app_id, read_only=True) as history:
        committed = [r for r in history.records() if r.outcome == "committed"]
    missing = [r.epoch for r in committed if not r.operators or any(None in v for v in r.operators.values())]
    assert committed and not missing, missing
