"""`ethereal-kafka replay` and `offsets` against the real broker: run a job, replay, run again, compare the output
written after the replay with a plain-Python reference over the replayed input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from ethereal_kafka.connectors.kafka.topics import ReadRecord, produce, read_committed
from ethereal_kafka.eos.names import transactional_id
from ethereal_kafka.examples import eos
from ethereal_kafka.testing.cluster import KafkaCluster
from ethereal_kafka.testing.crash import compare
from ethereal_kafka.testing.plugin import RunJob, TopicFactory
from tests.integration.eos_helpers import (
    JobFiles,
    add_poison,
    check_dead_letters,
    dead_letter_job,
    feed,
    leave_open_transaction,
    output,
    pairs,
    write_job,
)

STATELESS = "ethereal_kafka.examples.eos:stateless"
RUNNING_TOTAL = "ethereal_kafka.examples.eos:running_total"


def _cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """Run the CLI with no terminal on stdin (as CI and scripts do)."""
    return subprocess.run(
        [sys.executable, "-m", "ethereal_kafka.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def _offsets(app_id: str) -> dict[str, Any]:
    result = _cli("offsets", app_id, "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def _ends(bootstrap: str, topic: str) -> dict[int, int]:
    """High watermark per partition: everything written later has a higher offset."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ethereal-test-ends", "log_level": 3})
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
    finally:
        consumer.close()


def _written_after(bootstrap: str, topic: str, ends: dict[int, int]) -> list[ReadRecord]:
    return [r for r in output(bootstrap, topic) if r.offset >= ends.get(r.partition, 0)]


def _feed_with_timestamps(
    bootstrap: str, topic: str, records: list[tuple[bytes, bytes]], partitions: int
) -> None:
    """`feed`, with each record's Kafka timestamp set to its event time (`ts`)."""
    by_partition: dict[int, list[tuple[bytes, bytes]]] = defaultdict(list)
    for key, value in records:
        by_partition[sum(key) % partitions].append((key, value))
    for partition, items in sorted(by_partition.items()):
        stamps = [json.loads(v)["ts"] for _, v in items]
        produce(bootstrap, topic, items, partition=partition, timestamps_ms=stamps)


def _check_running_totals(records: list[ReadRecord], inputs: list[tuple[bytes, bytes]]) -> None:
    """Every update matches the reference over `inputs`, none repeats, and every key reaches its final count."""
    updates = [json.loads(r.value or b"") for r in records]
    reference = eos.running_total_reference(inputs)
    seen = Counter((u["key"], u["count"]) for u in updates)
    assert all(n == 1 for n in seen.values()), "no duplicate update"
    assert all(reference[u["key"]][u["count"] - 1] == u["total"] for u in updates), "totals as the reference"
    finals = {k: max(c for key, c in seen if key == k) for k, _ in seen}
    assert finals == {k: len(v) for k, v in reference.items()}, "state restarted from the replay position"


def _moved_aside(files: JobFiles) -> list[Path]:
    return sorted(files.checkpoint.parent.glob(f"{files.checkpoint.name}.before-replay-*"))


def _stateless_run(
    bs: str, topic_factory: TopicFactory, tmp_path: Path, run_job: RunJob
) -> tuple[str, str, list[tuple[bytes, bytes]], JobFiles, dict[int, int]]:
    """300 events through the stateless job in one epoch: (source, sink, inputs, files, the sink's ends after it)."""
    src, dst = topic_factory(partitions=2), topic_factory(partitions=2)
    inputs = eos.events(300)
    feed(bs, src, inputs, 2)
    files = write_job(tmp_path, bs, src, dst, STATELESS, starting="group-offsets", max_records=1000)
    run_job(files.job)
    return src, dst, inputs, files, _ends(bs, dst)


def test_replay_from_earliest_reprocesses_everything(
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    run_job: RunJob,
) -> None:
    bs = kafka_cluster.bootstrap
    _, dst, inputs, files, before = _stateless_run(bs, topic_factory, tmp_path, run_job)
    result = _cli("replay", files.app_id, "--from", "earliest", "--yes")
    assert result.returncode == 0, result.stderr
    (moved,) = _moved_aside(files)
    assert f"moved the old Spark checkpoint aside to {moved}" in result.stdout
    assert (moved / "out" / "metadata").exists(), "the old checkpoint is kept, whole"
    doc = _offsets(files.app_id)
    assert {p["committed"] for p in doc["partitions"]} == {0}
    assert all(p["marker"]["kind"] == "replay" for p in doc["partitions"])
    run_job(files.job)
    cmp = compare(eos.stateless_reference(inputs), pairs(_written_after(bs, dst, before)))
    assert (cmp.records, cmp.duplicates, cmp.lost, cmp.unexpected) == (
        len(eos.stateless_reference(inputs)),
        0,
        0,
        0,
    )
    assert all(p["lag"] == 0 and p["marker"]["kind"] == "epoch" for p in _offsets(files.app_id)["partitions"])


def test_offsets_and_replay_do_not_wait_for_a_crashed_runs_open_transaction(
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    run_job: RunJob,
) -> None:
    """A run SIGKILLed inside a commit leaves its transaction open, with its marker pending on the source's group.
    `offsets` and the replay plan used to read the group stably, which waits for the pending offset: both waited out
    the dead run's transaction timeout (5 minutes here) and failed with "committed offsets of group ... did not
    answer" after 45 s of retries. They now read the last committed offsets; the replay fences the run's ids, plans
    again stably, and the replayed run's output is exact."""
    bs = kafka_cluster.bootstrap
    src, dst, inputs, files, before = _stateless_run(bs, topic_factory, tmp_path, run_job)
    txn_id = transactional_id(files.app_id, "out", f"{src}-0")
    dead_run = leave_open_transaction(bs, txn_id, files.app_id, (src, 0), dst)
    began = time.monotonic()
    assert all(p["committed"] is not None for p in _offsets(files.app_id)["partitions"])
    result = _cli("replay", files.app_id, "--from", "earliest", "--yes")
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - began < 40, "neither waited for the open transaction"
    del dead_run
    run_job(files.job)
    got = pairs(_written_after(bs, dst, before))
    assert (b"never", b"aborted") not in got, "the replay's fence aborted the dead run's transaction"
    cmp = compare(eos.stateless_reference(inputs), got)
    assert (cmp.duplicates, cmp.lost, cmp.unexpected) == (0, 0, 0)


def test_stateful_job_replayed_from_a_timestamp_restarts_there(
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    run_job: RunJob,
) -> None:
    bs = kafka_cluster.bootstrap
    src, dst = topic_factory(partitions=2), topic_factory(partitions=2)
    # Event times (and Kafka timestamps) in the recent past: the broker rejects timestamps far in the future.
    inputs = eos.events(400, base_ts=int(time.time() * 1000) - 600_000)
    _feed_with_timestamps(bs, src, inputs, 2)
    files = write_job(tmp_path, bs, src, dst, RUNNING_TOTAL, max_records=100)
    run_job(files.job)
    doc = _offsets(files.app_id)
    (progress,) = doc["progress"]
    assert progress["group"] == f"{files.app_id}.ethereal-progress.out"
    assert any(p["marker"] and p["marker"]["kind"] == "epoch" for p in progress["partitions"])
    before = _ends(bs, dst)
    boundary = json.loads(inputs[250][1])["ts"]
    result = _cli("replay", files.app_id, "--from", f"timestamp:{boundary}", "--yes")
    assert result.returncode == 0, result.stderr
    assert f"deleted progress group(s) {progress['group']}" in result.stdout
    assert _offsets(files.app_id)["progress"] == [], "the old checkpoint's progress markers are gone"
    run_job(
        files.job
    )  # a stateful job without its checkpoint: starts from the replay position instead of refusing
    replayed = [(k, v) for k, v in inputs if json.loads(v)["ts"] >= boundary]
    assert len(replayed) == 150
    _check_running_totals(_written_after(bs, dst, before), replayed)


def test_replay_from_explicit_offsets_validates_them_and_keeps_other_partitions(
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    run_job: RunJob,
) -> None:
    bs = kafka_cluster.bootstrap
    src, dst = topic_factory(partitions=2), topic_factory(partitions=2)
    inputs = eos.events(300)
    feed(bs, src, inputs, 2)
    # starting.offsets=earliest: the replay positions, not the source's own start, must decide where it resumes.
    files = write_job(tmp_path, bs, src, dst, STATELESS, starting="earliest", max_records=1000)
    run_job(files.job)
    ends = _ends(bs, src)
    for bad, message in (
        (
            f"{src}:0:{ends[0] + 1}",
            f"offset {ends[0] + 1} of {src}:0 is outside the partition's retained range",
        ),
        (f"{src}:7:0", f"does not read partition(s) {src}:7"),
        (f"{src}:0", "expected earliest, timestamp:<ms> or topic:partition:offset"),
    ):
        refused = _cli("replay", "--job", str(files.job), "--from", bad, "--yes")
        assert refused.returncode == 1 and message in refused.stderr, refused.stderr
        assert refused.stderr.count("\n") == 1, "one line"
    assert not _moved_aside(files), "a refused replay changes nothing"
    before = _ends(bs, dst)
    result = _cli("replay", "--job", str(files.job), "--from", f"{src}:0:10", "--yes")
    assert result.returncode == 0, result.stderr
    run_job(files.job)
    replayed = [
        (r.key or b"", r.value or b"") for r in read_committed(bs, src) if r.partition == 0 and r.offset >= 10
    ]
    assert replayed
    cmp = compare(eos.stateless_reference(replayed), pairs(_written_after(bs, dst, before)))
    assert (cmp.duplicates, cmp.lost, cmp.unexpected) == (0, 0, 0)


def test_offsets_show_lag_and_markers_and_dry_run_or_no_yes_change_nothing(
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    run_job: RunJob,
) -> None:
    bs = kafka_cluster.bootstrap
    src, dst = topic_factory(partitions=2), topic_factory(partitions=2)
    feed(bs, src, eos.events(200), 2)
    files = write_job(tmp_path, bs, src, dst, STATELESS, max_records=60)
    run_job(files.job)
    checkpoint_id = json.loads((files.checkpoint / "out" / "metadata").read_text())["id"]
    last_epoch = max(
        int(p.name) for p in (files.checkpoint / "out" / "commits").iterdir() if p.name.isdigit()
    )
    doc = _offsets(files.app_id)
    assert doc["lag"] == 0 and len(doc["partitions"]) == 2
    for p in doc["partitions"]:
        assert (p["group"], p["committed"], p["lag"]) == (files.app_id, p["end"], 0)
        assert p["marker"] == {
            "kind": "epoch",
            "app_id": files.app_id,
            "checkpoint_id": checkpoint_id,
            "epoch": last_epoch,
        }
    table = _cli("offsets", files.app_id)
    assert table.returncode == 0, table.stderr
    assert f"app {files.app_id}: 2 input partition(s), total lag 0" in table.stdout
    assert f"epoch {last_epoch} @ {checkpoint_id[:8]}" in table.stdout

    more = eos.events(250)[200:]
    feed(bs, src, more, 2)
    produced = Counter(sum(k) % 2 for k, _ in more)
    doc = _offsets(files.app_id)
    assert doc["lag"] == 50
    assert {p["partition"]: p["lag"] for p in doc["partitions"]} == {0: produced[0], 1: produced[1]}

    listing = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    dry = _cli("replay", files.app_id, "--from", "earliest", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "dry run: nothing changed" in dry.stdout and "note:" not in dry.stdout
    rows = [line.split() for line in dry.stdout.splitlines() if line.startswith("events ")]
    assert sorted((int(r[3]), int(r[4]), int(r[5])) for r in rows) == sorted(
        (p["partition"], p["committed"], 0) for p in doc["partitions"]
    ), "per partition: committed offset -> new start"
    no_yes = _cli("replay", files.app_id, "--from", "earliest")
    assert no_yes.returncode == 1 and "pass --yes" in no_yes.stderr
    assert _offsets(files.app_id) == doc
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == listing


def test_replay_into_another_topic_leaves_the_app_untouched(
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    run_job: RunJob,
) -> None:
    bs = kafka_cluster.bootstrap
    src, dst, copy = topic_factory(partitions=2), topic_factory(partitions=2), topic_factory(partitions=2)
    dlq, copy_dlq = topic_factory(partitions=1), topic_factory(partitions=1)
    inputs = eos.events(300)
    feed(bs, src, inputs, 2)
    add_poison(bs, src, 2, 12)  # dead letters: a replay sends them to its own topic, never production's
    files = write_job(tmp_path, bs, src, dst, STATELESS, max_records=1000)
    dead_letter_job(files, dlq)
    run_job(files.job)
    doc = _offsets(files.app_id)
    dst_before, dlq_before = _ends(bs, dst), _ends(bs, dlq)
    listing = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    refused = _cli("replay", files.app_id, "--from", "earliest", "--into", dst)
    assert refused.returncode == 1 and "that is an output topic" in refused.stderr
    refused = _cli("replay", files.app_id, "--from", "earliest", "--into", copy)
    assert refused.returncode == 1 and f"sends dead letters to {dlq}" in refused.stderr, refused.stderr[
        -2000:
    ]
    result = _cli("replay", files.app_id, "--from", "earliest", "--into", copy, "--dlq-into", copy_dlq)
    assert result.returncode == 0, result.stderr[-3000:]
    expected = eos.stateless_reference(inputs)
    assert f"replayed into {copy}: {len(expected)} record(s)" in result.stdout
    cmp = compare(expected, pairs(read_committed(bs, copy)))
    assert (cmp.records, cmp.duplicates, cmp.lost, cmp.unexpected) == (len(expected), 0, 0, 0)
    print(check_dead_letters(bs, src, copy_dlq))
    assert _offsets(files.app_id) == doc, "the app's group offsets and markers are untouched"
    assert _ends(bs, dst) == dst_before, "nothing written to the app's sink topic"
    assert _ends(bs, dlq) == dlq_before, "nothing written to the app's dead-letter topic"
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == listing, "checkpoint untouched"


def test_replay_refuses_while_the_app_runs_and_not_after_it_was_killed(
    kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    bs = kafka_cluster.bootstrap
    src, dst = topic_factory(partitions=2), topic_factory(partitions=2)
    inputs = eos.events(200)
    feed(bs, src, inputs, 2)
    files = write_job(tmp_path, bs, src, dst, STATELESS, max_records=1000)
    expected = len(eos.stateless_reference(inputs))
    log = tmp_path / "job.log"
    job = subprocess.Popen(
        [sys.executable, "-m", "ethereal_kafka.cli", "run", str(files.job)],
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(output(bs, dst)) < expected:
            assert job.poll() is None, log.read_text()[-3000:]
            time.sleep(1)
        assert _offsets(files.app_id)["lag"] == 0, "offsets reads a running app"
        refused = _cli("replay", files.app_id, "--from", "earliest", "--yes")
        assert refused.returncode == 1
        assert refused.stderr.startswith(
            f"error: app {files.app_id} is running on this host (last started as pid"
        )
        dry = _cli("replay", files.app_id, "--from", "earliest", "--dry-run")
        assert dry.returncode == 0 and "note: a replay now would be refused" in dry.stdout
        os.killpg(job.pid, 9)  # the kernel releases the run lock with the process: no stale lock
        job.wait(timeout=30)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, 9)
    assert not _moved_aside(files)
    dry = _cli("replay", files.app_id, "--from", "earliest", "--dry-run")
    assert dry.returncode == 0 and "note:" not in dry.stdout, dry.stdout + dry.stderr


@pytest.mark.parametrize("command", ["offsets", "replay"])
def test_unknown_app_is_a_one_line_error(command: str) -> None:
    extra = ["--from", "earliest", "--yes"] if command == "replay" else []
    result = _cli(command, "no-such-app-7f3e", *extra)
    assert result.returncode == 1
    assert result.stderr == (
        "error: no job known as app 'no-such-app-7f3e' on this host (`ethereal-kafka run` records a job when it "
        "starts); pass --job FILE\n"
    )


def test_replay_claims_the_app_and_fences_the_last_runs_transactional_ids(
    kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path, run_job: RunJob
) -> None:
    """A zombie of the last run (a sink task's producer still alive, inside a transaction) must not commit after a
    replay reset the app: the replay claims the app and fences the transactional ids the run recorded. Before, the
    zombie's transaction committed after the replay (its record visible) and the replay claimed nothing."""
    from confluent_kafka import KafkaException

    from ethereal_kafka.checkpoint.apps import read_run_record
    from ethereal_kafka.connectors.kafka.clients import transactional_producer
    from ethereal_kafka.eos.ownership import read_claim

    bs = kafka_cluster.bootstrap
    src, dst = topic_factory(partitions=2), topic_factory(partitions=2)
    feed(bs, src, eos.events(200), 2)
    files = write_job(tmp_path, bs, src, dst, STATELESS, starting="group-offsets", max_records=1000)
    run_job(files.job)
    record = read_run_record(files.app_id)
    assert record is not None and record.pool, "the run recorded its transactional ids"
    ((cluster, ids),) = record.pool.items()
    zombie = transactional_producer(ids[0], cluster, 30000, {})
    zombie.begin_transaction()
    zombie.produce(dst, b"zombie", b"zombie", partition=0)
    zombie.flush(10)
    result = _cli("replay", files.app_id, "--from", "earliest", "--yes")
    assert result.returncode == 0, result.stderr
    assert f"fenced the last run's {len(ids)} transactional id(s)" in result.stdout, result.stdout
    with pytest.raises(KafkaException):
        zombie.commit_transaction(10)
    assert b"zombie" not in [r.value for r in output(bs, dst)]
    claim = read_claim(files.app_id, bs, {})
    assert claim is not None and claim[0].instance_id.startswith("replay-") and claim[0].released
