"""Exactly-once on a replicated cluster: a running job rides out SIGKILLs of the brokers that hold its roles.

Production runs replication 3 with `min.insync.replicas=2`; these tests run the session's 3-node KRaft cluster
(`kafka_cluster3`) and hard-kill, one after the other, the node leading an input partition, the node leading an
output partition, the transaction coordinator of a sink task's transactional id and the group coordinator of the
job's group, each while an epoch's sink tasks are inside their transactions, keep it down, and restart it. One job
process (a keyed running count, `eos.running_total`) runs through all four kills; what it committed is compared
with the plain-Python reference: no duplicate, nothing lost, per-key order kept, and a concurrent read_committed
reader never saw a duplicate. No epoch may take longer than twice the usual epoch plus 10 s, and the job must never
need a restart.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from ethereal_kafka import faults
from ethereal_kafka.broker import LocalCluster, roles
from ethereal_kafka.broker.roles import health
from ethereal_kafka.checkpoint.history import CheckpointHistory, EpochRecord
from ethereal_kafka.connectors.kafka.topics import create_topic
from ethereal_kafka.eos.names import transactional_id
from ethereal_kafka.examples import eos
from ethereal_kafka.testing.crash import describe_kill
from tests.integration.eos_helpers import JobFiles, group_offsets, output, write_job

PARTITIONS = 2
#: Every sink task holds its transaction open this long in every epoch, so that a kill timed on a task's `open`
#: step lands inside the transaction (and the epoch's phase two follows while the node is down).
TXN_DELAY_MS = 1500
#: How long a killed node stays down at least (it is restarted once the cluster has also fenced it: leaderships
#: and coordinators have moved).
DOWN_S = 10.0
#: Input fed while the job runs: records per second (a few per epoch and key, so every epoch writes output).
FEED_PER_S = 25
ROLES = ("input-partition leader", "output-partition leader", "transaction coordinator", "group coordinator")


@dataclass(frozen=True)
class Kill:
    """One broker kill: which role, which node, when (wall clock), where the job was, when the cluster fenced the
    node (it left the metadata: leaderships and coordinators move then), when the node was back and in sync."""

    role: str
    node: int
    roles_held: str
    at: float
    landed: str
    fenced: float
    restarted: float
    healthy: float


@pytest.mark.timeout(900)
def test_running_count_survives_killed_leaders_and_coordinators(
    kafka_cluster3: LocalCluster, tmp_path: Path
) -> None:
    cluster = kafka_cluster3
    bs = cluster.bootstrap
    suffix = uuid.uuid4().hex[:8]
    src = create_topic(bs, f"c3-in-{suffix}", PARTITIONS, replication_factor=-1)
    dst = create_topic(bs, f"c3-out-{suffix}", PARTITIONS, replication_factor=-1)
    files = write_job(tmp_path, bs, src, dst, "ethereal_kafka.examples.eos:running_total", max_records=200)
    trace = tmp_path / "trace"
    feeder = Feeder(bs, src)
    reader = Reader(bs, dst)
    env = {**os.environ, faults.TXN_DELAY_ENV: str(TXN_DELAY_MS), faults.TRACE_ENV: str(trace)}
    log = (tmp_path / "job.log").open("wb")
    job = subprocess.Popen(
        [sys.executable, "-m", "ethereal_kafka.cli", "run", str(files.job)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    kills: list[Kill] = []
    try:
        feeder.start()
        reader.start()
        _wait(lambda: _commits(files) > 0, 240, "the job's first committed epoch", job)
        for role in ROLES:
            committed = _commits(files)
            _wait(lambda c=committed: _commits(files) >= c + 2, 120, "two more committed epochs", job)
            kills.append(_kill_during_transaction(cluster, role, files, src, dst, trace, job))
            print(_describe(kills[-1]))
        feeder.stop()
        _wait(lambda: _consumed(bs, files, src, feeder.ends()), 240, "the job to consume its input", job)
        assert job.poll() is None, (
            "the job process exited during the broker kills (a restart would be needed)"
        )
        job.send_signal(signal.SIGTERM)
        assert job.wait(timeout=120) == 0, _tail(tmp_path / "job.log")
    finally:
        feeder.stop()
        reader.stop()
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
        log.close()
        cluster.wait_healthy()  # the next test gets three nodes

    inputs = feeder.sent
    updates = [(r.partition, r.offset, json.loads(r.value or b"")) for r in output(bs, dst)]
    reference = eos.running_total_reference(inputs)
    seen = Counter((u["key"], u["count"]) for _, _, u in updates)
    duplicates = sum(n - 1 for n in seen.values() if n > 1)
    wrong = [u for _, _, u in updates if reference[u["key"]][u["count"] - 1] != u["total"]]
    finals = {k: max(c for (key, c) in seen if key == k) for k, _ in seen}
    lost = sum(1 for k, totals in reference.items() if finals.get(k) != len(totals))
    print(
        f"records={len(updates)} duplicates={duplicates} lost={lost} kills={len(kills)} inputs={len(inputs)}"
    )
    print(f"concurrent read_committed reader: {reader.count} records, {reader.duplicates} duplicates")
    assert (duplicates, lost, wrong) == (0, 0, [])
    assert _per_key_order_kept(updates)
    assert reader.count > 0 and reader.duplicates == 0

    # The bound holds for every epoch but the run's first, which also starts the Python workers and the state
    # store (10-20 s on a loaded machine, with or without a kill).
    first, *epochs = _committed_epochs(files.app_id)
    usual = statistics.median(e.duration_ms for e in epochs)
    bound = 2 * usual + 10_000
    for kill in kills:
        print(_effect(kill, epochs))
    longest = max(epochs, key=lambda e: e.duration_ms)
    print(
        f"epochs={len(epochs) + 1} first={first.duration_ms} ms usual={usual:.0f} ms bound={bound:.0f} ms "
        f"longest={longest.duration_ms} ms (epoch {longest.epoch})"
    )
    assert longest.duration_ms < bound, (
        f"epoch {longest.epoch} took {longest.duration_ms} ms > {bound:.0f} ms"
    )


def test_broker_cli_covers_every_node(kafka_cluster3: LocalCluster) -> None:
    """`broker start --nodes 3` on a running cluster returns it (last line: every node's address); `status` lists
    each node."""
    cli = [sys.executable, "-m", "ethereal_kafka.cli", "broker"]
    where = ["--nodes", "3", "--state-dir", str(kafka_cluster3.state_dir)]
    before = {n: s.pid for n, s in kafka_cluster3.status().nodes.items()}
    started = subprocess.run(
        [*cli, "start", *where], capture_output=True, text=True, timeout=120, check=False
    )
    assert started.returncode == 0, started.stderr
    assert started.stdout.strip().splitlines()[-1] == kafka_cluster3.bootstrap
    assert {n: s.pid for n, s in kafka_cluster3.status().nodes.items()} == before  # nothing new started
    status = subprocess.run(
        [*cli, "status", *where], capture_output=True, text=True, timeout=120, check=False
    )
    assert status.returncode == 0, status.stderr
    assert sum(f"node {n}: running" in status.stdout for n in (1, 2, 3)) == 3, status.stdout


def test_coordinator_roles_follow_the_brokers_hashing(kafka_cluster3: LocalCluster) -> None:
    """The rule `roles` finds a transaction coordinator by (the leader of `__consumer_offsets` or
    `__transaction_state` partition `abs(hash(key)) % partitions`) names the node the cluster itself reports as a
    group's coordinator."""
    bs = kafka_cluster3.bootstrap
    topic = create_topic(bs, f"c3-roles-{uuid.uuid4().hex[:8]}", 1, replication_factor=-1)
    for i in range(6):
        group = f"{topic}-{i}"
        consumer = Consumer({"bootstrap.servers": bs, "group.id": group, "log_level": 0})
        try:
            consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
        finally:
            consumer.close()
        assert kafka_cluster3.group_coordinator(group) == roles.leader_for_key(bs, roles.OFFSETS_TOPIC, group)


# -- the kills -----------------------------------------------------------------------------------------------------
def _role_node(cluster: LocalCluster, role: str, files: JobFiles, src: str, dst: str) -> int:
    if role == ROLES[0]:
        return cluster.leader(src, 0)
    if role == ROLES[1]:
        return cluster.leader(dst, 0)
    if role == ROLES[2]:
        return cluster.transaction_coordinator(transactional_id(files.app_id, "out", "0"))
    return cluster.group_coordinator(files.app_id)


def _kill_during_transaction(
    cluster: LocalCluster,
    role: str,
    files: JobFiles,
    src: str,
    dst: str,
    trace: Path,
    job: subprocess.Popen[bytes],
) -> Kill:
    """SIGKILL the node holding `role` as soon as a sink task opens its next transaction; restart it once it was
    down `DOWN_S` and the cluster fenced it; wait until every partition is in sync again."""
    node = _role_node(cluster, role, files, src, dst)
    held = ", ".join(r for r in ROLES if _role_node(cluster, r, files, src, dst) == node)
    seen = len(_trace_lines(trace))
    _wait(
        lambda: any(ln.endswith(f" {faults.OPEN}") for ln in _trace_lines(trace)[seen:]),
        60,
        "a transaction",
        job,
    )
    cluster.kill(node)
    at = time.time()
    landed = describe_kill(files.checkpoint, trace)
    _wait(lambda: _fenced(cluster, node), 60, f"node {node} to be fenced", job)
    fenced = time.time()
    time.sleep(max(0.0, at + DOWN_S - time.time()))
    cluster.start_node(node)
    restarted = time.time()
    cluster.wait_healthy()
    return Kill(role, node, held, at, landed, fenced, restarted, time.time())


def _fenced(cluster: LocalCluster, node: int) -> bool:
    try:
        return node not in health(cluster.bootstrap).brokers
    except Exception:
        return False


def _describe(kill: Kill) -> str:
    return (
        f"killed node {kill.node} ({kill.roles_held}) for the {kill.role}: {kill.landed}; fenced after "
        f"{kill.fenced - kill.at:.1f} s, restarted after {kill.restarted - kill.at:.1f} s, in sync after "
        f"{kill.healthy - kill.at:.1f} s"
    )


def _effect(kill: Kill, epochs: list[EpochRecord]) -> str:
    """The kill's measured effect: the longest epoch that overlapped the node's absence, and the time from the kill
    to the first epoch committed after it with output."""
    at_ms, back_ms = kill.at * 1000, kill.healthy * 1000
    spanning = [e for e in epochs if e.started_ms < back_ms and e.started_ms + e.duration_ms > at_ms]
    first = min(
        (
            e.started_ms + e.duration_ms
            for e in epochs
            if e.started_ms + e.duration_ms > at_ms and e.records_out
        ),
        default=None,
    )
    longest = max((e.duration_ms for e in spanning), default=0)
    after = "none"
    if first is not None:
        after = f"{(first - at_ms) / 1000:.1f} s after the kill ({(first - kill.fenced * 1000) / 1000:.1f} s after the fence)"
    return f"{kill.role} (node {kill.node}): longest epoch {longest} ms, first committed output {after}"


# -- the job's progress ----------------------------------------------------------------------------------------------
def _commits(files: JobFiles) -> int:
    return sum(
        1 for folder in files.checkpoint.glob("*/commits") for p in folder.iterdir() if p.name.isdigit()
    )


def _consumed(bs: str, files: JobFiles, src: str, ends: dict[int, int]) -> bool:
    committed = group_offsets(bs, files.app_id, src, PARTITIONS)
    return all(committed.get(p, (-1, None))[0] >= end for p, end in ends.items())


def _committed_epochs(app_id: str) -> list[EpochRecord]:
    with CheckpointHistory(app_id, read_only=True) as history:
        return [r for r in history.records() if r.outcome == "committed"]


def _trace_lines(trace: Path) -> list[str]:
    try:
        return trace.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []


def _wait(done: Callable[[], bool], timeout_s: float, what: str, job: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert job.poll() is None, f"the job exited ({job.returncode}) while waiting for {what}"
        assert time.monotonic() < deadline, f"no {what} within {timeout_s:.0f} s"
        time.sleep(0.1)


def _tail(path: Path, lines: int = 40) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _per_key_order_kept(updates: list[tuple[int, int, dict[str, int]]]) -> bool:
    """Within each output partition, each key's counts increase in offset order."""
    last: dict[tuple[int, str], int] = {}
    for partition, _, u in sorted(updates, key=lambda x: (x[0], x[1])):
        k = (partition, str(u["key"]))
        if k in last and u["count"] <= last[k]:
            return False
        last[k] = u["count"]
    return True


# -- input and a concurrent reader -----------------------------------------------------------------------------------
class Feeder:
    """Feeds `eos.events` to the input topic while the job runs (keyed into partitions as `eos_helpers.feed`, so
    per-key order is offset order), through the broker kills; `sent` is what Kafka acknowledged, in order."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.sent: list[tuple[bytes, bytes]] = []
        self._producer = Producer(
            {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5}
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="feeder", daemon=True)
        self._ends: dict[int, int] = {}

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=120)

    def ends(self) -> dict[int, int]:
        """The input's end offset per partition once feeding stopped."""
        return dict(self._ends)

    def _run(self) -> None:
        events = iter(eos.events(1_000_000))
        step = 0.2
        while not self._stop.is_set():
            batch = [next(events) for _ in range(max(1, int(FEED_PER_S * step)))]
            for key, value in batch:
                self._producer.produce(self.topic, value, key, partition=sum(key) % PARTITIONS)
            assert self._producer.flush(120) == 0, "the feeder's records were not acknowledged"
            self.sent.extend(batch)
            self._stop.wait(step)
        counts = Counter(sum(key) % PARTITIONS for key, _ in self.sent)
        self._ends = {p: counts.get(p, 0) for p in range(PARTITIONS)}


class Reader:
    """A read_committed consumer of the output topic running beside the job: counts what it saw and how many
    `(key, count)` updates it saw twice."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"c3-reader-{uuid.uuid4().hex[:8]}",
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "log_level": 0,
            }
        )
        # Assigned, not subscribed: no group, so a coordinator's kill cannot rewind it (a re-read is no duplicate).
        self._consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        self._seen: Counter[tuple[str, int]] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="reader", daemon=True)
        self.count = 0

    @property
    def duplicates(self) -> int:
        return sum(n - 1 for n in self._seen.values() if n > 1)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for m in self._consumer.consume(500, timeout=0.5):
                    error = m.error()
                    if error is not None and error.code() != KafkaError._PARTITION_EOF:
                        continue
                    if error is None:
                        update = json.loads(m.value() or b"{}")
                        self._seen[(update["key"], update["count"])] += 1
                        self.count += 1
        finally:
            self._consumer.close()
