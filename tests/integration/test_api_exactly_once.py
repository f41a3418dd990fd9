"""Exactly-once for DataStream jobs: one query writing two sinks commits both in one transaction per task, and a
keyed process function's state and timers resume where the last committed epoch left them, so SIGKILLs at random
moments leave no sink with a duplicate or a gap."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from ethereal_kafka.runtime.logs import JVM_OUTPUT_FILE, default_log_dir
from ethereal_kafka.testing.cluster import KafkaCluster
from ethereal_kafka.testing.crash import compare, run_with_kills
from ethereal_kafka.testing.plugin import TopicFactory
from tests.integration import ref_keyed as ref
from tests.integration.api_helpers import base_ts, feed_events, read_json, write_api_job
from tests.integration.eos_helpers import FINAL_RUN
from tests.integration.keyed_jobs import EVENT_DDL
from tests.integration.pipelines_api import WINDOW_MS

TEXTS = ["the quick brown fox", "jumps over the lazy dog", "a b cc ddd", "fox and dog and cat", "x"]


#: Kills of the shared run: each lands in both queries at once, aimed at a moment of one of them.
KILLS = 12


@pytest.mark.timeout(1800)
def test_timers_and_a_window_written_to_two_sinks_survive_kills(
    kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    """One job process, two queries, SIGKILLed `KILLS` times: a keyed process function with state and event-time
    timers writing a main and a side output, and a window written to two sinks by one query. Each sink's output
    matches its plain-Python reference: no duplicate, no gap, both sinks of a query committed together. One process
    for both halves the restarts two kill runs paid (docs/dev/testing.md)."""
    bs = kafka_cluster.bootstrap
    # keyed state and timers (`keyed_jobs.slot_timers`)
    events_topic = topic_factory(partitions=2)
    keyed_events = ref.make_events(31, 600, 8, base_ts())
    feed_events(bs, events_topic, ref.feed_list(keyed_events))
    out, cancelled = topic_factory(partitions=2), topic_factory(partitions=2)
    # a window into two sinks (`pipelines_api.counts_two_ways`)
    lines_topic = topic_factory(partitions=2)
    counts_topic, flat_topic = topic_factory(partitions=2), topic_factory(partitions=2)
    base = base_ts()
    lines = [
        (i % 2, f"l{i}", {"seq": i, "text": TEXTS[i % len(TEXTS)], "ts": base + i * 400}, base + i * 400)
        for i in range(1200)
    ]
    last = base + 1199 * 400
    flush = [(p, "flush", {"seq": -1, "text": "flush", "ts": last + 3 * WINDOW_MS}, last) for p in range(2)]
    feed_events(bs, lines_topic, lines + flush)
    json_sink = "value.format=json\nkey.format=string\n"
    job = write_api_job(
        tmp_path,
        bs,
        "tests.integration.kill_jobs:timers_and_two_sinks",
        {
            "events": (events_topic, f"value.format=json\nvalue.schema={EVENT_DDL}\n"),
            "lines": (lines_topic, "value.format=json\nvalue.schema=seq long, text string, ts long\n"),
        },
        {
            "out": (out, json_sink),
            "cancelled": (cancelled, json_sink),
            "counts": (counts_topic, "value.format=json\n"),
            "flat": (flat_topic, "value.format=json\n"),
        },
        max_records={"events": 20, "lines": 40},
    )
    repo = str(Path(__file__).resolve().parents[2])
    env = {
        "PYTHONPATH": os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH", "")) if p),
        "ETHEREAL_KAFKA_FAULT_TXN_DELAY_MS": "300",  # widen each task's open transaction: kills land in commits
    }
    final = {**FINAL_RUN, "PYTHONPATH": env["PYTHONPATH"]}
    run = run_with_kills(job.path, KILLS, seed=41, env=env, final_env=final, log=tmp_path / "crash.log")
    print("\n".join(run.landed))
    assert run.kills >= KILLS

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
