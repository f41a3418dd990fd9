"""One running instance per app.id: a second start is refused, or (`run --takeover`) the first hands over.

Two things say who runs an app:

* **This host's run lock** (`checkpoint.apps`, `run.lock`): the running instance holds it exclusively; the kernel
  drops it when the process dies, SIGKILL included, so a crashed instance never blocks a restart here.
* **The owner claim in Kafka** (`OwnerClaim`, the offset of group `{app.id}.ethereal-owner` on progress partition
  0): names the instance, its host, pid, start time and generation; its offset is the time of the owner's last
  heartbeat (refreshed every `HEARTBEAT_S`). It covers instances on other hosts: a claim from another host with a
  recent heartbeat (younger than `LEASE_S`) means the app runs there. The claim is only ever written in a
  transaction of the claimant's `ClaimWriter`, whose `init_transactions` fences every earlier claimant: an owner
  stalled past its lease whose heartbeat lands after a takeover is refused by the broker (fenced) instead of
  naming itself owner again. The claim's generation grows by one with each claimant.

`InstanceGuard.acquire()` runs before Spark starts, so a refusal costs a second, not a session. Without takeover a
running instance is refused with one line naming it. With takeover the guard posts a takeover request (group
`{app.id}.ethereal-takeover`) and waits: the owner's heartbeat thread sees the request, stops its job gracefully
between epochs (as a first SIGTERM does), releases the claim and its lock, and exits 0; then the new instance claims
the app. The owner's sink tasks and epochs keep checking the claim's instance id (`FencedError` if another took it
without a handover, or if the claim is gone), so exactly-once never depends on the handover going well.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace

from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition

from ethereal_kafka import faults
from ethereal_kafka.checkpoint.apps import (
    LOCK_WAIT_S,
    read_run_record,
    release_run_lock,
    replay_in_progress,
    try_run_lock,
)
from ethereal_kafka.checkpoint.errors import AppRunningError, ReplayError
from ethereal_kafka.connectors.kafka.clients import (
    FENCED_CODES,
    bounded_call,
    group_consumer,
    transactional_producer,
    with_retries,
)
from ethereal_kafka.connectors.kafka.stall import send_offsets
from ethereal_kafka.eos.committed import committed_offsets
from ethereal_kafka.eos.errors import FencedError
from ethereal_kafka.eos.markers import OwnerClaim
from ethereal_kafka.eos.names import owner_claim_id, owner_group, progress_topic, takeover_group

log = logging.getLogger(__name__)

#: How often the owner refreshes its claim (and looks for a takeover request).
HEARTBEAT_S = 2.0
#: A claim from another host whose heartbeat is older than this belongs to an instance that is gone.
LEASE_S = 15.0


def read_claim(app_id: str, bootstrap: str, passthrough: Mapping[str, str]) -> tuple[OwnerClaim, int] | None:
    """The app's owner claim and its heartbeat (epoch ms), or None when no instance ever claimed it (or the
    progress topic does not exist yet). A stable read that fails is retried, then raises: never read as "no claim".

    Raises:
        KafkaConnectionError: the cluster did not answer after bounded retries.
        FencedError: the claim's metadata is not a claim (the group was written by something else).
    """
    (found,) = committed_offsets(bootstrap, owner_group(app_id), passthrough, [(progress_topic(app_id), 0)])
    if found.offset is None:
        return None
    claim = OwnerClaim.parse(found.metadata)
    if claim is None:
        raise FencedError(
            f"app {app_id}: the owner claim (group {owner_group(app_id)}) is unreadable: {str(found.metadata)[:80]!r}"
        )
    return claim, found.offset


def read_takeover(app_id: str, bootstrap: str, passthrough: Mapping[str, str]) -> tuple[str, int] | None:
    """The newest takeover request: the requesting instance and when it asked (epoch ms); None when none was made.

    Raises:
        KafkaConnectionError: the cluster did not answer after bounded retries.
    """
    (found,) = committed_offsets(
        bootstrap, takeover_group(app_id), passthrough, [(progress_topic(app_id), 0)]
    )
    if found.offset is None or not found.metadata:
        return None
    return found.metadata, found.offset


def request_takeover(app_id: str, bootstrap: str, passthrough: Mapping[str, str], instance_id: str) -> None:
    """Ask the app's owner to hand over to `instance_id` (a plain commit: the claim itself is written by owners only).

    Raises:
        KafkaConnectionError: the cluster did not answer after bounded retries.
    """
    consumer = group_consumer(bootstrap, takeover_group(app_id), passthrough)
    offset = TopicPartition(progress_topic(app_id), 0, int(time.time() * 1000), instance_id)
    with_retries("takeover request", bootstrap, lambda: consumer.commit(offsets=[offset], asynchronous=False))


#: Transaction timeout of a claim writer's transactions (each is one offset commit).
CLAIM_TRANSACTION_TIMEOUT_MS = 30_000


class ClaimWriter:
    """The only way the owner claim is written: a transactional producer for the app's claim id
    (`names.owner_claim_id`) owned by one claimant. Its first `commit` fences every earlier claimant's writer (and
    bumps the claim's generation); from then on an earlier claimant's write is refused by the broker, so a zombie
    can never win the claim back. Thread-safe.

    Args:
        claim: The claim this claimant writes (its generation is set by the first `commit`).
    """

    def __init__(
        self, app_id: str, bootstrap: str, passthrough: Mapping[str, str], claim: OwnerClaim
    ) -> None:
        self.app_id = app_id
        self.bootstrap = bootstrap
        self.passthrough = dict(passthrough)
        self.claim = claim
        self._producer: Producer | None = None
        self._fenced = False
        self._lock = threading.Lock()

    def commit(self) -> OwnerClaim:
        """Claim the app (first call: fence the earlier claimants, generation + 1), or refresh the heartbeat.

        Raises:
            FencedError: a newer claimant fenced this writer; this instance no longer owns the app.
            KafkaConnectionError: the cluster did not answer after bounded retries.
        """
        with self._lock:
            if self._producer is None:
                found = read_claim(self.app_id, self.bootstrap, self.passthrough)
                generation = (found[0].generation if found is not None else 0) + 1
                self.claim = replace(self.claim, generation=generation)
                self._producer = self._new_producer()
            self._write(self.claim)
            return self.claim

    def release(self, takeover: str | None = None) -> None:
        """Mark the claim released (naming the instance it hands over to, if any); nothing when this writer never
        claimed or was fenced.

        Raises:
            FencedError, KafkaConnectionError: as `commit`.
        """
        with self._lock:
            if self._producer is not None and not self._fenced:
                self._write(replace(self.claim, released=True, takeover=takeover))

    def close(self) -> None:
        """Let the producer go."""
        with self._lock:
            producer, self._producer = self._producer, None
        if producer is not None:
            with contextlib.suppress(KafkaException):
                producer.flush(0)

    def _new_producer(self) -> Producer:
        """An initialised producer for the app's claim id (fencing the writers before it)."""
        return with_retries(
            "owner claim",
            self.bootstrap,
            lambda: transactional_producer(
                owner_claim_id(self.app_id), self.bootstrap, CLAIM_TRANSACTION_TIMEOUT_MS, self.passthrough
            ),
        )

    def _write(self, claim: OwnerClaim) -> None:
        """One transaction committing `claim` with the current time as its heartbeat."""
        if self._fenced:
            raise FencedError(
                f"app {self.app_id}: a newer instance claimed the app; {claim.instance_id} stops"
            )
        consumer = group_consumer(self.bootstrap, owner_group(self.app_id), self.passthrough)
        offset = TopicPartition(progress_topic(self.app_id), 0, int(time.time() * 1000), claim.render())

        def attempt() -> None:
            producer = self._producer
            assert producer is not None
            try:
                producer.begin_transaction()
                metadata = consumer.consumer_group_metadata()
                send_offsets(producer, [offset], metadata, self.bootstrap, self.passthrough)
                bounded_call("owner claim", lambda: producer.commit_transaction(30))
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if error is not None and error.code() in FENCED_CODES:
                    self._fenced = True
                    raise FencedError(
                        f"app {self.app_id}: a newer instance claimed the app (this claim writer was fenced); "
                        f"{claim.instance_id} stops"
                    ) from exc
                if error is not None and (error.fatal() or error.code() == KafkaError._TIMED_OUT):
                    # A call stuck on a coordinator the cluster no longer has (`stall`), or a producer that cannot go
                    # on: a new one for the same id looks the coordinators up afresh. Only while the claim is still
                    # this writer's: renewing fences the id's holder, which must never be a newer claimant.
                    found = read_claim(self.app_id, self.bootstrap, self.passthrough)
                    current = found is not None and found[0].generation == claim.generation
                    if not current or found is None or found[0].instance_id != claim.instance_id:
                        self._fenced = True
                        raise FencedError(
                            f"app {self.app_id}: a newer instance claimed the app; {claim.instance_id} stops"
                        ) from exc
                    self._producer = self._new_producer()
                else:
                    with contextlib.suppress(KafkaException):
                        producer.abort_transaction(10)
                raise

        with_retries("owner claim", self.bootstrap, attempt, attempts=5)


def write_claim(app_id: str, bootstrap: str, passthrough: Mapping[str, str], claim: OwnerClaim) -> OwnerClaim:
    """Claim the app for `claim`'s instance once (a new `ClaimWriter`, fencing every earlier claimant) and let the
    writer go; returns the claim as written (with its generation).

    Raises:
        KafkaConnectionError: the cluster did not answer after bounded retries.
    """
    writer = ClaimWriter(app_id, bootstrap, passthrough, claim)
    try:
        return writer.commit()
    finally:
        writer.close()


def describe(claim: OwnerClaim, beat_ms: int) -> str:
    """`instance 1a2b… on host h (pid 42) since 2026-11-23T20:00:00Z` (what a refusal names)."""
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime((claim.since_ms or beat_ms) / 1000))
    where = f" on host {claim.host}" if claim.host else ""
    pid = f" (pid {claim.pid})" if claim.pid else ""
    return f"instance {claim.instance_id}{where}{pid} since {since}"


class InstanceGuard:
    """This process's right to run one app (see the module docstring); `acquire` → `watch` → `release`.

    Args:
        app_id, bootstrap, passthrough: The app and the cluster its sinks (and claim) live on.
        instance_id: This instance's id (the coordinator, its epochs and sink tasks use it).
        takeover: Ask a running instance to hand over instead of refusing to start.
        wait_s: How long a takeover waits for the running instance to stop.
    """

    def __init__(
        self,
        app_id: str,
        bootstrap: str,
        passthrough: Mapping[str, str],
        instance_id: str,
        takeover: bool = False,
        wait_s: float = 120.0,
    ) -> None:
        self.app_id = app_id
        self.bootstrap = bootstrap
        self.passthrough = dict(passthrough)
        self.instance_id = instance_id
        self.takeover = takeover
        self.wait_s = wait_s
        #: This instance's claim writer: the coordinator commits the claim with it once the progress topic exists,
        #: the heartbeat refreshes it, `release` lets it go.
        self.writer = ClaimWriter(
            app_id,
            bootstrap,
            passthrough,
            OwnerClaim(instance_id, socket.gethostname(), os.getpid(), int(time.time() * 1000)),
        )
        #: Set when the run ended because another instance took the app over: that instance's description.
        self.taken_over_by: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._held = False
        self._handed_to: str | None = None  # the instance a takeover request came from

    # -- start ---------------------------------------------------------------------------------------------------
    def acquire(self) -> None:
        """Take the app for this instance: the local run lock, and no live claim of another host's instance. The
        coordinator then commits this instance's claim (`self.claim`) once the progress topic exists.

        Raises:
            AppRunningError: another instance runs the app (here or on another host) and `takeover` was not asked
                for, or it did not hand over within `wait_s`; the message names it.
            ReplayError: a replay of the app kept its lock for longer than the wait allows.
        """
        deadline = time.monotonic() + self.wait_s
        requested = False
        while not try_run_lock(self.app_id):
            if replay_in_progress(self.app_id):
                if time.monotonic() > deadline + LOCK_WAIT_S - self.wait_s:
                    raise ReplayError(
                        f"app {self.app_id}: a replay held its run lock for too long; retry later"
                    )
                time.sleep(0.2)
                continue
            running = self._running_here()
            if not self.takeover:
                raise AppRunningError(
                    f"app {self.app_id} is already running: {running} (stop it, or start this one with --takeover)"
                )
            requested = self._request_takeover(requested)
            if time.monotonic() > deadline:
                raise AppRunningError(
                    f"app {self.app_id}: {running} did not hand over within {self.wait_s:.0f}s"
                )
            time.sleep(0.2)
        self._held = True
        try:
            self._wait_for_other_hosts(deadline)
        except BaseException:
            self.release()
            raise

    def _running_here(self) -> str:
        found = read_claim(self.app_id, self.bootstrap, self.passthrough)
        if found is not None and not found[0].released:
            return describe(*found)
        record = read_run_record(self.app_id)
        if record is None:
            return "an instance on this host"
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record.started_ms / 1000))
        return f"instance {record.instance_id} on host {record.host} (pid {record.pid}) since {since}"

    @property
    def claim(self) -> OwnerClaim:
        """This instance's claim (its generation once committed)."""
        return self.writer.claim

    def _request_takeover(self, requested: bool) -> bool:
        """Post a takeover request for this instance, once (the owner's heartbeat sees it)."""
        if requested:
            return True
        found = read_claim(self.app_id, self.bootstrap, self.passthrough)
        if found is None or found[0].released:
            return False
        log.info("app %s: asking %s to hand over", self.app_id, describe(*found))
        request_takeover(self.app_id, self.bootstrap, self.passthrough, self.instance_id)
        return True

    def _wait_for_other_hosts(self, deadline: float) -> None:
        """With the local lock held: a claim by an instance on another host whose heartbeat is recent means it runs
        there; refuse, or (takeover) ask it to hand over and wait for its release or for its heartbeat to lapse."""
        here = socket.gethostname()
        requested = False
        while True:
            found = read_claim(self.app_id, self.bootstrap, self.passthrough)
            if found is None:
                return
            claim, beat_ms = found
            alive = time.time() * 1000 - beat_ms < LEASE_S * 1000
            if claim.released or claim.host in ("", here) or not alive:
                return  # released, stale, or from this host (whose lock we hold: that instance is gone)
            if not self.takeover:
                raise AppRunningError(
                    f"app {self.app_id} is already running: {describe(claim, beat_ms)} (stop it, or start this "
                    "one with --takeover)"
                )
            requested = self._request_takeover(requested)
            if time.monotonic() > deadline:
                raise AppRunningError(
                    f"app {self.app_id}: {describe(claim, beat_ms)} did not hand over within {self.wait_s:.0f}s"
                )
            time.sleep(0.5)

    # -- while running -------------------------------------------------------------------------------------------
    def watch(self, stop: Callable[[str], None]) -> None:
        """Refresh the claim every `HEARTBEAT_S` from a daemon thread; on a takeover request (or a claim another
        instance took), call `stop(reason)` once: the job then stops between epochs."""

        def taken_over(other: str) -> None:
            self.taken_over_by = f"instance {other}"
            log.info("app %s: %s takes over; stopping between epochs", self.app_id, self.taken_over_by)
            stop("takeover")

        def beat() -> None:
            while not self._stop.wait(HEARTBEAT_S):
                try:
                    found = read_claim(self.app_id, self.bootstrap, self.passthrough)
                    if found is not None and found[0].instance_id != self.instance_id:
                        taken_over(found[0].instance_id)
                        return
                    request = read_takeover(self.app_id, self.bootstrap, self.passthrough)
                    if (
                        request is not None
                        and request[0] != self.instance_id
                        and request[1] >= self.claim.since_ms
                    ):
                        self._handed_to = request[0]
                        taken_over(request[0])
                        return
                    faults.hook("heartbeat", 0)
                    self.writer.commit()
                except FencedError:  # a newer claimant fenced this instance's claim writer
                    found = read_claim(self.app_id, self.bootstrap, self.passthrough)
                    taken_over(found[0].instance_id if found is not None else "unknown")
                    return
                except Exception:  # a heartbeat that fails is retried at the next one; epochs check the claim
                    log.warning("app %s: heartbeat failed", self.app_id, exc_info=True)

        self._thread = threading.Thread(target=beat, name="ethereal-kafka-heartbeat", daemon=True)
        self._thread.start()

    # -- end -----------------------------------------------------------------------------------------------------
    def release(self) -> None:
        """Stop the heartbeat, mark the claim released (when it is still this instance's), release the lock.
        Never raises: the run's outcome is already decided."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=HEARTBEAT_S + 5)
            self._thread = None
        if not self._held:
            self.writer.close()
            return
        try:
            self.writer.release(self._handed_to)
        except FencedError:
            pass  # a newer instance claimed the app: the claim is not this instance's to release
        except Exception:
            log.warning("app %s: could not release the owner claim", self.app_id, exc_info=True)
        finally:
            self.writer.close()
            release_run_lock(self.app_id)
            self._held = False
