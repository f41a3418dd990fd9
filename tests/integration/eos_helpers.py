"""Helpers for the exactly-once tests: write a job's files, feed input, read and check output."""

from __future__ import annotations

import json
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from confluent_kafka import Consumer, Producer, TopicPartition

from ethereal_kafka.connectors.kafka.topics import ReadRecord, produce, read_all, read_committed
from ethereal_kafka.examples import eos
from ethereal_kafka.testing.crash import compare

if TYPE_CHECKING:
    from ethereal_kafka.testing.plugin import TopicFactory


@dataclass(frozen=True)
class JobFiles:
    """A job written to disk."""

    job: Path
    app_id: str
    source_topic: str
    sink_topic: str
    checkpoint: Path


#: Overrides a test job's `max.records.per.epoch` (`write_job`): the crash harness's last run, which no kill is
#: aimed at, reads in larger epochs (`FINAL_RUN`).
EPOCH_RECORDS_ENV = "TEST_EPOCH_RECORDS"
#: The environment of the crash harness's last run: no fault delay (no kill to widen a window for), larger epochs.
FINAL_RUN = {EPOCH_RECORDS_ENV: "2000"}


def write_job(
    folder: Path,
    bootstrap: str,
    source_topic: str,
    sink_topic: str,
    pipeline: str,
    *,
    app_id: str | None = None,
    guarantee: str = "exactly-once",
    max_records: int = 300,
    extra_job: str = "",
    starting: str = "earliest",
) -> JobFiles:
    """Write source, sink and job `.properties` files for a test job."""
    folder.mkdir(parents=True, exist_ok=True)
    app = app_id or f"eos-{uuid.uuid4().hex[:8]}"
    (folder / "source.properties").write_text(
        f"connector.class=kafka-source\nname=events\nbootstrap.servers={bootstrap}\ntopics={source_topic}\n"
        f"starting.offsets={starting}\nmax.records.per.epoch=${{{EPOCH_RECORDS_ENV}:-{max_records}}}\n"
    )
    (folder / "sink.properties").write_text(
        f"connector.class=kafka-sink\nname=out\nbootstrap.servers={bootstrap}\ntopic={sink_topic}\n"
    )
    checkpoint = folder / "checkpoint"
    (folder / "job.properties").write_text(
        f"app.id={app}\nsources=source.properties\nsinks=sink.properties\npipeline={pipeline}\n"
        f"checkpoint.location={checkpoint}\ndelivery.guarantee={guarantee}\ntrigger.interval.ms=200\n"
        f"sink.tasks=2\ntransaction.timeout.ms=30000\n{extra_job}"
    )
    return JobFiles(folder / "job.properties", app, source_topic, sink_topic, checkpoint)


def dead_letter_lines(dlq_topic: str) -> str:
    """A source's lines that decode values as JSON and send poison records to `dlq_topic` (`dead_letter_job`)."""
    return f"value.format=json\nvalue.schema=id bigint, amount bigint\non.error=dlq\ndlq.topic={dlq_topic}\n"


def feed(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]], partitions: int) -> None:
    """Produce records keyed into partitions by a stable hash of the key (per-key order = offset order)."""
    by_partition: dict[int, list[tuple[bytes, bytes]]] = defaultdict(list)
    for key, value in records:
        by_partition[sum(key) % partitions].append((key, value))
    for partition, items in sorted(by_partition.items()):
        produce(bootstrap, topic, items, partition=partition)


def pairs(records: list[ReadRecord]) -> list[tuple[bytes, bytes]]:
    """(key, value) of each record."""
    return [(r.key or b"", r.value or b"") for r in records]


def output(bootstrap: str, topic: str) -> list[ReadRecord]:
    """The committed output, read to the end."""
    return read_committed(bootstrap, topic, timeout_s=60)


def per_key_order_kept(records: list[ReadRecord]) -> bool:
    """Within each output partition, each key's `seq` values increase in offset order."""
    last: dict[tuple[int, bytes], int] = {}
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        seq = json.loads(r.value or b"{}")["seq"]
        k = (r.partition, r.key or b"")
        if k in last and seq <= last[k]:
            return False
        last[k] = seq
    return True


def group_offsets(
    bootstrap: str, group: str, topic: str, partitions: int
) -> dict[int, tuple[int, str | None]]:
    """`{partition: (committed offset, metadata)}` of `group` on `topic` (stable reads)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",
            "log_level": 3,
        }
    )
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        return {tp.partition: (tp.offset, tp.metadata) for tp in found}
    finally:
        consumer.close()


def drop_last_commit(query_checkpoint: Path) -> int:
    """Remove the last entry of a query's Spark commit log (and its checksum): the state a crash leaves between the
    Kafka commit of an epoch and Spark's; the next run replays that epoch. Returns the epoch."""
    commits = sorted((query_checkpoint / "commits").glob("[0-9]*"), key=lambda p: int(p.name))
    assert len(commits) >= 2, f"{query_checkpoint}: several epochs expected"
    last = commits[-1]
    last.unlink()
    (last.parent / f".{last.name}.crc").unlink(missing_ok=True)
    return int(last.name)


POISON_VALUE = b"{not json"


def add_poison(bootstrap: str, topic: str, partitions: int, count: int) -> None:
    """Produce `count` records whose value is not JSON, spread over the partitions (keys k<n> as `feed`'s)."""
    records = [(f"k{i % 13}".encode(), POISON_VALUE + str(i).encode()) for i in range(count)]
    feed(bootstrap, topic, records, partitions)


def dead_letter_job(files: JobFiles, dlq_topic: str) -> None:
    """Make the job's source decode values as JSON and send poison records to `dlq_topic` (`on.error=dlq`)."""
    with (files.job.parent / "source.properties").open("a") as source:
        source.write(dead_letter_lines(dlq_topic))


def check_dead_letters(bootstrap: str, source_topic: str, dlq_topic: str) -> str:
    """Every poison record of `source_topic` is on `dlq_topic` exactly once, naming its origin; returns a summary.

    Raises:
        AssertionError: a poison record is missing, repeated, or a dead letter names no poison record.
    """
    from collections import Counter

    poison = {
        (r.partition, r.offset)
        for r in read_all(bootstrap, source_topic)
        if (r.value or b"").startswith(POISON_VALUE)
    }
    seen: Counter[tuple[int, int]] = Counter()
    for record in read_committed(bootstrap, dlq_topic, timeout_s=30):
        headers = dict(record.headers or [])
        assert headers.get("ethereal.source.topic") == source_topic.encode(), headers
        seen[
            (
                int(headers["ethereal.source.partition"] or b"-1"),
                int(headers["ethereal.source.offset"] or b"-1"),
            )
        ] += 1
    duplicates = sum(n - 1 for n in seen.values() if n > 1)
    lost = len(poison - set(seen))
    unexpected = len(set(seen) - poison)
    assert poison and (duplicates, lost, unexpected) == (0, 0, 0), (len(poison), duplicates, lost, unexpected)
    return f"dead letters={len(poison)} duplicates={duplicates} lost={lost}"


def check_running_totals(bootstrap: str, topic: str, inputs: list[tuple[bytes, bytes]]) -> str:
    """Assert that the committed output of `eos.running_total` over `inputs` is exact: no (key, count) update twice,
    every total right, every key's last update there; returns `records=N duplicates=0 lost=0`."""
    from ethereal_kafka.examples import eos

    updates = [json.loads(r.value or b"") for r in output(bootstrap, topic)]
    reference = eos.running_total_reference(inputs)
    seen = Counter((u["key"], u["count"]) for u in updates)
    duplicates = sum(n - 1 for n in seen.values() if n > 1)
    wrong = [u for u in updates if reference[u["key"]][u["count"] - 1] != u["total"]]
    finals = {k: max(c for (key, c) in seen if key == k) for k, _ in seen}
    lost = sum(1 for k, totals in reference.items() if finals.get(k) != len(totals))
    assert updates and (duplicates, lost, wrong) == (0, 0, []), (duplicates, lost, wrong[:3])
    return f"records={len(updates)} duplicates={duplicates} lost={lost}"


def leave_open_transaction(
    bootstrap: str, txn_id: str, group: str, tp: tuple[str, int], topic: str
) -> Producer:
    """What a run SIGKILLed inside a commit leaves: a transaction of `txn_id` (one of the run's ids) with a record
    on `topic` and the group's committed offset of `tp` (unchanged, with its marker) pending, open for 5 minutes.
    Returns the producer (keep it referenced until the test is done; fencing `txn_id` aborts the transaction)."""
    from ethereal_kafka.eos.committed import committed_offsets

    (committed,) = committed_offsets(bootstrap, group, {}, [tp])
    assert committed.marker is not None, f"the run committed a marker on {group}"
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": txn_id, "transaction.timeout.ms": 300000}
    )
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(topic, key=b"never", value=b"aborted")
        producer.flush(30)
        pending = TopicPartition(tp[0], tp[1], committed.offset, metadata=committed.metadata)
        producer.send_offsets_to_transaction([pending], reader.consumer_group_metadata(), 30)
    finally:
        reader.close()
    return producer


#: `max.records.per.epoch` of `FrameQueries.sources` in the kill run.
FRAME_MAX_RECORDS = {"stateless_in": 100, "running_total_in": 80, "windowed_count_in": 80}


@dataclass(frozen=True)
class FrameQueries:
    """The inputs and outputs of `examples.eos:three_queries` (DataFrame queries: a stateless map/filter with dead
    letters, a keyed running aggregate with dead letters, an event-time windowed count), fed by `feed_frames`.

    `sources` and `sinks` are `api_helpers.write_api_job`'s: a source `{query}_in` and a sink named after each
    query, with the epoch sizes the kill run uses."""

    stateless: tuple[str, str, str]  # source, sink, dead letters
    running_total: tuple[str, str, str]
    windowed: tuple[str, str]
    stateless_inputs: list[tuple[bytes, bytes]]
    running_inputs: list[tuple[bytes, bytes]]
    windowed_inputs: list[tuple[bytes, bytes]]
    flush_ts: int

    @property
    def sources(self) -> dict[str, tuple[str, str]]:
        return {
            "stateless_in": (self.stateless[0], dead_letter_lines(self.stateless[2])),
            "running_total_in": (self.running_total[0], dead_letter_lines(self.running_total[2])),
            "windowed_count_in": (self.windowed[0], ""),
        }

    @property
    def sinks(self) -> dict[str, tuple[str, str]]:
        return {
            "stateless": (self.stateless[1], ""),
            "running_total": (self.running_total[1], ""),
            "windowed_count": (self.windowed[1], ""),
        }

    def check(self, bootstrap: str, kills: int) -> None:
        """Each output exact against its plain-Python reference (no duplicate, no loss, per-key order kept), and
        every poison record in its dead-letter topic once; prints one line per query."""
        got = output(bootstrap, self.stateless[1])
        stateless = compare(eos.stateless_reference(self.stateless_inputs), pairs(got))
        dead = check_dead_letters(bootstrap, self.stateless[0], self.stateless[2])
        print(f"stateless: {stateless.line(kills)}; {dead}")
        assert (stateless.duplicates, stateless.lost, stateless.unexpected) == (0, 0, 0)
        assert per_key_order_kept(got)

        updates = [json.loads(r.value or b"") for r in output(bootstrap, self.running_total[1])]
        reference = eos.running_total_reference(self.running_inputs)
        seen = Counter((u["key"], u["count"]) for u in updates)
        duplicates = sum(n - 1 for n in seen.values() if n > 1)
        wrong = [u for u in updates if reference[u["key"]][u["count"] - 1] != u["total"]]
        finals = {k: max(c for (key, c) in seen if key == k) for k in {k for k, _ in seen}}
        lost = sum(1 for k, totals in reference.items() if finals.get(k) != len(totals))
        dead = check_dead_letters(bootstrap, self.running_total[0], self.running_total[2])
        print(
            f"running_total: records={len(updates)} duplicates={duplicates} lost={lost} kills={kills}; {dead}"
        )
        assert (duplicates, lost, wrong) == (0, 0, [])

        windows = [json.loads(r.value or b"") for r in output(bootstrap, self.windowed[1])]
        expected = eos.windowed_count_reference(self.windowed_inputs, self.flush_ts - eos.LATENESS_MS)
        windowed = compare(
            [(k, s, c) for (k, s), c in expected.items()],
            [(g["key"], g["window_start"], g["count"]) for g in windows],
        )
        print(f"windowed_count: {windowed.line(kills)}")
        assert (windowed.duplicates, windowed.lost, windowed.unexpected) == (0, 0, 0)


def _poisoned(
    bootstrap: str, topic_factory: TopicFactory, events: int, partitions: int, poison: int
) -> tuple[str, str, str, list[tuple[bytes, bytes]]]:
    """A source topic fed `events` events with `poison` poison records halfway, its sink and dead-letter topics."""
    src, dst, dlq = (
        topic_factory(partitions=partitions),
        topic_factory(partitions=partitions),
        topic_factory(1),
    )
    inputs = eos.events(events)
    feed(bootstrap, src, inputs[: events // 2], partitions)
    add_poison(bootstrap, src, partitions, poison)
    feed(bootstrap, src, inputs[events // 2 :], partitions)
    return src, dst, dlq, inputs


def feed_frames(bootstrap: str, topic_factory: TopicFactory) -> FrameQueries:
    """Topics and input for `examples.eos:three_queries`: 4,000 events with 60 poison records (stateless, 3
    partitions), 3,000 with 40 poison records (running aggregate), 3,000 events and one far-future flush event per
    partition that moves the watermark past every real window (windowed count)."""
    s_src, s_dst, s_dlq, s_inputs = _poisoned(bootstrap, topic_factory, 4000, 3, 60)
    k_src, k_dst, k_dlq, k_inputs = _poisoned(bootstrap, topic_factory, 3000, 2, 40)
    w_src, w_dst = topic_factory(partitions=2), topic_factory(partitions=2)
    w_inputs = eos.events(3000)
    flush_ts = max(json.loads(v)["ts"] for _, v in w_inputs) + 10 * eos.WINDOW_MS
    feed(bootstrap, w_src, w_inputs, 2)
    for p in range(2):
        flush = {"id": -1 - p, "key": f"flush{p}", "seq": 1, "amount": 0, "ts": flush_ts}
        produce(bootstrap, w_src, [(f"flush{p}".encode(), json.dumps(flush).encode())], partition=p)
    return FrameQueries(
        (s_src, s_dst, s_dlq), (k_src, k_dst, k_dlq), (w_src, w_dst), s_inputs, k_inputs, w_inputs, flush_ts
    )
