"""`Stream`: what the compiler knows about one node's output — a streaming DataFrame and its shape."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ethereal_kafka.api.tags import OutputTag
from ethereal_kafka.plan.schema import KEY, OFFSET, PART, TAG, TS, is_hidden

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


@dataclass(frozen=True)
class Stream:
    """A compiled node.

    Attributes:
        frame: The streaming DataFrame: user fields first, then hidden columns (see `plan.schema`).
        fields: The user fields, in order.
        key_fields: After `key_by`: the key fields (a selector key: empty tuple); None when not keyed.
        watermarked: A watermark is defined upstream (event-time operators may follow).
        tags: Side outputs carried in `__tag` / `__side_<tag>` columns of `frame`.
        stateful: The frame contains a stateful operator.
        chain: How `chain_end` was built from the source's read, step by step, in Arrow (`plan.chaining`); it
            describes this stream only while `frame` is `chain_end` (any other operator makes a new frame).
    """

    frame: DataFrame
    fields: tuple[str, ...]
    key_fields: tuple[str, ...] | None = None
    watermarked: bool = False
    tags: tuple[OutputTag, ...] = ()
    stateful: bool = False
    notes: tuple[str, ...] = field(default=())
    chain: tuple[Any, ...] | None = field(default=None, compare=False)
    chain_end: Any = field(default=None, compare=False, repr=False)

    @property
    def chained(self) -> tuple[Any, ...] | None:
        """The chain that built this stream's frame (`plan.chaining`), None when another operator made it."""
        return self.chain if self.chain_end is not None and self.chain_end is self.frame else None

    @classmethod
    def of(cls, frame: DataFrame, **attrs: Any) -> Stream:
        """A stream whose user fields are `frame`'s non-hidden columns."""
        return cls(frame, tuple(c for c in frame.columns if not is_hidden(c)), **attrs)

    @property
    def keyed(self) -> bool:
        """True after `key_by` (the frame has `__key`)."""
        return self.key_fields is not None and KEY in self.frame.columns

    @property
    def positioned(self) -> bool:
        """True when elements carry their source record's position (`__part`, `__off`): per-element operators
        before any window, process function, rolling aggregate or join."""
        return PART in self.frame.columns and OFFSET in self.frame.columns

    @property
    def event_time(self) -> bool:
        """True when elements carry event time (`__ts`)."""
        return TS in self.frame.columns

    def hidden(self) -> list[str]:
        """The hidden columns present, in frame order."""
        return [c for c in self.frame.columns if is_hidden(c)]

    def chained_into(self, frame: DataFrame, step: Any, **changes: Any) -> Stream:
        """`with_frame(frame)` for an operator that has an Arrow step (`plan.chaining`): the chain goes on with
        `step` when this stream's frame is its chain's end; else there is none."""
        chain = self.chained
        return self.with_frame(
            frame, chain=None if chain is None else (*chain, step), chain_end=frame, **changes
        )

    def with_frame(self, frame: DataFrame, **changes: Any) -> Stream:
        """The same shape over another frame (fields recomputed from it)."""
        return replace(
            self, frame=frame, fields=tuple(c for c in frame.columns if not is_hidden(c)), **changes
        )


def main_output(stream: Stream) -> Stream:
    """The main output of an operator that also has side outputs (its rows with a null `__tag`)."""
    from pyspark.sql import functions as F

    keep = [c for c in stream.frame.columns if c != TAG and not c.startswith("__side_")]
    frame = stream.frame.where(F.col(TAG).isNull()).select(*keep)
    return replace(stream.with_frame(frame), tags=())


def key_columns(stream: Stream) -> list[Column]:
    """The key as output fields: the key field(s) by name, or `key` for a selector key."""
    from pyspark.sql import functions as F

    fields = stream.key_fields or ()
    if not fields:
        return [F.col(KEY).alias("key")]
    if len(fields) == 1:
        return [F.col(KEY).alias(fields[0])]
    return [F.col(f"{KEY}.`{f}`").alias(f) for f in fields]
