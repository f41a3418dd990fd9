"""One running instance per app.id: a second start is refused, or (`run --takeover`) the first hands over.

Two things say who runs an app:

* **This host's run lock** (`checkpoint.apps`, `run.lock`): the running instance holds it exclusively; the kernel
  drops it when the process dies, SIGKILL included, so a crashed instance never blocks a restart here.
* **The owner claim in Kafka** (`OwnerClaim`, the offset of group `{app.id}.ethereal-owner` on progress partition
  0): names the instance, its host, pid and start time; its offset is the time of the owner's last heartbeat
  (refreshed every `HEARTBEAT_S`). It covers instances on other hosts: a claim from another host with a recent
  heartbeat (younger than `LEASE_S`) means the app runs there.

`InstanceGuard.acquire()` runs before Spark starts, so a refusal costs a second, not a session. Without takeover a
running instance is refused with one line naming it. With takeover the guard writes its id into the claim's
`takeover` field and waits: the owner's heartbeat thread sees the request, stops its job gracefully between epochs
(as a first SIGTERM does), releases the claim and its lock, and exits 0; then the new instance claims the app. The
owner's sink tasks and epochs keep checking the claim's instance id (`FencedError` if another took it without a
handover), so exactly-once never depends on the handover going well.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace

from confluent_kafka import TopicPartition

from ethereal_kafka.checkpoint.apps import (
    LOCK_WAIT_S,
    read_run_record,
    release_run_lock,
    replay_in_progress,
    try_run_lock,
)
from ethereal_kafka.checkpoint.errors import AppRunningError, ReplayError
from ethereal_kafka.connectors.kafka.clients import group_consumer, with_retries
from ethereal_kafka.eos.markers import OwnerClaim
from ethereal_kafka.eos.names import owner_group, progress_topic

log = logging.getLogger(__name__)

#: How often the owner refreshes its claim (and looks for a takeover request).
HEARTBEAT_S = 2.0
#: A claim from another host whose heartbeat is older than this belongs to an instance that is gone.
LEASE_S = 15.0


def read_claim(app_id: str, bootstrap: str, passthrough: Mapping[str, str]) -> tuple[OwnerClaim, int] | None:
    """The app's owner claim and its heartbeat (epoch ms), or None when no instance ever claimed it (or the
    progress topic does not exist yet).

    Raises:
        KafkaConnectionError: the cluster did not answer after bounded retries.
    """
    consumer = group_consumer(bootstrap, owner_group(app_id), passthrough)
    part = TopicPartition(progress_topic(app_id), 0)
    found = with_retries("owner claim", bootstrap, lambda: consumer.committed([part], timeout=30))
    if not found or found[0].error is not None or found[0].offset < 0:
        return None
    claim = OwnerClaim.parse(found[0].metadata)
    return (claim, int(found[0].offset)) if claim is not None else None


def write_claim(app_id: str, bootstrap: str, passthrough: Mapping[str, str], claim: OwnerClaim) -> None:
    """Commit `claim` with the current time as its heartbeat.

    Raises:
        KafkaConnectionError: the cluster did not answer after bounded retries.
    """
    consumer = group_consumer(bootstrap, owner_group(app_id), passthrough)
    offset = TopicPartition(progress_topic(app_id), 0, int(time.time() * 1000), claim.render())
    with_retries("owner claim", bootstrap, lambda: consumer.commit(offsets=[offset], asynchronous=False))


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
        self.claim = OwnerClaim(instance_id, socket.gethostname(), os.getpid(), int(time.time() * 1000))
        #: Set when the run ended because another instance took the app over: that instance's description.
        self.taken_over_by: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._held = False

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

    def _request_takeover(self, requested: bool) -> bool:
        """Put this instance's id in the claim's takeover field (again, if the owner's heartbeat overwrote it)."""
        found = read_claim(self.app_id, self.bootstrap, self.passthrough)
        if found is None or found[0].released or found[0].takeover == self.instance_id:
            return requested
        if not requested:
            log.info("app %s: asking %s to hand over", self.app_id, describe(*found))
        write_claim(
            self.app_id, self.bootstrap, self.passthrough, replace(found[0], takeover=self.instance_id)
        )
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

        def beat() -> None:
            while not self._stop.wait(HEARTBEAT_S):
                try:
                    found = read_claim(self.app_id, self.bootstrap, self.passthrough)
                    claim = found[0] if found is not None else None
                    if claim is not None and (claim.instance_id != self.instance_id or claim.takeover):
                        other = claim.takeover or claim.instance_id
                        self.taken_over_by = f"instance {other}"
                        log.info(
                            "app %s: %s takes over; stopping between epochs", self.app_id, self.taken_over_by
                        )
                        stop("takeover")
                        return
                    write_claim(self.app_id, self.bootstrap, self.passthrough, self.claim)
                except (
                    Exception
                ):  # a heartbeat that fails is retried at the next one; epochs check the claim anyway
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
            return
        try:
            found = read_claim(self.app_id, self.bootstrap, self.passthrough)
            if found is not None and found[0].instance_id == self.instance_id:
                takeover = found[0].takeover
                write_claim(
                    self.app_id,
                    self.bootstrap,
                    self.passthrough,
                    replace(self.claim, released=True, takeover=takeover),
                )
        except Exception:
            log.warning("app %s: could not release the owner claim", self.app_id, exc_info=True)
        finally:
            release_run_lock(self.app_id)
            self._held = False
