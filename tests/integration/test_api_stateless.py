"""The DataStream API end to end on the real broker: per-element operators, key handling, and one query writing
two sinks in one transaction per task, each checked against a plain-Python reference."""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ethereal_kafka.checkpoint.history import CheckpointHistory
from ethereal_kafka.errors import ConfigError
from ethereal_kafka.runtime.description import read_description
from ethereal_kafka.testing.cluster import KafkaCluster
from ethereal_kafka.testing.plugin import RunJob, TopicFactory
from tests.integration.api_helpers import (
    base_ts,
    by_partition,
    feed_events,
    read_json,
    read_records,
    write_api_job,
)
from tests.integration.eos_helpers import add_poison, check_dead_letters
from tests.integration.pipelines_api import WINDOW_MS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TEXTS = ["the quick brown fox", "jumps over the lazy dog", "a b cc ddd", "fox and dog and cat", "x"]


def _lines(count: int) -> list[tuple[int, str, dict[str, object], int]]:
    base = base_ts()
    return [
        (i % 2, f"l{i}", {"seq": i, "text": TEXTS[i % len(TEXTS)], "ts": base + i * 700}, base + i * 700)
        for i in range(count)
    ]


def _expected_words(events: list[tuple[int, str, dict[str, object], int]]) -> Counter[tuple[str, str]]:
    """`pipelines_api.stateless`'s output records (key, value) for `events`."""
    return Counter(
        (w, json.dumps({"key": w, "word": w.upper(), "seq": v["seq"]}, separators=(",", ":")))
        for _, _, v, _ in events
        for w in str(v["text"]).split()
        if len(w) > 2
    )


def _chained_words(events: list[tuple[int, str, dict[str, object], int]]) -> Counter[tuple[str, str]]:
    """`pipelines_api.chained_words`'s output records (key, value) for `events`."""
    return Counter(
        (w, json.dumps({"word": w.upper(), "seq": v["seq"]}, separators=(",", ":")))
        for _, _, v, _ in events
        for w in str(v["text"]).split()
        if len(w) > 2
    )


def test_per_element_operators_through_kafka(
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    run_job: RunJob,
) -> None:
    bs = kafka_cluster.bootstrap
    src, dst = topic_factory(partitions=2), topic_factory(partitions=2)
    events = _lines(300)
    feed_events(bs, src, events)
    job = write_api_job(
        tmp_path,
        bs,
        "tests.integration.pipelines_api:stateless",
        {"lines": (src, "value.format=json\nvalue.schema=seq long, text string, ts long\n")},
        {"words": (dst, "value.format=json\nkey.format=string\n")},
        max_records=70,
    )
    run_job(job.path)
    expected = _expected_words(events)
    records = read_records(bs, dst)
    assert records
    got = Counter(((r.key or b"").decode(), (r.value or b"").decode()) for r in records)
    assert got == expected, (sorted((got - expected).items())[:3], sorted((expected - got).items())[:3])
    # Per-element operators keep the job partition-preserving: each epoch commits input offsets with the output.
    with CheckpointHistory(job.app_id, read_only=True) as history:
        modes = {record.mode for record in history.records()}
    assert modes == {"partition-preserving"}


def test_a_chained_query_writes_what_its_spark_plan_writes_byte_for_byte(
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    run_job: RunJob,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Python functions and `key_by` only between a Kafka source and sink: the query runs chained in its source's read tasks
    (`plan.chaining`, `eos.chained`) and writes, partition by partition, the same records in the same order as the
    same job with `pipeline.operator.chaining=false` (each operator its own Spark step); poison records go to the
    dead-letter topic exactly once in both."""
    bs = kafka_cluster.bootstrap
    src = topic_factory(partitions=2)
    events = _lines(300)
    feed_events(bs, src, events)
    add_poison(bs, src, 2, 6)
    written, jobs, outputs, figures = {}, {}, {}, {}
    for chaining in ("true", "false"):
        dst, dlq = topic_factory(partitions=2), topic_factory(partitions=1)
        outputs[chaining] = dst
        job = write_api_job(
            tmp_path / chaining,
            bs,
            "tests.integration.pipelines_api:chained_words",
            {
                "lines": (
                    src,
                    "value.format=json\nvalue.schema=seq long, text string, ts long\n"
                    + f"on.error=dlq\ndlq.topic={dlq}\n",
                )
            },
            {"words": (dst, "value.format=json\nkey.format=string\n")},
            max_records=70,
            extra_job=f"pipeline.operator.chaining={chaining}\n",
        )
        jobs[chaining] = job.path
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="ethereal_kafka.runtime.pipeline"):
            assert run_job(job.path).ok
        chained = [
            r.getMessage() for r in caplog.records if "chained in its source's read tasks" in r.getMessage()
        ]
        assert len(chained) == (1 if chaining == "true" else 0), chained
        described = read_description(job.app_id)
        assert described is not None
        assert [q.get("chained") for q in described.plan["queries"]] == [chaining == "true"]
        check_dead_letters(bs, src, dlq)
        written[chaining] = by_partition(bs, dst)
        with CheckpointHistory(job.app_id, read_only=True) as history:
            totals: Counter[tuple[str, int]] = Counter()
            for record in history.records():
                for nid, (rows_in, rows_out) in (record.operators or {}).items():
                    totals[(nid, 0)] += rows_in
                    totals[(nid, 1)] += rows_out
        figures[chaining] = totals
    got = Counter(
        ((k or b"").decode(), (v or b"").decode()) for rows in written["true"].values() for k, v in rows
    )
    assert got == _chained_words(events)
    # Two tasks write each output partition at once, so compare what each input partition (seq % 2) wrote to it.
    per_task = {
        chaining: {
            (out, seq % 2): [(k, v) for k, v in rows if json.loads(v or b"{}")["seq"] % 2 == seq % 2]
            for out, rows in by_out.items()
            for seq in (0, 1)
        }
        for chaining, by_out in written.items()
    }
    assert per_task["true"] == per_task["false"]
    # The UI's per-operator rows: from the chained tasks' own counts, the same as Spark counts unchained.
    assert len(figures["true"]) == 8 and figures["true"] == figures["false"], figures

    # Each checkpoint goes on with the setting switched: same ids and markers, so nothing is lost or repeated.
    more = _lines(500)[300:]
    feed_events(bs, src, more)
    for chaining, path in jobs.items():
        switched = "false" if chaining == "true" else "true"
        text = path.read_text().replace(f"chaining={chaining}", f"chaining={switched}")
        path.write_text(text)
        assert run_job(path).ok
        rows = read_records(bs, outputs[chaining])
        got = Counter(((r.key or b"").decode(), (r.value or b"").decode()) for r in rows)
        assert got == _chained_words(events + more), chaining


def test_dataframe_queries_run_beside_the_streams_of_a_datastream_job(
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    run_job: RunJob,
    spark: SparkSession,
) -> None:
    """`env.add_dataframe_pipeline` adds a DataFrame query to a DataStream job (Flink's Table API statements beside
    its DataStream pipelines): both read the one source, each with a consumer group of its own, and each output is
    exact; a DataFrame query writing a sink a stream already writes is refused before anything runs."""
    from ethereal_kafka.config.job import load_job
    from ethereal_kafka.runtime.pipeline import build_pipeline
    from tests.integration.eos_helpers import group_offsets

    bs = kafka_cluster.bootstrap
    src, words, lengths = (
        topic_factory(partitions=2),
        topic_factory(partitions=2),
        topic_factory(partitions=2),
    )
    events = _lines(200)
    feed_events(bs, src, events)
    source = {"lines": (src, "value.format=json\nvalue.schema=seq long, text string, ts long\n")}
    job = write_api_job(
        tmp_path,
        bs,
        "tests.integration.pipelines_api:stateless_and_lengths",
        source,
        {"words": (words, "value.format=json\nkey.format=string\n"), "lengths": (lengths, "")},
        max_records=70,
    )
    run_job(job.path)
    expected_words = _expected_words(events)
    got_words = Counter(((r.key or b"").decode(), (r.value or b"").decode()) for r in read_records(bs, words))
    assert got_words == expected_words
    expected_lengths = Counter(
        (key, json.dumps({"seq": v["seq"], "length": len(str(v["text"]))}, separators=(",", ":")))
        for _, key, v, _ in events
    )
    got_lengths = Counter(
        ((r.key or b"").decode(), (r.value or b"").decode()) for r in read_records(bs, lengths)
    )
    assert got_lengths == expected_lengths
    # Each query committed the whole input under its own group; a shared group would have let one query's
    # markers and offsets stand for the other's.
    for query in ("words", "lengths"):
        committed = group_offsets(bs, f"{job.app_id}.{query}", src, 2)
        assert {p: offset for p, (offset, _) in committed.items()} == {0: 100, 1: 100}, query

    twice = write_api_job(
        tmp_path / "twice",
        bs,
        "tests.integration.pipelines_api:lengths_into_words",
        source,
        {"words": (words, ""), "lengths": (lengths, "")},
    )
    loaded = load_job(twice.path)
    with pytest.raises(ConfigError, match=r"writes sink 'words', which a stream \(sink_to\) already writes"):
        build_pipeline(spark, loaded, loaded.sources)


def test_one_query_writes_a_window_to_two_sinks(
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    run_job: RunJob,
) -> None:
    bs = kafka_cluster.bootstrap
    src = topic_factory(partitions=2)
    counts_topic, flat_topic = topic_factory(partitions=2), topic_factory(partitions=1)
    events = _lines(200)
    last = max(int(str(v["ts"])) for _, _, v, _ in events)
    # One late-in-the-future word per partition moves the watermark past every real window (its own window never
    # closes, so it is not in the output).
    flush = [(p, "flush", {"seq": -1, "text": "flush", "ts": last + 3 * WINDOW_MS}, last) for p in range(2)]
    feed_events(bs, src, events + flush)
    job = write_api_job(
        tmp_path,
        bs,
        "tests.integration.pipelines_api:counts_two_ways",
        {"lines": (src, "value.format=json\nvalue.schema=seq long, text string, ts long\n")},
        {"counts": (counts_topic, "value.format=json\n"), "flat": (flat_topic, "value.format=json\n")},
        max_records=60,
    )
    run_job(job.path)
    expected: Counter[tuple[str, int]] = Counter()
    for _, _, v, _ in events:
        ts = int(str(v["ts"]))
        for word in str(v["text"]).split():
            expected[(word, ts - ts % WINDOW_MS)] += 1
    flat = read_json(bs, flat_topic)
    assert {(e["word"], e["start_ms"]): e["n"] for e in flat} == dict(expected)
    assert len(flat) == len(expected)
    counts = read_json(bs, counts_topic)
    assert sorted((c["word"], c["count"]) for c in counts) == sorted((w, n) for (w, _), n in expected.items())
    assert (job.checkpoint / "counts+flat").is_dir(), "both sinks are written by one query"


def test_a_keys_updates_reach_kafka_in_emission_order(
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    run_job: RunJob,
) -> None:
    bs = kafka_cluster.bootstrap
    src, dst = topic_factory(partitions=2), topic_factory(partitions=2)
    base = base_ts()
    events = [(i % 2, f"k{i % 3}", {"seq": i, "text": "", "ts": base + i}, base + i) for i in range(240)]
    feed_events(bs, src, events)
    job = write_api_job(
        tmp_path,
        bs,
        "tests.integration.pipelines_api:running_counts",
        {
            "lines": (
                src,
                "key.format=string\nvalue.format=json\nvalue.schema=seq long, text string, ts long\n",
            )
        },
        {"counts": (dst, "value.format=json\nkey.format=string\n")},
        max_records=60,
    )
    run_job(job.path)
    records = read_records(bs, dst)
    per_key: dict[str, list[int]] = {}
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        per_key.setdefault((record.key or b"").decode(), []).append(json.loads(record.value or b"{}")["n"])
    expected = Counter(f"k{i % 3}" for i in range(240))
    assert {k: v for k, v in per_key.items()} == {k: list(range(1, n + 1)) for k, n in expected.items()}


def test_a_keys_records_keep_input_order_through_a_shuffling_query(
    kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path, run_job: RunJob
) -> None:
    """A union makes the query shuffle its rows to the sink tasks; a key's records must still leave in the order
    they were read, not sorted by their content (it sorted by every column after the key)."""
    bs = kafka_cluster.bootstrap
    left, right, dst = topic_factory(partitions=2), topic_factory(partitions=2), topic_factory(partitions=2)
    base = base_ts()

    def events(prefix: str) -> list[tuple[int, str, dict[str, object], int]]:
        out: list[tuple[int, str, dict[str, object], int]] = []
        for seq in range(60):
            key = f"{prefix}{seq % 4}"
            out.append((seq % 4 % 2, key, {"rank": 1000 - seq, "user": key, "seq": seq}, base + seq))
        return out

    feed_events(bs, left, events("l"))
    feed_events(bs, right, events("r"))
    schema = "value.format=json\nvalue.schema=rank long, user string, seq long\n"
    job = write_api_job(
        tmp_path,
        bs,
        "tests.integration.pipelines_api:union_in_input_order",
        {"left": (left, schema), "right": (right, schema)},
        {"out": (dst, "value.format=json\nkey.format=string\n")},
        max_records=200,
    )
    run_job(job.path)
    per_key: dict[str, list[int]] = {}
    for record in sorted(read_records(bs, dst), key=lambda r: (r.partition, r.offset)):
        per_key.setdefault((record.key or b"").decode(), []).append(json.loads(record.value or b"{}")["seq"])
    assert sorted(per_key) == [f"{p}{i}" for p in "lr" for i in range(4)]
    assert all(seqs == sorted(seqs) and len(seqs) == 15 for seqs in per_key.values()), per_key
