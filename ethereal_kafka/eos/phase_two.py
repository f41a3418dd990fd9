"""Phase two of the exactly-once protocol (driver): once every sink task of a shuffling query's epoch committed, the
epoch's input end offsets are committed to the query's consumer groups with the epoch marker, together with the
epoch's dead letters, in one transaction of the query's phase-two producer (one per source).

Every start fences the whole pool (`eos.startup.fence_pool`), so a taken-over instance's phase two is fenced
instead of moving the offsets backwards; a replay that finds the epoch's marker already committed writes nothing
(its dead letters included).

A phase-two producer that lost a broker connection (a broker restart, a node of a cluster killed) after it
committed a transaction is replaced before its next transaction: librdkafka can keep a stale group coordinator
cached, on which `send_offsets_to_transaction` then blocks past its timeout (confluentinc/librdkafka#5456, #5511).
A new producer's `init_transactions` looks the coordinators up afresh, and fences the old one. The connections a
new producer fails to open before its first commit do not count: it looked its coordinators up after them (on a
3-node cluster with one node down, counting them renewed the producer in every epoch while the node was down,
because each new producer tries the dead node's bootstrap address). Where no connection error shows (the other
brokers of a cluster stay up), a `send_offsets_to_transaction` stuck on a coordinator the cluster no longer has is
given up (`connectors.kafka.stall`) and the producer replaced all the same.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition

from ethereal_kafka import faults
from ethereal_kafka.config.connectors import KafkaSourceConfig
from ethereal_kafka.connectors.kafka.clients import (
    FENCED_CODES,
    bounded_call,
    transactional_producer,
    with_retries,
)
from ethereal_kafka.connectors.kafka.dead_letters import DeadLetter
from ethereal_kafka.connectors.kafka.encoding import OutRecord
from ethereal_kafka.connectors.kafka.sink import send_records
from ethereal_kafka.connectors.kafka.stall import send_offsets
from ethereal_kafka.eos.committed import committed_offsets
from ethereal_kafka.eos.errors import FencedError
from ethereal_kafka.eos.markers import EpochMarker

log = logging.getLogger(__name__)

#: Client errors after which a phase-two producer is replaced before its next transaction (see the module
#: docstring).
_CONNECTION_LOST_CODES = {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN}

#: How long phase two of an epoch may wait on the broker: the marker check and the offset commit it guards. A
#: broker restart costs the epoch spanning it 7-17 s here (the producer renewal above); the budget leaves room for a
#: slow cluster (a stable offset read also waits for an open transaction of the group to end).
PHASE_TWO_DEADLINE_S = 180.0


def marker_committed(source: KafkaSourceConfig, tps: Sequence[TopicPartition], epoch: EpochMarker) -> bool:
    """True when `source`'s group already holds the marker `epoch` (its app, checkpoint, epoch and ranges) on one of
    `tps`.

    Raises:
        CheckpointMismatchError: the group holds a marker of the same checkpoint for a later epoch, or for this
            epoch over other ranges (Spark's checkpoint is behind Kafka).
        KafkaConnectionError: the read kept failing for phase two's deadline.
    """
    found = committed_offsets(
        source.bootstrap_servers,
        source.group,
        source.passthrough,
        [(tp.topic, tp.partition) for tp in tps],
        attempts=8,
        deadline_s=PHASE_TWO_DEADLINE_S,
    )
    verdicts = [
        offset.marker.committed(
            epoch.app_id,
            epoch.checkpoint_id,
            epoch.epoch,
            epoch.ranges,
            f"group {source.group}, {offset.topic}[{offset.partition}]",
        )
        for offset in found
        if offset.marker is not None
    ]
    return any(verdicts)


class PhaseTwo:
    """The phase-two producers of one run and their transactions.

    Args:
        transaction_timeout_ms: The producers' transaction timeout.
        check_owner: Raises FencedError when another instance owns the app (asked before a producer is renewed:
            a producer fenced by a takeover must stop the run, not fence the new owner back).
    """

    def __init__(self, transaction_timeout_ms: int, check_owner: Callable[[], None]) -> None:
        self.transaction_timeout_ms = transaction_timeout_ms
        self.check_owner = check_owner
        self._producers: dict[str, Producer] = {}
        self._stale: set[str] = set()  # producers that lost a broker connection since their last commit
        self._proven: set[str] = set()  # producers that committed a transaction since built
        self._current: dict[str, object] = {}  # the token of each id's newest producer (its errors count)

    def producer(self, txn_id: str, source: KafkaSourceConfig) -> Producer:
        """A new, initialised phase-two producer for `txn_id` (fencing older ones), not stale. Not kept: `keep`
        keeps it."""
        token = self._current[txn_id] = object()
        self._proven.discard(txn_id)
        producer = transactional_producer(
            txn_id,
            source.bootstrap_servers,
            self.transaction_timeout_ms,
            source.passthrough,
            on_error=lambda error: self._note_client_error(txn_id, token, error),
        )
        self._stale.discard(txn_id)
        return producer

    def keep(self, producers: dict[str, Producer]) -> None:
        """Commit with these producers (by transactional id) from now on."""
        self._producers.update(producers)

    def holds(self, txn_id: str) -> bool:
        """True when this run commits `txn_id`'s phase two in transactions (exactly-once)."""
        return txn_id in self._producers

    def commit(
        self,
        txn_id: str,
        source: KafkaSourceConfig,
        consumer: Any,
        tps: list[TopicPartition],
        letters: list[DeadLetter],
        marker: EpochMarker,
    ) -> None:
        """One transaction of the phase-two producer `txn_id`: the epoch's dead letters of `source` (shuffling
        queries, `on.error=dlq`, and user-code errors under `on.user.error=dlq`), then its end offsets with
        `marker` (`tps` carry both). Every call that waits on the broker is bounded (`bounded_call`): after a
        coordinator restart librdkafka's `send_offsets_to_transaction` can block forever, and the epoch must instead
        go on with a new producer.

        A commit reported failed may have landed (a timeout while the coordinator applied it, a coordinator
        failover): before every retry the marker is read again, and a retry that finds it committed ends there
        instead of sending the epoch's dead letters a second time.

        Raises:
            FencedError: another instance took the app over.
            KafkaConnectionError: no commit within phase two's retries and deadline.
        """
        records = [
            OutRecord(d.target or str(source.dlq_topic), None, d.key, d.value, list(d.headers))
            for d in letters
        ]

        tries = 0

        def attempt() -> None:
            nonlocal tries
            tries += 1
            if tries > 1 and marker_committed(source, tps, marker):
                return  # the previous try's commit landed although it was reported failed
            self._producers[txn_id].poll(0)  # serves the client's error events (`_note_client_error`)
            if txn_id in self._stale:
                self._renew(txn_id, source, "it lost its connection to the brokers")
            current = self._producers[txn_id]
            try:
                current.begin_transaction()
                send_records(current, records, None)
                metadata = consumer.consumer_group_metadata()
                send_offsets(current, tps, metadata, source.bootstrap_servers, source.passthrough)
                bounded_call("commit_transaction", lambda: current.commit_transaction(30))
                self._proven.add(txn_id)
                if tries == 1:
                    faults.after_commit("phase_two")
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                unusable = (
                    error is None or error.fatal() or error.code() in FENCED_CODES | {KafkaError._TIMED_OUT}
                )
                if not unusable:
                    try:
                        bounded_call("abort_transaction", lambda: current.abort_transaction(30))
                    except KafkaException:
                        unusable = True
                if unusable:
                    # Fenced by another instance (stop), or a producer that cannot go on (a call that never
                    # returned after a coordinator restart, a fatal error, a failed abort): a new producer for the
                    # same id fences it and aborts its transaction, and the commit is tried again.
                    self._renew(txn_id, source, str(exc))
                raise

        with_retries(
            f"offset commit for group {source.group}",
            source.bootstrap_servers,
            attempt,
            attempts=8,
            deadline_s=PHASE_TWO_DEADLINE_S,
        )

    def close(self) -> None:
        """Let the producers go (end of the run)."""
        producers, self._producers = list(self._producers.values()), {}
        for producer in producers:
            with contextlib.suppress(KafkaException):
                producer.flush(0)

    def _renew(self, txn_id: str, source: KafkaSourceConfig, cause: str) -> None:
        """Replace a phase-two producer that cannot go on (`cause` says why), unless another instance took the app
        over.

        Raises:
            FencedError: the owner claim names another instance (its start fenced this one's producer).
        """
        try:
            self.check_owner()
        except FencedError as exc:
            raise FencedError(
                f"{exc}; the phase-two commit for group {source.group} was fenced ({cause})"
            ) from exc
        log.info("phase-two producer %s renewed: %s", txn_id, cause)
        self._producers[txn_id] = self.producer(txn_id, source)

    def _note_client_error(self, txn_id: str, token: object, error: KafkaError) -> None:
        """A phase-two producer's client error (served by `poll` or a transactional call): a lost connection marks
        it stale, if it is the id's current producer and has committed since it was built."""
        current = self._current.get(txn_id) is token and txn_id in self._proven
        if current and error.code() in _CONNECTION_LOST_CODES:
            self._stale.add(txn_id)
