"""One sink task's exactly-once commit, driven directly (no Spark) against the real broker, with two attempts of
the same task interleaved at chosen points by the fault hooks (`ethereal_kafka.faults.HOOKS`)."""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ethereal_kafka import faults
from ethereal_kafka.connectors.kafka.topics import create_topic, read_committed
from ethereal_kafka.eos.errors import FencedError
from ethereal_kafka.eos.markers import OwnerClaim
from ethereal_kafka.eos.names import progress_topic
from ethereal_kafka.eos.ownership import write_claim
from ethereal_kafka.eos.phase_one import TransactionalTask
from ethereal_kafka.testing.cluster import KafkaCluster
from ethereal_kafka.testing.plugin import TopicFactory
from tests.integration.sink_task_helpers import commit_attempt, epoch_write

HOLD_S = 60.0


@pytest.fixture
def hooks() -> Iterator[dict[str, Callable[[int], None]]]:
    """The fault hooks, cleared after the test."""
    yield faults.HOOKS
    faults.HOOKS.clear()


class Gate:
    """One thread parks at a hook point until the test releases it."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.release = threading.Event()

    def park(self) -> None:
        self.reached.set()
        assert self.release.wait(HOLD_S), "never released"


def test_an_older_attempt_cannot_commit_between_a_new_attempts_marker_read_and_its_write(
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    hooks: dict[str, Callable[[int], None]],
) -> None:
    """Attempt A is held inside its open transaction (records sent, marker and commit not yet) while attempt
    B of the same task starts. B must fence A before it reads the marker: then either A's transaction is aborted
    and B writes, or A committed and B sees it. Reading the marker first (then fencing) let A commit in between, and
    B wrote the epoch's output a second time."""
    bs = kafka_cluster.bootstrap
    out, marked = topic_factory(partitions=1), topic_factory(partitions=1)
    write = epoch_write(bs, out, marked, app_id=f"hold-{uuid.uuid4().hex[:8]}")
    records = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(20)]
    a_held, b_read = Gate(), Gate()
    threads = threading.local()

    def in_transaction(_task: int) -> None:
        if getattr(threads, "name", "") == "A" and not a_held.reached.is_set():
            a_held.park()

    def after_marker(_task: int) -> None:
        if getattr(threads, "name", "") == "B" and not b_read.reached.is_set():
            b_read.park()

    hooks["in_transaction"] = in_transaction
    hooks["after_marker"] = after_marker
    results: dict[str, object] = {}

    def attempt(name: str) -> None:
        threads.name = name
        try:
            results[name] = commit_attempt(write, 0, records)
        except Exception as exc:  # reported by the assertions below
            results[name] = exc

    a = threading.Thread(target=attempt, args=("A",))
    a.start()
    assert a_held.reached.wait(HOLD_S), "A never opened its transaction"
    b = threading.Thread(target=attempt, args=("B",))
    b.start()
    # B reads the marker (not committed yet), then parks; A is released and tries to commit.
    if not b_read.reached.wait(20):
        pytest.fail(f"B never read the marker: {results}")
    a_held.release.set()
    # A tries to commit now; fenced by B, it can only wait for B's marker (it never fences B back), so it finishes
    # after B. Give it the time to try, then let B go on.
    a.join(5)
    b_read.release.set()
    a.join(HOLD_S)
    b.join(HOLD_S)
    assert not a.is_alive() and not b.is_alive()
    got = [(r.key, r.value) for r in read_committed(bs, out, timeout_s=10)]
    assert sorted(got) == sorted(records), (
        f"each record exactly once (got {len(got)} for {len(records)}): {results}"
    )


def test_a_task_of_an_instance_that_was_taken_over_writes_nothing(
    kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    """Instance B claimed the app; a task of instance A (still running an epoch) fences B's producer for a moment
    when it builds its own, but must then find that the app is not A's any more and write nothing."""
    bs = kafka_cluster.bootstrap
    out, marked = topic_factory(partitions=1), topic_factory(partitions=1)
    app = f"owner-{uuid.uuid4().hex[:8]}"
    create_topic(bs, progress_topic(app), 1)
    old = epoch_write(bs, out, marked, app_id=app, instance_id="instance-a", claim=False)
    new = epoch_write(bs, out, marked, app_id=app, instance_id="instance-b", claim=False)
    write_claim(app, bs, {}, OwnerClaim("instance-b"))
    records = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(10)]
    with pytest.raises(FencedError, match="took over"):
        commit_attempt(old, 0, records)
    assert read_committed(bs, out, timeout_s=3) == []
    assert commit_attempt(new, 0, records) is True
    assert sorted((r.key, r.value) for r in read_committed(bs, out, timeout_s=10)) == sorted(records)


def test_a_fenced_attempt_never_fences_the_newer_attempt_back(
    kafka_cluster: KafkaCluster, topic_factory: TopicFactory, hooks: dict[str, Callable[[int], None]]
) -> None:
    """Two live attempts of one task (a resubmitted stage, an executor declared lost but alive): A is inside its
    transaction when B starts and fences it; B is still inside its own transaction when A goes on and finds itself
    fenced. A must stop writing and wait for B's marker, not fence B back: a fenced attempt that re-fences aborts the
    newer one's transaction, and two such attempts fence each other until both give up (which fails the job under
    local[2]). B commits in its first transaction; A writes nothing; the records are there once."""
    bs = kafka_cluster.bootstrap
    out, marked = topic_factory(partitions=1), topic_factory(partitions=1)
    write = epoch_write(bs, out, marked, app_id=f"oneway-{uuid.uuid4().hex[:8]}")
    records = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(20)]
    held = {"A": Gate(), "B": Gate()}
    threads = threading.local()

    def in_transaction(_task: int) -> None:
        gate = held.get(getattr(threads, "name", ""))
        if gate is not None and not gate.reached.is_set():
            gate.park()

    hooks["in_transaction"] = in_transaction
    attempts = {name: TransactionalTask(write, 0) for name in held}
    results: dict[str, object] = {}

    def attempt(name: str) -> None:
        threads.name = name
        try:
            results[name] = commit_attempt(write, 0, records, attempts[name])
        except Exception as exc:  # reported by the assertions below
            results[name] = exc

    a = threading.Thread(target=attempt, args=("A",))
    a.start()
    assert held["A"].reached.wait(HOLD_S), "A never opened its transaction"
    b = threading.Thread(target=attempt, args=("B",))
    b.start()
    assert held["B"].reached.wait(HOLD_S), f"B never opened its transaction: {results}"
    held["A"].release.set()  # A goes on: its producer was fenced by B's start
    time.sleep(3)  # A meets the fence (it either waits for B's marker, or fences B back)
    held["B"].release.set()
    a.join(HOLD_S)
    b.join(HOLD_S)
    assert not a.is_alive() and not b.is_alive()
    assert results == {"A": True, "B": True}, results
    assert attempts["B"].commit_ms is not None, "the newer attempt B committed its own transaction"
    assert attempts["A"].commit_ms is None, "the fenced attempt A never committed (it never fenced B back)"
    got = [(r.key, r.value) for r in read_committed(bs, out, timeout_s=10)]
    assert sorted(got) == sorted(records), f"each record exactly once (got {len(got)} for {len(records)})"


def test_a_commit_reported_failed_after_it_landed_is_not_written_again(
    kafka_cluster: KafkaCluster, topic_factory: TopicFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`commit_transaction` returned, then the task is told it failed (`_TIMED_OUT`, what a timeout while the
    coordinator applied the commit looks like): the task must re-read its marker after fencing again, find the
    epoch committed, and not produce it a second time."""
    monkeypatch.setenv(faults.FAIL_AFTER_COMMIT_ENV, "phase_one")
    bs = kafka_cluster.bootstrap
    out, marked = topic_factory(partitions=1), topic_factory(partitions=1)
    write = epoch_write(bs, out, marked, app_id=f"landed-{uuid.uuid4().hex[:8]}")
    records = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(15)]
    task = TransactionalTask(write, 0)
    assert commit_attempt(write, 0, records, task) is True
    assert task.commit_ms is not None, "the first transaction committed (then was reported failed)"
    got = [(r.key, r.value) for r in read_committed(bs, out, timeout_s=10)]
    assert sorted(got) == sorted(records), f"each record exactly once (got {len(got)} for {len(records)})"


@pytest.mark.parametrize("limit", ["producer", "topic"])
def test_a_record_too_large_fails_the_task_at_once_in_one_line(
    limit: str, kafka_cluster: KafkaCluster, topic_factory: TopicFactory
) -> None:
    """A record larger than the producer accepts (its `message.max.bytes`, 1 MB by default), or than the topic
    accepts (the producer's limit raised, the broker's left), can never be committed. Before, the task aborted and
    redid its transaction six times and failed with "not committed after 6 attempts", and again at every replay.
    Now it fails at once with one line naming the topic, the size and the task's input."""
    from ethereal_kafka.errors import RecordTooLargeError

    bs = kafka_cluster.bootstrap
    out, marked = topic_factory(partitions=1), topic_factory(partitions=1)
    settings = {"kafka.message.max.bytes": "4000000"} if limit == "topic" else {}
    write = epoch_write(bs, out, marked, app_id=f"big-{uuid.uuid4().hex[:8]}", sink_settings=settings)
    big = random.Random(7).randbytes(1_500_000)  # incompressible: the compressed batch is as large
    started = time.monotonic()
    task = TransactionalTask(write, 0)
    with pytest.raises(RecordTooLargeError) as refused:
        commit_attempt(write, 0, [(b"small", b"v"), (b"big", big)], task)
    line = str(refused.value)
    print(line)
    assert "\n" not in line and f"for topic {out}" in line and "1,500,003 bytes" in line and "task 0" in line
    assert task.attempts == 1, "no transaction was redone"
    assert time.monotonic() - started < 60
    assert read_committed(bs, out, timeout_s=3) == []
