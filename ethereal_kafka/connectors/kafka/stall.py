"""`send_offsets_to_transaction` that cannot hang on a group coordinator the cluster no longer has.

librdkafka ignores the call's own timeout while the coordinator it cached is unreachable
(confluentinc/librdkafka#5456) and, once that broker has left the cluster's metadata, may never look the
coordinator up again (#5511). Measured on a local 3-node cluster: with the group coordinator's node SIGKILLed ~15 s
before the call (it had left the metadata), the call hung in 7 of 7 tries while the other two nodes served (2
watched past 90 s, 3 replaced after 10 s, 2 given up by this module after 5 s); a new producer's call then took
0.1-0.3 s. A fixed cut-off cannot tell that hang from a genuine failover:
with the transaction coordinator's node killed, the same call waits until the cluster fences the node (9-13 s after
the kill: the brokers' session timeout) and then completes within about a second; cut at a fixed 8 s, it was
redone with a new producer and the epoch took 21 s instead of ~15.

`CoordinatorWatch` therefore waits while the cluster is failing over (a broker its metadata lists does not accept
connections: the dead node is not fenced yet), and gives the call up once the cluster has been whole for
`SETTLE_S` (every listed broker answers, so every coordinator has a live home) and the call still has not returned
`STALL_MIN_S` after it began. The caller then replaces its producer (`TIMED_OUT` is fatal for it), whose fresh
look-up finds the live coordinator. Nothing is asked of the cluster while the call returns within a second.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Producer, TopicPartition

from ethereal_kafka.connectors.kafka.clients import bounded_call, cached_admin

#: A call pending this long on a whole cluster is stuck (it normally takes milliseconds; a coordinator still loading
#: its partition answers within a few seconds).
STALL_MIN_S = 5.0
#: How long the cluster must have been whole (every listed broker accepting connections) before a pending call is
#: given up: after a failover, librdkafka completes a waiting call within about a second.
SETTLE_S = 3.0
#: The call's own timeout, and the bound on it whatever the cluster says.
CALL_LIMIT_S = 30.0
TRANSACTION_STATE_TOPIC = "__transaction_state"


class CoordinatorWatch:
    """Asked every second by `bounded_call` while a transactional call runs; says when the call is stuck."""

    def __init__(self, bootstrap: str, passthrough: Mapping[str, str]) -> None:
        self.bootstrap = bootstrap
        self.passthrough = passthrough
        self._whole_since: float | None = None

    def __call__(self, elapsed_s: float) -> str | None:
        """None while the call may still be waiting out a failover; else why it is stuck."""
        now = time.monotonic()
        if not cluster_whole(self.bootstrap, self.passthrough):
            self._whole_since = None
            return None
        if self._whole_since is None:
            self._whole_since = now
        if elapsed_s >= STALL_MIN_S and now - self._whole_since >= SETTLE_S:
            return (
                f"every broker of the cluster has answered for {now - self._whole_since:.0f}s: the client waits on "
                "a coordinator the cluster no longer has (librdkafka#5511)"
            )
        return None


def cluster_whole(bootstrap: str, passthrough: Mapping[str, str], timeout_s: float = 2.0) -> bool:
    """True when the cluster's metadata answers and every broker it lists accepts a TCP connection (False while a
    dead node is still listed, i.e. before the cluster fenced it, and when the cluster does not answer).

    The metadata asked for is `__transaction_state`'s (it exists wherever a transaction was begun), so the answer
    stays small on a cluster with many topics; any broker answers it (DescribeCluster would wait for the active
    controller, which may be the dead node).
    """
    admin = cached_admin(bootstrap, passthrough)
    try:
        brokers = admin.list_topics(TRANSACTION_STATE_TOPIC, timeout=timeout_s).brokers
    except Exception:  # KafkaException, a timeout: the cluster is not whole as far as this can tell
        return False
    return bool(brokers) and all(_accepts(str(b.host), int(b.port), timeout_s) for b in brokers.values())


def send_offsets(
    producer: Producer,
    offsets: list[TopicPartition],
    metadata: Any,
    bootstrap: str,
    passthrough: Mapping[str, str],
) -> None:
    """`producer.send_offsets_to_transaction(offsets, metadata)`, given up when `CoordinatorWatch` finds it stuck
    or after `CALL_LIMIT_S`: the caller must then replace the producer.

    Raises:
        KafkaException: what the call raised, or `_TIMED_OUT` when it was given up.
    """
    bounded_call(
        "send_offsets_to_transaction",
        lambda: producer.send_offsets_to_transaction(offsets, metadata, CALL_LIMIT_S),
        timeout_s=CALL_LIMIT_S,
        stuck=CoordinatorWatch(bootstrap, passthrough),
    )


def _accepts(host: str, port: int, timeout_s: float) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False
