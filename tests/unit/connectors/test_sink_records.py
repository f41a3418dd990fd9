"""The sink's record path: `encode_outputs` batches handed to a producer by `send_records`, in row order."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
from confluent_kafka import Producer

from ethereal_kafka.config import KafkaSinkConfig
from ethereal_kafka.connectors.kafka.encoding import EncodedBatch, OutRecord, SinkOutput, encode_outputs
from ethereal_kafka.connectors.kafka.sink import send_records
from ethereal_kafka.serde import SerdeSpec

VALUE = SerdeSpec("value", "json", spark_ddl="id bigint, name string")
KEY = SerdeSpec("key", "string")


class RecordingProducer:
    """Records every accepted produce; refuses (BufferError) each call whose number is in `full_on`."""

    def __init__(self, full_on: frozenset[int] = frozenset()) -> None:
        self.full_on = full_on
        self.calls = 0
        self.produced: list[dict[str, Any]] = []
        self.polls: list[float] = []

    def produce(self, topic: str, value: Any = None, key: Any = None, **kwargs: Any) -> None:
        self.calls += 1
        if self.calls in self.full_on:
            raise BufferError("queue full")
        self.produced.append({"topic": topic, "key": key, "value": value, **kwargs})

    def poll(self, timeout: float) -> int:
        self.polls.append(timeout)
        return 0


def output(**settings: str) -> SinkOutput:
    config = KafkaSinkConfig.from_properties(
        {"bootstrap.servers": "127.0.0.1:1", "value.column": "*", **settings}
    )
    return SinkOutput(config, KEY, VALUE)


def rows(n: int) -> list[dict[str, Any]]:
    return [{"key": f"k{i}", "id": i, "name": f"n{i}"} for i in range(n)]


def test_a_configured_topic_sends_every_row_in_order_through_a_full_queue() -> None:
    data = rows(25_000)
    batches = [pa.RecordBatch.from_pylist(data[i : i + 10_000]) for i in range(0, len(data), 10_000)]
    producer = RecordingProducer(full_on=frozenset({3, 4, 20_000}))
    sent = send_records(producer, encode_outputs([output(topic="out")], batches), None)  # type: ignore[arg-type]
    expected = [
        {
            "topic": "out",
            "key": r["key"].encode(),
            "value": json.dumps({"id": r["id"], "name": r["name"]}, separators=(",", ":")).encode(),
            "on_delivery": None,
        }
        for r in data
    ]
    assert sent == len(data) and producer.produced == expected
    assert producer.polls.count(0.05) == 3  # each refusal waited once, then the record went
    assert producer.polls.count(0) == 2  # after 10,000 and 20,000 records


def test_topic_partition_and_header_columns_route_each_row() -> None:
    data = rows(6)
    for i, row in enumerate(data):
        row["topic"] = f"t{i % 2}"
        row["partition"] = None if i == 4 else i % 3
        row["headers"] = [{"key": "h", "value": bytes([i])}] if i % 2 else []
    batch = pa.RecordBatch.from_pylist(data)
    producer = RecordingProducer(full_on=frozenset({2}))
    callback = object()
    sent = send_records(producer, encode_outputs([output()], [batch]), callback)  # type: ignore[arg-type]
    expected = []
    for i, row in enumerate(data):
        record: dict[str, Any] = {
            "topic": row["topic"],
            "key": row["key"].encode(),
            "value": json.dumps({"id": row["id"], "name": row["name"]}, separators=(",", ":")).encode(),
            "on_delivery": callback,
        }
        if row["partition"] is not None:
            record["partition"] = row["partition"]
        if row["headers"]:
            record["headers"] = [("h", bytes([i]))]
        expected.append(record)
    assert sent == 6 and producer.produced == expected and producer.polls == [0.05]


def test_single_records_and_batches_mix() -> None:
    producer = RecordingProducer()
    letters = [OutRecord("dlq", None, b"k", b"v", [("error", b"bad")]), OutRecord("dlq", 2, None, None, None)]
    batch = EncodedBatch("out", [None], [b"{}"])
    assert send_records(producer, [letters[0], batch, letters[1]], None) == 3  # type: ignore[arg-type]
    assert producer.produced == [
        {"topic": "dlq", "key": b"k", "value": b"v", "on_delivery": None, "headers": [("error", b"bad")]},
        {"topic": "out", "key": None, "value": b"{}", "on_delivery": None},
        {"topic": "dlq", "key": None, "value": None, "on_delivery": None, "partition": 2},
    ]


def test_a_real_producer_takes_the_batch_call() -> None:
    # No broker: the records only queue locally; purging them hands each back to its delivery callback, in order.
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "log_level": 0})
    batch = pa.RecordBatch.from_pylist(rows(3))
    returned: list[tuple[str, bytes | None, bytes | None]] = []

    def on_delivery(err: Any, msg: Any) -> None:
        returned.append((msg.topic(), msg.key(), msg.value()))

    assert send_records(producer, encode_outputs([output(topic="out")], [batch]), on_delivery) == 3
    producer.purge()
    producer.flush(5)
    assert returned == [("out", f"k{i}".encode(), f'{{"id":{i},"name":"n{i}"}}'.encode()) for i in range(3)]
