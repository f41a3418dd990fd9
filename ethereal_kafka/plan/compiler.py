"""Compile a job graph into Spark streaming queries.

1. **Group sinks into queries** (`plan.sink_groups`): sinks whose streams share a stateful operator must be written by
   one query (one checkpoint, one transaction per task), e.g. a window's results and its late records; other
   sinks get their own query (stateless work before a split is simply computed per query).
2. **Compile nodes** bottom-up (`plan.context`): each node type has a compiler (registered by the operator modules: `stateless`,
   `windows`, `keyed`, `joins`, `lookup`) that turns its inputs' `Stream`s into its own, choosing Spark-native
   operators where their semantics match and the framework's stateful processors where they do not.
3. **Bind sinks** (`plan.outputs`): project each query's rows onto its sinks' key/value columns (one query writing
   several sinks tags each row with its sink).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ethereal_kafka.api import graph as g
from ethereal_kafka.config.connectors import KafkaSinkConfig, KafkaSourceConfig

# The operator modules register their node compilers when imported (`plan.context.register`).
from ethereal_kafka.plan import broadcast, connected, joins, keyed, lookup, stateless, windows  # noqa: F401
from ethereal_kafka.plan.classify import classify
from ethereal_kafka.plan.context import CompileContext
from ethereal_kafka.plan.event_time import carried_watermarks
from ethereal_kafka.plan.lookup import pin_lookup_tables
from ethereal_kafka.plan.outputs import bind_sinks
from ethereal_kafka.plan.query import Layout, Query
from ethereal_kafka.plan.sink_groups import group_sinks
from ethereal_kafka.plan.windows import watermark_settings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from ethereal_kafka.config.job import JobConfig
    from ethereal_kafka.plan.user_errors import UserErrors


def compile_graph(
    spark: SparkSession,
    graph: g.JobGraph,
    job: JobConfig | None,
    connectors: ConnectorSet,
    user_errors: UserErrors | None = None,
    also_read: Mapping[str, int] | None = None,
    initial_states: Mapping[str, str] | None = None,
    restored: set[str] | None = None,
) -> list[tuple[Query, DataFrame]]:
    """Compile `graph` into queries, each with the DataFrame it writes (sink key/value columns, `__sink` with several
    sinks); see the module docstring. `user_errors`: the job's `on.user.error` (`plan.user_errors`; None: user-code
    errors fail the epoch). `also_read`: per source, the job's queries outside the graph that read it too
    (`plan.sink_groups.group_sinks`). `initial_states`: per operator uid, the folder of the state it restores from a
    savepoint; each uid an operator took is added to `restored`.

    Raises:
        GraphError: the graph uses a combination the engine cannot run (the message names the operator).
    """
    compiled = []
    for planned in group_sinks(graph, connectors.sources, also_read):
        plan = pin_lookup_tables(planned, graph, dict(connectors.tables))
        restoring = bool(initial_states)
        carried = (
            carried_watermarks(plan.sinks, restoring) if job is not None and job.checkpoint_location else ()
        )
        ctx = CompileContext(
            spark,
            job,
            plan.sources,
            dict(connectors.sinks),
            dict(connectors.tables),
            plan.name,
            user_errors,
            carried,
            job.query_checkpoint(plan.name) if carried and job is not None else None,
            dict(initial_states or {}),
            restored if restored is not None else set(),
        )
        frame, sinks, chain = bind_sinks(ctx, plan)
        layout, stateful, _, store = classify(frame)
        if not chains(job, layout):
            chain = None
        query = Query(
            plan.name,
            sinks,
            tuple(plan.sources.values()),
            layout,
            stateful,
            "append",
            watermark_settings(plan.sinks),
            tuple(s.sink for s in plan.sinks if reads_late_data(s)),
            carried,
            store,
            chain,
        )
        compiled.append((query, frame))
    return compiled


def chains(job: JobConfig | None, layout: Layout) -> bool:
    """True when a query of `layout` may run chained (`plan.chaining`): exactly-once (whose source read task
    writes, `eos.chained`), partition-preserving, and `pipeline.operator.chaining` on."""
    from ethereal_kafka.config.job import Guarantee

    return (
        job is not None
        and job.operator_chaining
        and job.delivery_guarantee == Guarantee.EXACTLY_ONCE
        and layout == Layout.PARTITION_PRESERVING
    )


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
