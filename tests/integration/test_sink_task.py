"""One sink task's exactly-once commit, driven directly (no Spark) against the real broker, with two attempts of
the same task interleaved at chosen points by the fault hooks (`ethereal_kafka.faults.HOOKS`)."""

from __future__ import annotations

import threading
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
    a.join(HOLD_S)
    b_read.release.set()
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
    old = epoch_write(bs, out, marked, app_id=app, instance_id="instance-a")
    new = epoch_write(bs, out, marked, app_id=app, instance_id="instance-b")
    write_claim(app, bs, {}, OwnerClaim("instance-b"))
    records = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(10)]
    with pytest.raises(FencedError, match="took over"):
        commit_attempt(old, 0, records)
    assert read_committed(bs, out, timeout_s=3) == []
    assert commit_attempt(new, 0, records) is True
    assert sorted((r.key, r.value) for r in read_committed(bs, out, timeout_s=10)) == sorted(records)
