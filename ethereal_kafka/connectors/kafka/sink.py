"""The Kafka sink (at-least-once): a `foreachBatch` writer whose Spark tasks produce Arrow batches to Kafka.

Each task sends its rows with an idempotent producer and flushes before it reports success, so when Spark records
an epoch as done every record of it is acknowledged by Kafka. A failed task is retried by Spark and may resend
records: at-least-once. The exactly-once path (transactions, epoch markers) is in `ethereal_kafka.checkpoint`.

Input columns: `value` (binary or string; required), `key` (binary or string, optional), `topic` (string; used
when the connector has no `topic`), `partition` (int, optional), `headers` (array<struct<key,value>>, optional).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pyarrow as pa
from confluent_kafka import KafkaError, Message

from ethereal_kafka.config.connectors import KafkaSinkConfig
from ethereal_kafka.connectors.kafka.producers import cached_producer, drop_producer, producer_config
from ethereal_kafka.errors import ConfigError, KafkaConnectionError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

RESULT_SCHEMA = "records long"


def _as_bytes(column: pa.Array | None, n: int) -> list[bytes | None]:
    if column is None:
        return [None] * n
    values = column.to_pylist()
    return [v.encode() if isinstance(v, str) else v for v in values]


def produce_arrow(config: KafkaSinkConfig, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Produce every row of `batches` and flush; yields one row with the number of records sent.

    Runs inside a Spark task (via `mapInArrow`).

    Raises:
        KafkaConnectionError: a delivery failed or was not acknowledged within `flush.timeout.ms`.
    """
    conf = producer_config(config.bootstrap_servers, config.passthrough)
    producer = cached_producer(conf)
    failures: list[str] = []

    def on_delivery(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            failures.append(err.str())

    sent = 0
    for batch in batches:
        n = batch.num_rows
        names = batch.schema.names
        values = _as_bytes(batch.column(names.index(config.value_column)), n)
        keys = _as_bytes(
            batch.column(names.index(config.key_column)) if config.key_column in names else None, n
        )
        topics = batch.column(names.index("topic")).to_pylist() if "topic" in names else None
        partitions = batch.column(names.index("partition")).to_pylist() if "partition" in names else None
        headers = batch.column(names.index("headers")).to_pylist() if "headers" in names else None
        for i in range(n):
            topic = config.topic or (topics[i] if topics else None)
            if not topic:
                raise ConfigError(
                    f"sink {config.name}: no topic configured and row {i} has no topic column value"
                )
            kwargs: dict[str, object] = {"key": keys[i], "value": values[i], "on_delivery": on_delivery}
            if partitions is not None and partitions[i] is not None:
                kwargs["partition"] = partitions[i]
            if headers is not None and headers[i]:
                kwargs["headers"] = [(h["key"], h["value"]) for h in headers[i]]
            while True:
                try:
                    producer.produce(topic, **kwargs)  # type: ignore[arg-type]
                    break
                except BufferError:
                    producer.poll(0.05)
            sent += 1
        producer.poll(0)
    remaining = producer.flush(config.flush_timeout_ms / 1000)
    if remaining or failures:
        drop_producer(conf)
        raise KafkaConnectionError(
            f"sink {config.name}: {remaining} record(s) unacknowledged after flush, {len(failures)} failed "
            f"({'; '.join(sorted(set(failures))[:3])})"
        )
    yield pa.RecordBatch.from_pydict({"records": pa.array([sent], pa.int64())})


class KafkaSink:
    """A `foreachBatch` function: `query = df.writeStream.foreachBatch(KafkaSink(config)).start()`."""

    def __init__(self, config: KafkaSinkConfig) -> None:
        self.config = config

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        """Write one epoch; returns when every record is acknowledged (called by Spark on the driver)."""
        self.write(batch, batch_id)

    def write(self, batch: DataFrame, batch_id: int) -> int:
        """Write one epoch's DataFrame to Kafka and return the number of records sent."""
        if self.config.value_column not in batch.columns:
            raise ConfigError(
                f"sink {self.config.name}: the stream has no {self.config.value_column!r} column "
                f"(columns: {', '.join(batch.columns)})"
            )
        config = self.config
        counts = batch.mapInArrow(lambda it: produce_arrow(config, it), RESULT_SCHEMA).collect()
        return sum(int(row["records"]) for row in counts)
