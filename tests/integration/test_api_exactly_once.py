"""Exactly-once for DataStream jobs: one query writing two sinks commits both in one transaction per task, so
SIGKILLs at random moments leave neither sink with a duplicate or a gap."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from ethereal_kafka.testing.cluster import KafkaCluster
from ethereal_kafka.testing.crash import compare, run_with_kills
from ethereal_kafka.testing.plugin import TopicFactory
from tests.integration.api_helpers import base_ts, feed_events, read_json, write_api_job
from tests.integration.eos_helpers import FINAL_RUN
from tests.integration.pipelines_api import WINDOW_MS

TEXTS = ["the quick brown fox", "jumps over the lazy dog", "a b cc ddd", "fox and dog and cat", "x"]


@pytest.mark.timeout(1500)
def test_window_written_to_two_sinks_survives_kills(
    kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    bs = kafka_cluster.bootstrap
    src = topic_factory(partitions=2)
    counts_topic, flat_topic = topic_factory(partitions=2), topic_factory(partitions=2)
    base = base_ts()
    events = [
        (i % 2, f"l{i}", {"seq": i, "text": TEXTS[i % len(TEXTS)], "ts": base + i * 400}, base + i * 400)
        for i in range(1200)
    ]
    last = base + 1199 * 400
    flush = [(p, "flush", {"seq": -1, "text": "flush", "ts": last + 3 * WINDOW_MS}, last) for p in range(2)]
    feed_events(bs, src, events + flush)
    job = write_api_job(
        tmp_path,
        bs,
        "tests.integration.pipelines_api:counts_two_ways",
        {"lines": (src, "value.format=json\nvalue.schema=seq long, text string, ts long\n")},
        {"counts": (counts_topic, "value.format=json\n"), "flat": (flat_topic, "value.format=json\n")},
        max_records=40,
    )
    repo = str(Path(__file__).resolve().parents[2])
    env = {
        "PYTHONPATH": os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH", "")) if p),
        "ETHEREAL_KAFKA_FAULT_TXN_DELAY_MS": "300",
    }
    final = {**FINAL_RUN, "PYTHONPATH": env["PYTHONPATH"]}
    run = run_with_kills(job.path, 10, seed=5, env=env, final_env=final, log=tmp_path / "crash.log")
    print("\n".join(run.landed))
    expected: Counter[tuple[str, int]] = Counter()
    for _, _, v, _ in events:
        ts = int(str(v["ts"]))
        for word in str(v["text"]).split():
            expected[(word, ts - ts % WINDOW_MS)] += 1
    flat = compare(
        [(w, s, n) for (w, s), n in expected.items()],
        [(e["word"], e["start_ms"], e["n"]) for e in read_json(bs, flat_topic)],
    )
    counts = compare(
        sorted((w, n) for (w, _), n in expected.items()),
        [(c["word"], c["count"]) for c in read_json(bs, counts_topic)],
    )
    print(f"flat: {flat.line(run.kills)}\ncounts: {counts.line(run.kills)}")
    assert run.kills >= 10
    assert (flat.duplicates, flat.lost, flat.unexpected) == (0, 0, 0)
    assert (counts.duplicates, counts.lost, counts.unexpected) == (0, 0, 0)
