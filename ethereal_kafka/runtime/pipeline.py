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
import logging
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


log = logging.getLogger(__name__)


def is_graph_pipeline(function: Any) -> bool:
    """True when `function` is a DataStream API pipeline: exactly one parameter, named `env`."""
    try:
        params = list(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return False
    return params == ["env"]


def source_frame(spark: SparkSession, config: KafkaSourceConfig, **options: str) -> DataFrame:
    """The streaming DataFrame of one Kafka source connector (`options`: the source's own, beside the
    connector's properties)."""
    return spark.readStream.format("ethereal-kafka").options(**config.to_properties(), **options).load()


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
    initial_states: Mapping[str, str] | None = None,
    restored: set[str] | None = None,
) -> BuiltPipeline:
    """Call the job's pipeline function (or `graph_builder`, which builds a DataStream graph on the environment it
    is given: `env.execute()` uses it) and return its queries with their description. `initial_states`: per
    operator uid, the state it restores from a savepoint; each uid an operator took goes into `restored`.

    Raises:
        ConfigError: the pipeline cannot be imported, returns something other than DataFrames, or its outputs do
            not match the job's sinks.
    """
    from ethereal_kafka.plan.describe import describe_dataframe, with_query_shapes

    guarantee = loaded.job.delivery_guarantee
    function: Any = graph_builder or dataframe_pipeline(spark, loaded)
    if graph_builder is not None or is_graph_pipeline(function):
        return _graph_pipeline(spark, loaded, sources, function, initial_states, restored)
    outputs = _outputs(loaded, function(_frames(spark, sources)))
    read = _reads(outputs, sources)
    pairs = _dataframe_queries(
        spark, loaded, sources, outputs, lambda own: _outputs(loaded, function(own)), read, _readers(read)
    )
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


def _graph_pipeline(
    spark: SparkSession,
    loaded: LoadedJob,
    sources: Mapping[str, KafkaSourceConfig],
    function: Any,
    initial_states: Mapping[str, str] | None = None,
    restored: set[str] | None = None,
) -> BuiltPipeline:
    """`build_pipeline` for a DataStream pipeline: its graph compiled into queries, and the queries of the
    DataFrame pipelines it added (`env.add_dataframe_pipeline`), each source read by several of them with a
    consumer group of its own."""
    from ethereal_kafka.api.environment import StreamExecutionEnvironment
    from ethereal_kafka.plan.compiler import ConnectorSet, compile_graph
    from ethereal_kafka.plan.describe import describe_dataframe, describe_graph, merged, with_query_shapes
    from ethereal_kafka.plan.sink_groups import group_sinks

    env = StreamExecutionEnvironment.for_job(loaded, sources=sources)
    function(env)
    graph = env.graph()
    written = {s.sink: "a stream (sink_to)" for s in graph.sinks}
    added: list[tuple[Any, dict[str, DataFrame]]] = []
    for fn in env.dataframe_pipelines:
        outputs = _added_outputs(loaded, fn, fn(_frames(spark, sources)), written)
        added.append((fn, outputs))
    reads = [_reads(outputs, sources) for _, outputs in added]
    also_read = _readers(*reads)  # per source, the added DataFrame queries that read it
    in_graph = {plan.name: sorted(plan.sources) for plan in group_sinks(graph, dict(sources))}
    readers = _readers(in_graph, *reads)  # per source, every query of the job that reads it
    compiled = compile_graph(
        spark,
        graph,
        loaded.job,
        ConnectorSet(dict(sources), dict(loaded.sinks), dict(loaded.tables)),
        user_errors(loaded),
        also_read,
        initial_states,
        restored,
    )
    guarantee = loaded.job.delivery_guarantee
    plan = describe_graph(
        graph, group_sinks(graph, dict(sources), also_read), sources, loaded.sinks, guarantee, loaded.tables
    )
    for (fn, outputs), read in zip(added, reads, strict=True):

        def rebuild(own: Mapping[str, DataFrame], fn: Any = fn) -> dict[str, DataFrame]:
            return _added_outputs(loaded, fn, fn(own), {})

        pairs = _dataframe_queries(spark, loaded, sources, outputs, rebuild, read, readers)
        compiled.extend(pairs)
        plan = merged(
            plan,
            describe_dataframe(
                [(q.name, [s.name for s in q.sinks], [s.name for s in q.sources]) for q, _ in pairs],
                sources,
                loaded.sinks,
                guarantee,
                _function_name(fn),
            ),
        )
    builds = [query for query, _ in compiled]
    frames = {query.name: _chained_frame(spark, query) or frame for query, frame in compiled}
    return BuiltPipeline(builds, frames, with_query_shapes(plan, _shapes(builds)))


def _chained_frame(spark: SparkSession, query: Query) -> DataFrame | None:
    """The streaming DataFrame of a chained query (`plan.chaining`): its source alone, whose read tasks run the
    chained function and write (`eos.chained`); None for a query that runs as its Spark plan."""
    from ethereal_kafka.eos.chained import CHAINED_OPTION

    if query.chain is None:
        return None
    (config,) = query.sources
    log.info(
        "query %s: chained in its source's read tasks (%s)",
        query.name,
        " -> ".join((config.name, *query.chain.labels, *(s.name for s in query.sinks))),
    )
    return source_frame(spark, config, **{CHAINED_OPTION: query.name})


def _frames(spark: SparkSession, sources: Mapping[str, KafkaSourceConfig]) -> dict[str, DataFrame]:
    return {name: source_frame(spark, conf) for name, conf in sources.items()}


def _reads(
    outputs: Mapping[str, DataFrame], sources: Mapping[str, KafkaSourceConfig]
) -> dict[str, list[str]]:
    """Per output (one query each), the job's sources its frame reads (one walk of its analyzed plan)."""
    return {name: sorted(sources_read(frame) & set(sources)) for name, frame in outputs.items()}


def _readers(*reads: Mapping[Any, list[str]]) -> dict[str, int]:
    """Per source, how many queries read it, given each query's sources (`_reads`)."""
    counts: dict[str, int] = {}
    for read in reads:
        for names in read.values():
            for source in names:
                counts[source] = counts.get(source, 0) + 1
    return counts


def _function_name(function: Any) -> str:
    module = getattr(function, "__module__", None)
    name = getattr(function, "__qualname__", None) or type(function).__qualname__
    return f"{module}:{name}" if module else str(name)


def _dataframe_queries(
    spark: SparkSession,
    loaded: LoadedJob,
    sources: Mapping[str, KafkaSourceConfig],
    outputs: Mapping[str, DataFrame],
    rebuild: Callable[[Mapping[str, DataFrame]], Mapping[str, DataFrame]],
    reads: Mapping[str, list[str]],
    readers: Mapping[str, int],
) -> list[tuple[Query, DataFrame]]:
    """One query per output (sink name -> DataFrame) of a DataFrame pipeline, each with the sources it reads as it
    reads them.

    As for DataStream pipelines, a source read by several queries (`readers`: per source, how many of the job's
    queries read it) is read by each with its own consumer group (`<group>.<query>`): their committed offsets and
    epoch markers would otherwise overwrite each other, and a replayed epoch could find another query's marker
    and write its output again. The pipeline is then called again (`rebuild`) per such query, with that query's
    frames, and only its output for that query is kept.

    Raises:
        ConfigError: the function returns something other than DataFrames, or its outputs do not match the sinks.
    """
    builds: list[tuple[Query, DataFrame]] = []
    for name, frame in outputs.items():
        own = {
            source: dataclasses.replace(conf, group_id=f"{conf.group}.{name}")
            if readers.get(source, 0) > 1
            else conf
            for source, conf in sources.items()
        }
        if own != dict(sources):
            frame = rebuild(_frames(spark, own))[name]
        layout, stateful, watermarked, store = classify(frame)
        query = Query(
            name,
            (loaded.sinks[name],),
            tuple(own[s] for s in reads[name]),
            layout,
            stateful,
            output_mode(stateful, watermarked, loaded.job.output_mode),
            state_store=store,
        )
        builds.append((query, frame))
    return builds


def _added_outputs(
    loaded: LoadedJob, function: Any, outputs: Any, written: dict[str, str]
) -> dict[str, DataFrame]:
    """The outputs of a DataFrame pipeline added to a DataStream job, checked: `{sink name: DataFrame}` naming sinks
    of the job that nothing else writes yet (`written`: sink -> what writes it; the new sinks are added to it).

    Raises:
        ConfigError: not a mapping of DataFrames, an unknown sink, or a sink already written.
    """
    from pyspark.sql import DataFrame as SparkFrame

    what = f"{loaded.path}: add_dataframe_pipeline({_function_name(function)})"
    if not isinstance(outputs, Mapping) or not all(isinstance(f, SparkFrame) for f in outputs.values()):
        raise ConfigError(f"{what} returned {type(outputs).__name__}, not {{sink name: DataFrame}}")
    for sink in outputs:
        if sink not in loaded.sinks:
            raise ConfigError(
                f"{what} writes sink {sink!r}, which the job does not have (sinks: {', '.join(loaded.sinks)})"
            )
        if sink in written:
            raise ConfigError(f"{what} writes sink {sink!r}, which {written[sink]} already writes")
    written.update(dict.fromkeys(outputs, f"add_dataframe_pipeline({_function_name(function)})"))
    return dict(outputs)


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
    return {
        b.name: {
            "mode": b.layout,
            "stateful": b.stateful,
            "output_mode": b.output_mode,
            "chained": b.chain is not None,
        }
        for b in builds
    }
