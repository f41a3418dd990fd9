"""The range reader's conversion of consumed messages into the Kafka columns (no broker: messages are stand-ins
with confluent-kafka's accessors)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from ethereal_kafka.connectors.kafka.range_reader import KAFKA_ARROW_SCHEMA, messages_to_batch


class FakeMessage:
    """What `messages_to_batch` reads of a confluent-kafka `Message`."""

    def __init__(self, offset: int, headers: Any = None, ts: tuple[int, int] = (1, 1_000)) -> None:
        self._offset, self._headers, self._ts = offset, headers, ts

    def key(self) -> bytes | None:
        return None if self._offset % 2 else b"k%d" % self._offset

    def value(self) -> bytes:
        return b"v%d" % self._offset

    def topic(self) -> str:
        return "orders"

    def partition(self) -> int:
        return 3

    def offset(self) -> int:
        return self._offset

    def timestamp(self) -> tuple[int, int]:
        return self._ts

    def headers(self) -> Any:
        return self._headers


def test_every_column_of_every_message_in_order() -> None:
    batch = messages_to_batch([FakeMessage(7, ts=(1, 1_500)), FakeMessage(8, ts=(0, -1))])  # type: ignore[list-item]
    assert batch.schema == KAFKA_ARROW_SCHEMA
    assert batch.to_pylist() == [
        {
            "key": None,
            "value": b"v7",
            "topic": "orders",
            "partition": 3,
            "offset": 7,
            "timestamp": dt.datetime(1970, 1, 1, 0, 0, 1, 500_000, tzinfo=dt.UTC),
            "timestamp_type": 1,
            "headers": [],
        },
        {
            "key": b"k8",
            "value": b"v8",
            "topic": "orders",
            "partition": 3,
            "offset": 8,
            "timestamp": None,
            "timestamp_type": 0,
            "headers": [],
        },
    ]


def test_headers_as_pairs_or_a_dict_and_none_as_no_headers() -> None:
    messages = [
        FakeMessage(0),
        FakeMessage(1, [("a", b"x"), ("a", None)]),
        FakeMessage(2, {"b": b"y"}),
        FakeMessage(3, []),
    ]
    batch = messages_to_batch(messages)  # type: ignore[arg-type]
    assert batch.schema == KAFKA_ARROW_SCHEMA
    assert batch.column("headers").to_pylist() == [
        [],
        [{"key": "a", "value": b"x"}, {"key": "a", "value": None}],
        [{"key": "b", "value": b"y"}],
        [],
    ]


def test_no_messages_is_an_empty_batch() -> None:
    batch = messages_to_batch([])
    assert batch.num_rows == 0 and batch.schema == KAFKA_ARROW_SCHEMA
