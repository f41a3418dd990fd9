"""Exactly-once, proven by killing real processes (SIGKILL at random moments) on the real broker."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from ethereal_kafka.broker import BrokerSettings, LocalBroker
from ethereal_kafka.checkpoint.history import CheckpointHistory
from ethereal_kafka.connectors.kafka.topics import add_partitions, create_topic
from ethereal_kafka.eos.committed import committed_offsets
from ethereal_kafka.eos.errors import RecoveryError
from ethereal_kafka.eos.names import owner_group, progress_topic
from ethereal_kafka.errors import ConfigError
from ethereal_kafka.examples import eos
from ethereal_kafka.testing.cluster import KafkaCluster
from ethereal_kafka.testing.crash import compare
from ethereal_kafka.testing.epochs import read_epochs
from ethereal_kafka.testing.jobs import JobRun
from ethereal_kafka.testing.plugin import RunJob, TopicFactory
from tests.integration.eos_helpers import (
    add_poison,
    check_dead_letters,
    dead_letter_job,
    drop_last_commit,
    feed,
    output,
    pairs,
    write_job,
)

FAULT = {
    "ETHEREAL_KAFKA_FAULT_TXN_DELAY_MS": "300"
}  # widen each task's open transaction: kills land in commits


def _run(
    job: Path, *extra: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ethereal_kafka.cli", "run", str(job), "--available-now", *extra],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )


def test_epoch_outliving_the_transaction_timeout_is_aborted_and_redone(
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    run_job: RunJob,
) -> None:
    if kafka_cluster.broker is None:
        pytest.skip("needs the local broker (its transaction cleanup interval is set to 1 s)")
    bs = kafka_cluster.bootstrap
    src, dst = topic_factory(partitions=2), topic_factory(partitions=2)
    inputs = eos.events(400)
    feed(bs, src, inputs, 2)
    files = write_job(
        tmp_path,
        bs,
        src,
        dst,
        "ethereal_kafka.examples.eos:stateless",
        max_records=1000,
        extra_job="transaction.timeout.ms=2000\n",
    )
    # Every task's first transaction stays open 6 s, three times the timeout: the broker aborts it.
    run_job(files.job, env={"ETHEREAL_KAFKA_FAULT_TXN_DELAY_MS": "6000"})
    got = output(bs, dst)
    cmp = compare(eos.stateless_reference(inputs), pairs(got))
    assert (cmp.duplicates, cmp.lost, cmp.unexpected) == (0, 0, 0)
    with CheckpointHistory(files.app_id, read_only=True) as history:
        epochs = history.records()
    assert epochs and all(e.outcome == "committed" for e in epochs)


def test_exactly_once_epochs_are_bounded_by_default(
    kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path, run_job: RunJob
) -> None:
    """With no max.records.per.epoch, an exactly-once job still reads a backlog in epochs small enough to commit
    within its transaction timeout (here 5 s: at most 4800 records); it used to log the whole backlog as one.
    Fixed epoch sizing, so that the default bounds alone are at work (adaptive sizing also stays within them)."""
    bs = kafka_cluster.bootstrap
    src, dst = topic_factory(partitions=2), topic_factory(partitions=2)
    inputs = eos.events(10_000)
    feed(bs, src, inputs, 2)
    files = write_job(
        tmp_path,
        bs,
        src,
        dst,
        "ethereal_kafka.examples.eos:stateless",
        max_records=0,
        extra_job="transaction.timeout.ms=5000\nepoch.sizing=fixed\n",
    )
    run_job(files.job)
    sizes = []
    previous: dict[tuple[str, int], int] = {}
    for epoch in read_epochs(files.checkpoint / "out"):
        (ends,) = epoch.ends
        sizes.append(sum(o - previous.get(tp, 0) for tp, o in ends.items()))
        previous = ends
    print(f"epoch sizes: {sizes}")
    assert sum(sizes) == len(inputs) and len(sizes) >= 3 and max(sizes) <= 4800, sizes
    cmp = compare(eos.stateless_reference(inputs), pairs(output(bs, dst)))
    assert (cmp.duplicates, cmp.lost, cmp.unexpected) == (0, 0, 0)


def test_a_changed_write_layout_is_refused_at_start(
    kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path, run_job: RunJob
) -> None:
    """A shuffling job restarted with another sink.tasks, or after its output topic gained partitions, would send a
    replayed epoch's rows to tasks whose markers skip them: the start is refused, naming the change."""
    bs = kafka_cluster.bootstrap
    src, dst = topic_factory(partitions=2), topic_factory(partitions=2)
    feed(bs, src, eos.events(300), 2)
    files = write_job(tmp_path, bs, src, dst, "ethereal_kafka.examples.eos:running_total", max_records=150)
    run_job(files.job)
    text = files.job.read_text()
    files.job.write_text(text.replace("sink.tasks=2", "sink.tasks=3"))
    refused = run_job(files.job, check=False)
    assert isinstance(refused.error, ConfigError), refused.error
    assert "query out: sink.tasks 2 -> 3 since its checkpoint was made" in str(refused.error)
    assert "docs/operations.md#rescaling-a-job" in str(refused.error)
    files.job.write_text(text)
    add_partitions(bs, dst, 3)
    refused = run_job(files.job, check=False)
    assert isinstance(refused.error, ConfigError), refused.error
    assert "sink out's topic partitions 2 -> 3" in str(refused.error)


def test_at_most_once_never_writes_a_replayed_epoch_twice(
    kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path, run_job: RunJob
) -> None:
    """At-most-once commits an epoch's offsets, then writes its output. A crash after the write and before Spark
    logged the epoch (simulated: its commit-log entry removed) replays it; the replay must not write it again."""
    bs = kafka_cluster.bootstrap
    src, dst = topic_factory(partitions=2), topic_factory(partitions=2)
    inputs = eos.events(400)
    feed(bs, src, inputs, 2)
    files = write_job(
        tmp_path,
        bs,
        src,
        dst,
        "ethereal_kafka.examples.eos:stateless",
        max_records=100,
        guarantee="at-most-once",
    )
    run_job(files.job)
    drop_last_commit(files.checkpoint / "out")
    run_job(files.job)
    cmp = compare(eos.stateless_reference(inputs), pairs(output(bs, dst)))
    assert (cmp.duplicates, cmp.lost, cmp.unexpected) == (0, 0, 0)


@pytest.mark.parametrize(
    "pipeline", ["ethereal_kafka.examples.eos:stateless", "ethereal_kafka.examples.eos:running_total"]
)
def test_dead_letters_commit_with_their_epoch_and_a_replay_does_not_repeat_them(
    pipeline: str, kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path, run_job: RunJob
) -> None:
    """Partition-preserving (stateless): a sink task commits the dead letters its read left with the output.
    Shuffling (running total): phase two commits the epoch's dead letters with its input offsets. Either way an
    epoch replayed after its Kafka commit (commit-log entry removed) writes them no second time."""
    bs = kafka_cluster.bootstrap
    src, dst, dlq = topic_factory(partitions=2), topic_factory(partitions=2), topic_factory(partitions=1)
    inputs = eos.events(400)
    feed(bs, src, inputs[:200], 2)
    add_poison(bs, src, 2, 30)
    feed(bs, src, inputs[200:], 2)
    add_poison(bs, src, 2, 10)  # the last epoch has dead letters too: its replay must not repeat them
    files = write_job(tmp_path, bs, src, dst, pipeline, max_records=120)
    dead_letter_job(files, dlq)
    run_job(files.job)
    drop_last_commit(files.checkpoint / "out")
    run_job(files.job)
    print(check_dead_letters(bs, src, dlq))


def test_replay_of_the_same_offsets_is_byte_identical(
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    run_job: RunJob,
) -> None:
    bs = kafka_cluster.bootstrap
    src = topic_factory(partitions=2)
    feed(bs, src, eos.events(1500), 2)
    outputs = []
    for run in range(2):
        dst = topic_factory(partitions=2)
        files = write_job(
            tmp_path / f"run{run}", bs, src, dst, "ethereal_kafka.examples.eos:running_total", max_records=250
        )
        run_job(files.job)
        # What a read_committed reader sees, record by record per partition. Offsets are not compared: aborted
        # attempts and transaction markers occupy offsets, and how many depends on retries, not on the data.
        outputs.append([(r.partition, r.key, r.value, r.headers) for r in output(bs, dst)])
    assert outputs[0] and outputs[0] == outputs[1]


def test_one_instance_per_app_a_second_start_is_refused_and_a_takeover_hands_over(
    kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    """A second `run` of a running app is refused before Spark starts, with one line naming the running instance,
    and the first keeps going; `run --takeover` makes the first stop cleanly between epochs (exit 0) and carries
    on from there; the output is exact."""
    bs = kafka_cluster.bootstrap
    src, dst = topic_factory(partitions=2), topic_factory(partitions=2)
    inputs = eos.events(3000)
    feed(bs, src, inputs, 2)
    files = write_job(tmp_path, bs, src, dst, "ethereal_kafka.examples.eos:stateless", max_records=100)
    log_path = tmp_path / "first.log"  # a file: an unread pipe fills up and blocks the job
    first = subprocess.Popen(
        [sys.executable, "-m", "ethereal_kafka.cli", "run", str(files.job)],
        stdout=log_path.open("w"),
        stderr=subprocess.STDOUT,
        env={**os.environ, **FAULT},
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(output(bs, dst)) < 100:
            assert first.poll() is None, log_path.read_text()[-3000:]
            time.sleep(0.5)
        began = time.monotonic()
        refused = _run(files.job)
        refused_s = time.monotonic() - began
        last = refused.stderr.strip().splitlines()[-1]
        assert refused.returncode == 1, refused.stderr[-3000:]
        assert last.startswith(f"error: app {files.app_id} is already running: instance "), last
        assert f"(pid {first.pid})" in last and " since " in last and "--takeover" in last, last
        assert "Traceback" not in refused.stderr and "SparkContext" not in refused.stderr
        before = len(output(bs, dst))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(output(bs, dst)) == before:
            time.sleep(0.5)
        assert first.poll() is None and len(output(bs, dst)) > before, "the first instance kept going"
        took_over = _run(files.job, "--takeover", env=FAULT)
        assert took_over.returncode == 0, took_over.stderr[-3000:]
        code = first.wait(timeout=60)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, 9)
    log = log_path.read_text(errors="replace")
    print(f"second start refused in {refused_s:.1f}s: {last}")
    assert code == 0, log[-3000:]
    assert "stopped on takeover: graceful" in log and "handed over to instance" in log, log[-3000:]
    got = output(bs, dst)
    cmp = compare(eos.stateless_reference(inputs), pairs(got))
    assert (cmp.duplicates, cmp.lost, cmp.unexpected) == (0, 0, 0)
    # Each run's summary (printed before its stop line) counts what its committed epochs wrote: together, the topic.
    written = [_summary_out(text) for text in (log, took_over.stderr)]
    assert sum(written) == len(got), (written, len(got))


def _summary_out(stderr: str) -> int:
    """Records out in the summary block of a run's stderr (`  out  QUERY -> SINK N`, one query, one sink)."""
    lines = stderr.splitlines()
    head = next(i for i, line in enumerate(lines) if "summary of " in line)
    out = next(line for line in lines[head:] if line.split(": ", 1)[-1].lstrip().startswith("out "))
    return int(out.rsplit(" ", 1)[-1].replace(",", ""))


def test_broker_restart_mid_run(kafka_cluster: KafkaCluster, tmp_path: Path, run_job: RunJob) -> None:
    if kafka_cluster.broker is None:
        pytest.skip("needs the local broker to stop and restart it")
    # A broker of its own: restarting the session's broker made it reload every topic, group and transaction the
    # session's tests had left (20-35 s, then a minute of NOT_COORDINATOR on a loaded machine), and slowed the
    # tests after this one on the same worker while it did.
    broker = LocalBroker(
        BrokerSettings(
            name="restart", state_dir=tmp_path / "broker", overrides=kafka_cluster.broker.settings.overrides
        )
    )
    bs = broker.start().bootstrap
    assert bs is not None
    try:
        _broker_restart_mid_run(broker, bs, tmp_path, run_job)
    finally:
        broker.destroy()


def _broker_restart_mid_run(broker: LocalBroker, bs: str, tmp_path: Path, run_job: RunJob) -> None:
    src, dst = f"restart-in-{tmp_path.name}", f"restart-out-{tmp_path.name}"
    create_topic(bs, src, 2)
    create_topic(bs, dst, 2)
    inputs = eos.events(3000)
    feed(bs, src, inputs, 2)
    files = write_job(tmp_path, bs, src, dst, "ethereal_kafka.examples.eos:running_total", max_records=150)
    # The job runs in-process in a thread, so the test can stop and restart the broker under it.
    runs: list[JobRun] = []
    job = threading.Thread(
        target=lambda: runs.append(run_job(files.job, env=FAULT, check=False, timeout_s=400))
    )
    job.start()
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not output(bs, dst):
            time.sleep(0.5)
        broker.stop()
        time.sleep(3)
    finally:
        broker.start()
        # "Back" is when the broker serves the app's group coordinators again (its own restart loads every group
        # and transaction log first, which no job can shorten).
        for group in (owner_group(files.app_id), files.app_id):
            committed_offsets(bs, group, {}, [(src, 0), (progress_topic(files.app_id), 0)], deadline_s=300)
        back_ms = time.time() * 1000  # the history's clock
        job.join(timeout=420)
    assert runs, "the run did not end"
    if not runs[0].ok:  # the job may give up while the broker is down; a restart must then finish exactly
        # ... and its recovery is timed from its own start, not from the broker's return.
        back_ms = time.time() * 1000
        run_job(files.job)
    updates = [json.loads(r.value or b"") for r in output(bs, dst)]
    reference = eos.running_total_reference(inputs)
    seen = Counter((u["key"], u["count"]) for u in updates)
    assert all(n == 1 for n in seen.values()), "no duplicate update"
    assert all(reference[u["key"]][u["count"] - 1] == u["total"] for u in updates)
    assert {k: max(c for (key, c) in seen if key == k) for k, _ in seen} == {
        k: len(v) for k, v in reference.items()
    }
    # Recovery does not wait out a hung client call: a phase-two producer that lost its brokers is replaced
    # before its next transaction. Kept, its `send_offsets_to_transaction` blocked on a stale coordinator until
    # `bounded_call` gave up (35 s): the epoch spanning the restart took 41-69 s in 9 of 9 runs; 7-17 s since.
    # Counted from the broker's return, not the epoch's start: the broker's own restart took 20-30 s at a load
    # average of 30 (one CI run: a 37 s epoch that committed in 154 ms once the broker was back), and its group
    # coordinators answered NOT_COORDINATOR for up to a minute more while loading a shared broker's groups.
    with CheckpointHistory(files.app_id, read_only=True) as history:
        records = history.records()
    ends = [r.started_ms + r.duration_ms for r in records if r.outcome == "committed"]
    first_after = min(end for end in ends if end > back_ms) - back_ms
    timeline = [
        (r.epoch, r.outcome, round(r.started_ms - back_ms), r.duration_ms, r.commit_ms, r.txn_aborts, r.error)
        for r in sorted(records, key=lambda r: r.started_ms)
        if r.started_ms + r.duration_ms > back_ms - 60_000
    ]
    assert first_after < 25_000, (first_after, runs[0].error, timeline)


def test_stateless_job_without_checkpoint_resumes_from_group_offsets(
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    run_job: RunJob,
) -> None:
    bs = kafka_cluster.bootstrap
    src, dst = topic_factory(partitions=2), topic_factory(partitions=2)
    first, second = eos.events(1200)[:600], eos.events(1200)[600:]
    feed(bs, src, first, 2)
    files = write_job(
        tmp_path, bs, src, dst, "ethereal_kafka.examples.eos:stateless", starting="group-offsets"
    )
    run_job(files.job)
    shutil.rmtree(files.checkpoint)
    feed(bs, src, second, 2)
    run_job(files.job)
    cmp = compare(eos.stateless_reference(first + second), pairs(output(bs, dst)))
    assert (cmp.duplicates, cmp.lost, cmp.unexpected) == (0, 0, 0)


def test_stateful_job_without_checkpoint_refuses_unless_replaying(
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    run_job: RunJob,
) -> None:
    bs = kafka_cluster.bootstrap
    src, dst = topic_factory(partitions=2), topic_factory(partitions=2)
    inputs = eos.events(600)
    feed(bs, src, inputs, 2)
    files = write_job(
        tmp_path, bs, src, dst, "ethereal_kafka.examples.eos:running_total", starting="group-offsets"
    )
    run_job(files.job)
    shutil.rmtree(files.checkpoint)
    refused = run_job(files.job, check=False)
    last = str(refused.error)
    assert isinstance(refused.error, RecoveryError) and "\n" not in last
    assert last.startswith("stateful job") and "replay.from" in last
    with files.job.open("a") as f:
        f.write("replay.from=earliest\n")
    run_job(files.job)
