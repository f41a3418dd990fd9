"""The serde contract: a `Codec` (what runs on executors) turns raw Kafka bytes of one field into typed Arrow values
and back.

The source connector calls `Codec.decode` on each Arrow batch of raw keys or values and routes the per-row errors
under its error policy; the sink calls `Codec.encode` on the key and value columns before producing. A codec is built
from a frozen `SerdeSpec` (`serde.spec`) by `serde.codecs.build_codec`, on the driver or in a task, with no
SparkContext and no JVM.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from ethereal_kafka.serde.ddl import spark_field_list
from ethereal_kafka.serde.errors import RegistryError, SerdeError
from ethereal_kafka.serde.spec import SerdeSpec


@dataclass(frozen=True)
class DecodeResult:
    """What `Codec.decode` returns for one batch.

    Attributes:
        values: One value per input row, of the codec's `arrow_type()`; null for null input and for failed rows.
        errors: Row index -> the error of that row, for the rows that failed (absent rows succeeded).
    """

    values: pa.Array
    errors: dict[int, SerdeError] = field(default_factory=dict)


class Codec(ABC):
    """Turns raw Kafka bytes into typed Arrow values and back, for one field, on one executor.

    Built by `serde.codecs.build_codec`; holds parsed schemas and registry caches, so build it once per task (or cache it
    per worker) rather than per batch. Not thread-safe.
    """

    def __init__(self, spec: SerdeSpec) -> None:
        """Keep the spec; subclasses parse their schema here and raise `ConfigError` if it is invalid."""
        self.spec = spec

    @abstractmethod
    def arrow_type(self) -> pa.DataType:
        """The Arrow type of decoded values (a struct of nullable fields for json/avro). Stable per codec."""

    def spark_ddl(self) -> str:
        """The Spark DDL of `arrow_type()`: a field list ("`a` bigint, `b` string") for structs, else the type."""
        return spark_field_list(self.arrow_type())

    @abstractmethod
    def decode(
        self, raw: pa.Array, topics: Sequence[str], partitions: Sequence[int], offsets: Sequence[int]
    ) -> DecodeResult:
        """Decode a batch of raw keys or values.

        Called by the source on executors, once per Arrow batch. `topics`, `partitions` and `offsets` are aligned
        with `raw` and only used to describe errors. A null input row decodes to null without an error. Never
        raises for a bad record: it becomes an entry of `errors` and a null value.

        Raises:
            RegistryError: the registry could not be reached (not a record's fault; the task should fail).
        """

    @abstractmethod
    def encode(self, values: pa.Array, topic: str) -> list[bytes | None]:
        """Encode a column for producing to `topic`: one bytes object (or None for a null) per row.

        Called by the sink on executors, once per Arrow batch.

        Raises:
            SerdeError: for the first row that cannot be encoded (its index is in the message, the row in `raw`).
            RegistryError: the registry could not be reached or refused the writer schema.
        """

    # -- helpers for subclasses ---------------------------------------------------------------------------------
    def _decode_error(
        self,
        message: str,
        row: int,
        raw: bytes | None,
        topics: Sequence[str],
        partitions: Sequence[int],
        offsets: Sequence[int],
        cause: BaseException | None = None,
    ) -> SerdeError:
        error = SerdeError(
            message,
            field=self.spec.field,
            topic=topics[row] if row < len(topics) else None,
            partition=partitions[row] if row < len(partitions) else None,
            offset=offsets[row] if row < len(offsets) else None,
            raw=raw,
            cause_class=type(cause).__name__ if cause is not None else None,
        )
        if cause is not None:
            error.__cause__ = cause
        return error

    def _encode_error(
        self, message: str, row: int, topic: str, value: Any, cause: BaseException
    ) -> SerdeError:
        return SerdeError(
            f"row {row}: {message}",
            field=self.spec.field,
            topic=topic,
            raw=value,
            cause_class=type(cause).__name__,
        )


def decode_rows(
    codec: Codec,
    raw: pa.Array,
    topics: Sequence[str],
    partitions: Sequence[int],
    offsets: Sequence[int],
    decode_one: Callable[[bytes, int], Any],
) -> DecodeResult:
    """Decode row by row with `decode_one(bytes, row) -> python value` and assemble an Arrow array.

    `decode_one` raises any exception for a bad record; it becomes that row's `SerdeError`. A value that Arrow
    cannot convert to `codec.arrow_type()` is an error of its row too. `RegistryError` propagates.
    """
    target = codec.arrow_type()
    rows: list[Any] = []
    errors: dict[int, SerdeError] = {}
    for i, data in enumerate(raw.to_pylist()):
        if data is None:
            rows.append(None)
            continue
        try:
            rows.append(decode_one(data, i))
        except RegistryError:
            raise
        except Exception as exc:
            errors[i] = codec._decode_error(
                str(exc) or type(exc).__name__, i, data, topics, partitions, offsets, exc
            )
            rows.append(None)
    try:
        values = pa.array(rows, type=target)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        # One row's value does not fit the type: convert singly to find it, the rest stays decoded.
        for i, row in enumerate(rows):
            try:
                pa.array([row], type=target)
            except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
                data = raw[i].as_py()
                errors[i] = codec._decode_error(
                    f"does not fit {target}: {exc}", i, data, topics, partitions, offsets, exc
                )
                rows[i] = None
        values = pa.array(rows, type=target)
    return DecodeResult(values, errors)
