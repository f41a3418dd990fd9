"""Turn a job's `pipeline=module:function` into the streaming queries the runner starts.

Two styles of pipeline function are accepted:

- **DataStream API** — `function(env)`, whose one parameter is named `env`: it builds a job graph on the given
  `StreamExecutionEnvironment` (`env.from_source(name)`, ..., `stream.sink_to(name)`); the plan layer compiles the
  graph into queries (a query may write several sinks in one transaction, e.g. a window's results and its late
  records).
- **DataFrame** — `function(sources)`, called with `{source name: streaming DataFrame}`, returning one DataFrame (for
  the only sink) or `{sink name: DataFrame}`: one query per sink, named after it.

A job without a pipeline function declares `transform.sql` instead; `runtime.transform` makes it a DataFrame
pipeline over views named after the sources.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ethereal_kafka.config.connectors import KafkaSourceConfig
from ethereal_kafka.config.job import LoadedJob
from ethereal_kafka.errors import ConfigError
from ethereal_kafka.plan.classify import classify, output_mode, sources_read
from ethereal_kafka.plan.query import Query
from ethereal_kafka.runtime.transform import dataframe_pipeline

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from ethereal_kafka.api.environment import StreamExecutionEnvironment
    from ethereal_kafka.plan.user_errors import UserErrors


def is_graph_pipeline(function: Any) -> bool:
    """True when `function` is a DataStream API pipeline: exactly one parameter, named `env`."""
    try:
        params = list(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return False
    return params == ["env"]


def source_frame(spark: SparkSession, config: KafkaSourceConfig) -> DataFrame:
    """The streaming DataFrame of one Kafka source connector."""
    return spark.readStream.format("ethereal-kafka").options(**config.to_properties()).load()


@dataclass(frozen=True)
class BuiltPipeline:
    """A pipeline's queries, the DataFrame each writes (by query name), and its description for people
    (`plan.describe`: which operator runs where)."""

    queries: list[Query]
    frames: Mapping[str, DataFrame]
    plan: dict[str, Any]


def user_errors(loaded: LoadedJob) -> UserErrors | None:
    """The job's `on.user.error` for the compiler: None for `fail`; with `dlq`, dead letters commit with their
    epoch under exactly-once (`eos.dead_letters.EpochHandoff`) and are produced at once otherwise
    (`ProduceNow`, on the sinks' cluster, which `load_job` checked is the sources' too)."""
    from ethereal_kafka.config.job import Guarantee
    from ethereal_kafka.connectors.kafka.dead_letters import ProduceNow
    from ethereal_kafka.eos.dead_letters import EpochHandoff
    from ethereal_kafka.plan.user_errors import UserErrors

    job = loaded.job
    if job.on_user_error == "fail":
        return None
    if job.on_user_error != "dlq":
        return UserErrors(job.on_user_error)
    sink = next(iter(loaded.sinks.values()))
    handoff: Any = (
        EpochHandoff()
        if job.delivery_guarantee == Guarantee.EXACTLY_ONCE
        else ProduceNow(sink.bootstrap_servers, dict(sink.passthrough))
    )
    return UserErrors("dlq", job.user_error_dlq_topic, handoff)


def build_queries(
    spark: SparkSession,
    loaded: LoadedJob,
    sources: Mapping[str, KafkaSourceConfig],
    graph_builder: Callable[[StreamExecutionEnvironment], None] | None = None,
) -> list[Query]:
    """The queries of `build_pipeline` (same arguments, same errors)."""
    return build_pipeline(spark, loaded, sources, graph_builder).queries


def build_pipeline(
    spark: SparkSession,
    loaded: LoadedJob,
    sources: Mapping[str, KafkaSourceConfig],
    graph_builder: Callable[[StreamExecutionEnvironment], None] | None = None,
) -> BuiltPipeline:
    """Call the job's pipeline function (or `graph_builder`, which builds a DataStream graph on the environment it
    is given: `env.execute()` uses it) and return its queries with their description.

    Raises:
        ConfigError: the pipeline cannot be imported, returns something other than DataFrames, or its outputs do
            not match the job's sinks.
    """
    from ethereal_kafka.plan.describe import describe_dataframe, describe_graph, with_query_shapes

    guarantee = loaded.job.delivery_guarantee
    function: Any = graph_builder or dataframe_pipeline(spark, loaded)
    if graph_builder is not None or is_graph_pipeline(function):
        from ethereal_kafka.api.environment import StreamExecutionEnvironment
        from ethereal_kafka.plan.compiler import ConnectorSet, compile_graph
        from ethereal_kafka.plan.sink_groups import group_sinks

        env = StreamExecutionEnvironment.for_job(loaded, sources=sources)
        function(env)
        graph = env.graph()
        compiled = compile_graph(
            spark,
            graph,
            loaded.job,
            ConnectorSet(dict(sources), dict(loaded.sinks), dict(loaded.tables)),
            user_errors(loaded),
        )
        builds = [query for query, _ in compiled]
        plan = describe_graph(
            graph, group_sinks(graph, dict(sources)), sources, loaded.sinks, guarantee, loaded.tables
        )
        frames = {query.name: frame for query, frame in compiled}
        return BuiltPipeline(builds, frames, with_query_shapes(plan, _shapes(builds)))
    pairs = _dataframe_queries(spark, loaded, sources, function)
    builds = [query for query, _ in pairs]
    what = loaded.job.pipeline or "transform.sql"
    plan = describe_dataframe(
        [(b.name, [s.name for s in b.sinks], [s.name for s in b.sources]) for b in builds],
        sources,
        loaded.sinks,
        guarantee,
        what,
    )
    frames = {query.name: frame for query, frame in pairs}
    return BuiltPipeline(builds, frames, with_query_shapes(plan, _shapes(builds)))


def _dataframe_queries(
    spark: SparkSession, loaded: LoadedJob, sources: Mapping[str, KafkaSourceConfig], function: Any
) -> list[tuple[Query, DataFrame]]:
    """One query per sink of a DataFrame pipeline, each with the sources it reads as it reads them.

    As for DataStream pipelines, a source read by several queries is read by each with its own consumer group
    (`<group>.<query>`): their committed offsets and epoch markers would otherwise overwrite each other, and a
    replayed epoch could find another query's marker and write its output again. The pipeline function is then
    called once per query, with that query's frames, and only its output for that query is kept.

    Raises:
        ConfigError: the function returns something other than DataFrames, or its outputs do not match the sinks.
    """
    outputs = _outputs(loaded, function({name: source_frame(spark, conf) for name, conf in sources.items()}))
    reads = {name: sorted(sources_read(frame) & set(sources)) for name, frame in outputs.items()}
    readers: dict[str, int] = {}
    for names in reads.values():
        for source in names:
            readers[source] = readers.get(source, 0) + 1
    builds: list[tuple[Query, DataFrame]] = []
    for name, frame in outputs.items():
        own = {
            source: dataclasses.replace(conf, group_id=f"{conf.group}.{name}")
            if readers.get(source, 0) > 1
            else conf
            for source, conf in sources.items()
        }
        if own != dict(sources):
            frame = _outputs(loaded, function({s: source_frame(spark, c) for s, c in own.items()}))[name]
        layout, stateful, watermarked = classify(frame)
        query = Query(
            name,
            (loaded.sinks[name],),
            tuple(own[s] for s in reads[name]),
            layout,
            stateful,
            output_mode(stateful, watermarked, loaded.job.output_mode),
        )
        builds.append((query, frame))
    return builds


def _outputs(loaded: LoadedJob, outputs: Any) -> dict[str, DataFrame]:
    """A DataFrame pipeline's outputs per sink name (one DataFrame is the only sink's).

    Raises:
        ConfigError: one DataFrame for several sinks, or outputs that do not match the job's sinks.
    """
    if not isinstance(outputs, Mapping):
        if len(loaded.sinks) != 1:
            raise ConfigError(
                f"pipeline {loaded.job.pipeline} returned one DataFrame but the job has several sinks"
            )
        outputs = {next(iter(loaded.sinks)): outputs}
    missing = sorted(set(loaded.sinks) - set(outputs))
    extra = sorted(set(outputs) - set(loaded.sinks))
    if missing or extra:
        raise ConfigError(
            f"pipeline outputs {sorted(outputs)} do not match the job's sinks {sorted(loaded.sinks)}"
        )
    return dict(outputs)


def _shapes(builds: list[Query]) -> dict[str, dict[str, Any]]:
    return {b.name: {"mode": b.layout, "stateful": b.stateful, "output_mode": b.output_mode} for b in builds}
