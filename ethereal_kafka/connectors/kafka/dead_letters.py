"""Dead-letter records: a poison record (one that failed to deserialize, `on.error=dlq`) in the form it takes on
the dead-letter topic: its raw key and value, its own headers plus ours naming the error and its origin; and an
element that made user code raise (the job's `on.user.error=dlq`), as JSON with headers naming the exception, the
operator and the user's line (`user_dead_letter`).

Plain record shaping, used on both delivery paths: produced at once by the task (`dlq.delivery=immediate`,
at-least-once; `ProduceNow` for user-code errors of jobs that are not exactly-once), or kept and handed to the
exactly-once protocol, which commits them with their epoch (`dlq.delivery=epoch`, `ethereal_kafka.eos.dead_letters`).
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from ethereal_kafka.serde import SerdeError

#: Header names on dead-letter records.
DLQ_HEADERS = (
    "ethereal.error.class",
    "ethereal.error.message",
    "ethereal.error.field",
    "ethereal.source.topic",
    "ethereal.source.partition",
    "ethereal.source.offset",
    "ethereal.source.timestamp",
)

#: Header names on the dead letters of user-code errors (`user_dead_letter`).
USER_ERROR_HEADERS = (
    "ethereal.error.stage",
    "ethereal.error.class",
    "ethereal.error.message",
    "ethereal.error.operator",
    "ethereal.error.operator.uid",
    "ethereal.error.location",
    "ethereal.source.topic",
    "ethereal.source.partition",
    "ethereal.source.offset",
)


@dataclass(frozen=True)
class DeadLetter:
    """One poison record as it goes to the dead-letter topic: the raw key and value, the record's headers plus
    ours (`DLQ_HEADERS`), and where it came from.

    Attributes:
        target: The dead-letter topic, when the letter names its own (user-code errors: the job's
            `user.error.dlq.topic`); None = the source's `dlq.topic`.
        discriminator: Tells apart several letters of one source record (user-code errors: the operator's uid and
            the element's rank among those the record became); empty for a poison record.
    """

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    target: str | None = None
    discriminator: str = field(default="")

    @property
    def identity(self) -> tuple[str, int, int, str]:
        """What makes the letter one: its source record and `discriminator` (a task run twice makes it twice)."""
        return (self.topic, self.partition, self.offset, self.discriminator)


def dead_letters_of(raw: pa.RecordBatch, errors: dict[int, SerdeError]) -> list[DeadLetter]:
    """The dead letters of the rows of `raw` that failed to deserialize (`errors` by row), in row order."""
    timestamps = raw.column("timestamp").cast(pa.int64()).to_pylist()
    headers = raw.column("headers").to_pylist()
    out = []
    for row in sorted(errors):
        error = errors[row]
        topic = str(raw.column("topic")[row].as_py())
        partition = int(raw.column("partition")[row].as_py())
        offset = int(raw.column("offset")[row].as_py())
        meta = (
            type(error.__cause__ or error).__name__ if error.cause_class is None else error.cause_class,
            error.message,
            error.field,
            topic,
            str(partition),
            str(offset),
            str((timestamps[row] or 0) // 1000),
        )
        origin = [(h["key"], h["value"]) for h in (headers[row] or [])]
        ours = [(k, v.encode()) for k, v in zip(DLQ_HEADERS, meta, strict=True)]
        out.append(
            DeadLetter(
                topic,
                partition,
                offset,
                raw.column("key")[row].as_py(),
                raw.column("value")[row].as_py(),
                tuple(origin + ours),
            )
        )
    return out


def user_dead_letter(
    element: Mapping[str, Any],
    origin: tuple[str, int, int],
    operator: tuple[str, str],
    error: tuple[str, str, str],
    target: str,
    rank: int = 0,
) -> DeadLetter:
    """The dead letter of an element that made user code raise (`on.user.error=dlq`): the element as JSON, with
    headers naming the error (`USER_ERROR_HEADERS`).

    Args:
        element: The element the user's function was called with.
        origin: `(topic, partition, offset)` of the source record it came from.
        operator: `(name, uid)` of the operator.
        error: `(exception class, message, location)` (`path:line` of the user's code, or "").
        target: The dead-letter topic.
        rank: The element's rank among the failing elements of the same record and operator (a `flat_map` makes
            several elements of one record).
    """
    topic, partition, offset = origin
    meta = ("user-code", *error[:2], *operator, error[2], topic, str(partition), str(offset))
    headers = tuple((k, v.encode()) for k, v in zip(USER_ERROR_HEADERS, meta, strict=True))
    value = json.dumps(dict(element), default=_json_default, ensure_ascii=False).encode()
    return DeadLetter(topic, partition, offset, None, value, headers, target, f"{operator[1]}#{rank}")


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode()
    if hasattr(value, "asDict"):
        return value.asDict(recursive=True)
    return str(value)


@dataclass(frozen=True)
class ProduceNow:
    """Hands user-code dead letters to the dead-letter topic at once, with an idempotent producer (jobs that are
    not exactly-once: at-least-once, as `dlq.delivery=immediate`). Picklable; runs in the Spark task that found the
    letters, which fails when a letter is not acknowledged (and is retried).

    Args:
        bootstrap: The cluster of the dead-letter topic.
        passthrough: Its `kafka.*` settings.
    """

    bootstrap: str
    passthrough: Mapping[str, str] = field(default_factory=dict)

    def keep(self, group: str, letters: Sequence[DeadLetter]) -> None:
        """Produce `letters` (each to its `target`) and wait for their acknowledgements.

        Raises:
            KafkaConnectionError: a letter was not acknowledged.
        """
        from ethereal_kafka.connectors.kafka.clients import cached_producer, drop_producer, producer_config
        from ethereal_kafka.errors import KafkaConnectionError

        conf = producer_config(self.bootstrap, dict(self.passthrough))
        producer = cached_producer(conf)
        failures: list[str] = []
        for letter in letters:
            while True:
                try:
                    producer.produce(
                        str(letter.target),
                        key=letter.key,
                        value=letter.value,
                        headers=list(letter.headers),
                        on_delivery=lambda err, _msg: failures.append(err.str()) if err is not None else None,
                    )
                    break
                except BufferError:
                    producer.poll(0.05)
        remaining = producer.flush(60)
        if remaining or failures:
            drop_producer(conf)
            raise KafkaConnectionError(
                f"user-code dead letters: {remaining} unacknowledged, failures {sorted(set(failures))[:3]}"
            )
