"""Per-worker transactional producers and marker consumers (cached: `init_transactions` costs round trips).

A Spark partition is not pinned to a Python worker, so two workers can hold a producer for the same transactional
id: the later `init_transactions` fences the earlier producer, which notices on its next use (a fatal error) and
is rebuilt by the task. Rebuilding is the bounded price of not pinning tasks.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from ethereal_kafka.checkpoint.markers import EpochMarker
from ethereal_kafka.connectors.kafka.clients import close_quietly

_PRODUCERS: dict[str, Producer] = {}
_CONSUMERS: dict[tuple[tuple[str, str], ...], Consumer] = {}
_LOCK = threading.Lock()


def transactional_producer(
    transactional_id: str, bootstrap: str, timeout_ms: int, passthrough: Mapping[str, str]
) -> Producer:
    """This worker's producer for `transactional_id`, initialised (fencing older holders) on first use.

    Raises:
        KafkaException: `init_transactions` failed (the caller classifies the error).
    """
    with _LOCK:
        producer = _PRODUCERS.get(transactional_id)
    if producer is not None:
        return producer
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "transaction.timeout.ms": str(timeout_ms),
            "linger.ms": "5",
            "compression.type": "lz4",
            "log_level": "3",
            **passthrough,
        }
    )
    producer.init_transactions(max(30.0, timeout_ms / 1000))
    with _LOCK:
        _PRODUCERS[transactional_id] = producer
    return producer


def drop_transactional_producer(transactional_id: str) -> None:
    """Forget the cached producer of `transactional_id` (fenced or fatal); the next use builds a new one."""
    with _LOCK:
        _PRODUCERS.pop(transactional_id, None)


def close_cached_clients() -> None:
    """Close this process's cached consumers and drop its producers (end of a run: nothing stays connected)."""
    with _LOCK:
        consumers = list(_CONSUMERS.values())
        _CONSUMERS.clear()
        _PRODUCERS.clear()
    close_quietly(consumers)


def group_consumer(bootstrap: str, group: str, passthrough: Mapping[str, str]) -> Consumer:
    """A consumer in `group` used only to read committed offsets (stable reads) and for its group metadata."""
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": "false",
        "isolation.level": "read_committed",
        "log_level": "3",
        **{k: v for k, v in passthrough.items() if not k.startswith(("transaction", "acks", "linger"))},
    }
    key = tuple(sorted(conf.items()))
    with _LOCK:
        consumer = _CONSUMERS.get(key)
        if consumer is None:
            consumer = _CONSUMERS[key] = Consumer(conf)
        return consumer


def read_marker(
    consumer: Consumer, topic: str, partition: int, timeout_s: float = 30.0
) -> EpochMarker | None:
    """The marker committed for (topic, partition) in the consumer's group, waiting for pending transactions.

    A read_committed consumer asks for stable offsets, so a transaction still completing is waited for rather
    than read as absent.

    Raises:
        KafkaException: the fetch failed after the client's own retries.
    """
    found = consumer.committed([TopicPartition(topic, partition)], timeout=timeout_s)
    if not found or found[0].error is not None:
        if found and found[0].error is not None:
            raise KafkaException(found[0].error)
        return None
    return EpochMarker.parse(found[0].metadata)
