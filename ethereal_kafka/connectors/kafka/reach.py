"""Reach a Kafka cluster once, failing fast: the first request of every command that talks to a cluster.

A metadata request alone cannot tell a cluster that is slow to answer from one that is not there: librdkafka keeps
reconnecting until the request's timeout, so a refused port on localhost cost the whole timeout (10-15 s, and 45-65
s behind the retrying calls of `clients.with_retries`). `reach` also listens to the client's error events: when
librdkafka reports every bootstrap broker down (connection refused, a name that does not resolve) and none comes up
within `DOWN_GRACE_S` (a host name with several addresses gets its next address tried meanwhile), the cluster is
declared unreachable at once; a failed authentication too. Only a silent address (packets dropped) takes the whole
timeout.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import ClusterMetadata

from ethereal_kafka.connectors.kafka.clients import new_admin
from ethereal_kafka.errors import KafkaConnectionError

#: How long every bootstrap broker may stay down (after librdkafka said so) before the cluster is unreachable.
DOWN_GRACE_S = 1.0

#: Length of each metadata request while waiting (the error events are served between two).
_SLICE_S = 0.25

_BROKER_PREFIX = re.compile(r"^\S+/\S+: ")
_AFTER = re.compile(r"\s*\(after [^)]*\)")


def reach(
    bootstrap: str, settings: Mapping[str, str] | None = None, timeout_s: float = 10.0
) -> ClusterMetadata:
    """Return the cluster's metadata (every topic), or fail with one line naming `bootstrap`.

    Args:
        bootstrap: The `bootstrap.servers` to try.
        settings: librdkafka settings that reach this cluster (security, ...), as a connector's `kafka.*`.
        timeout_s: The most this may take when the cluster does not answer and does not refuse.

    Called by `validate --connect`, by `run` before Spark starts, by `offsets`/`replay` and by the topic, produce
    and consume commands, each before its first real request. A refused connection fails in about
    `DOWN_GRACE_S`, a cluster that stays silent after `timeout_s`.

    Raises:
        KafkaConnectionError: the cluster refused (or could not be resolved, or rejected the credentials), or did
            not answer within `timeout_s`; the message names `bootstrap` and librdkafka's reason.
    """
    events: list[KafkaError] = []
    admin = new_admin(
        {
            "log_level": "3",
            "socket.connection.setup.timeout.ms": str(max(1000, int(timeout_s * 1000))),
            **(settings or {}),
            "bootstrap.servers": bootstrap,
            "error_cb": events.append,
        }
    )
    began = time.monotonic()
    deadline = began + timeout_s
    down_since: float | None = None
    last: object = None
    while True:
        try:
            return admin.list_topics(timeout=max(0.05, min(_SLICE_S, deadline - time.monotonic())))
        except KafkaException as exc:
            last = exc.args[0] if exc.args else exc
        admin.poll(0)  # serves the error events (and the log lines) queued meanwhile
        now = time.monotonic()
        down_since, refused = _judge(events, down_since, now)
        if refused is not None:
            raise KafkaConnectionError(f"Kafka at {bootstrap} is not reachable: {refused}")
        if down_since is not None and now - down_since >= DOWN_GRACE_S:
            reason = _reason(events) or _text(last)
            raise KafkaConnectionError(f"Kafka at {bootstrap} is not reachable: {reason}")
        if now >= deadline:
            reason = _reason(events) or _text(last)
            raise KafkaConnectionError(
                f"Kafka at {bootstrap} did not answer within {timeout_s:g} s ({reason})"
            )


def _judge(events: list[KafkaError], down_since: float | None, now: float) -> tuple[float | None, str | None]:
    """(since when every broker is down, or None; a reason to give up at once, or None) after the new events."""
    for event in events:
        code = event.code()
        if code == KafkaError._AUTHENTICATION:
            return down_since, _clean(event.str())
        if code == KafkaError._ALL_BROKERS_DOWN and down_since is None:
            down_since = now
    return down_since, None


def _reason(events: list[KafkaError]) -> str | None:
    """The last connection error librdkafka reported (`Connect to ipv4#127.0.0.1:9092 failed: Connection
    refused`), without its broker prefix and timing suffix."""
    for event in reversed(events):
        if event.code() != KafkaError._ALL_BROKERS_DOWN:
            return _clean(event.str())
    return None


def _clean(text: str) -> str:
    return _AFTER.sub("", _BROKER_PREFIX.sub("", text)).strip()


def _text(error: Any) -> str:
    return error.str() if hasattr(error, "str") else str(error)
