"""Exactly-once under SIGKILL, in the suite's shared kill run: one job process of both APIs. DataStream queries: one
query writing two sinks commits both in one transaction per task; a keyed process function's state and timers,
connected streams' shared keyed state and broadcast state with timers resume where the last committed epoch left
them. DataFrame queries (added with `env.add_dataframe_pipeline`): a stateless map/filter and a keyed running
aggregate with dead letters, an event-time windowed count. SIGKILLs at random moments leave no sink with a
duplicate or a gap, and with fixed epochs the killed run writes the same bytes as a run without kills."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest

from ethereal_kafka.runtime.logs import JVM_OUTPUT_FILE, default_log_dir
from ethereal_kafka.testing.cluster import KafkaCluster
from ethereal_kafka.testing.crash import compare, run_with_kills
from ethereal_kafka.testing.plugin import RunJob, TopicFactory
from tests.integration import ref_connected as cref
from tests.integration import ref_keyed as ref
from tests.integration.api_helpers import (
    base_ts,
    by_partition,
    feed_events,
    per_key,
    read_json,
    write_api_job,
)
from tests.integration.connected_jobs import EVENT_DDL as PAYMENT_DDL
from tests.integration.connected_jobs import LIMIT_DDL
from tests.integration.eos_helpers import FINAL_RUN, FRAME_MAX_RECORDS, feed_frames
from tests.integration.keyed_jobs import EVENT_DDL
from tests.integration.kill_jobs import CONNECTED
from tests.integration.pipelines_api import WINDOW_MS

TEXTS = ["the quick brown fox", "jumps over the lazy dog", "a b cc ddd", "fox and dog and cat", "x"]


#: Kills of the shared run: each lands in every query at once, aimed at a moment of one of them.
KILLS = 12


@pytest.mark.timeout(1800)
def test_eight_queries_of_both_apis_survive_kills(
    kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path, run_job: RunJob
) -> None:
    """One job process, eight queries, SIGKILLed `KILLS` times. DataStream: a keyed process function with state
    and event-time timers writing a main and a side output; a window written to two sinks by one query; Python
    functions only, chained into the source's read tasks (`plan.chaining`), over the window's input; a
    `KeyedCoProcessFunction` whose two keyed inputs share a user's state; a `KeyedBroadcastProcessFunction` with
    broadcast rules and event-time timers. DataFrame (`examples.eos.three_queries`, added to the same job): a
    stateless map/filter and a keyed running aggregate, each with poison input sent to dead letters, and an
    event-time windowed count. Each sink's output matches its plain-Python reference: no duplicate, no gap, per-key
    order kept, both sinks of a query committed together, each poison record dead-lettered once. The connected
    queries read fixed epochs (pinned sizes, so the last run plans them as every other run did): their output is
    also the same bytes, per partition, as a run without kills. One process for all seven pays the restarts once
    (docs/dev/testing.md)."""
    bs = kafka_cluster.bootstrap
    # keyed state and timers (`keyed_jobs.slot_timers`)
    events_topic = topic_factory(partitions=2)
    keyed_events = ref.make_events(31, 600, 8, base_ts())
    feed_events(bs, events_topic, ref.feed_list(keyed_events))
    out, cancelled = topic_factory(partitions=2), topic_factory(partitions=2)
    # a window into two sinks (`pipelines_api.counts_two_ways`)
    lines_topic = topic_factory(partitions=2)
    counts_topic, flat_topic = topic_factory(partitions=2), topic_factory(partitions=2)
    words_topic = topic_factory(partitions=2)  # the chained query's (`pipelines_api.chained_words`)
    base = base_ts()
    lines = [
        (i % 2, f"l{i}", {"seq": i, "text": TEXTS[i % len(TEXTS)], "ts": base + i * 400}, base + i * 400)
        for i in range(1200)
    ]
    last = base + 1199 * 400
    flush = [(p, "flush", {"seq": -1, "text": "flush", "ts": last + 3 * WINDOW_MS}, last) for p in range(2)]
    feed_events(bs, lines_topic, lines + flush)
    # connected keyed streams, broadcast state and timers (`connected_jobs.limits_and`, renamed `CONNECTED`)
    payments, limits = cref.make_inputs(seed=17, events=1_500, limits=150, users=8, start=base_ts())
    connected = {
        CONNECTED.events: topic_factory(partitions=2),
        CONNECTED.limits: topic_factory(partitions=1),
        CONNECTED.out: topic_factory(partitions=2),
        CONNECTED.alerts: topic_factory(partitions=2),
    }
    feed_events(bs, connected[CONNECTED.events], cref.feed_list(payments))
    feed_events(bs, connected[CONNECTED.limits], cref.feed_list(limits))
    # the DataFrame queries (`examples.eos.three_queries`)
    frames = feed_frames(bs, topic_factory)
    json_sink = "value.format=json\nkey.format=string\n"
    connected_sources = {
        CONNECTED.events: (connected[CONNECTED.events], f"value.format=json\nvalue.schema={PAYMENT_DDL}\n"),
        CONNECTED.limits: (connected[CONNECTED.limits], f"value.format=json\nvalue.schema={LIMIT_DDL}\n"),
    }
    connected_sinks = {name: (connected[name], json_sink) for name in (CONNECTED.out, CONNECTED.alerts)}
    # ~30 epochs of payments, enough for 12 kills; the limits are read three times as fast (~11 epochs): they run
    # ahead in event time and then go quiet, so most restarts find a quiet input that read ahead, whose watermark
    # the query must carry across the restart (`plan.event_time`) for the runs to match byte for byte.
    connected_records = {CONNECTED.events: 50, CONNECTED.limits: 15}
    fixed = "epoch.sizing=fixed\n"
    job = write_api_job(
        tmp_path,
        bs,
        "tests.integration.kill_jobs:both_apis",
        {
            "events": (events_topic, f"value.format=json\nvalue.schema={EVENT_DDL}\n"),
            "lines": (lines_topic, "value.format=json\nvalue.schema=seq long, text string, ts long\n"),
            **connected_sources,
            **frames.sources,
        },
        {
            "out": (out, json_sink),
            "cancelled": (cancelled, json_sink),
            "counts": (counts_topic, "value.format=json\n"),
            "flat": (flat_topic, "value.format=json\n"),
            "words": (words_topic, json_sink),
            **connected_sinks,
            **frames.sinks,
        },
        max_records={"events": 20, "lines": 40, **connected_records, **FRAME_MAX_RECORDS},
        extra_job=fixed,
        pinned=connected_sources,
    )
    # The same connected queries without kills, over the same input, into topics of their own.
    clean_sinks = {name: (topic_factory(partitions=2), json_sink) for name in connected_sinks}
    clean = write_api_job(
        tmp_path / "clean",
        bs,
        "tests.integration.kill_jobs:rules_only",
        connected_sources,
        clean_sinks,
        max_records=connected_records,
        extra_job=fixed,
        pinned=connected_sources,
    )
    repo = str(Path(__file__).resolve().parents[2])
    env = {
        "PYTHONPATH": os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH", "")) if p),
        "ETHEREAL_KAFKA_FAULT_TXN_DELAY_MS": "300",  # widen each task's open transaction: kills land in commits
    }
    final = {**FINAL_RUN, "PYTHONPATH": env["PYTHONPATH"]}
    run = run_with_kills(
        job.path, KILLS, seed=41, env=env, final_env=final, log=tmp_path / "crash.log", timeout_s=1500
    )
    print("\n".join(run.landed))
    assert run.kills >= KILLS
    run_job(clean.path)

    epochs = ref.committed_epochs(job.checkpoint / "cancelled+out")
    split = ref.by_epoch(keyed_events, epochs, events_topic)
    ref.check_watermarks(split, epochs)
    main, cancels = ref.slot_timers(split, epochs)
    for name, topic, expected in (("out", out, main), ("cancelled", cancelled, cancels)):
        result = compare(
            [ref.dumps(r) for rs in expected.values() for r in rs],
            [ref.dumps(r) for r in read_json(bs, topic)],
        )
        print(f"{name}: {result.line(run.kills)}")
        assert (result.duplicates, result.lost, result.unexpected) == (0, 0, 0)
    # What the runs printed on their terminal: no transformWithState worker chatter (it goes to the log folder).
    terminal = run.log.read_text(encoding="utf-8", errors="replace")
    assert "TransformWithStateInPandas" not in terminal
    jvm_output = default_log_dir(job.app_id) / JVM_OUTPUT_FILE
    assert "TransformWithStateInPandas Python worker" in jvm_output.read_text(
        encoding="utf-8", errors="replace"
    )

    expected_words: Counter[tuple[str, int]] = Counter()
    for _, _, v, _ in lines:
        ts = int(str(v["ts"]))
        for word in str(v["text"]).split():
            expected_words[(word, ts - ts % WINDOW_MS)] += 1
    flat = compare(
        [(w, s, n) for (w, s), n in expected_words.items()],
        [(e["word"], e["start_ms"], e["n"]) for e in read_json(bs, flat_topic)],
    )
    counts = compare(
        sorted((w, n) for (w, _), n in expected_words.items()),
        [(c["word"], c["count"]) for c in read_json(bs, counts_topic)],
    )
    print(f"flat: {flat.line(run.kills)}\ncounts: {counts.line(run.kills)}")
    assert (flat.duplicates, flat.lost, flat.unexpected) == (0, 0, 0)
    assert (counts.duplicates, counts.lost, counts.unexpected) == (0, 0, 0)

    # The chained query: every word of every line once, and each input partition's words (seq % 2) in input order.
    expected_chained = [
        {"word": w.upper(), "seq": v["seq"]}
        for _, _, v, _ in lines + flush
        for w in str(v["text"]).split()
        if len(w) > 2
    ]
    words_by_partition = {
        p: [json.loads(v or b"null") for _, v in rows] for p, rows in by_partition(bs, words_topic).items()
    }
    got_words = [w for rows in words_by_partition.values() for w in rows]
    chained = compare(map(ref.dumps, expected_chained), map(ref.dumps, got_words))
    print(f"words (chained): {chained.line(run.kills)}")
    assert (chained.duplicates, chained.lost, chained.unexpected) == (0, 0, 0)
    for partition, rows in words_by_partition.items():
        for parity in (0, 1):
            seqs = [int(w["seq"]) for w in rows if int(w["seq"]) >= 0 and int(w["seq"]) % 2 == parity]
            assert seqs == sorted(seqs), (partition, parity)

    # Connected streams and broadcast state: each output against its reference fed the epochs Spark logged (alerts
    # need each epoch's watermark for the follow-up timers), per key in order, and byte for byte per partition
    # against the run without kills, which planned the same epochs.
    outputs = ((CONNECTED.out, "user"), (CONNECTED.alerts, "card"))
    for sink, field in outputs:
        epochs = ref.committed_epochs(job.checkpoint / sink)
        payment_split = cref.split(payments, epochs, connected[CONNECTED.events])
        limit_split = cref.split(limits, epochs, connected[CONNECTED.limits])
        # The limits are read three times as fast as the payments: they run ahead in event time and then go quiet,
        # and most kills land after that. Each epoch's watermark is what the input read so far gives.
        assert [e.watermark_ms for e in epochs] == cref.min_watermarks(payment_split, limit_split), sink
        if sink == CONNECTED.alerts:
            expected = cref.timed_rule_alerts(payment_split, limit_split, [e.watermark_ms for e in epochs])
        else:
            expected = cref.limit_check(payment_split, limit_split)
        got = read_json(bs, connected[sink])
        result = compare(map(ref.dumps, expected), map(ref.dumps, got))
        print(f"{sink}: {result.line(run.kills)}")
        assert (result.duplicates, result.lost, result.unexpected) == (0, 0, 0), sink
        assert per_key(got, field) == per_key(expected, field), sink
        clean_epochs = ref.committed_epochs(clean.checkpoint / sink)
        assert [e.ends for e in clean_epochs] == [e.ends for e in epochs], sink
        assert by_partition(bs, connected[sink]) == by_partition(bs, clean_sinks[sink][0]), sink
    follow_ups = sum(r["kind"] == "timer" for r in read_json(bs, connected[CONNECTED.alerts]))
    assert follow_ups > 100, follow_ups

    frames.check(bs, run.kills)
