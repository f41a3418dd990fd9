"""The owner claim on the real broker, driven directly (no Spark): one-way, so a stalled owner cannot win it back."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ethereal_kafka import faults
from ethereal_kafka.connectors.kafka.topics import create_topic
from ethereal_kafka.eos.errors import FencedError
from ethereal_kafka.eos.markers import OwnerClaim
from ethereal_kafka.eos.names import progress_topic
from ethereal_kafka.eos.ownership import HEARTBEAT_S, ClaimWriter, InstanceGuard, read_claim
from ethereal_kafka.testing.cluster import KafkaCluster
from tests.integration.sink_task_helpers import commit_attempt, epoch_write


@pytest.fixture
def hooks() -> Iterator[dict[str, Callable[[int], None]]]:
    yield faults.HOOKS
    faults.HOOKS.clear()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own cache folder: the run locks and records of its apps."""
    monkeypatch.setenv("ETHEREAL_KAFKA_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_an_owner_stalled_past_a_takeover_cannot_write_the_claim_back(
    kafka_cluster: KafkaCluster, hooks: dict[str, Callable[[int], None]], home: Path
) -> None:
    """Instance A's heartbeat reads the claim (still A's) and stalls before writing it. Meanwhile instance B, on
    another host, claims the app (as after A's lease lapsed). When A's stall ends, its write must be refused: A
    stops, the claim keeps naming B (with a newer generation), and A's sink tasks write nothing. Before the claim
    was written by a fencing claim writer, A's late write named A owner again: B's heartbeat then stopped B, and
    A's fenced tasks re-fenced and passed the owner check."""
    bs = kafka_cluster.bootstrap
    app = f"zombie-{uuid.uuid4().hex[:8]}"
    create_topic(bs, progress_topic(app), 1)
    stalled, resume = threading.Event(), threading.Event()

    def heartbeat(_task: int) -> None:
        if not stalled.is_set():
            stalled.set()
            assert resume.wait(60), "never resumed"

    hooks["heartbeat"] = heartbeat
    a = InstanceGuard(app, bs, {}, "instance-a")
    a.acquire()
    first = a.writer.commit()  # what A's coordinator does once the progress topic exists
    stops: list[str] = []
    try:
        a.watch(stops.append)
        assert stalled.wait(HEARTBEAT_S * 5), "A's heartbeat never ran"
        b = ClaimWriter(app, bs, {}, OwnerClaim("instance-b", "another-host", 7, int(time.time() * 1000)))
        taken = b.commit()
        assert taken.generation == first.generation + 1
        resume.set()  # A's stalled heartbeat now tries to write the claim
        deadline = time.monotonic() + 30
        while not stops and time.monotonic() < deadline:
            time.sleep(0.1)
        assert stops == ["takeover"], "A learned it lost the app"
        assert a.taken_over_by == "instance instance-b"
        found = read_claim(app, bs, {})
        assert found is not None and found[0].instance_id == "instance-b", found
        assert found[0].generation == taken.generation
        b.commit()  # B's own heartbeat goes on
        out, marked = f"{app}-out", f"{app}-in"
        create_topic(bs, out, 1)
        create_topic(bs, marked, 1)
        with pytest.raises(FencedError, match="took over"):
            commit_attempt(epoch_write(bs, out, marked, app, instance_id="instance-a"), 0, [(b"k", b"v")])
        b.close()
    finally:
        resume.set()
        a.release()
    found = read_claim(app, bs, {})
    assert found is not None and found[0].instance_id == "instance-b" and not found[0].released, (
        "A's release did not touch B's claim"
    )


def test_a_claim_that_is_gone_stops_the_tasks_instead_of_passing_them(
    kafka_cluster: KafkaCluster, topic_factory: Callable[..., str], home: Path
) -> None:
    """Deleting the progress topic erases the claim; a task used to take "no claim" for "no other owner" and write.
    It now stops: a missing claim never proves the app is still this instance's."""
    bs = kafka_cluster.bootstrap
    app = f"gone-{uuid.uuid4().hex[:8]}"
    out, marked = topic_factory(partitions=1), topic_factory(partitions=1)
    write = epoch_write(bs, out, marked, app, instance_id="instance-a", claim=False)
    with pytest.raises(FencedError, match="is gone or unreadable"):
        commit_attempt(write, 0, [(b"k", b"v")])


def test_a_claim_from_another_host_blocks_a_start_until_its_lease_lapses(
    kafka_cluster: KafkaCluster, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An instance on another host whose heartbeat is recent runs the app: a start here is refused in one line
    naming it. Once its heartbeat is older than the lease, it is gone and the start goes on, claiming the app with
    a newer generation (which fences the old claimant for good)."""
    from ethereal_kafka.checkpoint.errors import AppRunningError
    from ethereal_kafka.eos import ownership

    bs = kafka_cluster.bootstrap
    app = f"lease-{uuid.uuid4().hex[:8]}"
    create_topic(bs, progress_topic(app), 1)
    there = ClaimWriter(app, bs, {}, OwnerClaim("instance-x", "another-host", 11, int(time.time() * 1000)))
    old = there.commit()
    here = InstanceGuard(app, bs, {}, "instance-y", wait_s=1)
    with pytest.raises(
        AppRunningError, match="already running: instance instance-x on host another-host"
    ) as e:
        here.acquire()
    assert "\n" not in str(e.value)
    monkeypatch.setattr(ownership, "LEASE_S", 1.0)
    time.sleep(1.5)
    here.acquire()
    try:
        claimed = here.writer.commit()
        assert claimed.generation == old.generation + 1
        with pytest.raises(FencedError, match="newer instance claimed the app"):
            there.commit()  # the lapsed owner's late heartbeat
    finally:
        there.close()
        here.release()
