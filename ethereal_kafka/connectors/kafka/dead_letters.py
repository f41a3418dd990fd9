"""Dead-letter records: a poison record (one that failed to deserialize, `on.error=dlq`) in the form it takes on
the dead-letter topic: its raw key and value, its own headers plus ours naming the error and its origin.

Plain record shaping, used by the decoder on both delivery paths: produced at once by the read task
(`dlq.delivery=immediate`, at-least-once), or kept and handed to the exactly-once protocol, which commits them with
their epoch (`dlq.delivery=epoch`, `ethereal_kafka.eos.dead_letters`).
"""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass(frozen=True)
class DeadLetter:
    """One poison record as it goes to the dead-letter topic: the raw key and value, the record's headers plus
    ours (`DLQ_HEADERS`), and where it came from."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


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
