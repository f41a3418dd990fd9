"""The job graph: what a DataStream pipeline describes, as frozen nodes (nothing here runs).

Each `DataStream` method appends a node whose `inputs` are the nodes it reads. The plan layer
(`ethereal_kafka.plan.compiler`) turns the nodes reachable from the sinks into Spark streaming queries. Nodes
compare by identity: two `map` calls with the same function are two operators.

Field names starting with `__` are reserved for the framework's hidden columns (event time, key, source position).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ethereal_kafka.api.tags import OutputTag
from ethereal_kafka.api.time import ZERO, Duration
from ethereal_kafka.api.watermarks import WatermarkStrategy
from ethereal_kafka.api.windows import Trigger, WindowAssigner

#: Join kinds of windowed joins.
JOIN_KINDS = ("inner", "left", "right", "full", "semi", "anti")


#: What a uid may hold: it names the operator in dead-letter headers, metrics labels and the checkpoint history.
UID_PATTERN = re.compile(r"^[A-Za-z0-9._:@/#-]{1,120}$")


@dataclass(frozen=True)
class OperatorRef:
    """Who an operator is, as people see it: its name (`DataStream.name`) and its stable id (`DataStream.uid`).

    Attributes:
        auto: `kind#id` (`process#3`): the operator's position in the graph. It is the default name and the
            default uid, so it changes when an operator is added before this one: give operators that people
            (alerts, dashboards, dead-letter consumers) refer to a `uid`.
        name: The display name the pipeline gave (`.name("detect-fraud")`), or None.
        given_uid: The stable id the pipeline gave (`.uid("fraud-1")`), or None.
    """

    auto: str
    name: str | None = None
    given_uid: str | None = None

    @property
    def display(self) -> str:
        """The name, or `kind#id`."""
        return self.name or self.auto

    @property
    def uid(self) -> str:
        """The stable id, or `kind#id` (derived from the graph position: not stable when the graph changes)."""
        return self.given_uid or self.auto

    def __str__(self) -> str:
        """`'detect-fraud' (uid fraud-1)`, `'detect-fraud' (process#3)`, `process#3 (uid fraud-1)` or
        `process#3`: how messages name the operator."""
        if self.name is not None:
            return f"'{self.name}' ({f'uid {self.given_uid}' if self.given_uid else self.auto})"
        if self.given_uid is not None:
            return f"{self.auto} (uid {self.given_uid})"
        return self.auto


@dataclass(frozen=True, eq=False)
class Node:
    """Base of graph nodes.

    Attributes:
        id: Position in the environment's node list (stable for a given pipeline function): names operators in
            messages and their state in the checkpoint, so a pipeline must add its operators in a fixed order.
        inputs: The nodes this one reads (one for most, two for joins, any number for unions).
        name: The display name given with `DataStream.name()`, or None.
        uid: The stable id given with `DataStream.uid()`, or None.
    """

    id: int
    inputs: tuple[Node, ...]
    name: str | None = None
    uid: str | None = None

    @property
    def ref(self) -> OperatorRef:
        """The operator's name and ids (`OperatorRef`)."""
        return OperatorRef(
            f"{type(self).__name__.removesuffix('Node').lower()}#{self.id}", self.name, self.uid
        )

    @property
    def label(self) -> str:
        """How messages name the operator: `kind#id`, with its name and uid when the pipeline gave them
        (`str(OperatorRef)`)."""
        return str(self.ref)


@dataclass(frozen=True, eq=False)
class SourceNode(Node):
    """A Kafka source connector of the job, by name."""

    source: str = ""


@dataclass(frozen=True, eq=False)
class MapNode(Node):
    """A per-element Python function.

    Attributes:
        kind: `map` (one out), `flat_map` (zero or more out), `filter` (keep when true).
        function: The callable (a `MapFunction`/`FlatMapFunction`/`FilterFunction` is unwrapped to its method).
        output_type: Spark DDL of the output elements; None = the input's type.
    """

    kind: str = "map"
    function: Callable[[dict[str, Any]], Any] | None = None
    output_type: str | None = None


@dataclass(frozen=True, eq=False)
class ExprNode(Node):
    """Spark column expressions, evaluated in the JVM (no per-record Python).

    Attributes:
        kind: `select` (the output is exactly `columns`), `with_columns` (add or replace `names`), `where`.
        columns: `pyspark.sql.Column`s or SQL expression strings.
        names: For `with_columns`, the name of each column.
    """

    kind: str = "select"
    columns: tuple[Any, ...] = ()
    names: tuple[str, ...] = ()


@dataclass(frozen=True, eq=False)
class WatermarkNode(Node):
    """Event time and watermarks from here on."""

    strategy: WatermarkStrategy = field(default_factory=WatermarkStrategy)


@dataclass(frozen=True, eq=False)
class KeyByNode(Node):
    """Partition by key.

    Attributes:
        fields: Key fields (one field: the key is its value; several: a struct of them), or empty with `selector`.
        selector: A Python function `element -> key` (slower than fields).
        key_type: Spark DDL type of the selector's key (default `string`).
    """

    fields: tuple[str, ...] = ()
    selector: Callable[[dict[str, Any]], Any] | None = None
    key_type: str = "string"


@dataclass(frozen=True)
class WindowFunction:
    """What a windowed stream computes per window.

    Attributes:
        kind: `agg` (Spark aggregate expressions: `columns`), `aggregate` (an `AggregateFunction`, optionally
            followed by `window_function`), `reduce` (a `ReduceFunction`), `process` (a `ProcessWindowFunction`).
        function: The user function (aggregate/reduce/process).
        window_function: Optional `ProcessWindowFunction` applied to the aggregate's single result.
        columns: Spark aggregate Columns for `agg`.
        output_type: Spark DDL of the result fields (before the key and window fields are added).
    """

    kind: str
    function: Any = None
    window_function: Any = None
    columns: tuple[Any, ...] = ()
    output_type: str | None = None


@dataclass(frozen=True, eq=False)
class WindowNode(Node):
    """A keyed window operator.

    Output elements: the key field(s), `window_start` and `window_end` (timestamps; absent for count/global
    windows), then the function's result fields. Late records (see `windows`) go to `late_tag` when set.
    """

    assigner: WindowAssigner | None = None
    trigger: Trigger | None = None
    allowed_lateness: Duration = ZERO
    late_tag: OutputTag | None = None
    function: WindowFunction | None = None


@dataclass(frozen=True, eq=False)
class RollingNode(Node):
    """A keyed running aggregate without windows: one output element per input element (Flink's rolling
    `reduce`/`aggregate`/`sum`).

    Attributes:
        kind: `reduce`, `aggregate`, or `sum`/`min`/`max` (of `field`).
    """

    kind: str = "reduce"
    function: Any = None
    field_name: str | None = None
    output_type: str | None = None


@dataclass(frozen=True, eq=False)
class ProcessNode(Node):
    """A `KeyedProcessFunction` on a keyed stream.

    Attributes:
        function: The user's KeyedProcessFunction.
        output_type: Spark DDL of the main output's elements.
        side_outputs: Tags the function may emit to with `ctx.output(tag, value)` (each with its `output_type`).
        time_mode: `event` (event-time timers; needs a watermark upstream), `processing` (processing-time timers),
            or `auto` (event when the stream has a watermark).
    """

    function: Any = None
    output_type: str | None = None
    side_outputs: tuple[OutputTag, ...] = ()
    time_mode: str = "auto"


@dataclass(frozen=True, eq=False)
class CoProcessNode(ProcessNode):
    """A `KeyedCoProcessFunction` on two keyed streams connected (`a.key_by(k).connect(b.key_by(k))`):
    `inputs = (first, second)`, keyed alike. The attributes are a `ProcessNode`'s; both inputs share the key's state
    and timers, and `output_type` is needed unless both inputs have the same fields and types.

    Attributes:
        keyed: False for a `CoProcessFunction` on two non-keyed streams (`a.connect(b).process(f)`: no state, no
            timers).
    """

    keyed: bool = True


@dataclass(frozen=True, eq=False)
class BroadcastNode(Node):
    """A stream broadcast to every parallel instance of the operator it is connected to (`stream.broadcast(...)`),
    with the broadcast state it carries: only a `BroadcastProcessNode` reads it.

    Attributes:
        descriptors: The `MapStateDescriptor`s of the broadcast state (by name).
    """

    descriptors: tuple[Any, ...] = ()


@dataclass(frozen=True, eq=False)
class BroadcastProcessNode(Node):
    """A `KeyedBroadcastProcessFunction` (keyed input) or `BroadcastProcessFunction` on a stream connected with a
    broadcast stream: `inputs = (stream, broadcast)`, the second a `BroadcastNode`.

    Attributes:
        function: The user's function.
        output_type: Spark DDL of the main output's elements (default: the first input's type).
        side_outputs: Tags the function may emit to (each with its `output_type`).
        keyed: The first input is keyed (keyed state and `apply_to_keyed_state`).
        time_mode: `event`, `processing` or `auto`, for the timers of a keyed function with `on_timer` (see
            `ProcessNode`).
    """

    function: Any = None
    output_type: str | None = None
    side_outputs: tuple[OutputTag, ...] = ()
    keyed: bool = False
    time_mode: str = "auto"


@dataclass(frozen=True, eq=False)
class SideOutputNode(Node):
    """The elements an operator emitted to `tag` (its input is that operator)."""

    tag: OutputTag | None = None


@dataclass(frozen=True, eq=False)
class UnionNode(Node):
    """The elements of all inputs (they must have the same type)."""


@dataclass(frozen=True, eq=False)
class JoinNode(Node):
    """A two-input join: `inputs = (left, right)`.

    Windowed (`window` set): pairs with equal keys in the same window; `how` in `JOIN_KINDS`; outer rows are
    emitted when the window closes. Interval (`lower`/`upper` set, in ms, may be negative): pairs with equal
    keys where `left.ts + lower <= right.ts <= left.ts + upper` (inner only).

    Attributes:
        left_key, right_key: Key fields on each side (or taken from `key_by` when empty).
        function: Optional `(left, right) -> element` (either side None for outer rows); default: the left fields,
            then the right fields (a right field whose name the left has gets the prefix `right_`), plus
            `window_start`/`window_end` for windowed joins.
        output_type: Spark DDL of `function`'s output.
    """

    how: str = "inner"
    left_key: tuple[str, ...] = ()
    right_key: tuple[str, ...] = ()
    window: WindowAssigner | None = None
    lower: int | None = None
    upper: int | None = None
    lower_inclusive: bool = True
    upper_inclusive: bool = True
    function: Any = None
    output_type: str | None = None


@dataclass(frozen=True, eq=False)
class LookupJoinNode(Node):
    """Enrich each element with the row of a global table (a compacted topic) whose key equals the element's key.

    The table is read as of the table offsets recorded for the epoch, so a replayed epoch sees the same table.

    Attributes:
        table: The job's table connector, by name.
        key: The element field holding the lookup key (or empty with `selector`).
        selector: `element -> key` (Python).
        how: `inner` (drop elements without a table row) or `left` (keep them, table fields null).
        prefix: Prefix of the table's fields in the output.
    """

    table: str = ""
    key: str = ""
    selector: Callable[[dict[str, Any]], Any] | None = None
    how: str = "left"
    prefix: str = ""


@dataclass(frozen=True, eq=False)
class SinkNode(Node):
    """Write the input stream to a sink connector of the job, by name."""

    sink: str = ""


@dataclass(frozen=True)
class JobGraph:
    """Every node a pipeline added, and its sinks (the roots the compiler starts from)."""

    nodes: tuple[Node, ...]
    sinks: tuple[SinkNode, ...]


def upstream(*nodes: Node) -> list[Node]:
    """`nodes` and every node they read from, transitively, each once."""
    seen: dict[int, Node] = {}
    stack = list(nodes)
    while stack:
        current = stack.pop()
        if current.id not in seen:
            seen[current.id] = current
            stack.extend(current.inputs)
    return list(seen.values())
