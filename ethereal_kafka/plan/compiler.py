"""Compile a job graph into Spark streaming queries.

1. **Group sinks into queries** (`plan.queries`): sinks whose streams share a stateful operator must be written by
   one query (one checkpoint, one transaction per task), e.g. a window's results and its late records; other
   sinks get their own query (stateless work before a split is simply computed per query).
2. **Compile nodes** bottom-up: each node type has a compiler (registered by the operator modules: `stateless`,
   `windows`, `keyed`, `joins`, `lookup`) that turns its inputs' `Stream`s into its own, choosing Spark-native
   operators where their semantics match and the framework's stateful processors where they do not.
3. **Bind sinks** (`plan.outputs`): project each query's rows onto its sinks' key/value columns (one query writing
   several sinks tags each row with its sink).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from ethereal_kafka.api import graph as g
from ethereal_kafka.api.errors import GraphError
from ethereal_kafka.config.connectors import KafkaSinkConfig, KafkaSourceConfig
from ethereal_kafka.plan.stream import Stream

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from ethereal_kafka.config.job import JobConfig

N = TypeVar("N", bound=g.Node)
NodeCompiler = Callable[["CompileContext", N, list[Stream]], Stream]

_REGISTRY: dict[type[g.Node], NodeCompiler] = {}

#: Modules whose import registers node compilers (a missing one leaves its node types unsupported).
OPERATOR_MODULES = ("stateless", "windows", "keyed", "joins", "lookup")


def register(node_type: type[N]) -> Callable[[NodeCompiler[N]], NodeCompiler[N]]:
    """Decorator: `@register(MapNode) def compile_map(ctx, node, inputs) -> Stream`."""

    def decorate(function: NodeCompiler[N]) -> NodeCompiler[N]:
        _REGISTRY[node_type] = function
        return function

    return decorate


def _load_operator_modules() -> None:
    for name in OPERATOR_MODULES:
        try:
            importlib.import_module(f"ethereal_kafka.plan.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"ethereal_kafka.plan.{name}":
                raise


@dataclass
class CompileContext:
    """State of compiling one query.

    Attributes:
        spark: The session (DataFrames are built, nothing runs).
        job: The job's settings (state backend, output mode, ...).
        sources: The source connectors as this query reads them.
        sinks: The job's sink connectors.
        tables: The job's table connectors (lookup joins), by name.
        query: The query's name.
    """

    spark: SparkSession
    job: JobConfig | None
    sources: dict[str, KafkaSourceConfig]
    sinks: dict[str, KafkaSinkConfig]
    tables: dict[str, object] = field(default_factory=dict)
    query: str = ""
    _memo: dict[int, Stream] = field(default_factory=dict)

    def compile(self, node: g.Node) -> Stream:
        """The compiled stream of `node` (each node compiled once per query).

        Raises:
            GraphError: the node (or an input) cannot be compiled.
        """
        found = self._memo.get(node.id)
        if found is not None:
            return found
        compiler = _REGISTRY.get(type(node))
        if compiler is None:
            raise GraphError(f"{node.label}: this operator is not supported yet")
        inputs = [self.compile(parent) for parent in node.inputs]
        if not isinstance(node, g.SideOutputNode):
            from ethereal_kafka.plan.outputs import main_output

            inputs = [main_output(s) if s.tags else s for s in inputs]
        stream = compiler(self, node, inputs)
        if self.job is not None and self.job.state_backend != "rocksdb":
            _refuse_framework_operator(node, stream, self.job.state_backend)
        self._memo[node.id] = stream
        return stream


def _refuse_framework_operator(node: g.Node, stream: Stream, backend: str) -> None:
    """Raise when `node` compiled to the framework's stateful operator (Spark's transformWithState, which runs only
    on the RocksDB state store). Inputs compile first, so the first node whose plan holds one is the culprit."""
    plan = str(stream.frame._jdf.queryExecution().logical().toString())
    if "TransformWithState" in plan:
        raise GraphError(
            f"{node.label} runs on the framework's stateful operator (Spark's transformWithState), which needs "
            f"state.backend=rocksdb, but the job sets state.backend={backend}; only Spark-native operators "
            "(windows with Spark aggregate expressions, joins) run on the in-memory state store"
        )


@dataclass(frozen=True)
class CompiledQuery:
    """One query ready for the runner.

    Attributes:
        name: Fixed for the job's life (names checkpoint folder and transactional ids).
        frame: The DataFrame the query writes (sink key/value columns, `__sink` with several sinks).
        sinks: The sink connectors with `key.column`/`value.column` set to this query's columns.
        sources: The source connectors as the query reads them.
        output_mode, mode, stateful: See `runtime.pipeline.QueryBuild`.
        spark_conf: Session settings the query must start with (fixed in its checkpoint from the first start), e.g.
            `spark.sql.streaming.multipleWatermarkPolicy=max` when an input declares `with_idleness`.
        late_sinks: The sinks fed by a window's late-data side output (metrics count their records as late).
    """

    name: str
    frame: DataFrame
    sinks: tuple[KafkaSinkConfig, ...]
    sources: tuple[KafkaSourceConfig, ...]
    output_mode: str
    mode: str
    stateful: bool
    spark_conf: Mapping[str, str] = field(default_factory=dict)
    late_sinks: tuple[str, ...] = ()


def compile_graph(
    spark: SparkSession, graph: g.JobGraph, job: JobConfig | None, connectors: ConnectorSet
) -> list[CompiledQuery]:
    """Compile `graph` into queries (see the module docstring).

    Raises:
        GraphError: the graph uses a combination the engine cannot run (the message names the operator).
    """
    from ethereal_kafka.plan.classify import classify
    from ethereal_kafka.plan.lookup import pin_lookup_tables
    from ethereal_kafka.plan.outputs import bind_sinks
    from ethereal_kafka.plan.queries import plan_queries
    from ethereal_kafka.plan.windows import watermark_settings

    _load_operator_modules()
    compiled = []
    for planned in plan_queries(graph, connectors.sources):
        plan = pin_lookup_tables(planned, graph, dict(connectors.tables))
        ctx = CompileContext(
            spark, job, plan.sources, dict(connectors.sinks), dict(connectors.tables), plan.name
        )
        frame, sinks = bind_sinks(ctx, plan)
        shape = classify(frame)
        compiled.append(
            CompiledQuery(
                plan.name,
                frame,
                sinks,
                tuple(plan.sources.values()),
                "append",
                shape.mode,
                shape.stateful,
                watermark_settings(plan.sinks),
                tuple(s.sink for s in plan.sinks if reads_late_data(s)),
            )
        )
    return compiled


def reads_late_data(sink: g.SinkNode) -> bool:
    """True when `sink`'s stream is a window's late-data side output (possibly through per-element functions)."""
    node = sink.inputs[0]
    while isinstance(node, g.MapNode):
        node = node.inputs[0]
    if not isinstance(node, g.SideOutputNode) or node.tag is None:
        return False
    source = node.inputs[0]
    return (
        isinstance(source, g.WindowNode)
        and source.late_tag is not None
        and source.late_tag.name == node.tag.name
    )


@dataclass(frozen=True)
class ConnectorSet:
    """The connectors a graph refers to by name."""

    sources: dict[str, KafkaSourceConfig]
    sinks: dict[str, KafkaSinkConfig]
    tables: dict[str, object] = field(default_factory=dict)
