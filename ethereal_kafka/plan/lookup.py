"""Compile the stream-table lookup join (`stream.join_table(table, key, how, prefix)`).

How it runs:

1. **Pinning** (driver, `pin_lookup_tables`, before a query is compiled): every source upstream of a lookup join
   gets the option `pin.tables`, so its end offsets of each epoch also record the tables' end offsets (Spark logs
   them before the epoch runs and reuses them on a replay) and its rows carry them in the hidden `__pins` column
   (see `connectors.table_pins`).
2. **Lookup** (executors, `LookupStage`, a `mapInArrow` step): each Python worker keeps a RocksDB copy of the table
   (`connectors.table`), brings it to the rows' pins, and adds the table row of each element's key. No state for
   Spark, no shuffle: a job made of per-element operators and lookup joins stays partition-preserving.

The rows must still carry `__pins`: a lookup join reads elements that come from a source through per-element
operators (map, filter, key_by, union, ...), not the output of a window, join or process function (their rows are
not tied to one epoch's read). Output: the element's fields, then the table row's fields with `prefix` (a json/avro
value's fields, or `value`); with `how="left"` the table fields are null when the key has no row, with `inner`
such elements are dropped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ethereal_kafka.api import graph as g
from ethereal_kafka.api.errors import GraphError
from ethereal_kafka.config.connectors import KafkaTableConfig
from ethereal_kafka.connectors.table import TableSpec, lookup_key, table_store
from ethereal_kafka.connectors.table_pins import PINS_COLUMN, decode_pins, encode_tables
from ethereal_kafka.plan.context import CompileContext, register
from ethereal_kafka.plan.errors import user_error
from ethereal_kafka.plan.schema import arrow_of, spark_struct
from ethereal_kafka.plan.sink_groups import SinkGroup, ancestors
from ethereal_kafka.plan.stream import Stream


def pin_lookup_tables(plan: SinkGroup, graph: g.JobGraph, tables: dict[str, Any]) -> SinkGroup:
    """`plan` with `pin.tables` set on each source that feeds one of its lookup joins (see the module docstring).

    Called by `compiler.compile_graph` before the query is compiled.

    Raises:
        GraphError: a lookup join names a table the job does not have.
    """
    by_id = {n.id: n for n in graph.nodes}
    reach: set[int] = set()
    for sink in plan.sinks:
        reach |= ancestors(sink)
    wanted: dict[str, set[str]] = {}
    for node_id in sorted(reach):
        node = by_id[node_id]
        if not isinstance(node, g.LookupJoinNode):
            continue
        _table(tables, node)
        for upstream in ancestors(node):
            source = by_id[upstream]
            if isinstance(source, g.SourceNode) and source.source in plan.sources:
                wanted.setdefault(source.source, set()).add(node.table)
    if not wanted:
        return plan
    sources = dict(plan.sources)
    for name, names in wanted.items():
        chosen = [_table(tables, n) for n in sorted(names)]
        sources[name] = dataclasses.replace(sources[name], pin_tables=encode_tables(chosen))
    return dataclasses.replace(plan, sources=sources)


def _table(tables: dict[str, Any], node: g.LookupJoinNode | str) -> KafkaTableConfig:
    name = node if isinstance(node, str) else node.table
    found = tables.get(name)
    if not isinstance(found, KafkaTableConfig):
        where = "" if isinstance(node, str) else f"{node.label}: "
        known = ", ".join(sorted(tables)) or "none; list table files under tables= in the job file"
        raise GraphError(f"{where}the job has no table named {name!r} (tables: {known})")
    return found


@register(g.LookupJoinNode)
def compile_lookup(ctx: CompileContext, node: g.LookupJoinNode, inputs: list[Stream]) -> Stream:
    """The lookup `mapInArrow` step (see the module docstring).

    Raises:
        GraphError: unknown table or key field, rows without pins (after a stateful operator), or a table field
            whose prefixed name the element already has.
    """
    (stream,) = inputs
    table = _table(ctx.tables, node)
    if PINS_COLUMN not in stream.frame.columns:
        raise GraphError(
            f"{node.label}: join_table reads elements as a source delivered them in an epoch (through map, filter, "
            "key_by, union, ...); the output of a window, join or process function has no table version to read. "
            "Join the table before the stateful operator."
        )
    if node.selector is None and node.key not in stream.fields:
        raise GraphError(
            f"{node.label}: no field {node.key!r} to look up (fields: {', '.join(stream.fields)})"
        )
    spec = TableSpec.from_config(table, ctx.job.app_id if ctx.job is not None else "ethereal-kafka")
    row_type = spec.row_type()
    added = [pa.field(f"{node.prefix}{f.name}", f.type) for f in row_type]
    clash = sorted({f.name for f in added} & set(stream.fields))
    if clash:
        raise GraphError(
            f"{node.label}: the table's field(s) {', '.join(clash)} would replace element fields; "
            f"pass prefix=... to join_table"
        )
    arrow = arrow_of(stream.frame.schema)
    hidden = stream.hidden()
    stage = LookupStage(
        node.label,
        spec,
        node.how,
        node.key or None,
        node.selector,
        tuple(stream.fields),
        pa.schema([*[arrow.field(f) for f in stream.fields], *added, *[arrow.field(h) for h in hidden]]),
    )
    frame = stream.frame.mapInArrow(stage, spark_struct(stage.output))
    return stream.with_frame(frame)


@dataclass(frozen=True)
class LookupStage:
    """One lookup join applied to a partition's Arrow batches (frozen, picklable; runs in Spark tasks).

    Attributes:
        label: The operator's name for messages.
        spec: The table.
        how: `left` or `inner`.
        key: The element field holding the key (or None with `selector`).
        selector: `element -> key`.
        fields: The input's user fields (what the selector sees).
        output: The output schema: the input's user fields, the table's (prefixed) fields, the hidden columns.
    """

    label: str
    spec: TableSpec
    how: str
    key: str | None
    selector: Callable[[dict[str, Any]], Any] | None
    fields: tuple[str, ...]
    output: pa.Schema

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Enrich every batch (rows of one input partition, normally all with the same pins)."""
        store = None
        key_fields = self.spec.key_fields()
        for batch in batches:
            if batch.num_rows == 0:
                continue
            if store is None:
                store = table_store(self.spec)
            keys = [lookup_key(k, key_fields) for k in self._keys(batch)]
            pins = batch.column(PINS_COLUMN).to_pylist()
            rows: list[dict[str, Any] | None] = [None] * batch.num_rows
            for text in sorted(set(pins), key=lambda p: p or ""):
                store.sync(decode_pins(text).get(self.spec.config.name, {}))
                at = [i for i, p in enumerate(pins) if p == text]
                for i, found in zip(at, store.lookup(keys[i] for i in at), strict=True):
                    rows[i] = found
            yield self._output(batch, rows)

    def _keys(self, batch: pa.RecordBatch) -> list[Any]:
        if self.selector is None:
            return batch.column(batch.schema.get_field_index(str(self.key))).to_pylist()
        elements = pa.Table.from_batches([batch.select(list(self.fields))]).to_pylist()
        keys = []
        for element in elements:
            try:
                keys.append(self.selector(element))
            except Exception as exc:
                raise user_error(self.label, exc, f"the key selector, on {element!r}") from exc
        return keys

    def _output(self, batch: pa.RecordBatch, rows: list[dict[str, Any] | None]) -> pa.RecordBatch:
        row_type = self.spec.row_type()
        if self.how == "inner":
            batch = batch.filter(pa.array([r is not None for r in rows]))
            rows = [r for r in rows if r is not None]
        added = pa.array(rows, type=row_type).flatten()
        hidden = self.output.names[len(self.fields) + len(added) :]
        columns = [
            *[batch.column(batch.schema.get_field_index(f)) for f in self.fields],
            *added,
            *[batch.column(batch.schema.get_field_index(h)) for h in hidden],
        ]
        return pa.RecordBatch.from_arrays(columns, schema=self.output)
