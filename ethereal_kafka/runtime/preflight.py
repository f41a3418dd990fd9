"""The checks a job passes before Spark starts: shared by `ethereal-kafka validate` and `ethereal-kafka run`.

Each check returns problems as lines, each naming the file it comes from:

- every connector's serde settings and schemas (`connectors.kafka.checks.check_connector`);
- every connector's `kafka.*` settings, judged by librdkafka (`check_client_settings`);
- the pipeline module and function exist (imported from the job's folder, `runtime.imports`);
- the source, sink and table names the pipeline refers to are the job's: the names written as string literals in
  the pipeline function (`from_source("x")`, `sink_to("x")`, `join_table("x", ...)`; a DataFrame pipeline's
  `sources["x"]` and `return {"x": frame}`), and the graph a DataStream pipeline builds when it can be built
  without Spark;
- under exactly-once, that every source's epochs (as the runner bounds them) can commit within
  `transaction.timeout.ms` (`runtime.source_bounds.bound_problems`);
- with `connect`, that the brokers answer and every source, sink, table and dead-letter topic exists.

`planned` goes one step further, for `validate` (unless `--no-plan`): it plans the job as `run` does
(`runtime.pipeline.build_pipeline`: the graph compiled into Spark queries, nothing started), on a SparkSession the
caller provides, so every refusal of the planner (an operator misuse, a missing `output_type`) and every exception
of the user's code while the graph is built is found before `run`.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import traceback
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ethereal_kafka.config.connectors import KafkaSinkConfig, KafkaSourceConfig, KafkaTableConfig
from ethereal_kafka.config.job import LoadedJob
from ethereal_kafka.connectors.kafka.checks import check_client_settings, check_connector, check_topics
from ethereal_kafka.errors import ConfigError, EtherealKafkaError
from ethereal_kafka.runtime.job import resolve_pipeline
from ethereal_kafka.runtime.pipeline import is_graph_pipeline
from ethereal_kafka.runtime.source_bounds import bound_problems

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Connector = KafkaSourceConfig | KafkaSinkConfig | KafkaTableConfig

#: DataStream calls whose first argument names a connector of the job, and the kind of connector it names.
_NAMING_CALLS = {"from_source": "source", "sink_to": "sink", "join_table": "table"}


def preflight(
    loaded: LoadedJob, connect: bool = False, timeout_s: float = 10.0, pipeline: bool = True
) -> list[str]:
    """Every problem the job has that can be found before Spark starts, one line each (empty: none).

    Called by `validate` (which prints every line) and by `runner.run` (`require_preflight`). Imports the pipeline
    module on the driver (from the job file's folder first) unless `pipeline` is False (a script-style run brings
    its own graph, `StreamExecutionEnvironment.execute`). With `connect`, contacts each cluster once, bounded by
    `timeout_s`. Never raises for a problem it finds.
    """
    problems: list[str] = []
    for file, config in connector_files(loaded).items():
        problems.extend(connector_problems(config, file))
    if not problems:  # the bounds are read from connectors that parsed
        problems.extend(bound_problems(loaded))
    if pipeline:
        problems.extend(pipeline_problems(loaded))
    if connect:
        problems.extend(topic_problems(connector_files(loaded), timeout_s, user_dlq(loaded)))
    return problems


def connector_files(loaded: LoadedJob) -> dict[Path, Connector]:
    """Every source, sink and table of the job, keyed by the file it came from."""
    connectors: dict[str, Connector] = {**loaded.sources, **loaded.sinks, **loaded.tables}
    return {loaded.file_of(name): config for name, config in connectors.items()}


def require_preflight(
    loaded: LoadedJob, pipeline: bool = True, connect: bool = False, timeout_s: float = 15.0
) -> None:
    """Raise on the first `preflight` problem (called by `runner.run` before Spark starts; `pipeline`: as for
    `preflight`). With `connect`, once the offline checks pass, each cluster is asked once (bounded by `timeout_s`)
    whether it answers and has every topic the job reads and writes: a missing topic or a wrong address is refused
    here, in seconds, instead of failing an epoch minutes after Spark started.

    Raises:
        ConfigError: one line: the first problem, and how many more `ethereal-kafka validate` would list.
    """
    problems = preflight(loaded, pipeline=pipeline)
    if not problems and connect:
        problems = topic_problems(connector_files(loaded), timeout_s, user_dlq(loaded))
    if problems:
        command = f"ethereal-kafka validate{' --connect' if connect else ''} {loaded.path}"
        more = f" (and {len(problems) - 1} more: {command})" if problems[1:] else ""
        raise ConfigError(problems[0] + more)


def connector_problems(config: Connector, file: str | Path) -> list[str]:
    """The offline problems of one connector file: its schemas and serde settings, its `kafka.*` settings."""
    problems = []
    try:
        check_connector(config)
    except ConfigError as exc:
        text = str(exc)
        problems.append(text if text.startswith(str(file)) else f"{file}: {text}")
    client = check_client_settings(config, file)
    if client is not None:
        problems.append(client)
    return problems


def user_dlq(loaded: LoadedJob) -> dict[Path, tuple[str, Connector]]:
    """`{job file: (user.error.dlq.topic, first sink)}` when the job dead-letters user-code errors
    (`on.user.error=dlq`): the topic is checked on the sinks' cluster (the sources' too, `load_job` checked)."""
    job = loaded.job
    if job.on_user_error != "dlq" or not job.user_error_dlq_topic or not loaded.sinks:
        return {}
    return {loaded.path: (job.user_error_dlq_topic, next(iter(loaded.sinks.values())))}


def topic_problems(
    connectors: dict[Path, Connector],
    timeout_s: float = 10.0,
    user_dlq: dict[Path, tuple[str, Connector]] | None = None,
) -> list[str]:
    """Per cluster, whether it answers and has the topics the connectors read and write (`check_topics`), and the
    job's `user.error.dlq.topic` (`user_dlq`: the job file and the connector whose cluster holds it).

    A source's `topic.pattern` is not checked (its topics may come later); a sink without `topic` writes each
    row's `topic` column, which cannot be known before it runs.
    """
    by_cluster: dict[str, dict[str, list[str]]] = defaultdict(dict)
    settings: dict[str, Any] = {}
    for file, config in connectors.items():
        topics = list(config.topics) if isinstance(config, KafkaSourceConfig) else []
        if isinstance(config, KafkaSourceConfig) and config.on_error == "dlq" and config.dlq_topic:
            topics.append(config.dlq_topic)
        if isinstance(config, KafkaSinkConfig | KafkaTableConfig) and config.topic:
            topics.append(config.topic)
        by_cluster[config.bootstrap_servers][str(file)] = topics
        settings.setdefault(config.bootstrap_servers, config.passthrough)
    for file, (topic, config) in (user_dlq or {}).items():
        by_cluster[config.bootstrap_servers][str(file)] = [topic]
        settings.setdefault(config.bootstrap_servers, config.passthrough)
    problems = []
    for bootstrap, topics_by_file in by_cluster.items():
        problems.extend(check_topics(bootstrap, topics_by_file, settings[bootstrap], timeout_s))
    return problems


def pipeline_problems(loaded: LoadedJob) -> list[str]:
    """The pipeline module and function exist, and the connector names it uses are the job's."""
    spec = loaded.job.pipeline
    if spec is None:
        return []
    try:
        function: Any = resolve_pipeline(spec, loaded.path)
    except ConfigError as exc:
        return [str(exc)]
    problems = literal_name_problems(loaded, function)
    if problems or not is_graph_pipeline(function):
        return problems
    return built_graph_problems(loaded, function)


def literal_name_problems(loaded: LoadedJob, function: Any) -> list[str]:
    """The connector names written as string literals in `function`'s body that the job does not define; each
    line names the module file and line, and the job file.

    A DataStream pipeline names them in calls (`from_source("x")`, `sink_to("x")`, `join_table("x", ...)`); a
    DataFrame pipeline `f(sources)` reads `sources["x"]` (or `sources.get("x")`) and returns `{"sink": frame}`.
    """
    try:
        lines, first = inspect.getsourcelines(function)
        file = inspect.getsourcefile(function) or "<unknown>"
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):
        return []  # no source to read (a builtin, a lambda in a string): the graph check still runs
    known = {"source": loaded.sources, "sink": loaded.sinks, "table": loaded.tables}
    graph = is_graph_pipeline(function)
    params = list(inspect.signature(function).parameters)
    frames = params[0] if params and not graph else None
    problems = []
    for node in ast.walk(tree):
        for kind, used, how in _named(node, frames) if not graph else _called(node):
            if used not in known[kind]:
                defined = ", ".join(known[kind]) or "none"
                line = first + getattr(node, "lineno", 1) - 1
                problems.append(
                    f"{file}:{line}: {how}: the job {loaded.path} has no {kind} named {used!r} ({kind}s: {defined})"
                )
    return problems


def _literal(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _called(node: ast.AST) -> list[tuple[str, str, str]]:
    """(kind, name, how) for a DataStream call naming a connector with a literal."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
        kind, name = _NAMING_CALLS.get(node.func.attr), _literal(node.args[0])
        if kind is not None and name is not None:
            return [(kind, name, f"{node.func.attr}({name!r})")]
    return []


def _named(node: ast.AST, frames: str | None) -> list[tuple[str, str, str]]:
    """(kind, name, how) for a DataFrame pipeline's `frames["x"]`, `frames.get("x")` and `return {"x": ...}`."""

    def is_frames(value: ast.AST) -> bool:
        return frames is not None and isinstance(value, ast.Name) and value.id == frames

    if isinstance(node, ast.Subscript) and is_frames(node.value) and (name := _literal(node.slice)):
        return [("source", name, f"{frames}[{name!r}]")]
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and is_frames(node.func.value)
        and node.args
        and (name := _literal(node.args[0]))
    ):
        return [("source", name, f"{frames}.get({name!r})")]
    if isinstance(node, ast.Return) and isinstance(node.value, ast.Dict):
        keys = [_literal(k) for k in node.value.keys]
        return [("sink", k, f"return {{{k!r}: ...}}") for k in keys if k is not None]
    return []


def built_graph_problems(loaded: LoadedJob, function: Any) -> list[str]:
    """Build `function`'s graph on a Spark-less environment; a framework error (an unknown connector name, a sink
    written twice) is a problem naming the module file. A pipeline that needs Spark to build (column expressions)
    stops early and is not judged here: its graph is checked when the job starts."""
    from ethereal_kafka.api.environment import StreamExecutionEnvironment

    file = inspect.getsourcefile(function) or loaded.path
    env = StreamExecutionEnvironment.for_job(loaded)
    try:
        function(env)
        env.graph()
    except EtherealKafkaError as exc:
        return [f"{file}: {exc} (job {loaded.path})"]
    except Exception as exc:
        if _needs_spark(exc):  # e.g. `F.col` without a SparkContext: judged when the job is planned
            return []
        return [raised_line(exc, loaded)]
    return []


def planned(loaded: LoadedJob, spark: SparkSession) -> tuple[list[str], dict[str, Any] | None]:
    """Plan the job on `spark` as `run` does (`build_pipeline`: the pipeline called, its graph compiled into
    queries; no query starts, no broker is contacted). Returns the planner's refusal as one line naming the
    pipeline's file, or what the user's code raised while building as one line naming its file and line (empty when
    the job plans), and the job's description (`plan.describe`) when it plans, else None.

    Called by `validate` once `preflight` found nothing. Never raises for a problem of the job.
    """
    import logging

    from ethereal_kafka.runtime.pipeline import build_pipeline

    # PySpark logs an analysis error (a JSON line with the JVM's stack) before raising it: the one line is ours.
    logging.getLogger("DataFrameQueryContextLogger").setLevel(logging.CRITICAL)
    try:
        pipeline = build_pipeline(spark, loaded, loaded.sources)
    except EtherealKafkaError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return [f"{_pipeline_file(loaded)}: {first} (job {loaded.path})"], None
    except Exception as exc:
        return [raised_line(exc, loaded)], None
    return [], pipeline.plan


def raised_line(exc: BaseException, loaded: LoadedJob) -> str:
    """`FILE:LINE: Type: message (building the pipeline of job JOB)` for an exception the user's code raised while
    the pipeline was built: FILE:LINE is the innermost frame outside Python's import machinery, PySpark and this
    package (for a module that fails to import, the line that fails in it)."""
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if not f.filename.startswith("<") and not _framework_file(f.filename)
    ]
    where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else str(_pipeline_file(loaded))
    lines = str(exc).strip().splitlines()  # Spark's analysis errors go on with the whole plan: its first line
    text = " ".join(lines[0].split()).removesuffix(";") if lines else "(no message)"
    return f"{where}: {type(exc).__name__}: {text} (building the pipeline of job {loaded.path})"


def _pipeline_file(loaded: LoadedJob) -> str:
    """The file of the job's pipeline function (the job file when it has none or it cannot be found)."""
    spec = loaded.job.pipeline
    if spec is None:
        return str(loaded.path)
    try:
        return inspect.getsourcefile(resolve_pipeline(spec, loaded.path)) or str(loaded.path)
    except (ConfigError, TypeError):
        return str(loaded.path)


def _framework_file(filename: str) -> bool:
    parts = Path(filename).parts
    return "pyspark" in parts or "py4j" in parts or "ethereal_kafka" in parts


def _needs_spark(exc: BaseException) -> bool:
    """True when `exc` was raised inside PySpark (a column expression built without a SparkContext)."""
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and "pyspark" in Path(frames[-1].filename).parts
