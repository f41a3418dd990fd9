"""Watermark strategies: where event time comes from and how far it may run out of order.

Semantics (Spark's, which the framework keeps): the watermark of epoch N is the largest event time seen in the
epochs before N (over every partition of the stream) minus the strategy's out-of-orderness bound; with several
watermarked inputs in one query the smallest of them rules. An event-time window `[start, end)` fires in the
first epoch whose watermark is at or past `end`.

Idleness: because a stream's watermark follows its most advanced partition, a partition that goes quiet never
holds windows back. `with_idleness` additionally makes a query with several inputs follow the most advanced input
(Spark's `multipleWatermarkPolicy=max`) so a quiet *input* cannot stall the others either.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ethereal_kafka.api.time import ZERO, Duration, as_duration

TimestampAssigner = Callable[[dict[str, Any]], int]


#: The field event time is read from when a strategy names none: a Kafka source's record timestamp.
DEFAULT_TIMESTAMP_FIELD = "timestamp"


@dataclass(frozen=True)
class WatermarkStrategy:
    """How a stream gets event time and watermarks (a frozen description).

    Attributes:
        out_of_orderness: How late (in event time) a record may arrive behind the largest event time seen.
        timestamp_field: Field holding the event time (epoch milliseconds as a number, or a timestamp); the default
            `timestamp` is the Kafka record timestamp.
        timestamp_assigner: A function `element -> epoch ms`, used instead of `timestamp_field` when given
            (runs per record in Python; a field is faster).
        idleness: See the module docstring; None = not declared.
    """

    out_of_orderness: Duration = ZERO
    timestamp_field: str = DEFAULT_TIMESTAMP_FIELD
    timestamp_assigner: TimestampAssigner | None = None
    idleness: Duration | None = None

    @classmethod
    def for_bounded_out_of_orderness(cls, max_out_of_orderness: Duration | int) -> WatermarkStrategy:
        """Records may arrive up to `max_out_of_orderness` behind the largest event time seen."""
        return cls(out_of_orderness=as_duration(max_out_of_orderness))

    @classmethod
    def for_monotonous_timestamps(cls) -> WatermarkStrategy:
        """Event time never decreases (bound 0)."""
        return cls(out_of_orderness=Duration(0))

    def with_timestamp_assigner(self, assigner: str | TimestampAssigner) -> WatermarkStrategy:
        """Take event time from a field (by name) or from a function of the element (epoch ms)."""
        if isinstance(assigner, str):
            return replace(self, timestamp_field=assigner, timestamp_assigner=None)
        if not callable(assigner):
            raise TypeError("with_timestamp_assigner takes a field name or a function element -> epoch ms")
        return replace(self, timestamp_assigner=assigner)

    def with_idleness(self, timeout: Duration | int) -> WatermarkStrategy:
        """Declare that this input may go quiet (see the module docstring)."""
        return replace(self, idleness=as_duration(timeout))
