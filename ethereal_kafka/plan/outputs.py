"""Bind a query's streams to its sinks: per sink, a key column and a value column the sink connector encodes.

Sink `i` of a query reads `__k<i>` (key) and `__v<i>` (value); with several sinks each row names its sink in
`__sink`. How an element becomes a record, per the sink's formats:

- value `json` / `avro`: the element (all user fields) as one record;
- value `bytes` / `string`: the element's only field, or its field `value`;
- key: the element's field `key` if it has one, else the stream's key (after `key_by`), else none.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ethereal_kafka.api.errors import GraphError
from ethereal_kafka.config.connectors import KafkaSinkConfig
from ethereal_kafka.connectors.kafka.encoding import SINK_INDEX_COLUMN
from ethereal_kafka.plan.chaining import ChainedPipeline, chain_of, sink_step
from ethereal_kafka.plan.conform import describe_origin, source_topics
from ethereal_kafka.plan.errors import user_error
from ethereal_kafka.plan.pyfuncs import PyStage, UserFunctionError
from ethereal_kafka.plan.schema import (
    KEY,
    OFFSET,
    PART,
    SEQ,
    TAG,
    arrow_of,
    arrow_struct,
    side_column,
    spark_struct,
)
from ethereal_kafka.plan.stream import Stream, main_output

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from ethereal_kafka.api import graph as g
    from ethereal_kafka.plan.context import CompileContext
    from ethereal_kafka.plan.sink_groups import Branch, SinkGroup
    from ethereal_kafka.plan.user_errors import OperatorErrors


def bind_sinks(
    ctx: CompileContext, plan: SinkGroup
) -> tuple[DataFrame, tuple[KafkaSinkConfig, ...], ChainedPipeline | None]:
    """The query's final DataFrame, its sink connectors (with their key/value columns set), and the same query as
    one chained function when it can run that way (`plan.chaining`; one sink, Python operators only).

    Raises:
        GraphError: a sink's formats cannot encode its stream's elements.
    """
    from pyspark.sql import functions as F

    configs = [_sink_config(ctx, s.sink) for s in plan.sinks]
    if plan.fork is None:
        (sink,) = plan.sinks
        stream = ctx.compile(sink.inputs[0])
        if stream.tags:
            stream = main_output(stream)
        key, value = record_columns(stream.frame, stream.fields, configs[0], sink.label)
        frame = stream.frame.select(key.alias("__k0"), *_order(stream.frame), value.alias("__v0"))
        steps = stream.chained
        chain = None
        if steps is not None:
            chain = chain_of(steps, sink_step(stream.frame, stream.fields, configs[0], frame))
        return frame, (_columns(configs[0], 0),), chain
    fork = ctx.compile(plan.fork)
    fanned = _fan_out(fork, plan.branches, ctx.sources, ctx.errors_for)
    keys, values = [], []
    for i, (branch, config) in enumerate(zip(plan.branches, configs, strict=True)):
        fields = _branch_fields(fanned, i)
        key, value = record_columns(fanned, fields, config, branch.sink.label, base=F.col(f"__e{i}"))
        keys.append(key.alias(f"__k{i}"))
        values.append(value.alias(f"__v{i}"))
    # Column order is the order the exactly-once sink sorts a task's records by: sink, keys, emission, values.
    frame = fanned.select(F.col(SINK_INDEX_COLUMN), *keys, *_order(fanned), *values)
    return frame, tuple(_columns(c, i) for i, c in enumerate(configs)), None


def _order(frame: DataFrame) -> list[Column]:
    """The columns that keep a key's records in order through the exactly-once sink's sort: the operator's
    emission sequence, else the element's source position (partition, offset)."""
    from pyspark.sql import functions as F

    if SEQ in frame.columns:
        return [F.col(SEQ)]
    return [F.col(c) for c in (PART, OFFSET)] if {PART, OFFSET} <= set(frame.columns) else []


def side_output(stream: Stream, tag: str, where: str) -> Stream:
    """The elements an operator emitted to `tag`, with the operator's hidden columns (key, event time)."""
    from pyspark.sql import functions as F

    if tag not in {t.name for t in stream.tags}:
        raise GraphError(f"{where}: the operator has no side output {tag!r}")
    column = side_column(tag)
    hidden = [
        c for c in stream.frame.columns if c.startswith("__") and c != TAG and not c.startswith("__side_")
    ]
    frame = stream.frame.where(F.col(TAG) == tag).select(f"{column}.*", *hidden)
    return Stream.of(
        frame, key_fields=stream.key_fields, watermarked=stream.watermarked, stateful=stream.stateful
    )


def record_columns(
    frame: DataFrame, fields: Iterable[str], config: KafkaSinkConfig, where: str, base: Column | None = None
) -> tuple[Column, Column]:
    """Key and value columns of a sink for elements with `fields` (see the module docstring).

    Args:
        frame: The rows (the hidden key column, if any, is `__key`); used to resolve column types.
        base: A struct column holding the fields (fan-out), instead of top-level columns.

    Raises:
        GraphError: a bytes/string value format and an element with several fields and no `value` field.
    """
    from pyspark.sql import functions as F

    names = list(fields)

    def field(name: str) -> Column:
        return base.getField(name) if base is not None else F.col(f"`{name}`")

    if config.value_format in ("json", "avro"):
        value = F.struct(*[field(n).alias(n) for n in names])
    else:
        chosen = names[0] if len(names) == 1 else ("value" if "value" in names else None)
        if chosen is None:
            raise GraphError(
                f"{where}: sink {config.name} has value.format={config.value_format}, so its stream needs one field "
                f"or a field named value (it has {', '.join(names)}); set value.format=json or avro to write records"
            )
        value = field(chosen).cast("binary" if config.value_format == "bytes" else "string")
    if "key" in names:
        key = field("key")
    elif KEY in frame.columns:
        key = F.col(KEY)
    else:
        return F.lit(None).cast("binary"), value
    if config.key_format == "bytes":
        kind = frame.select(key).schema.fields[0].dataType.typeName()
        key = key if kind == "binary" else key.cast("string").cast("binary")
    elif config.key_format == "string":
        key = key.cast("string")
    return key, value


def _columns(config: KafkaSinkConfig, index: int) -> KafkaSinkConfig:
    return dataclasses.replace(config, key_column=f"__k{index}", value_column=f"__v{index}")


def _sink_config(ctx: CompileContext, name: str) -> KafkaSinkConfig:
    if name not in ctx.sinks:
        raise GraphError(f"the job has no sink named {name!r} (sinks: {', '.join(ctx.sinks) or 'none'})")
    return ctx.sinks[name]


def _branch_fields(frame: DataFrame, index: int) -> list[str]:
    struct = frame.schema[f"__e{index}"].dataType
    return [f.name for f in getattr(struct, "fields", [])]


def _fan_out(
    fork: Stream,
    branches: tuple[Branch, ...],
    sources: Mapping[str, Any],
    errors_for: Callable[[g.Node, bool], OperatorErrors | None] | None = None,
) -> DataFrame:
    """Rows of `fork` tagged with the sink(s) they go to, each with that branch's element in `__e<i>`."""
    from pyspark.sql import functions as F

    frame = fork.frame
    tags = {t.name for t in fork.tags}
    for branch in branches:
        if branch.tag is not None and branch.tag not in tags:
            raise GraphError(f"{branch.sink.label}: the stream it reads has no side output {branch.tag!r}")
    if all(not b.ops for b in branches):
        conditions = [
            (F.col(TAG).isNull() if tags else F.lit(True)) if b.tag is None else (F.col(TAG) == b.tag)
            for b in branches
        ]
        picks = F.filter(
            F.array(*[F.when(c, F.lit(i)) for i, c in enumerate(conditions)]), lambda x: x.isNotNull()
        )
        exploded = frame.withColumn(SINK_INDEX_COLUMN, F.explode(picks))
        elements = [
            F.when(
                F.col(SINK_INDEX_COLUMN) == i,
                F.struct(*[F.col(f"`{f}`") for f in fork.fields])
                if b.tag is None
                else F.col(side_column(b.tag)),
            ).alias(f"__e{i}")
            for i, b in enumerate(branches)
        ]
        carried = [F.col(c) for c in (KEY, SEQ) if c in frame.columns]
        return exploded.select(F.col(SINK_INDEX_COLUMN), *carried, *elements)
    stage = FanOut.build(fork, branches, sources, errors_for)
    return frame.mapInArrow(stage, spark_struct(stage.output_schema()))


@dataclass(frozen=True)
class FanOut:
    """The fan-out step of a query with several sinks and Python operators in its branches (runs in Spark tasks).

    For each input row and each branch reading the row's output (main or a tag), the branch's operators run on
    the element; every resulting element becomes a row `(__sink=i, __key, __e<i>=element)`.
    """

    branches: tuple[tuple[str | None, tuple[PyStage, ...], pa.StructType], ...]
    main_fields: tuple[str, ...]
    key_type: pa.DataType | None
    sequenced: bool = False

    @classmethod
    def build(
        cls,
        fork: Stream,
        branches: tuple[Branch, ...],
        sources: Mapping[str, Any],
        errors_for: Callable[[g.Node, bool], OperatorErrors | None] | None = None,
    ) -> FanOut:
        """Plan the fan-out of `fork` into `branches` (driver side; `sources`: the query's source configs by name,
        which name the records' topics in messages; `errors_for`: each operator's `on.user.error` policy, given
        whether its elements carry their source position)."""
        arrow = arrow_of(fork.frame.schema)
        positioned = PART in arrow.names and OFFSET in arrow.names
        specs = []
        for branch in branches:
            if branch.tag is None:
                current = pa.struct([arrow.field(f) for f in fork.fields])
            else:
                current = arrow.field(side_column(branch.tag)).type
            stages = []
            for op in branch.ops:
                out = (
                    arrow_struct(op.output_type, op.label)
                    if op.output_type and op.kind != "filter"
                    else current
                )
                assert op.function is not None
                fields = tuple(f.name for f in current)
                defaulted = not op.output_type and op.kind != "filter"
                topics = source_topics(op, sources)
                on_error = errors_for(op, positioned and branch.tag is None) if errors_for else None
                stage = PyStage(
                    op.label,
                    op.kind,
                    op.function,
                    fields,
                    out,
                    (),
                    (),
                    topics=topics,
                    defaulted=defaulted,
                    on_error=on_error,
                )
                stages.append(stage)
                current = out
            specs.append((branch.tag, tuple(stages), current))
        key_type = arrow.field(KEY).type if KEY in arrow.names else None
        return cls(tuple(specs), tuple(fork.fields), key_type, SEQ in arrow.names)

    def output_schema(self) -> pa.Schema:
        """`__sink`, `__key` (if the fork is keyed), then `__e<i>` per branch."""
        fields = [pa.field(SINK_INDEX_COLUMN, pa.int32())]
        if self.key_type is not None:
            fields.append(pa.field(KEY, self.key_type))
        if self.sequenced:
            fields.append(pa.field(SEQ, pa.int64()))
        fields += [pa.field(f"__e{i}", struct) for i, (_, _, struct) in enumerate(self.branches)]
        return pa.schema(fields)

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Fan every row out to its branches (runs in a Spark task)."""
        schema = self.output_schema()
        for batch in batches:
            rows = pa.Table.from_batches([batch]).to_pylist()
            out: dict[str, list[Any]] = {name: [] for name in schema.names}
            for row in rows:
                for i, (tag, stages, _) in enumerate(self.branches):
                    if row.get(TAG) != tag:
                        continue
                    start = (
                        row[side_column(tag)] if tag is not None else {f: row[f] for f in self.main_fields}
                    )
                    for element in _run(stages, start, row):
                        out[SINK_INDEX_COLUMN].append(i)
                        if self.key_type is not None:
                            out[KEY].append(row.get(KEY))
                        if self.sequenced:
                            out[SEQ].append(row.get(SEQ))
                        for j in range(len(self.branches)):
                            out[f"__e{j}"].append(element if j == i else None)
            for _, stages, _ in self.branches:
                for stage in stages:
                    if stage.on_error is not None and not stage.on_error.fails:
                        stage.on_error.flush()
            if out[SINK_INDEX_COLUMN]:
                yield pa.RecordBatch.from_pydict(out, schema=schema)


def _run(stages: tuple[PyStage, ...], element: dict[str, Any], row: dict[str, Any]) -> list[dict[str, Any]]:
    """The elements a branch's stages make of `element` (each checked against its stage's output type; `row`: the
    fork's row, whose source position, when it has one, names the record in messages)."""

    def origin() -> str:
        return describe_origin(stages[0].topics if stages else "", row.get(PART), row.get(OFFSET))

    elements = [element]
    for stage in stages:
        produced: list[dict[str, Any]] = []
        for item in elements:
            try:
                made = stage._call(item)
            except UserFunctionError:
                raise
            except Exception as exc:
                where = f"element from {origin()}"
                if stage.on_error is None:
                    raise user_error(stage.label, exc, where) from exc
                stage.on_error.handle(exc, item, row.get(PART), row.get(OFFSET), where)
                continue
            produced += [stage.conform(e, origin) for e in made]
        elements = produced
    return elements
