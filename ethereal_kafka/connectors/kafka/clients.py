"""confluent-kafka client construction, per-worker caching, and bounded-retry metadata calls.

Creating a consumer or producer costs round trips, so executor-side clients are cached per Python worker process
(keyed by their full configuration) and reused across epochs. Driver-side metadata calls retry for a bounded time
(long enough to ride out a broker restart) and then raise `KafkaConnectionError` naming the bootstrap servers.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ClusterMetadata
from tenacity import (
    RetryError,
    retry,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
)

from ethereal_kafka.errors import KafkaConnectionError

T = TypeVar("T")

_CONSUMERS: dict[tuple[tuple[str, str], ...], Consumer] = {}
_LOCK = threading.Lock()

#: How long driver-side calls keep retrying: a restarting broker is back within this (seen: 5-10 s).
RETRY_DEADLINE_S = 45.0

#: Client settings that keep failures bounded and quiet on a small machine.
_QUIET = {"log_level": "3", "socket.connection.setup.timeout.ms": "10000"}


def consumer_config(
    bootstrap: str, group_id: str, isolation_level: str, passthrough: Mapping[str, str]
) -> dict[str, str]:
    """Return the configuration of a reading consumer: manual assignment, no auto-commit, no offset store."""
    conf = {
        **_QUIET,
        "bootstrap.servers": bootstrap,
        "group.id": group_id,
        "enable.auto.commit": "false",
        "enable.auto.offset.store": "false",
        "enable.partition.eof": "true",
        "auto.offset.reset": "earliest",
        "isolation.level": isolation_level,
    }
    conf.update(passthrough)
    return conf


def cached_consumer(conf: Mapping[str, str]) -> Consumer:
    """Return this worker's consumer for `conf`, creating it on first use.

    Callers must `assign()` what they read; the consumer is never subscribed and never commits.
    """
    key = tuple(sorted(conf.items()))
    with _LOCK:
        consumer = _CONSUMERS.get(key)
        if consumer is None:
            consumer = Consumer(dict(conf))
            _CONSUMERS[key] = consumer
        return consumer


def drop_consumer(conf: Mapping[str, str]) -> None:
    """Close and forget the cached consumer for `conf` (after an error left it in an unknown state)."""
    key = tuple(sorted(conf.items()))
    with _LOCK:
        consumer = _CONSUMERS.pop(key, None)
    close_quietly([consumer] if consumer is not None else [])


def close_cached_consumers() -> None:
    """Close every consumer this process cached (end of a run: nothing stays connected)."""
    with _LOCK:
        consumers = list(_CONSUMERS.values())
        _CONSUMERS.clear()
    close_quietly(consumers)


def close_quietly(consumers: Iterable[Consumer]) -> None:
    """Close consumers whose state no longer matters (a close error changes nothing for the caller)."""
    for consumer in consumers:
        with contextlib.suppress(KafkaException, RuntimeError):
            consumer.close()


def with_retries(
    what: str,
    bootstrap: str,
    call: Callable[[], T],
    attempts: int = 30,
    deadline_s: float = RETRY_DEADLINE_S,
) -> T:
    """Run a Kafka call, retrying KafkaException with bounded exponential backoff (at most `attempts` tries and
    `deadline_s` seconds, whichever ends first).

    Raises:
        KafkaConnectionError: every attempt failed; the message names `what` and `bootstrap`.
    """
    retrying = retry(
        retry=retry_if_exception_type(KafkaException),
        stop=stop_after_attempt(attempts) | stop_after_delay(deadline_s),
        wait=wait_exponential(multiplier=0.2, max=3.0),
        reraise=False,
    )
    try:
        return retrying(call)()
    except RetryError as exc:
        cause = exc.last_attempt.exception()
        tries = exc.last_attempt.attempt_number
        raise KafkaConnectionError(
            f"{what} failed after {tries} attempts: Kafka at {bootstrap} did not answer ({cause})"
        ) from cause


def cluster_metadata(admin: AdminClient, bootstrap: str, timeout_s: float = 10.0) -> ClusterMetadata:
    """Return cluster metadata (all topics), with bounded retries."""
    return with_retries("metadata request", bootstrap, lambda: admin.list_topics(timeout=timeout_s))


def admin_client(bootstrap: str, passthrough: Mapping[str, str] | None = None) -> AdminClient:
    """Return an AdminClient for `bootstrap` with the pass-through settings."""
    return AdminClient({**_QUIET, "bootstrap.servers": bootstrap, **(passthrough or {})})


def watermarks(
    consumer: Consumer, tp: TopicPartition, bootstrap: str, timeout_s: float = 10.0
) -> tuple[int, int]:
    """Return (low, high) offsets of `tp`; for a read_committed consumer `high` is the last stable offset."""
    return with_retries(
        f"offset query for {tp.topic}[{tp.partition}]",
        bootstrap,
        lambda: consumer.get_watermark_offsets(tp, timeout=timeout_s, cached=False),
    )
