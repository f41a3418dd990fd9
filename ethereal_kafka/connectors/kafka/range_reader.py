"""Executor-side reading of one offset range `[from, until)` of one partition into Arrow record batches.

Called by `KafkaStreamReader.read` inside a Spark task. The consumer is cached per Python worker and re-assigned per
range, so an epoch costs no consumer start-up after the first.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from ethereal_kafka.connectors.kafka.clients import cached_consumer, drop_consumer
from ethereal_kafka.errors import KafkaConnectionError

HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))

#: The Kafka columns every source row has, in order, as Arrow types.
KAFKA_ARROW_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestamp_type", pa.int32()),
        ("headers", HEADER_TYPE),
    ]
)

#: The same columns as a Spark DDL string.
KAFKA_SPARK_DDL = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
    "timestamp_type int, headers array<struct<key:string,value:binary>>"
)


def messages_to_batch(messages: list[Message]) -> pa.RecordBatch:
    """Turn consumed messages into one Arrow batch of the Kafka columns (`KAFKA_ARROW_SCHEMA`).

    One pass per column (a list comprehension each, no per-message branching), and the headers column built from
    offsets alone when no message has headers (the common case); measured in docs/performance.md (read path).
    """
    stamps = [m.timestamp() for m in messages]
    columns = [
        pa.array([m.key() for m in messages], pa.binary()),
        pa.array([m.value() for m in messages], pa.binary()),
        pa.array([m.topic() for m in messages], pa.string()),
        pa.array([m.partition() for m in messages], pa.int32()),
        pa.array([m.offset() for m in messages], pa.int64()),
        pa.array([ts * 1000 if ts >= 0 else None for _, ts in stamps], pa.timestamp("us", tz="UTC")),
        pa.array([kind for kind, _ in stamps], pa.int32()),
        _headers([m.headers() for m in messages]),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=KAFKA_ARROW_SCHEMA)


def _headers(raw: list[Any]) -> pa.Array:
    """The headers column: each message's headers (a list of pairs, a dict or None) as a list of key/value
    structs; a message without headers has an empty list."""
    if not any(raw):
        offsets = pa.array(np.zeros(len(raw) + 1, dtype=np.int32))
        return pa.ListArray.from_arrays(offsets, pa.array([], HEADER_TYPE.value_type), type=HEADER_TYPE)
    return pa.array(
        [[{"key": k, "value": v} for k, v in (h.items() if isinstance(h, dict) else (h or []))] for h in raw],
        HEADER_TYPE,
    )


def read_messages(
    conf: Mapping[str, str],
    topic: str,
    partition: int,
    start: int,
    until: int,
    batch_size: int,
    timeout_ms: int,
) -> Iterator[list[Message]]:
    """Yield lists of at most `batch_size` messages with offsets in `[start, until)`, in offset order.

    Ends when the consumer reaches `until` (a record at or past it, or end-of-partition at or past it: with
    read_committed, aborted records and transaction markers leave gaps in the offsets). The range was planned
    at or below the last stable offset, so it is always reachable.

    Raises:
        KafkaConnectionError: no progress for `timeout_ms` or a non-retriable consumer error.
    """
    consumer = cached_consumer(conf)
    tp = TopicPartition(topic, partition, start)
    consumer.assign([tp])
    position = start
    last_progress = time.monotonic()
    try:
        while position < until:
            # Ask for no more than the range still holds: `consume` returns once it has that many messages (or an
            # end-of-partition event), instead of waiting out its timeout for a batch the range cannot fill.
            polled = consumer.consume(num_messages=max(1, min(batch_size, until - position)), timeout=0.5)
            chunk: list[Message] = []
            for message in polled:
                err = message.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        position = max(position, message.offset() or 0)
                        continue
                    if err.retriable():
                        continue
                    raise KafkaConnectionError(f"reading {topic}[{partition}] at {position}: {err.str()}")
                offset = message.offset() or 0
                position = max(position, offset + 1)
                if start <= offset < until:
                    chunk.append(message)
            if chunk:
                last_progress = time.monotonic()
                yield chunk
            elif polled:
                last_progress = time.monotonic()
            elif (time.monotonic() - last_progress) * 1000 > timeout_ms:
                raise KafkaConnectionError(
                    f"reading {topic}[{partition}] [{start}, {until}) made no progress at {position} "
                    f"for {timeout_ms} ms"
                )
    except (KafkaException, KafkaConnectionError):
        drop_consumer(conf)
        raise
    finally:
        try:
            consumer.unassign()
        except KafkaException:
            drop_consumer(conf)
