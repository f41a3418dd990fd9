"""Operator chaining: a partition-preserving query whose operators all run in Python, as one function per task.

A DataStream query made of a Kafka source, per-element Python functions (`map`, `flat_map`, `filter`, a `key_by`
selector), `key_by` on fields and one Kafka sink compiles to a Spark plan with a Python step per operator: the source's read, each function's `mapInArrow`, and
the exactly-once sink's `mapInArrow`. Spark runs each step of a task in a Python worker of its own and converts
every batch to JVM rows and back between them, so two cores held four or more resident workers and most of the
job's CPU went into those conversions (docs/performance.md). Flink chains such operators into one task; this module
does the same: `ChainedPipeline` is the whole per-element path of a query as one picklable function from the
source's read batches to the sink's rows, which the exactly-once source's read task runs before it writes
(`eos.chained`), in one worker, with no JVM round trip.

The compiler still builds the query's Spark plan as usual (its schemas, checks and description); chaining applies
only when that plan is exactly the chain recorded along it (`ChainedPipeline` steps are recorded by the source and
map compilers on their `Stream`, and any other operator ends the chain), and every step has an Arrow equivalent
that gives the same rows Spark would (`chain_of`): otherwise the query runs unchained. `pipeline.operator.chaining=
false` turns it off.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ethereal_kafka.plan.pyfuncs import PyStage
from ethereal_kafka.plan.schema import KEY, OFFSET, PART, arrow_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from ethereal_kafka.config.connectors import KafkaSinkConfig


@dataclass(frozen=True)
class SourceStep:
    """The source compiler's projection: `(source column, stream column)` pairs, then Spark's Arrow types."""

    columns: tuple[tuple[str, str], ...]
    schema: pa.Schema

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        names = [out for _, out in self.columns]
        for batch in batches:
            arrays = [batch.column(src) for src, _ in self.columns]
            yield pa.RecordBatch.from_arrays(arrays, names=names).cast(self.schema)


@dataclass(frozen=True)
class MapStep:
    """A Python operator (`PyStage`) over its input as Spark would hand it (`schema`: Spark's Arrow types)."""

    stage: PyStage
    schema: pa.Schema

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return self.stage(batch.cast(self.schema) for batch in batches)


@dataclass(frozen=True)
class KeyStep:
    """`key_by` on fields: `__key` set from the field (a struct of them for several), as `withColumn` sets it (in
    place when the stream is keyed already, else last); `schema`: Spark's Arrow types of the keyed stream."""

    fields: tuple[str, ...]
    schema: pa.Schema

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            columns = [batch.column(f) for f in self.fields]
            key = (
                columns[0]
                if len(columns) == 1
                else pa.StructArray.from_arrays(columns, names=list(self.fields))
            )
            at = batch.schema.get_field_index(KEY)
            batch = batch.set_column(at, KEY, key) if at >= 0 else batch.append_column(KEY, key)
            yield batch.cast(self.schema)


@dataclass(frozen=True)
class SinkStep:
    """The sink binding (`plan.outputs.bind_sinks`, one sink): `__k0`, the order columns, `__v0`.

    Attributes:
        key: The key's column, or None for a null key.
        order: The position columns the exactly-once sink orders by (`__part`, `__off`), when present.
        value: The value's columns: a struct of them (`struct=True`, json/avro), else the one column.
        schema: The bound frame's Arrow types (as Spark converts them).
        columns: The bound frame's columns with their Spark types (what the sink's serdes are chosen by).
    """

    key: str | None
    order: tuple[str, ...]
    value: tuple[str, ...]
    struct: bool
    schema: pa.Schema
    columns: tuple[tuple[str, Any], ...]

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            key = batch.column(self.key) if self.key is not None else pa.nulls(batch.num_rows, pa.binary())
            values = [batch.column(n) for n in self.value]
            value = pa.StructArray.from_arrays(values, names=list(self.value)) if self.struct else values[0]
            arrays = [key, *[batch.column(n) for n in self.order], value]
            yield pa.RecordBatch.from_arrays(arrays, names=self.schema.names).cast(self.schema)


Step = SourceStep | MapStep | KeyStep


@dataclass(frozen=True)
class ChainedPipeline:
    """A query's per-element path as one function: the source's read batches in, the sink's rows out (in the
    order Spark would give them: one task, no exchange)."""

    steps: tuple[Step, ...]
    sink: SinkStep

    @property
    def labels(self) -> tuple[str, ...]:
        """The chained operators after the source, in order (for logs)."""
        return tuple(s.stage.label if isinstance(s, MapStep) else "key_by" for s in self.steps[1:])

    def __call__(
        self, batches: Iterable[pa.RecordBatch], counts: list[int] | None = None
    ) -> Iterator[pa.RecordBatch]:
        """The sink's rows of `batches`; with `counts`, each step's rows out are added to it as they pass (the
        source's first, then each Python operator's: the UI's per-operator figures of a chained query)."""
        flow: Iterable[pa.RecordBatch] = batches
        if counts is not None:
            counts[:] = [0] * len(self.steps)
        for index, step in enumerate(self.steps):
            flow = step(flow)
            if counts is not None:
                flow = _counted(flow, counts, index)
        return self.sink(flow)


def _counted(batches: Iterable[pa.RecordBatch], counts: list[int], index: int) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        counts[index] += batch.num_rows
        yield batch


def source_step(frame: DataFrame, columns: Sequence[tuple[str, str]]) -> SourceStep:
    """The source compiler's projection of its read (`columns`) onto `frame`, the stream it made."""
    return SourceStep(tuple(columns), arrow_of(frame.schema))


def map_step(stage: PyStage, before: DataFrame) -> MapStep:
    """A Python operator over `before` (its input stream's frame)."""
    return MapStep(stage, arrow_of(before.schema))


def key_step(fields: Sequence[str], after: DataFrame) -> KeyStep:
    """`key_by(fields)`, giving the stream `after`."""
    return KeyStep(tuple(fields), arrow_of(after.schema))


def sink_step(
    frame: DataFrame, fields: Sequence[str], config: KafkaSinkConfig, bound: DataFrame
) -> SinkStep | None:
    """The Arrow form of `plan.outputs.record_columns` for one sink over a stream (`frame`, with user `fields`),
    bound into `bound`; None where Spark would cast a column (its text forms of numbers and dates are Spark's own, so
    those queries stay unchained)."""
    names = list(fields)
    types = {f.name: f.dataType.typeName() for f in frame.schema.fields}
    if config.value_format in ("json", "avro"):
        value, struct = tuple(names), True
    else:
        chosen = names[0] if len(names) == 1 else ("value" if "value" in names else None)
        wanted = "binary" if config.value_format == "bytes" else "string"
        if chosen is None or types.get(chosen) != wanted:
            return None
        value, struct = (chosen,), False
    key: str | None = "key" if "key" in names else (KEY if KEY in frame.columns else None)
    if key is not None:
        kind = types.get(key)
        if (config.key_format == "bytes" and kind != "binary") or (
            config.key_format == "string" and kind != "string"
        ):
            return None
    order = tuple(c for c in (PART, OFFSET) if {PART, OFFSET} <= set(frame.columns))
    schema = arrow_of(bound.schema)
    if len(schema) != 2 + len(order):
        return None
    columns = tuple((f.name, f.dataType) for f in bound.schema.fields)
    return SinkStep(key, order, value, struct, schema, columns)


def chain_of(steps: tuple[Step, ...] | None, sink: SinkStep | None) -> ChainedPipeline | None:
    """The chained pipeline of a query whose stream was built by `steps` alone, bound by `sink`; None when any part
    cannot be chained."""
    if not steps or sink is None or not isinstance(steps[0], SourceStep):
        return None
    return ChainedPipeline(steps, sink)
