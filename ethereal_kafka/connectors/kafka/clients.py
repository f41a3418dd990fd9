"""confluent-kafka client construction, the one per-process client cache, and bounded-retry metadata calls.

Creating a consumer or an idempotent producer costs round trips, so such clients are cached per process (a Python
worker on an executor, or the driver) in one `ClientCache`, keyed by their full configuration, and reused across
epochs: reading consumers, group consumers (committed offsets and group metadata) and idempotent producers.
Transactional producers are never cached: each sink task attempt builds its own, whose `init_transactions` fences
every older holder of its id (`transactional_producer`). Driver-side metadata calls retry for a bounded time (long
enough to ride out a broker restart) and then raise `KafkaConnectionError` naming the bootstrap servers.

Every client is built with `new_consumer`, `new_producer` or `new_admin`, which hand librdkafka's own log lines
(`Connect to ... failed`, ...) to the Python logger `ethereal_kafka.librdkafka` (`librdkafka_logger`) instead of
stderr: `ethereal-kafka run` writes them to the run's log file (`runtime.logs`); elsewhere (validate, Spark's Python
workers) they are dropped unless the process configures that logger.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
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

#: How long driver-side calls keep retrying: a restarting broker is back within this (seen: 5-10 s).
RETRY_DEADLINE_S = 45.0

#: A client retries a broker it lost at most this often. librdkafka's default (10 s) also paces its look-ups of a
#: coordinator that died: on a 3-node cluster a new transactional producer asked again only 5-8 s after the cluster
#: had fenced the dead node and moved its coordinators (init_transactions ended 15 s after the kill instead of 7 s).
#: The Java client's default is 1 s.
_RECONNECT = {"reconnect.backoff.max.ms": "1000"}

#: Client settings that keep failures bounded and quiet on a small machine.
_QUIET = {"log_level": "3", "socket.connection.setup.timeout.ms": "10000", **_RECONNECT}

ConfigKey = tuple[str, tuple[tuple[str, str], ...]]

#: Errors that mean another holder of a transactional id (a newer producer for the same id) fenced this one.
FENCED_CODES = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH})

#: The Python logger that receives librdkafka's log lines from every client the framework builds.
LIBRDKAFKA_LOGGER = "ethereal_kafka.librdkafka"


#: The folder a process's librdkafka lines go to when nothing else configured the logger: `run` sets it for the
#: Python workers of its local Spark session (they inherit the driver's environment through the JVM).
LOG_DIR_ENV = "ETHEREAL_KAFKA_WORKER_LOG_DIR"
#: The file in that folder (shared by the workers; one line per write, appended).
WORKERS_LOG = "librdkafka-workers.log"


def librdkafka_logger() -> logging.Logger:
    """The logger librdkafka's lines go to. It does not propagate (the framework's console handler never sees
    them). Unless a handler was added (`runtime.logs.configure_python_logging` adds the run's log file), the lines
    go to `$ETHEREAL_KAFKA_WORKER_LOG_DIR/librdkafka-workers.log` when that variable is set (a local run's Python
    workers), else nowhere."""
    logger = logging.getLogger(LIBRDKAFKA_LOGGER)
    logger.propagate = False
    if not logger.handlers:
        folder = os.environ.get(LOG_DIR_ENV)
        handler: logging.Handler = logging.NullHandler()
        if folder:
            handler = logging.FileHandler(Path(folder) / WORKERS_LOG, encoding="utf-8", delay=True)
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s pid %(process)d: %(message)s"))
            logger.setLevel(logging.DEBUG)
        logger.addHandler(handler)
    return logger


def new_consumer(conf: Mapping[str, Any]) -> Consumer:
    """A consumer built from `conf`, its librdkafka log lines routed to `librdkafka_logger()`."""
    return Consumer({**conf, "logger": librdkafka_logger()})


def new_producer(conf: Mapping[str, Any]) -> Producer:
    """A producer built from `conf`, its librdkafka log lines routed to `librdkafka_logger()`."""
    return Producer({**conf, "logger": librdkafka_logger()})


def new_admin(conf: Mapping[str, Any]) -> AdminClient:
    """An admin client built from `conf`, its librdkafka log lines routed to `librdkafka_logger()`."""
    settings: dict[str, Any] = {**conf, "logger": librdkafka_logger()}
    return AdminClient(settings)


class ClientCache:
    """This process's Kafka clients, one per (kind, configuration); thread-safe.

    Callers get a client with `get()` and must leave it as they found it (a consumer is assigned per read and
    unassigned after). `drop()` forgets (and closes) a client whose state is unknown after an error; `close_all()`
    ends a run: nothing stays connected.
    """

    def __init__(self) -> None:
        self._clients: dict[ConfigKey, Any] = {}
        self._lock = threading.Lock()

    @staticmethod
    def key(kind: str, conf: Mapping[str, str]) -> ConfigKey:
        """The cache key of a client of `kind` built from `conf`."""
        return kind, tuple(sorted(conf.items()))

    def get(self, kind: str, conf: Mapping[str, str], build: Callable[[dict[str, str]], T]) -> T:
        """The cached client of `kind` for `conf`, built with `build(conf)` on first use."""
        key = self.key(kind, conf)
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                client = self._clients[key] = build(dict(conf))
            return client

    def drop(self, kind: str, conf: Mapping[str, str]) -> None:
        """Forget the client of `kind` for `conf` and close it; the next `get` builds a new one."""
        with self._lock:
            client = self._clients.pop(self.key(kind, conf), None)
        if client is not None:
            _close(client)

    def close_all(self) -> None:
        """Close every cached client (end of a run)."""
        with self._lock:
            clients = list(self._clients.values())
            self._clients.clear()
        for client in clients:
            _close(client)


def _close(client: Any) -> None:
    """Close a consumer, or flush a producer (briefly): its state no longer matters to the caller. An admin client
    needs nothing (it goes with its last reference)."""
    with contextlib.suppress(KafkaException, RuntimeError):
        if isinstance(client, Consumer):
            client.close()
        elif isinstance(client, Producer):
            client.flush(5)


#: The process's cache (module state: one per Python worker process).
CLIENTS = ClientCache()


def close_cached_clients() -> None:
    """Close every client this process cached (end of a run: nothing stays connected)."""
    CLIENTS.close_all()


def consumer_config(
    bootstrap: str, group_id: str, isolation_level: str, passthrough: Mapping[str, str]
) -> dict[str, str]:
    """Return the configuration of a reading consumer: manual assignment, no auto-commit, no offset store, and a
    short fetch backoff (a new range's records arrive at once)."""
    conf = {
        **_QUIET,
        "bootstrap.servers": bootstrap,
        "group.id": group_id,
        "enable.auto.commit": "false",
        "enable.auto.offset.store": "false",
        "enable.partition.eof": "true",
        "auto.offset.reset": "earliest",
        "isolation.level": isolation_level,
        # librdkafka postpones a partition's next fetch by this much once its prefetch queue is over the
        # thresholds (1000 ms by default), and the postponement outlives the unassign / assign of the next epoch's
        # range: every other epoch waited ~1 s for its first records (tests/integration/test_range_reader.py).
        "fetch.queue.backoff.ms": "10",
        # A range that ends at the partition's end leaves the prefetcher long-polling there (the broker holds a
        # fetch without new data up to `fetch.wait.max.ms`, 500 ms by default), and librdkafka sends the next
        # fetch to that broker, the next range's first one, only when the held one returns: the next range's
        # first records came up to 0.5 s late (measured: 240-340 ms in half the epochs of a draining job,
        # tests/integration/test_range_reader.py). A range is planned below the last stable offset, so its own
        # records never need a long poll.
        "fetch.wait.max.ms": "10",
        # librdkafka prefetches until a partition's queue holds `queued.min.messages` (100,000 by default) or
        # `queued.max.messages.kbytes` (64 MB): a reader kept ~50-60 MB of fetched records in every Python worker,
        # most of them past the range it was reading (dropped at the unassign) and its heap kept the high-water mark.
        # A range is read in `consume` calls of at most `arrow.batch.size` records (10,000 by default).
        "queued.min.messages": "20000",
        "queued.max.messages.kbytes": "16384",
    }
    conf.update(passthrough)
    return conf


def cached_consumer(conf: Mapping[str, str]) -> Consumer:
    """This process's reading consumer for `conf`. Callers must `assign()` what they read; it never subscribes
    and never commits."""
    return CLIENTS.get("consumer", conf, new_consumer)


def drop_consumer(conf: Mapping[str, str]) -> None:
    """Close and forget the cached reading consumer for `conf` (after an error left it in an unknown state)."""
    CLIENTS.drop("consumer", conf)


def group_consumer(
    bootstrap: str, group: str, passthrough: Mapping[str, str], stable: bool = True
) -> Consumer:
    """This process's consumer in `group`, used only to read committed offsets and for its group metadata; it never
    subscribes, consumes or commits on its own.

    `stable` (read_committed) reads wait for an offset pending in an open transaction; otherwise (read_uncommitted)
    the broker answers with the last committed offset at once, ignoring the pending one."""
    conf = {
        **_QUIET,
        **{k: v for k, v in passthrough.items() if not k.startswith(("transaction", "acks", "linger"))},
        # After the pass-through settings: how markers and claims are read is the protocol's choice alone.
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": "false",
        "isolation.level": "read_committed" if stable else "read_uncommitted",
    }
    return CLIENTS.get("group", conf, new_consumer)


def producer_config(bootstrap: str, passthrough: Mapping[str, str]) -> dict[str, str]:
    """An idempotent producer's configuration (acks=all, ordered retries) plus the pass-through settings."""
    return {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": "true",
        "acks": "all",
        "linger.ms": "5",
        "compression.type": "lz4",
        "log_level": "3",
        **_RECONNECT,
        **passthrough,
    }


def cached_producer(conf: Mapping[str, str]) -> Producer:
    """This process's idempotent producer for `conf`, created on first use."""
    return CLIENTS.get("producer", conf, new_producer)


def drop_producer(conf: Mapping[str, str]) -> None:
    """Forget the cached idempotent producer for `conf` (after a fatal error); the next call builds a new one."""
    CLIENTS.drop("producer", conf)


def transactional_producer(
    transactional_id: str,
    bootstrap: str,
    timeout_ms: int,
    passthrough: Mapping[str, str],
    on_error: Callable[[KafkaError], None] | None = None,
) -> Producer:
    """A new producer for `transactional_id`, initialised: its `init_transactions` fences every older holder of
    the id and completes or aborts whatever transaction that holder left open, so once this returns no older
    producer of the id can commit. Owned by the caller (one sink task attempt); never cached. `on_error` is told
    the client's errors (lost connections, ...) when the caller polls the producer.

    Raises:
        KafkaException: `init_transactions` failed (the caller classifies the error).
    """
    extra: dict[str, Any] = {"error_cb": on_error} if on_error is not None else {}
    producer = new_producer(
        {
            **extra,
            "linger.ms": "5",
            "compression.type": "lz4",
            "log_level": "3",
            **_RECONNECT,
            # Connect to the brokers as soon as they are known: with sparse connections librdkafka's transaction
            # state machine can find no broker up yet and wait for its 500 ms coordinator timer (measured: a third
            # of inits on one broker took 0.5 s; median 11 ms without).
            "enable.sparse.connections": "false",
            **passthrough,
            # After the pass-through settings: the protocol's identity and timeout are never overridden.
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "transaction.timeout.ms": str(timeout_ms),
        }
    )
    producer.init_transactions(max(30.0, timeout_ms / 1000))
    return producer


def close_quietly(consumers: Iterable[Consumer]) -> None:
    """Close consumers whose state no longer matters (a close error changes nothing for the caller)."""
    for consumer in consumers:
        _close(consumer)


def bounded_call(
    what: str,
    call: Callable[[], T],
    timeout_s: float = 30.0,
    grace_s: float = 5.0,
    stuck: Callable[[float], str | None] | None = None,
) -> T:
    """Run a blocking transactional call, giving up after `timeout_s` + `grace_s` even when the client does not.

    librdkafka's `send_offsets_to_transaction` ignores its timeout and can block forever once the group
    coordinator was restarted or left the cluster (confluentinc/librdkafka#5456, #5511; seen here after a broker
    restart, and on a 3-node cluster after a kill). The call runs in a daemon thread (the client releases the GIL);
    if it has not returned in time the caller gets a `_TIMED_OUT` error, which is fatal for the producer: the
    caller abandons it, and the next producer's `init_transactions` for the same transactional id fences it and
    aborts its transaction. Used by the sink tasks and by the driver's phase-two commits. `grace_s` lets the
    client's own timeout (`timeout_s`, passed to the call) answer first where it works. `stuck`, when given, is
    asked every second while the call runs (with the seconds elapsed) and ends the wait early by returning why
    (`kafka.stall.CoordinatorWatch`).

    Raises:
        KafkaException: what the call raised, or `_TIMED_OUT` when it did not return in time.
    """
    outcome: dict[str, object] = {}
    done = threading.Event()

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:  # handed to the caller's thread below
            outcome["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name=f"ethereal-kafka-{what}", daemon=True).start()
    began = time.monotonic()
    limit = timeout_s + grace_s
    while not done.wait(min(1.0, max(0.0, limit - (time.monotonic() - began)))):
        elapsed = time.monotonic() - began
        if elapsed >= limit:
            raise KafkaException(
                KafkaError(KafkaError._TIMED_OUT, f"{what} did not return within {limit:.0f}s")
            )
        reason = stuck(elapsed) if stuck is not None else None
        if reason is not None:
            raise KafkaException(
                KafkaError(KafkaError._TIMED_OUT, f"{what} given up after {elapsed:.0f}s: {reason}")
            )
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome.get("value")  # type: ignore[return-value]


def cached_admin(bootstrap: str, passthrough: Mapping[str, str] | None = None) -> AdminClient:
    """This process's admin client for `bootstrap` with the pass-through settings (metadata look-ups)."""
    conf = {**_QUIET, "bootstrap.servers": bootstrap, **(passthrough or {})}
    return CLIENTS.get("admin", conf, new_admin)


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
    return new_admin({**_QUIET, "bootstrap.servers": bootstrap, **(passthrough or {})})


def watermarks(
    consumer: Consumer, tp: TopicPartition, bootstrap: str, timeout_s: float = 10.0
) -> tuple[int, int]:
    """Return (low, high) offsets of `tp`; for a read_committed consumer `high` is the last stable offset."""
    return with_retries(
        f"offset query for {tp.topic}[{tp.partition}]",
        bootstrap,
        lambda: consumer.get_watermark_offsets(tp, timeout=timeout_s, cached=False),
    )
