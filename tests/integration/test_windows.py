"""Windows through the real Kafka source and sink, against the plain-Python references of `ref_windows`.

Inputs are seeded random events over 2 partitions, out of order and with late events; a final record of key `flush`
far ahead in event time makes every other window fire (its own never does). Each job runs twice on the same
input offsets, into fresh output topics with fresh checkpoints (the replay): both runs must write identical records
to every output partition, and both must match the reference computed from the epochs and watermarks Spark logged.
"""

from __future__ import annotations

import json
import random
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from ethereal_kafka.connectors.kafka.topics import ReadRecord
from ethereal_kafka.testing.cluster import KafkaCluster
from ethereal_kafka.testing.plugin import RunJob, TopicFactory
from tests.integration import ref_windows as ref
from tests.integration import window_jobs as jobs
from tests.integration.api_helpers import ApiJob, feed_events, read_records, write_api_job

SOURCE = "value.format=json\nvalue.schema=user string, amount long, ts long\n"
SINK = "value.format=json\nkey.format=string\n"
Event = tuple[int, str, dict[str, Any], int]


def make_events(
    seed: int,
    count: int = 220,
    keys: int = 4,
    late_share: float = 0.12,
    late_ms: tuple[int, int] = (5_000, 14_000),
) -> list[Event]:
    """`count` events over 2 partitions: event time advances ~150 ms per event, 40% arrive up to 1.5 s out of order,
    `late_share` arrive `late_ms` behind; then one `flush` record 10 minutes ahead."""
    rnd = random.Random(seed)
    clock = (int(time.time()) // 60) * 60_000 - 3_600_000  # within the broker's retention
    events: list[Event] = []
    for _ in range(count):
        clock += rnd.randint(50, 250)
        draw = rnd.random()
        if draw < late_share:
            ts = clock - rnd.randint(*late_ms)
        elif draw < 0.5:
            ts = clock - rnd.randint(0, 1_500)
        else:
            ts = clock
        user = f"u{rnd.randrange(keys)}"
        events.append((rnd.randrange(2), user, {"user": user, "amount": rnd.randint(1, 20), "ts": ts}, ts))
    flush = clock + 600_000
    events.append((0, "flush", {"user": "flush", "amount": 0, "ts": flush}, flush))
    return events


def records_of(events: Sequence[Event], topic: str = "") -> list[ref.Rec]:
    """The non-flush events as references see them (offsets: their position in their partition)."""
    offsets: dict[int, int] = defaultdict(int)
    out = []
    for partition, key, value, ts in events:
        offset = offsets[partition]
        offsets[partition] += 1
        if key != "flush":
            out.append(ref.Rec(partition, offset, key, ts, value["amount"], topic))
    return out


@dataclass
class Run:
    """One run of a job: its files and what each sink's topic holds."""

    job: ApiJob
    outputs: dict[str, list[ReadRecord]]

    def batches(
        self, query: str, topic: str, records: Sequence[ref.Rec]
    ) -> tuple[list[list[ref.Rec]], list[int]]:
        """The records of each epoch of `query` and the epochs' watermarks."""
        epochs = self.job.epochs(query)
        return ref.per_epoch(records, epochs, topic), [e.watermark_ms for e in epochs]

    def by_key(self, sink: str) -> dict[str, list[tuple[int, dict[str, Any]]]]:
        """The sink's JSON values per record key, in output order, each with its transaction: the ordinal of the
        epoch's transaction in the record's output partition (a commit marker takes an offset: a gap starts the
        next one). Within a transaction the sink orders records by content, not by emission."""
        out: dict[str, list[tuple[int, dict[str, Any]]]] = defaultdict(list)
        last: dict[int, int] = {}
        txn: dict[int, int] = defaultdict(int)
        for record in sorted(self.outputs[sink], key=lambda r: (r.partition, r.offset)):
            if record.partition in last and record.offset != last[record.partition] + 1:
                txn[record.partition] += 1
            last[record.partition] = record.offset
            out[(record.key or b"").decode()].append(
                (txn[record.partition], json.loads(record.value or b"null"))
            )
        return out


def grouped(items: dict[str, list[tuple[int, Any]]]) -> dict[str, list[list[str]]]:
    """Per key, the items split where their epoch/transaction changes, each part in a canonical order (the sink
    orders an epoch's records by content)."""
    out: dict[str, list[list[str]]] = {}
    for key, tagged in items.items():
        parts: list[list[str]] = []
        previous = None
        for tag, item in tagged:
            if tag != previous or not parts:
                parts.append([])
                previous = tag
            parts[-1].append(json.dumps(item, sort_keys=True, default=str))
        if parts:
            out[key] = [sorted(p) for p in parts]
    return out


def fields(run: Run, sink: str, names: Sequence[str]) -> dict[str, list[tuple[int, dict[str, Any]]]]:
    """Per key: `(transaction, {name: value})`."""
    return {k: [(t, {n: v[n] for n in names}) for t, v in vs] for k, vs in run.by_key(sink).items()}


def run_twice(
    tmp: Path,
    cluster: KafkaCluster,
    topics: TopicFactory,
    run_job: RunJob,
    pipeline: str,
    sinks: Sequence[str],
    events: list[Event],
) -> tuple[str, Run, Run]:
    """Feed `events`, then run the job, then its replay (same input, fresh outputs and checkpoints), one after the
    other, in-process."""
    bs = cluster.bootstrap
    source = topics(partitions=2)
    feed_events(bs, source, events)
    runs = []
    for name in ("first", "replay"):
        outs = {sink: topics(partitions=2) for sink in sinks}
        job = write_api_job(
            tmp / name,
            bs,
            f"tests.integration.window_jobs:{pipeline}",
            {"events": (source, SOURCE)},
            {sink: (topic, SINK) for sink, topic in outs.items()},
            max_records=60,
        )
        print(f"{pipeline} {name}: {run_job(job.path).seconds:.0f} s")
        runs.append(Run(job, {sink: read_records(bs, topic) for sink, topic in outs.items()}))
    return source, runs[0], runs[1]


def assert_identical(first: Run, replay: Run) -> None:
    """Same records (key, value) in the same order in every output partition."""
    for sink, records in first.outputs.items():
        mine = defaultdict(list)
        theirs = defaultdict(list)
        for r in records:
            mine[r.partition].append((r.key, r.value))
        for r in replay.outputs[sink]:
            theirs[r.partition].append((r.key, r.value))
        assert mine == theirs, f"{sink}: the replay wrote different records"
        assert records, f"{sink}: no output"


def ms(text: str) -> int:
    """Epoch ms of an ISO timestamp written by the JSON sink."""
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def windowed(
    run: Run, sink: str, names: Sequence[str]
) -> dict[str, list[tuple[int, tuple[int, int, dict[str, Any]]]]]:
    """Per key: `(transaction, (window_start, window_end, {name: value}))` in output order."""
    return {
        key: [(t, (ms(v["window_start"]), ms(v["window_end"]), {f: v[f] for f in names})) for t, v in values]
        for key, values in run.by_key(sink).items()
    }


def count_sum(recs: list[ref.Rec], span: tuple[int, int]) -> list[dict[str, Any]]:
    return [{"n": len(recs), "total": sum(r.amount for r in recs)}]


def summary(recs: list[ref.Rec], span: tuple[int, int] | None = None) -> list[dict[str, Any]]:
    ordered = sorted(recs, key=ref.Rec.order)
    total = sum(r.amount for r in recs)
    return [{"n": len(recs), "total": total, "first_ts": ordered[0].ts, "last_ts": ordered[-1].ts}]


def reduced(recs: list[ref.Rec], span: tuple[int, int] | None = None) -> list[dict[str, Any]]:
    return [{"amount": sum(r.amount for r in recs), "ts": max(r.ts for r in recs)}]


def with_span(recs: list[ref.Rec], span: tuple[int, int]) -> list[dict[str, Any]]:
    return [{**count_sum(recs, span)[0], "span": span[1] - span[0]}]


@pytest.mark.timeout(900)
def test_framework_time_windows_match_the_reference_and_replay_identically(
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    run_job: RunJob,
) -> None:
    events = make_events(seed=5)
    recs = records_of(events)
    sinks = ("tumbling", "tumbling_late", "sliding", "continuous")
    topic, first, replay = run_twice(
        tmp_path, kafka_cluster, topic_factory, run_job, "time_windows", sinks, events
    )
    assert_identical(first, replay)

    batches, marks = first.batches("tumbling+tumbling_late", topic, recs)
    tumbling = ref.framework(batches, marks, ref.tumbling(jobs.TUMBLE), count_sum, lateness=jobs.LATENESS)
    assert grouped(windowed(first, "tumbling", ("n", "total"))) == grouped(tumbling.fired)
    late = {
        k: [(e, {"user": k, "amount": r.amount, "ts": r.ts}) for e, r in v] for k, v in tumbling.late.items()
    }
    assert grouped(first.by_key("tumbling_late")) == grouped(late)
    # Counts add up: every record is in the last (largest) result of its window, or on the late topic.
    results = [(k, w) for k, rows in windowed(first, "tumbling", ("n",)).items() for _, w in rows]
    final: dict[tuple[str, int, int], int] = {}
    for key, (start, end, result) in results:
        final[(key, start, end)] = max(final.get((key, start, end), 0), result["n"])
    late_count = sum(len(v) for v in late.values())
    print(
        f"tumbling: {len(final)} windows, {len(results) - len(final)} late firings, {late_count} late records"
    )
    assert sum(final.values()) + late_count == len(recs)
    assert late_count > 0 and len(results) > len(final)

    batches, marks = first.batches("sliding", topic, recs)
    sliding = ref.framework(batches, marks, ref.sliding(jobs.SLIDE_SIZE, jobs.SLIDE), reduced)
    assert grouped(windowed(first, "sliding", ("amount", "ts"))) == grouped(sliding.fired)

    batches, marks = first.batches("continuous", topic, recs)
    trig = ref.Trig("continuous", every=jobs.CONTINUOUS_EVERY)
    continuous = ref.framework(batches, marks, ref.tumbling(jobs.CONTINUOUS_SIZE), count_sum, trig=trig)
    assert grouped(windowed(first, "continuous", ("n", "total"))) == grouped(continuous.fired)
    windows = {(k, w[:2]) for k, rows in continuous.fired.items() for _, w in rows}
    assert sum(len(rows) for rows in continuous.fired.values()) > len(windows)  # early firings happened


@pytest.mark.timeout(900)
def test_framework_session_windows_match_the_reference_and_replay_identically(
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    run_job: RunJob,
) -> None:
    events = make_events(seed=6)
    recs = records_of(events)
    sinks = ("session", "session_max")
    topic, first, replay = run_twice(
        tmp_path, kafka_cluster, topic_factory, run_job, "session_windows", sinks, events
    )
    assert_identical(first, replay)

    batches, marks = first.batches("session", topic, recs)
    session = ref.framework(batches, marks, None, summary, lateness=jobs.SESSION_LATENESS, gap=jobs.GAP)
    assert grouped(windowed(first, "session", ("n", "total", "first_ts", "last_ts"))) == grouped(
        session.fired
    )
    assert any(session.late.values())  # some records came after their session was gone (dropped)

    batches, marks = first.batches("session_max", topic, recs)
    capped = ref.framework(batches, marks, None, with_span, gap=jobs.GAP, max_length=jobs.MAX_LENGTH)
    assert grouped(windowed(first, "session_max", ("n", "total", "span"))) == grouped(capped.fired)
    assert any(w[2]["span"] == jobs.MAX_LENGTH for rows in capped.fired.values() for _, w in rows)


@pytest.mark.timeout(900)
def test_count_and_global_windows_match_the_reference_and_replay_identically(
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    run_job: RunJob,
) -> None:
    events = make_events(seed=7, count=160)
    recs = records_of(events)
    sinks = ("count_tumbling", "count_sliding", "global_count")
    topic, first, replay = run_twice(
        tmp_path, kafka_cluster, topic_factory, run_job, "count_windows", sinks, events
    )
    assert_identical(first, replay)

    batches, _ = first.batches("count_tumbling", topic, recs)
    tumbling = ref.count_windows(batches, reduced, jobs.COUNT_SIZE, purge=True)
    assert grouped(fields(first, "count_tumbling", ("amount", "ts"))) == grouped(tumbling)

    batches, _ = first.batches("count_sliding", topic, recs)
    sliding = ref.count_windows(batches, summary, jobs.SLIDING_STEP, keep_last=jobs.SLIDING_COUNT)
    assert grouped(fields(first, "count_sliding", ("n", "total", "first_ts", "last_ts"))) == grouped(sliding)

    batches, _ = first.batches("global_count", topic, recs)
    every = ref.count_windows(batches, lambda rs: count_sum(rs, (0, 0)), jobs.GLOBAL_EVERY)
    assert grouped(fields(first, "global_count", ("n", "total"))) == grouped(every)


def emitted(run: Run, sink: str) -> dict[str, list[tuple[int, int, int, int]]]:
    """Per key, every window a native operator emitted (each exactly once): `(start, end, n, total)`, sorted."""
    return {
        k: sorted((s, e, r["n"], r["total"]) for _, (s, e, r) in v)
        for k, v in windowed(run, sink, ("n", "total")).items()
    }


@pytest.mark.timeout(900)
def test_native_windows_match_sparks_semantics_and_replay_identically(
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    run_job: RunJob,
) -> None:
    events = make_events(
        seed=11, late_ms=(5_000, 40_000)
    )  # Spark drops what is behind the previous watermark
    recs = records_of(events)
    sinks = ("native_tumbling", "native_sliding", "native_session")
    topic, first, replay = run_twice(
        tmp_path, kafka_cluster, topic_factory, run_job, "native_windows", sinks, events
    )
    assert_identical(first, replay)
    cases = {
        "native_tumbling": {"windows_of": ref.tumbling(jobs.TUMBLE)},
        "native_sliding": {"windows_of": ref.sliding(jobs.SLIDE_SIZE, jobs.SLIDE)},
        "native_session": {"gap": jobs.GAP},
    }
    for sink, how in cases.items():
        batches, marks = first.batches(sink, topic, recs)
        assert emitted(first, sink) == ref.native(batches, marks, **how), sink
    counted = sum(n for windows in emitted(first, "native_tumbling").values() for _, _, n, _ in windows)
    print(f"native tumbling: {len(recs) - counted} of {len(recs)} records dropped by Spark as late")
    assert counted < len(recs)  # late records were dropped, as Spark does


@pytest.mark.timeout(900)
def test_windows_close_when_a_partition_or_an_idle_declared_input_goes_quiet(
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    run_job: RunJob,
) -> None:
    """Run 1 reads both partitions of `events` (and the other input); run 2, same checkpoint, finds new records on
    partition 0 only. The quiet partition's open windows close in run 2, moved by partition 0 alone; with two
    inputs, the one declared `with_idleness` lets the query follow the busy input, the control stays held back."""
    bs = kafka_cluster.bootstrap
    base = (int(time.time()) // 60) * 60_000 - 3_600_000
    rnd = random.Random(13)

    def record(partition: int, key: str, i: int) -> Event:
        ts = base + i * 400 - rnd.randint(0, 600)
        return (partition, key, {"user": key, "amount": i % 7, "ts": ts}, ts)

    early = [r for i in range(30) for r in (record(0, f"p0-{i % 2}", i), record(1, "p1", i))]
    later = [record(0, f"p0-{i % 2}", i) for i in range(30, 160)]
    quiet = [(0, "o", {"user": "o", "amount": 1, "ts": base + i * 500}, base + i * 500) for i in range(16)]
    sources = {"events": topic_factory(partitions=2), "other": topic_factory(partitions=1)}
    sinks = {name: topic_factory(partitions=2) for name in ("idle_partition", "idle_input", "stalled")}
    job = write_api_job(
        tmp_path,
        bs,
        "tests.integration.window_jobs:idle_inputs",
        {name: (topic, SOURCE) for name, topic in sources.items()},
        {sink: (topic, SINK) for sink, topic in sinks.items()},
        max_records=60,
    )
    feed_events(bs, sources["events"], early)
    feed_events(bs, sources["other"], quiet)
    run_job(job.path)
    run1_epochs = len(job.epochs("idle_partition"))
    feed_events(bs, sources["events"], later)
    run_job(job.path)
    run = Run(job, {sink: read_records(bs, topic) for sink, topic in sinks.items()})

    busy = records_of(early + later, sources["events"])  # offsets: partition order is kept
    others = records_of(quiet, sources["other"])
    got = {sink: emitted(run, sink) for sink in sinks}
    for sink, recs in (("idle_partition", busy), ("idle_input", busy + others), ("stalled", busy + others)):
        epochs = job.epochs(sink)
        expected = ref.native(
            ref.per_epoch(recs, epochs), [e.watermark_ms for e in epochs], ref.tumbling(jobs.TUMBLE)
        )
        assert got[sink] == expected, sink
    # The quiet partition's last windows were still open after run 1, and closed in run 2 without its records.
    after_run1 = job.epochs("idle_partition")[run1_epochs - 1].watermark_ms
    closed_later = [w for w in got["idle_partition"]["p1"] if w[1] > after_run1]
    assert closed_later, got["idle_partition"]["p1"]
    busy_mark = max(r.ts for r in busy) - jobs.BOUND
    quiet_mark = max(r.ts for r in others) - jobs.BOUND
    assert job.epochs("idle_input")[-1].watermark_ms == busy_mark  # policy max: follows the busy input
    assert job.epochs("stalled")[-1].watermark_ms == quiet_mark  # policy min: held back by the quiet one
    assert len(got["idle_input"]["p0-0"]) > len(got["stalled"].get("p0-0", []))
