"""Executor-side producers: cached per Python worker, keyed by configuration, reused across epochs."""

from __future__ import annotations

import threading
from collections.abc import Mapping

from confluent_kafka import Producer

_PRODUCERS: dict[tuple[tuple[str, str], ...], Producer] = {}
_LOCK = threading.Lock()


def producer_config(bootstrap: str, passthrough: Mapping[str, str]) -> dict[str, str]:
    """An idempotent producer's configuration (acks=all, ordered retries) plus the pass-through settings."""
    return {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": "true",
        "acks": "all",
        "linger.ms": "5",
        "compression.type": "lz4",
        "log_level": "3",
        **passthrough,
    }


def cached_producer(conf: Mapping[str, str]) -> Producer:
    """Return this worker's producer for `conf`, creating it on first use."""
    key = tuple(sorted(conf.items()))
    with _LOCK:
        producer = _PRODUCERS.get(key)
        if producer is None:
            producer = Producer(dict(conf))
            _PRODUCERS[key] = producer
        return producer


def drop_producer(conf: Mapping[str, str]) -> None:
    """Forget the cached producer for `conf` (after a fatal error); the next call builds a new one."""
    key = tuple(sorted(conf.items()))
    with _LOCK:
        producer = _PRODUCERS.pop(key, None)
    if producer is not None:
        producer.flush(5)
