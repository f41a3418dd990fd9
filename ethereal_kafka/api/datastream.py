"""`DataStream`, `KeyedStream` and `WindowedStream`: the fluent, Flink-style face of the job graph.

Every method returns a new stream and adds one node to the environment's graph; nothing runs until the job is
compiled and started (`ethereal-kafka run`, or `env.execute()`). Elements are dicts (see `functions`).

Where an operator takes a Spark `Column` (or SQL text), it runs in the JVM; where it takes a Python function, it
runs per record in Python on the executors. Both are deterministic as long as the functions are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol, Self, TypeVar, overload

from ethereal_kafka.api import graph as g
from ethereal_kafka.api.errors import GraphError
from ethereal_kafka.api.state import MapStateDescriptor
from ethereal_kafka.api.tags import OutputTag
from ethereal_kafka.api.time import Duration, as_duration
from ethereal_kafka.api.watermarks import WatermarkStrategy
from ethereal_kafka.api.windows import (
    CountTrigger,
    CountWindows,
    GlobalWindows,
    PurgingTrigger,
    Trigger,
    WindowAssigner,
)

N = TypeVar("N", bound=g.Node)


class GraphOwner(Protocol):
    """What a stream needs of the environment that owns its graph (`StreamExecutionEnvironment` is one): streams
    sit below the environment, which creates them."""

    def add(self, cls: type[N], inputs: tuple[g.Node, ...], **attrs: Any) -> N:
        """Append a node of type `cls` reading `inputs`; returns it."""
        ...

    def add_sink(self, node: g.Node, sink: str) -> None:
        """Write `node`'s stream to the job's sink connector `sink`."""
        ...

    def name_node(self, node: g.Node, name: str) -> None:
        """Give `node` a display name."""
        ...

    def uid_node(self, node: g.Node, uid: str) -> None:
        """Give `node` a stable id (unique in the job)."""
        ...


def _method(function: Any, name: str) -> Callable[..., Any]:
    """A plain callable, or the named method of a function object (`MapFunction.map`, ...)."""
    method = getattr(function, name, None)
    if method is not None and callable(method) and not isinstance(function, type):
        return method
    if callable(function):
        return function
    raise GraphError(f"expected a function or an object with a {name}() method, got {function!r}")


def _fields(key: str | Iterable[str]) -> tuple[str, ...]:
    names = (key,) if isinstance(key, str) else tuple(key)
    if not names or any(not isinstance(n, str) or not n for n in names):
        raise GraphError(f"key fields must be non-empty field names, got {key!r}")
    if any(n.startswith("__") for n in names):
        raise GraphError("field names starting with '__' are reserved for the framework")
    return names


def _typed_tags(side_outputs: Iterable[OutputTag]) -> tuple[OutputTag, ...]:
    """A process function's side output tags, each with an output type.

    Raises:
        GraphError: a tag without `output_type`.
    """
    tags = tuple(side_outputs)
    for tag in tags:
        if tag.output_type is None:
            raise GraphError(f"side output {tag.name!r} of a process function needs an output_type")
    return tags


class DataStream:
    """A stream of elements (dicts)."""

    def __init__(self, env: GraphOwner, node: g.Node) -> None:
        self.env = env
        self.node = node

    def _then(self, cls: type[g.Node], **attrs: Any) -> DataStream:
        return DataStream(self.env, self.env.add(cls, (self.node,), **attrs))

    # -- identity (Flink's name() and uid()) ---------------------------------------------------------------------
    def name(self, name: str) -> Self:
        """Name the operator that makes this stream (Flink's `name()`): how errors, the web UI, metrics labels and
        dead-letter headers show it. Display only; returns this stream.

        Raises:
            GraphError: the name is empty, spans lines or holds a quote.
        """
        self.env.name_node(self.node, name)
        return self

    def uid(self, uid: str) -> Self:
        """Give the operator that makes this stream a stable id (Flink's `uid()`), unique in the job: it identifies
        the operator in errors, metrics labels, dead-letter headers and the checkpoint history however the graph
        around it changes. Without one, the uid is `kind#id` from the operator's position in the graph, which
        changes when an operator is added before it. Returns this stream.

        Raises:
            GraphError: the uid is malformed, or another operator of the job has it.
        """
        self.env.uid_node(self.node, uid)
        return self

    def set_uid(self, uid: str) -> Self:
        """Alias of `uid` (Flink's Python API spells it `set_uid`)."""
        return self.uid(uid)

    # -- per-element operators -----------------------------------------------------------------------------------
    def map(self, function: Any, output_type: str | None = None) -> DataStream:
        """One output element per element (`function(element) -> element`); `output_type` (Spark DDL) when the
        output's fields differ from the input's."""
        return self._then(g.MapNode, kind="map", function=_method(function, "map"), output_type=output_type)

    def flat_map(self, function: Any, output_type: str | None = None) -> DataStream:
        """Zero or more output elements per element (`function(element) -> iterable of elements`)."""
        return self._then(
            g.MapNode, kind="flat_map", function=_method(function, "flat_map"), output_type=output_type
        )

    def filter(self, predicate: Any) -> DataStream:
        """Keep the elements for which `predicate` holds: a Python function, or a Spark Column / SQL condition."""
        if isinstance(predicate, str) or type(predicate).__name__ == "Column":
            return self._then(g.ExprNode, kind="where", columns=(predicate,))
        return self._then(g.MapNode, kind="filter", function=_method(predicate, "filter"))

    def select(self, *columns: Any) -> DataStream:
        """Exactly these Spark Columns / SQL expressions (JVM side; the fastest way to reshape elements)."""
        if not columns:
            raise GraphError("select needs at least one column")
        return self._then(g.ExprNode, kind="select", columns=tuple(columns))

    def with_columns(self, **columns: Any) -> DataStream:
        """Add or replace fields computed by Spark Columns / SQL expressions: `with_columns(total="a * b")`."""
        if not columns:
            raise GraphError("with_columns needs at least one column")
        return self._then(
            g.ExprNode, kind="with_columns", columns=tuple(columns.values()), names=tuple(columns)
        )

    def assign_timestamps_and_watermarks(self, strategy: WatermarkStrategy) -> DataStream:
        """Event time and watermarks from here on (see `watermarks`)."""
        if not isinstance(strategy, WatermarkStrategy):
            raise GraphError("assign_timestamps_and_watermarks takes a WatermarkStrategy")
        return self._then(g.WatermarkNode, strategy=strategy)

    def union(self, *others: DataStream) -> DataStream:
        """All elements of this stream and `others` (same element type)."""
        if not others:
            return self
        node = self.env.add(g.UnionNode, (self.node, *(o.node for o in others)))
        return DataStream(self.env, node)

    # -- keys and joins ------------------------------------------------------------------------------------------
    def key_by(
        self, key: str | Iterable[str] | Callable[[dict[str, Any]], Any], key_type: str = "string"
    ) -> KeyedStream:
        """Partition by key: field name(s), or a function `element -> key` of Spark type `key_type`."""
        if callable(key) and not isinstance(key, str):
            node = self.env.add(g.KeyByNode, (self.node,), selector=key, key_type=key_type)
        else:
            node = self.env.add(g.KeyByNode, (self.node,), fields=_fields(key))
        return KeyedStream(self.env, node)

    def join(self, other: DataStream, how: str = "inner") -> JoinBuilder:
        """A windowed join with `other`: `.where(key).equal_to(key).window(assigner).apply(...)`.

        `how`: inner, left, right, full (outer rows when the window closes), semi (left elements with a match),
        anti (left elements without one).
        """
        if how not in g.JOIN_KINDS:
            raise GraphError(f"join kind {how!r}: expected one of {', '.join(g.JOIN_KINDS)}")
        return JoinBuilder(self, other, how)

    def join_table(
        self,
        table: str,
        key: str | Callable[[dict[str, Any]], Any],
        how: str = "left",
        prefix: str = "",
    ) -> DataStream:
        """Enrich each element with the global table row whose key equals `key` (a field, or a function).

        `table` names a table connector of the job (a compacted topic). The table is read as of the offsets
        recorded for each epoch: a replayed epoch sees the same rows. `how`: left (keep unmatched elements with
        null table fields) or inner (drop them).
        """
        if how not in ("left", "inner"):
            raise GraphError("join_table: how is left or inner")
        attrs: dict[str, Any] = {"table": table, "how": how, "prefix": prefix}
        if callable(key) and not isinstance(key, str):
            attrs["selector"] = key
        else:
            attrs["key"] = _fields(key)[0]
        return self._then(g.LookupJoinNode, **attrs)

    def broadcast(self, *descriptors: MapStateDescriptor) -> BroadcastStream:
        """Broadcast this stream (Flink's `broadcast(descriptor)`): connected to another stream
        (`events.key_by(k).connect(rules.broadcast(d))`), every element of it reaches every parallel instance, and
        `process_broadcast_element` keeps the broadcast state `descriptors` name (maps, the same everywhere).

        Raises:
            GraphError: no descriptor, a descriptor that is not a `MapStateDescriptor`, or a name twice.
        """
        if not descriptors:
            raise GraphError("broadcast needs at least one MapStateDescriptor (the broadcast state)")
        for descriptor in descriptors:
            if not isinstance(descriptor, MapStateDescriptor):
                raise GraphError(f"broadcast state is described by MapStateDescriptors, got {descriptor!r}")
        names = [d.name for d in descriptors]
        if len(set(names)) != len(names):
            raise GraphError(f"broadcast state names repeat: {', '.join(names)}")
        node = self.env.add(g.BroadcastNode, (self.node,), descriptors=tuple(descriptors))
        return BroadcastStream(self.env, node)

    @overload
    def connect(self, other: BroadcastStream) -> BroadcastConnectedStream: ...

    @overload
    def connect(self, other: DataStream) -> ConnectedStreams: ...

    def connect(self, other: DataStream | BroadcastStream) -> ConnectedStreams | BroadcastConnectedStream:
        """Connect with `other` (Flink's `connect`): two streams, possibly of different types, processed by one
        function with a method per input — `map`/`flat_map` with a `CoMapFunction`/`CoFlatMapFunction`, or, when
        both are keyed alike, `process` with a `KeyedCoProcessFunction` whose state and timers both inputs share
        (with neither keyed, a `CoProcessFunction`).
        With a `BroadcastStream` (`rules.broadcast(descriptor)`): `process` with a `KeyedBroadcastProcessFunction`
        (this stream keyed) or a `BroadcastProcessFunction`.

        Raises:
            GraphError: `other` is not a stream of the same job.
        """
        if isinstance(other, BroadcastStream):
            if other.env is not self.env:
                raise GraphError("connect: both streams must belong to the same job (environment)")
            return BroadcastConnectedStream(self, other)
        if not isinstance(other, DataStream):
            raise GraphError(f"connect takes another stream, got {other!r}")
        if other.env is not self.env:
            raise GraphError("connect: both streams must belong to the same job (environment)")
        return ConnectedStreams(self, other)

    # -- outputs -------------------------------------------------------------------------------------------------
    def get_side_output(self, tag: OutputTag) -> DataStream:
        """The elements this stream's operator emitted to `tag` (late data of a window, `ctx.output` of a process
        function)."""
        return self._then(g.SideOutputNode, tag=tag)

    def sink_to(self, sink: str) -> None:
        """Write this stream to the job's sink connector named `sink`."""
        self.env.add_sink(self.node, sink)

    add_sink = sink_to


class KeyedStream(DataStream):
    """A stream partitioned by key: keyed state, windows, rolling aggregates and process functions."""

    def _keyed(self, cls: type[g.Node], **attrs: Any) -> DataStream:
        return DataStream(self.env, self.env.add(cls, (self.node,), **attrs))

    def window(self, assigner: WindowAssigner) -> WindowedStream:
        """Window the stream (tumbling, sliding, session, global; see `windows`)."""
        if not isinstance(assigner, WindowAssigner):
            raise GraphError("window takes a WindowAssigner (e.g. TumblingEventTimeWindows.of(...))")
        return WindowedStream(self, assigner)

    def count_window(self, size: int, slide: int | None = None) -> WindowedStream:
        """Count windows of `size` records (sliding by `slide` records when given)."""
        return WindowedStream(self, CountWindows(size, slide))

    def reduce(self, function: Any, output_type: str | None = None) -> DataStream:
        """Running reduce per key: one output element per input element."""
        return self._keyed(
            g.RollingNode, kind="reduce", function=_method(function, "reduce"), output_type=output_type
        )

    def aggregate(self, function: Any, output_type: str | None = None) -> DataStream:
        """Running `AggregateFunction` per key: one output (the key fields and the result) per input element."""
        return self._keyed(g.RollingNode, kind="aggregate", function=function, output_type=output_type)

    def sum(self, field_name: str) -> DataStream:
        """Running sum of `field_name` per key (the element with the field replaced by the sum)."""
        return self._keyed(g.RollingNode, kind="sum", field_name=field_name)

    def min(self, field_name: str) -> DataStream:
        """Running minimum of `field_name` per key."""
        return self._keyed(g.RollingNode, kind="min", field_name=field_name)

    def max(self, field_name: str) -> DataStream:
        """Running maximum of `field_name` per key."""
        return self._keyed(g.RollingNode, kind="max", field_name=field_name)

    def process(
        self,
        function: Any,
        output_type: str | None = None,
        side_outputs: Iterable[OutputTag] = (),
        time_mode: str = "auto",
    ) -> DataStream:
        """Run a `KeyedProcessFunction` (state, timers, side outputs).

        Args:
            output_type: Spark DDL of the main output (default: the input's type).
            side_outputs: Every tag the function emits to (read them with `get_side_output`).
            time_mode: `event`, `processing` or `auto` (see `graph.ProcessNode`).
        """
        if time_mode not in ("auto", "event", "processing"):
            raise GraphError("time_mode is auto, event or processing")
        tags = _typed_tags(side_outputs)
        return self._keyed(
            g.ProcessNode, function=function, output_type=output_type, side_outputs=tags, time_mode=time_mode
        )

    def interval_join(self, other: KeyedStream) -> IntervalJoinBuilder:
        """Join with `other` (keyed the same way) on equal keys within a time interval: `.between(lower, upper)`."""
        if not isinstance(other, KeyedStream):
            raise GraphError("interval_join takes another keyed stream")
        return IntervalJoinBuilder(self, other)


class WindowedStream:
    """A keyed stream with a window assigner; ends with an aggregation that returns a `DataStream`."""

    def __init__(self, keyed: KeyedStream, assigner: WindowAssigner) -> None:
        self.keyed = keyed
        self.assigner = assigner
        self._trigger: Trigger | None = None
        self._lateness = Duration(0)
        self._late_tag: OutputTag | None = None
        if isinstance(assigner, CountWindows) and assigner.slide is None:
            self._trigger = PurgingTrigger(CountTrigger(assigner.size))

    def trigger(self, trigger: Trigger) -> WindowedStream:
        """When the window emits (default: event-time windows at their end; global windows need one)."""
        self._trigger = trigger
        return self

    def allowed_lateness(self, lateness: Duration | int) -> WindowedStream:
        """Keep windows `lateness` past their end; late records within it fire the window again."""
        self._lateness = as_duration(lateness)
        return self

    def side_output_late_data(self, tag: OutputTag) -> WindowedStream:
        """Send records that arrive after their window is gone to `tag` instead of dropping them."""
        self._late_tag = tag
        return self

    def _build(self, function: g.WindowFunction) -> DataStream:
        if isinstance(self.assigner, GlobalWindows) and self._trigger is None:
            raise GraphError(
                "a global window never fires without a trigger (e.g. .trigger(CountTrigger.of(100)))"
            )
        node = self.keyed.env.add(
            g.WindowNode,
            (self.keyed.node,),
            assigner=self.assigner,
            trigger=self._trigger,
            allowed_lateness=self._lateness,
            late_tag=self._late_tag,
            function=function,
        )
        return DataStream(self.keyed.env, node)

    def agg(self, *columns: Any) -> DataStream:
        """Spark aggregate expressions per window (`F.count("*").alias("n")`, `F.sum("amount")`): JVM-side."""
        if not columns:
            raise GraphError("agg needs at least one aggregate column")
        return self._build(g.WindowFunction("agg", columns=tuple(columns)))

    def count(self) -> DataStream:
        """The number of elements per window (field `count`)."""
        return self._build(g.WindowFunction("agg", columns=("count(1) AS count",)))

    def sum(self, field_name: str) -> DataStream:
        """The sum of `field_name` per window (field `sum`)."""
        return self._build(g.WindowFunction("agg", columns=(f"sum(`{field_name}`) AS sum",)))

    def aggregate(
        self, function: Any, window_function: Any = None, output_type: str | None = None
    ) -> DataStream:
        """Incremental `AggregateFunction` per window, optionally followed by a `ProcessWindowFunction` that gets
        the single result; `output_type` is the Spark DDL of the result fields."""
        return self._build(
            g.WindowFunction(
                "aggregate", function=function, window_function=window_function, output_type=output_type
            )
        )

    def reduce(self, function: Any, output_type: str | None = None) -> DataStream:
        """Reduce each window's elements to one (`function(a, b)`)."""
        return self._build(
            g.WindowFunction("reduce", function=_method(function, "reduce"), output_type=output_type)
        )

    def process(self, function: Any, output_type: str | None = None) -> DataStream:
        """Call a `ProcessWindowFunction` with all of a window's elements when it fires."""
        return self._build(g.WindowFunction("process", function=function, output_type=output_type))


class JoinBuilder:
    """`left.join(right, how).where(key).equal_to(key).window(assigner).apply(function=None, output_type=None)`."""

    def __init__(self, left: DataStream, right: DataStream, how: str) -> None:
        self.left, self.right, self.how = left, right, how
        self._left_key: tuple[str, ...] = ()
        self._right_key: tuple[str, ...] = ()
        self._window: WindowAssigner | None = None

    def where(self, key: str | Iterable[str]) -> JoinBuilder:
        """The left side's key field(s)."""
        self._left_key = _fields(key)
        return self

    def equal_to(self, key: str | Iterable[str]) -> JoinBuilder:
        """The right side's key field(s)."""
        self._right_key = _fields(key)
        return self

    def window(self, assigner: WindowAssigner) -> JoinBuilder:
        """The event-time window pairs must share."""
        if not assigner.event_time:
            raise GraphError("windowed joins need an event-time window assigner")
        self._window = assigner
        return self

    def apply(self, function: Any = None, output_type: str | None = None) -> DataStream:
        """Build the join; `function(left, right) -> element` (sides None for outer rows) or the default merge."""
        if not self._left_key or not self._right_key or self._window is None:
            raise GraphError("a windowed join needs where(...), equal_to(...) and window(...)")
        if len(self._left_key) != len(self._right_key):
            raise GraphError("where(...) and equal_to(...) name different numbers of fields")
        env = self.left.env
        node = env.add(
            g.JoinNode,
            (self.left.node, self.right.node),
            how=self.how,
            left_key=self._left_key,
            right_key=self._right_key,
            window=self._window,
            function=function,
            output_type=output_type,
        )
        return DataStream(env, node)


class IntervalJoinBuilder:
    """`a.interval_join(b).between(lower, upper).process(function=None, output_type=None)`."""

    def __init__(self, left: KeyedStream, right: KeyedStream) -> None:
        self.left, self.right = left, right
        self._bounds: tuple[int, int] | None = None
        self._inclusive = (True, True)

    def between(self, lower: Duration | int, upper: Duration | int) -> IntervalJoinBuilder:
        """Pairs where `left.ts + lower <= right.ts <= left.ts + upper` (lower may be negative: pass ms)."""
        lo = lower.millis if isinstance(lower, Duration) else int(lower)
        hi = upper.millis if isinstance(upper, Duration) else int(upper)
        if lo > hi:
            raise GraphError("interval join: lower bound after upper bound")
        self._bounds = (lo, hi)
        return self

    def lower_bound_exclusive(self) -> IntervalJoinBuilder:
        """Exclude the lower bound."""
        self._inclusive = (False, self._inclusive[1])
        return self

    def upper_bound_exclusive(self) -> IntervalJoinBuilder:
        """Exclude the upper bound."""
        self._inclusive = (self._inclusive[0], False)
        return self

    def process(self, function: Any = None, output_type: str | None = None) -> DataStream:
        """Build the join; `function(left, right) -> element` or the default merge."""
        if self._bounds is None:
            raise GraphError("an interval join needs between(lower, upper)")
        env = self.left.env
        node = env.add(
            g.JoinNode,
            (self.left.node, self.right.node),
            how="inner",
            lower=self._bounds[0],
            upper=self._bounds[1],
            lower_inclusive=self._inclusive[0],
            upper_inclusive=self._inclusive[1],
            function=function,
            output_type=output_type,
        )
        return DataStream(env, node)


class ConnectedStreams:
    """Two streams connected (`first.connect(second)`): one function handles both, with a method per input.

    `map`/`flat_map` are per element and keep no state (each input's elements go through its method; the outputs
    are merged). `process` with both inputs keyed alike (`a.key_by(k).connect(b.key_by(k))`) runs a
    `KeyedCoProcessFunction`, which sees, per key, both inputs' elements interleaved in the connected order — event
    time, then input (first before second), then source partition and offset — the same on every replay; with
    neither keyed, a `CoProcessFunction` (no state, no timers; the same order within each bucket of elements).
    """

    def __init__(self, first: DataStream, second: DataStream) -> None:
        self.first, self.second = first, second

    def key_by(
        self,
        key1: str | Iterable[str] | Callable[[dict[str, Any]], Any],
        key2: str | Iterable[str] | Callable[..., Any],
    ) -> ConnectedStreams:
        """Key both inputs (`key1` for the first, `key2` for the second; see `DataStream.key_by`)."""
        return ConnectedStreams(self.first.key_by(key1), self.second.key_by(key2))

    def map(self, function: Any, output_type: str | None = None) -> DataStream:
        """A `CoMapFunction`: `map1` per element of the first input, `map2` per element of the second; both give
        elements of `output_type` (Spark DDL; default: the inputs' type, which must then be the same)."""
        one = self.first.map(_method(function, "map1"), output_type)
        return one.union(self.second.map(_method(function, "map2"), output_type))

    def flat_map(self, function: Any, output_type: str | None = None) -> DataStream:
        """A `CoFlatMapFunction`: `flat_map1`/`flat_map2`, zero or more elements each (see `map`)."""
        one = self.first.flat_map(_method(function, "flat_map1"), output_type)
        return one.union(self.second.flat_map(_method(function, "flat_map2"), output_type))

    def process(
        self,
        function: Any,
        output_type: str | None = None,
        side_outputs: Iterable[OutputTag] = (),
        time_mode: str = "auto",
    ) -> DataStream:
        """Run a `KeyedCoProcessFunction` (shared keyed state, timers, side outputs) over both keyed inputs, or a
        `CoProcessFunction` (side outputs; no state, no timers) over two non-keyed inputs.

        Args:
            output_type: Spark DDL of the main output (default: the inputs' type, when both have the same).
            side_outputs: Every tag the function emits to (read them with `get_side_output`).
            time_mode: `event`, `processing` or `auto` (see `graph.ProcessNode`).

        Raises:
            GraphError: one input keyed and the other not, a bad time mode, or a side output without a type.
        """
        keyed = isinstance(self.first, KeyedStream), isinstance(self.second, KeyedStream)
        if keyed[0] != keyed[1]:
            raise GraphError(
                "process on connected streams needs both keyed (a.key_by(k).connect(b.key_by(k)), for a "
                "KeyedCoProcessFunction) or neither (a CoProcessFunction)"
            )
        for method in ("process_element1", "process_element2"):
            if not callable(getattr(function, method, None)):
                raise GraphError(
                    "process on connected streams takes a KeyedCoProcessFunction or a CoProcessFunction "
                    "(an object with process_element1 and process_element2)"
                )
        if time_mode not in ("auto", "event", "processing"):
            raise GraphError("time_mode is auto, event or processing")
        tags = _typed_tags(side_outputs)
        env = self.first.env
        node = env.add(
            g.CoProcessNode,
            (self.first.node, self.second.node),
            function=function,
            output_type=output_type,
            side_outputs=tags,
            time_mode=time_mode,
            keyed=keyed[0],
        )
        return DataStream(env, node)


class BroadcastStream:
    """A stream broadcast with its broadcast state (`stream.broadcast(descriptor)`): connect a stream to it."""

    def __init__(self, env: GraphOwner, node: g.BroadcastNode) -> None:
        self.env = env
        self.node = node


class BroadcastConnectedStream:
    """A stream connected with a broadcast stream: `process` it with a `KeyedBroadcastProcessFunction` (the stream
    keyed) or a `BroadcastProcessFunction`.

    Order: per epoch, each parallel instance meets the broadcast input's elements and its share of the other
    input's in the connected order (event time, then the non-broadcast input first, then partition and offset), so
    the broadcast state an element reads is a function of the offsets — the same on every instance and replay.
    """

    def __init__(self, stream: DataStream, broadcast: BroadcastStream) -> None:
        self.stream, self.broadcast = stream, broadcast

    def process(
        self,
        function: Any,
        output_type: str | None = None,
        side_outputs: Iterable[OutputTag] = (),
        time_mode: str = "auto",
    ) -> DataStream:
        """Run the function (see the class docstring).

        Args:
            output_type: Spark DDL of the main output (default: the non-broadcast input's type).
            side_outputs: Every tag the function emits to (read them with `get_side_output`).
            time_mode: `event`, `processing` or `auto`, for the timers of a keyed function that defines
                `on_timer` (see `KeyedStream.process`).

        Raises:
            GraphError: the function lacks `process_element`/`process_broadcast_element`, a bad time mode, or a
                side output has no type.
        """
        if time_mode not in ("auto", "event", "processing"):
            raise GraphError("time_mode is auto, event or processing")
        for method in ("process_element", "process_broadcast_element"):
            if not callable(getattr(function, method, None)):
                raise GraphError(
                    "process on a broadcast-connected stream takes a KeyedBroadcastProcessFunction or a "
                    f"BroadcastProcessFunction (no {method})"
                )
        tags = _typed_tags(side_outputs)
        env = self.stream.env
        node = env.add(
            g.BroadcastProcessNode,
            (self.stream.node, self.broadcast.node),
            function=function,
            output_type=output_type,
            side_outputs=tags,
            keyed=isinstance(self.stream, KeyedStream),
            time_mode=time_mode,
        )
        return DataStream(env, node)
