"""What compiling one query shares: `CompileContext` (the session, connectors and the nodes compiled so far) and
the registry of node compilers.

The operator modules (`stateless`, `windows`, `keyed`, `joins`, `lookup`) register a compiler per node type with
`@register(NodeType)`; `CompileContext.compile` looks it up. The operator modules import this module, never
`plan.compiler`, which imports them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from ethereal_kafka.api import graph as g
from ethereal_kafka.api.errors import GraphError
from ethereal_kafka.config.connectors import KafkaSinkConfig, KafkaSourceConfig
from ethereal_kafka.plan.operators.keyed_state import USER_PREFIX
from ethereal_kafka.plan.state_inventory import declared_state
from ethereal_kafka.plan.stream import Stream, main_output

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from ethereal_kafka.config.job import JobConfig
    from ethereal_kafka.plan.user_errors import OperatorErrors, UserErrors

N = TypeVar("N", bound=g.Node)
NodeCompiler = Callable[["CompileContext", N, list[Stream]], Stream]

_REGISTRY: dict[type[g.Node], NodeCompiler] = {}


def register(node_type: type[N]) -> Callable[[NodeCompiler[N]], NodeCompiler[N]]:
    """Decorator: `@register(MapNode) def compile_map(ctx, node, inputs) -> Stream`."""

    def decorate(function: NodeCompiler[N]) -> NodeCompiler[N]:
        _REGISTRY[node_type] = function
        return function

    return decorate


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
        user_errors: The job's `on.user.error` (None: every user-code error fails the epoch).
        carried: `(node id, carry key, bound ms)` of the watermark nodes that carry event time across restarts
            (`plan.event_time`).
        checkpoint: The query's Spark checkpoint folder (None without a job).
        initial_states: Per operator uid, the folder of its state in the savepoint the job restores from
            (`checkpoint.savepoints`); `initial_state` records in `restored` each uid it handed out.
    """

    spark: SparkSession
    job: JobConfig | None
    sources: dict[str, KafkaSourceConfig]
    sinks: dict[str, KafkaSinkConfig]
    tables: dict[str, object] = field(default_factory=dict)
    query: str = ""
    user_errors: UserErrors | None = None
    carried: tuple[tuple[int, str, int], ...] = ()
    checkpoint: str | None = None
    initial_states: Mapping[str, str] = field(default_factory=dict)
    restored: set[str] = field(default_factory=set)
    _memo: dict[int, Stream] = field(default_factory=dict)

    def initial_state(self, node: g.Node) -> DataFrame | None:
        """The state operator `node` restores from a savepoint (the rows of its table), or None."""
        folder = self.initial_states.get(node.ref.uid)
        if folder is None:
            return None
        self.restored.add(node.ref.uid)
        frame = self.spark.read.parquet(folder)
        process = isinstance(node, g.ProcessNode | g.CoProcessNode)
        declared = declared_state(node.function) if process else None  # type: ignore[attr-defined]
        if declared is None:
            return frame
        # The state of a variable this version no longer declares stays behind (the restore allowed it:
        # `runtime.savepoint.check_restore`).
        from pyspark.sql import functions as F

        user = F.col("var").startswith(USER_PREFIX)
        return frame.where(~user | F.col("var").isin(sorted(declared)))

    def carry_key(self, node_id: int) -> str | None:
        """The carry key of watermark node `node_id` when it carries event time across restarts, else None."""
        return {node: key for node, key, _ in self.carried}.get(node_id)

    def carrier(self, key: str, schema: StructType) -> DataFrame:
        """The event-time carrier source of the watermark whose carry key is `key` (`plan.event_time`), with its
        input's `schema`."""
        from ethereal_kafka.plan.event_time import carrier_frame

        assert self.checkpoint is not None
        return carrier_frame(self.spark, self.checkpoint, key, schema)

    def errors_for(
        self, node: g.Node, positioned: bool, placed_by: g.Node | None = None
    ) -> OperatorErrors | None:
        """`node`'s policy for user code that raises on an element (`plan.user_errors`); None when the job has no
        `on.user.error` settings (then every error fails the epoch). `positioned`: the operator's elements carry
        their source record's position; `placed_by`: the input whose source topic they come from (default: all
        of `node`'s inputs — a broadcast operator dead-letters only its non-broadcast input's elements)."""
        if self.user_errors is None:
            return None
        return self.user_errors.for_node(node, self.query, self.sources, positioned, placed_by)

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
            inputs = [main_output(s) if s.tags else s for s in inputs]
        stream = compiler(self, node, inputs)
        if self.job is not None and self.job.state_backend == "memory":
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
