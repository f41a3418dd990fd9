"""Connected streams and broadcast state end to end on the real broker. One job, two queries over the same inputs
(events, and limit changes that are also fraud rules): a `KeyedCoProcessFunction` whose two keyed inputs share a
user's state (`out`), and the fraud-rules example's `KeyedBroadcastProcessFunction` with the limits broadcast as
rules (`alerts`). Each output is checked against a plain-Python reference (`ref_connected`) fed with the epochs
Spark logged, through a restart. Plus a `CoMapFunction` on unkeyed connected streams. Their SIGKILL test, with a byte
for byte comparison against a run without kills, is one query pair of the DataStream shared kill run
(`test_api_exactly_once.py`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ethereal_kafka.cli import main
from ethereal_kafka.cli.run_cmd import restore_from
from ethereal_kafka.testing.cluster import KafkaCluster
from ethereal_kafka.testing.plugin import RunJob, TopicFactory
from tests.integration import ref_connected as ref
from tests.integration.api_helpers import ApiJob, base_ts, feed_events, per_key, read_json, write_api_job
from tests.integration.connected_jobs import EVENT_DDL, LIMIT_DDL
from tests.integration.ref_keyed import committed_epochs, dumps

SINK = "value.format=json\nkey.format=string\n"
Reference = Callable[[list[list[ref.Record]], list[list[ref.Record]]], list[dict[str, Any]]]
#: Each output: its sink, its reference, and the field that holds its key.
OUTPUTS: tuple[tuple[str, Reference, str], ...] = (
    ("out", ref.limit_check, "user"),
    ("alerts", ref.rule_alerts, "card"),
)


def _job(
    folder: Path, bootstrap: str, pipeline: str, topics: dict[str, str], max_records: int, extra: str = ""
) -> ApiJob:
    sinks = {name: (topics[name], SINK) for name in ("out", "alerts") if name in topics}
    return write_api_job(
        folder,
        bootstrap,
        f"tests.integration.connected_jobs:{pipeline}",
        {
            "events": (topics["events"], f"value.format=json\nvalue.schema={EVENT_DDL}\n"),
            "limits": (topics["limits"], f"value.format=json\nvalue.schema={LIMIT_DDL}\n"),
        },
        sinks,
        max_records=max_records,
        extra_job=extra,
    )


def _topics(topic_factory: TopicFactory) -> dict[str, str]:
    return {
        "events": topic_factory(partitions=2),
        "limits": topic_factory(partitions=1),
        "out": topic_factory(partitions=2),
        "alerts": topic_factory(partitions=2),
    }


def _split(
    job: ApiJob, sink: str, records: tuple[list[ref.Record], list[ref.Record]], topics: dict[str, str]
) -> Any:
    epochs = committed_epochs(job.checkpoint / sink)
    return (
        ref.split(records[0], epochs, topics["events"]),
        ref.split(records[1], epochs, topics["limits"]),
        epochs,
    )


def _timed(
    sink: str,
    reference: Reference,
    events: list[list[ref.Record]],
    limits: list[list[ref.Record]],
    marks: list[int],
) -> list[dict[str, Any]]:
    """The expected output of `sink` under `limits_and_timed_rules`: its `alerts` come from `FollowedRuleDetector`
    (follow-up timers), whose reference needs each epoch's watermark."""
    if sink == "alerts":
        return ref.timed_rule_alerts(events, limits, marks)
    return reference(events, limits)


def test_rule_and_limit_changes_decide_from_the_next_record_on_and_state_survives_a_restart(
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    run_job: RunJob,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bs = kafka_cluster.bootstrap
    events, limits = ref.make_inputs(seed=3, events=240, limits=30, users=5, start=base_ts())
    topics = _topics(topic_factory)
    job = _job(tmp_path, bs, "limits_and_timed_rules", topics, max_records=60)
    cut_events, cut_limits = len(events) * 6 // 10, len(limits) * 6 // 10
    feed_events(bs, topics["events"], ref.feed_list(events[:cut_events]))
    feed_events(bs, topics["limits"], ref.feed_list(limits[:cut_limits]))
    run_job(job.path)
    first_run = {sink: len(committed_epochs(job.checkpoint / sink)) for sink, _, _ in OUTPUTS}
    first_alerts = Counter(map(dumps, read_json(bs, topics["alerts"])))
    first_out = {sink: per_key(read_json(bs, topics[sink]), field) for sink, _, field in OUTPUTS}
    capsys.readouterr()
    assert main(["savepoint", "--job", str(job.path)]) == 0
    savepoint = capsys.readouterr().out.split(": ", 1)[1].splitlines()[0]
    feed_events(bs, topics["events"], ref.feed_list(events[cut_events:]))
    feed_events(bs, topics["limits"], ref.feed_list(limits[cut_limits:]))
    run_job(job.path)  # a restart: keyed and broadcast state, and timers, come back from the checkpoint

    for sink, reference, field in OUTPUTS:
        event_split, limit_split, epochs = _split(job, sink, (events, limits), topics)
        marks = [e.watermark_ms for e in epochs]
        expected = _timed(sink, reference, event_split, limit_split, marks)
        got = read_json(bs, topics[sink])
        assert per_key(got, field) == per_key(expected, field), sink
        # The second run's output follows from state the first run left: from empty state it would differ.
        done = first_run[sink]
        fresh = _timed(sink, reference, event_split[done:], limit_split[done:], marks[done:])
        assert len(epochs) > done >= 2 and fresh and expected[len(expected) - len(fresh) :] != fresh, sink
        print(f"{sink}: records={len(got)} epochs={len(epochs)} (first run {done})")
    vip = [
        r["verdict"] for r in read_json(bs, topics["out"]) if r["user"] == "vip" and r["amount"] is not None
    ]
    assert vip == ["ok", "over", "ok"], (
        "limit 100, then 20, then removed: each decides from the next event on"
    )
    alerts = read_json(bs, topics["alerts"])
    vip_alerts = [(r["tx_id"], r["threshold"]) for r in alerts if r["card"] == "vip" and r["kind"] != "timer"]
    assert vip_alerts == [(900_001, 20.0)], (
        "rule added (100), changed (20), removed: only the middle event alerts"
    )
    # Follow-up timers registered by the first run's transactions fired in the second run.
    first_ts = max(r.ts for r in events[:cut_events])
    second_run = Counter(map(dumps, alerts)) - first_alerts
    carried = [
        r
        for r in alerts
        if dumps(r) in second_run and r["kind"] == "timer" and r["ts"] - ref.FOLLOW_UP_MS <= first_ts
    ]
    follow_ups = sum(r["kind"] == "timer" for r in alerts)
    assert carried and follow_ups > 100, (len(carried), follow_ups)
    print(f"follow-up timers: {follow_ups}, {len(carried)} registered before the restart and fired after it")

    # The same state from a savepoint of the first run (connected keyed state, broadcast state, timers): an app of
    # its own restores it and reads the rest into topics of its own, and every key's records equal what the
    # restarted run wrote after the cut.
    copies = {**topics, "out": topic_factory(partitions=2), "alerts": topic_factory(partitions=2)}
    restored = _job(tmp_path / "restored", bs, "limits_and_timed_rules", copies, max_records=60)
    restore_from(str(restored.path), savepoint, allow_non_restored=False)
    run_job(restored.path)
    for sink, _, field in OUTPUTS:
        full = per_key(read_json(bs, topics[sink]), field)
        after = {k: v[len(first_out[sink].get(k, [])) :] for k, v in full.items()}
        assert per_key(read_json(bs, copies[sink]), field) == {k: v for k, v in after.items() if v}, (
            f"{sink}: the run restored from the savepoint differs from the restarted run"
        )


def test_co_map_and_a_non_keyed_co_process_function_merge_both_inputs_through_their_own_methods(
    kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path, run_job: RunJob
) -> None:
    bs = kafka_cluster.bootstrap
    events, limits = ref.make_inputs(seed=5, events=30, limits=6, users=3, start=base_ts())
    topics = _topics(topic_factory)
    feed_events(bs, topics["events"], ref.feed_list(events))
    feed_events(bs, topics["limits"], ref.feed_list(limits))
    run_job(_job(tmp_path, bs, "co_map", topics, max_records=500).path)
    expected = [{"user": r.user, "what": f"event {r.id}"} for r in events]
    expected += [{"user": r.user, "what": f"limit {r.limit}"} for r in limits]
    assert sorted(map(dumps, read_json(bs, topics["out"]))) == sorted(map(dumps, expected))
    # The same through a non-keyed CoProcessFunction: no key, no event time (neither input is watermarked).
    processed = [{"user": r.user, "what": f"event {r.id} key None at None"} for r in events]
    processed += [{"user": r.user, "what": f"limit {r.limit} at None"} for r in limits]
    assert sorted(map(dumps, read_json(bs, topics["alerts"]))) == sorted(map(dumps, processed))


def test_a_restart_keeps_the_watermark_of_an_input_that_has_gone_quiet(
    kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path, run_job: RunJob
) -> None:
    """Two watermarked inputs; the limits are all read in the first run and none come after it. Each epoch's
    watermark must be what the input read so far gives, restart or not: the smallest over the inputs of their
    largest event time read in earlier epochs, less the bound (never lower than the epoch before)."""
    bs = kafka_cluster.bootstrap
    events, limits = ref.make_inputs(seed=9, events=300, limits=30, users=4, start=base_ts())
    topics = _topics(topic_factory)
    job = _job(tmp_path, bs, "limit_check", topics, max_records=60)
    half = len(events) // 2
    feed_events(bs, topics["events"], ref.feed_list(events[:half]))
    feed_events(bs, topics["limits"], ref.feed_list(limits))
    run_job(job.path)
    feed_events(bs, topics["events"], ref.feed_list(events[half:]))
    # A restart with a next version of the job, whose watermarks have other graph ids (the checkpoint keeps each
    # input's event time by its sources and timestamp): the limits input has nothing new.
    reordered = job.path.with_name("job-reordered.properties")
    reordered.write_text(job.path.read_text().replace(":limit_check", ":limit_check_reordered"))
    run_job(reordered)

    epochs = committed_epochs(job.checkpoint / "out")
    parts = (ref.split(events, epochs, topics["events"]), ref.split(limits, epochs, topics["limits"]))
    assert [e.watermark_ms for e in epochs] == ref.min_watermarks(*parts)
    # A version whose limits take their event time from another field (and have no uid) is refused before it
    # starts: it would resume the limits without the event time the checkpoint carries for them.
    by_id = job.path.with_name("job-by-id.properties")
    by_id.write_text(job.path.read_text().replace(":limit_check", ":limit_check_limits_by_id"))
    refused = run_job(by_id, check=False)
    assert (
        "carries the event time of input:limits@ts, which this version of the job does not watermark"
        in str(refused.error)
    )
    assert committed_epochs(job.checkpoint / "out") == epochs, "the refused version ran an epoch"
