"""The keyed co-process operator: a user's `KeyedCoProcessFunction` over two keyed streams connected.

It is the process-function operator (`plan.operators.process`: the same keyed state, timers, time modes, side
outputs, output checks and error handling) over one input that carries both streams: each row holds its stream's
element in `__in1` or `__in2` and the stream's number in `__input` (1 or 2). What differs is the order in which a
key's rows of an epoch meet the function, and which method gets each.

**Connected order** (`connected_order`): event time, then input (the first stream before the second at equal event
time), then source partition, then offset, then content. Every part is logged by Spark with the epoch (offsets) or
computed from the record, so a replayed epoch interleaves the two inputs exactly as the first run did, whatever
Spark's scheduling: the output is byte-identical. Flink makes no such promise — there, the interleaving of a
connected stream's inputs depends on which network buffer arrives first.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from ethereal_kafka.plan.operators.base import MIN_TIME
from ethereal_kafka.plan.operators.process import KeyedProcessor
from ethereal_kafka.plan.schema import OFFSET, PART, TS

#: The row's stream: 1 (first) or 2 (second).
INPUT = "__input"
#: The first stream's element (null on the second's rows).
FIRST = "__in1"
#: The second stream's element (null on the first's rows).
SECOND = "__in2"


def connected_order(row: dict[str, Any]) -> tuple[Any, ...]:
    """Sort key of a connected row: event time, input (1 before 2), source partition, offset, then content."""
    ts = row.get(TS)
    if ts is None:
        stamp: Any = MIN_TIME
    else:
        stamp = ts.timestamp() if hasattr(ts, "timestamp") else ts
    index = int(row.get(INPUT) or 0)
    part, offset = row.get(PART), row.get(OFFSET)
    element = row.get(FIRST if index == 1 else SECOND)
    content = json.dumps(element, sort_keys=True, default=repr)
    return (stamp, index, -1 if part is None else part, -1 if offset is None else offset, content)


class CoKeyedProcessor(KeyedProcessor):
    """Runs a `ProcessSpec` whose function is a `KeyedCoProcessFunction` (see the module docstring); Spark drives it
    as it drives `KeyedProcessor`."""

    def ordered(self, rows: Iterator[Any]) -> list[dict[str, Any]]:
        """A key's rows of the epoch in the connected order."""
        return sorted((row.asDict(recursive=True) for row in rows), key=connected_order)

    def handler(self, row: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """`process_element1` with the first stream's element, or `process_element2` with the second's."""
        function = self._spec.function
        if row.get(INPUT) == 1:
            return function.process_element1, dict(row.get(FIRST) or {})
        return function.process_element2, dict(row.get(SECOND) or {})
