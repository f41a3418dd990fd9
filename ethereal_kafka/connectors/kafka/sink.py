"""The Kafka sink without transactions (at-least-once / at-most-once): a `foreachBatch` writer.

Each Spark task sends its rows with an idempotent producer and flushes before it reports success, so when Spark
records an epoch as done every record of it is acknowledged by Kafka. A failed task is retried by Spark and may
resend records: at-least-once. The exactly-once path (transactions, epoch markers) is `ethereal_kafka.checkpoint`.
Rows are turned into records by `encoding` (see there for the input columns); a sink object may write several sink
connectors from one query (rows name theirs in `__sink`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import repeat
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException, Message, Producer

from ethereal_kafka.config.connectors import KafkaSinkConfig
from ethereal_kafka.connectors.kafka.clients import cached_producer, drop_producer, producer_config
from ethereal_kafka.connectors.kafka.encoding import (
    EncodedBatch,
    OutRecord,
    SinkOutput,
    encode_outputs,
    sink_specs,
)
from ethereal_kafka.errors import ConfigError, KafkaConnectionError, RecordTooLargeError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

RESULT_SCHEMA = "records long"


#: `send_records` serves delivery callbacks (`poll(0)`) after every this many records.
_POLL_EVERY = 10000

#: Errors that mean one record (or its batch) is larger than the producer or the broker accepts.
TOO_LARGE_CODES = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE})


def too_large(
    topic: str, key: bytes | None, value: bytes | None, where: str, cause: str
) -> RecordTooLargeError:
    """The one-line error for a record its producer or topic refuses for its size (`where` names the sink task and
    its input)."""
    size = len(key or b"") + len(value or b"")
    return RecordTooLargeError(
        f"{where}: a record of {size:,} bytes (key {(key or b'')[:40]!r}) for topic {topic} is larger than the "
        f"producer or the topic accepts ({cause}); the epoch fails at every replay until it fits: raise "
        "kafka.message.max.bytes on the sink and the topic's max.message.bytes, or drop or trim such records"
    )


def send_records(
    producer: Producer, records: Iterable[OutRecord | EncodedBatch], on_delivery: object, where: str = "sink"
) -> int:
    """Hand every record to `producer` in order, waiting for queue space when it is full; returns the count sent.

    Called by the sink tasks (at-least-once and transactional) with `encode_outputs`' batches, and with single
    `OutRecord`s for dead letters. A full local queue (`BufferError`) is waited out with `poll`, which also serves
    delivery callbacks; `poll(0)` runs after every `_POLL_EVERY` records as well.

    Raises:
        RecordTooLargeError: the producer refused a record for its size (`where` names the caller in the message).
    """
    sent = 0
    for item in records:
        if isinstance(item, EncodedBatch):
            sent = _send_batch(producer, item, on_delivery, sent, where)
        else:
            try:
                produce_one(
                    producer, item.topic, item.key, item.value, item.partition, item.headers, on_delivery
                )
            except KafkaException as exc:
                raise _refused(exc, item.topic, item.key, item.value, where) from exc
            sent += 1
            if sent % _POLL_EVERY == 0:
                producer.poll(0)
    return sent


def _refused(
    exc: KafkaException, topic: str, key: bytes | None, value: bytes | None, where: str
) -> Exception:
    """What to raise when `produce` refused a record: `RecordTooLargeError` for its size, else `exc` itself."""
    error = exc.args[0] if exc.args else None
    if error is None or error.code() not in TOO_LARGE_CODES:
        return exc
    return too_large(topic, key, value, where, error.str())


def _send_batch(producer: Producer, batch: EncodedBatch, on_delivery: object, sent: int, where: str) -> int:
    """Produce one batch's records; returns `sent` plus their count."""
    topics = repeat(batch.topic) if isinstance(batch.topic, str) else batch.topic
    if batch.partitions is None and batch.headers is None:
        produce = producer.produce
        for topic, key, value in zip(topics, batch.keys, batch.values, strict=False):
            try:
                produce(topic, value, key, on_delivery=on_delivery)  # type: ignore[arg-type]
            except BufferError:
                producer.poll(0.05)
                try:
                    produce_one(producer, topic, key, value, None, None, on_delivery)
                except KafkaException as exc:
                    raise _refused(exc, topic, key, value, where) from exc
            except KafkaException as exc:
                raise _refused(exc, topic, key, value, where) from exc
            sent += 1
            if sent % _POLL_EVERY == 0:
                producer.poll(0)
        return sent
    partitions = batch.partitions if batch.partitions is not None else repeat(None)
    headers = batch.headers if batch.headers is not None else repeat(None)
    for topic, key, value, partition, row_headers in zip(
        topics, batch.keys, batch.values, partitions, headers, strict=False
    ):
        try:
            produce_one(producer, topic, key, value, partition, row_headers, on_delivery)
        except KafkaException as exc:
            raise _refused(exc, topic, key, value, where) from exc
        sent += 1
        if sent % _POLL_EVERY == 0:
            producer.poll(0)
    return sent


def produce_one(
    producer: Producer,
    topic: str,
    key: bytes | None,
    value: bytes | None,
    partition: int | None,
    headers: list[tuple[str, bytes | None]] | None,
    on_delivery: object,
    timestamp_ms: int | None = None,
) -> None:
    """Produce one record, polling while the local queue is full (used by the sinks and the test kit)."""
    kwargs: dict[str, object] = {"key": key, "value": value, "on_delivery": on_delivery}
    if partition is not None:
        kwargs["partition"] = partition
    if headers:
        kwargs["headers"] = headers
    if timestamp_ms is not None:
        kwargs["timestamp"] = timestamp_ms
    while True:
        try:
            producer.produce(topic, **kwargs)  # type: ignore[arg-type]
            return
        except BufferError:
            producer.poll(0.05)


def produce_arrow(
    outputs: Sequence[SinkOutput], batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """Produce every row of `batches` to its sink and flush; yields one row with the number of records sent.

    Runs inside a Spark task (via `mapInArrow`).

    Raises:
        KafkaConnectionError: a delivery failed or was not acknowledged within `flush.timeout.ms`.
    """
    config = outputs[0].config
    conf = producer_config(config.bootstrap_servers, config.passthrough)
    producer = cached_producer(conf)
    failures: list[str] = []

    def on_delivery(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            failures.append(err.str())

    sent = send_records(producer, encode_outputs(outputs, batches), on_delivery)
    remaining = producer.flush(max(o.config.flush_timeout_ms for o in outputs) / 1000)
    if remaining or failures:
        drop_producer(conf)
        raise KafkaConnectionError(
            f"sink {config.name}: {remaining} record(s) unacknowledged after flush, {len(failures)} failed "
            f"({'; '.join(sorted(set(failures))[:3])})"
        )
    yield pa.RecordBatch.from_pydict({"records": pa.array([sent], pa.int64())})


class KafkaSink:
    """A `foreachBatch` function: `query = df.writeStream.foreachBatch(KafkaSink(config)).start()`.

    With several connectors, rows name theirs by index in the `__sink` column and each connector reads its own
    `key.column`/`value.column`; all must use the same cluster.
    """

    def __init__(self, config: KafkaSinkConfig | Sequence[KafkaSinkConfig]) -> None:
        self.configs: tuple[KafkaSinkConfig, ...] = (
            (config,) if isinstance(config, KafkaSinkConfig) else tuple(config)
        )
        check_same_cluster(self.configs)
        self.config = self.configs[0]
        self._outputs: tuple[SinkOutput, ...] | None = None

    def outputs(self, batch: DataFrame) -> tuple[SinkOutput, ...]:
        """Every connector with its key and value serde specs, fixed from the first batch's schema."""
        return self.outputs_for([(f.name, f.dataType) for f in batch.schema.fields])

    def outputs_for(self, columns: Sequence[tuple[str, Any]]) -> tuple[SinkOutput, ...]:
        """`outputs` for rows of `columns` (name, Spark type), fixed from the first call."""
        if self._outputs is None:
            self._outputs = tuple(SinkOutput(c, *sink_specs(c, list(columns))) for c in self.configs)
        return self._outputs

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        """Write one epoch; returns when every record is acknowledged (called by Spark on the driver)."""
        self.write(batch, batch_id)

    def write(self, batch: DataFrame, batch_id: int) -> int:
        """Write one epoch's DataFrame to Kafka and return the number of records sent."""
        for config in self.configs:
            check_columns(config, batch)
        outputs = self.outputs(batch)
        counts = batch.mapInArrow(lambda it: produce_arrow(outputs, it), RESULT_SCHEMA).collect()
        return sum(int(row["records"]) for row in counts)


def check_same_cluster(configs: Sequence[KafkaSinkConfig]) -> None:
    """One query's sinks share one producer (one transaction): they must name the same cluster and settings.

    Raises:
        ConfigError: the connectors differ in `bootstrap.servers` or `kafka.*` settings.
    """
    if not configs:
        raise ConfigError("a query must write at least one sink")
    first = configs[0]
    for other in configs[1:]:
        if (other.bootstrap_servers, dict(other.passthrough)) != (
            first.bootstrap_servers,
            dict(first.passthrough),
        ):
            raise ConfigError(
                f"sinks {first.name} and {other.name} are written by one query (one transaction) but name "
                "different clusters or kafka.* settings"
            )


def check_columns(config: KafkaSinkConfig, batch: DataFrame) -> None:
    """Fail early, naming the columns, when the stream lacks the sink's value column.

    Raises:
        ConfigError: the value column is missing.
    """
    if config.value_column != "*" and config.value_column not in batch.columns:
        raise ConfigError(
            f"sink {config.name}: the stream has no {config.value_column!r} column (columns: {', '.join(batch.columns)})"
        )
