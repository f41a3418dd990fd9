"""Connected streams end to end on the real broker: a `KeyedCoProcessFunction` whose two inputs (events, limit
changes) share a user's state, checked against a plain-Python reference (`ref_connected`) fed with the epochs Spark
logged — through a restart and through SIGKILLs — and a `CoMapFunction` on unkeyed connected streams."""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from ethereal_kafka.testing.cluster import KafkaCluster
from ethereal_kafka.testing.plugin import RunJob, TopicFactory
from tests.integration import ref_connected as ref
from tests.integration.api_helpers import ApiJob, base_ts, feed_events, read_json, read_records, write_api_job
from tests.integration.connected_jobs import EVENT_DDL, LIMIT_DDL
from tests.integration.ref_keyed import committed_epochs, dumps

SINK = "value.format=json\nkey.format=string\n"
KILLS = 4


def _job(
    folder: Path,
    bootstrap: str,
    pipeline: str,
    events: str,
    limits: str,
    out: str,
    max_records: int,
    extra: str = "",
) -> ApiJob:
    return write_api_job(
        folder,
        bootstrap,
        f"tests.integration.connected_jobs:{pipeline}",
        {
            "events": (events, f"value.format=json\nvalue.schema={EVENT_DDL}\n"),
            "limits": (limits, f"value.format=json\nvalue.schema={LIMIT_DDL}\n"),
        },
        {"out": (out, SINK)},
        max_records=max_records,
        extra_job=extra,
    )


def _expected(
    job: ApiJob, events: list[ref.Record], limits: list[ref.Record], topics: tuple[str, str]
) -> Any:
    epochs = committed_epochs(job.checkpoint / "out")
    return ref.limit_check(ref.split(events, epochs, topics[0]), ref.split(limits, epochs, topics[1])), epochs


def _per_user(records: list[dict[str, Any]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for record in records:
        out[record["user"]].append(dumps(record))
    return dict(out)


def test_a_limit_change_decides_from_the_next_record_on_and_state_survives_a_restart(
    kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path, run_job: RunJob
) -> None:
    bs = kafka_cluster.bootstrap
    events, limits = ref.make_inputs(seed=3, events=240, limits=30, users=5, start=base_ts())
    events_topic, limits_topic, out = (
        topic_factory(partitions=2),
        topic_factory(partitions=1),
        topic_factory(partitions=2),
    )
    job = _job(tmp_path, bs, "limit_check", events_topic, limits_topic, out, max_records=60)
    cut_events, cut_limits = len(events) * 6 // 10, len(limits) * 6 // 10
    feed_events(bs, events_topic, ref.feed_list(events[:cut_events]))
    feed_events(bs, limits_topic, ref.feed_list(limits[:cut_limits]))
    run_job(job.path)
    first_run = len(committed_epochs(job.checkpoint / "out"))
    feed_events(bs, events_topic, ref.feed_list(events[cut_events:]))
    feed_events(bs, limits_topic, ref.feed_list(limits[cut_limits:]))
    run_job(job.path)  # a restart: keyed state comes back from the checkpoint

    expected, epochs = _expected(job, events, limits, (events_topic, limits_topic))
    got = read_json(bs, out)
    assert _per_user(got) == _per_user(expected)
    vip = [r["verdict"] for r in got if r["user"] == "vip" and r["amount"] is not None]
    assert vip == ["ok", "over", "ok"], (
        "limit 100, then 20, then removed: each decides from the next event on"
    )
    # The second run's records follow from state the first run left: from empty state they would differ.
    event_split, limit_split = (
        ref.split(events, epochs, events_topic),
        ref.split(limits, epochs, limits_topic),
    )
    fresh = ref.limit_check(event_split[first_run:], limit_split[first_run:])
    assert len(epochs) > first_run >= 2 and fresh and expected[len(expected) - len(fresh) :] != fresh
    print(f"records={len(got)} epochs={len(epochs)} (first run {first_run})")


@pytest.mark.timeout(1500)
def test_connected_streams_through_kills_match_the_reference_and_a_run_without_kills_byte_for_byte(
    kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path, run_job: RunJob
) -> None:
    from ethereal_kafka.testing.crash import compare, run_with_kills

    bs = kafka_cluster.bootstrap
    events, limits = ref.make_inputs(seed=17, events=1_500, limits=150, users=8, start=base_ts())
    events_topic, limits_topic = topic_factory(partitions=2), topic_factory(partitions=1)
    feed_events(bs, events_topic, ref.feed_list(events))
    feed_events(bs, limits_topic, ref.feed_list(limits))
    # Fixed epochs over input that is all there: both runs plan the same epochs, so their output is the same bytes.
    fixed = "epoch.sizing=fixed\n"
    killed_out, clean_out = topic_factory(partitions=2), topic_factory(partitions=2)
    killed = _job(tmp_path / "killed", bs, "limit_check", events_topic, limits_topic, killed_out, 100, fixed)
    clean = _job(tmp_path / "clean", bs, "limit_check", events_topic, limits_topic, clean_out, 100, fixed)
    root = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    env = {"PYTHONPATH": path, "ETHEREAL_KAFKA_FAULT_TXN_DELAY_MS": "300"}
    run = run_with_kills(
        killed.path, KILLS, seed=23, env=env, final_env={"PYTHONPATH": path}, log=tmp_path / "crash.log"
    )
    print("\n".join(run.landed))
    run_job(clean.path)

    expected, epochs = _expected(killed, events, limits, (events_topic, limits_topic))
    got = read_json(bs, killed_out)
    result = compare(map(dumps, expected), map(dumps, got))
    print(result.line(run.kills))
    assert (result.duplicates, result.lost, result.unexpected) == (0, 0, 0)
    assert _per_user(got) == _per_user(expected)
    assert [e.ends for e in committed_epochs(clean.checkpoint / "out")] == [e.ends for e in epochs]
    assert _by_partition(bs, killed_out) == _by_partition(bs, clean_out), (
        "byte-identical to the run without kills"
    )
    assert run.kills >= KILLS


def _by_partition(bootstrap: str, topic: str) -> dict[int, list[tuple[bytes | None, bytes | None]]]:
    out: dict[int, list[tuple[bytes | None, bytes | None]]] = defaultdict(list)
    for record in read_records(bootstrap, topic):
        out[record.partition].append((record.key, record.value))
    return dict(out)


def test_co_map_merges_both_inputs_through_their_own_methods(
    kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path, run_job: RunJob
) -> None:
    bs = kafka_cluster.bootstrap
    events, limits = ref.make_inputs(seed=5, events=30, limits=6, users=3, start=base_ts())
    events_topic, limits_topic, out = (
        topic_factory(partitions=2),
        topic_factory(partitions=1),
        topic_factory(partitions=2),
    )
    feed_events(bs, events_topic, ref.feed_list(events))
    feed_events(bs, limits_topic, ref.feed_list(limits))
    run_job(_job(tmp_path, bs, "co_map", events_topic, limits_topic, out, max_records=500).path)
    expected = [{"user": r.user, "what": f"event {r.id}"} for r in events]
    expected += [{"user": r.user, "what": f"limit {r.limit}"} for r in limits]
    assert sorted(map(dumps, read_json(bs, out))) == sorted(map(dumps, expected))
