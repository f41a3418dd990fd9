"""The job file: which connectors a job uses, how its pipeline is built, where its checkpoint lives.

Connector files named in a job file are resolved relative to the job file's folder.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import ClassVar

from ethereal_kafka.config.connectors import KafkaSinkConfig, KafkaSourceConfig, KafkaTableConfig
from ethereal_kafka.config.model import Model, non_negative, positive, setting
from ethereal_kafka.config.properties import load_properties
from ethereal_kafka.errors import ConfigError


class Guarantee(StrEnum):
    """A job's delivery guarantee (`delivery.guarantee`); see docs/exactly-once.md."""

    EXACTLY_ONCE = "exactly-once"
    AT_LEAST_ONCE = "at-least-once"
    AT_MOST_ONCE = "at-most-once"


EPOCH_SIZING = ("adaptive", "fixed")
USER_ERROR_POLICIES = ("fail", "skip", "dlq")
RESTART_STRATEGIES = ("none", "fixed-delay", "failure-rate")
SCALING_POLICIES = ("off", "lag", "throughput", "latency")
_APP_ID = re.compile(r"^[A-Za-z0-9._-]+$")
_PIPELINE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def _app_id(value: str) -> str | None:
    return None if _APP_ID.match(value) else "use letters, digits, '.', '_' and '-' only"


def _port(value: int) -> str | None:
    return None if 0 <= value <= 65535 else "expected a port number 0..65535 (0 = any free port)"


def _pipeline(value: str) -> str | None:
    return None if _PIPELINE.match(value) else "expected module.path:function"


def _fraction(value: float) -> str | None:
    return None if 0 < value <= 1 else "expected a fraction in (0, 1]"


@dataclasses.dataclass(frozen=True)
class RestartPolicy:
    """What the runner does after a failed epoch (Flink's restart strategies; `restart.*` keys of the job).

    Attributes:
        strategy: `none` (exit at once), `fixed-delay` or `failure-rate`.
        attempts: fixed-delay: restarts before giving up.
        delay_ms: Wait before each restart.
        max_failures: failure-rate: most failures within `interval_ms`.
        interval_ms: failure-rate: the sliding interval.
    """

    strategy: str
    attempts: int = 3
    delay_ms: int = 1000
    max_failures: int = 3
    interval_ms: int = 60000

    def describe(self) -> str:
        """The policy as its job keys (`restart.strategy=fixed-delay, restart.attempts=3`)."""
        if self.strategy == "fixed-delay":
            return f"restart.strategy=fixed-delay, restart.attempts={self.attempts}"
        if self.strategy == "failure-rate":
            return (
                f"restart.strategy=failure-rate, restart.failure-rate.max-failures={self.max_failures} per "
                f"restart.failure-rate.interval.ms={self.interval_ms}"
            )
        return "restart.strategy=none"


@dataclasses.dataclass(frozen=True, kw_only=True, repr=False)
class JobConfig(Model):
    """A job (`job.properties`); `spark.*` keys pass through to the SparkSession."""

    SECTION: ClassVar[str] = "job"
    PASSTHROUGH_PREFIX: ClassVar[str | None] = "spark."

    app_id: str = setting(
        key="app.id", check=_app_id, doc="unique, stable id of the job (names ids and groups)"
    )
    sources: tuple[str, ...] = setting(key="sources", doc="source connector files, comma-separated")
    sinks: tuple[str, ...] = setting(key="sinks", doc="sink connector files, comma-separated")
    tables: tuple[str, ...] = setting(
        (), key="tables", doc="global table connector files (lookup joins), comma-separated"
    )
    pipeline: str | None = setting(
        None,
        key="pipeline",
        check=_pipeline,
        doc="module:function(env) or module:function(sources) -> DataFrame",
    )
    transform_sql: str | None = setting(
        None,
        key="transform.sql",
        doc="a Spark SQL query over views named after the sources, giving the sink's columns (instead of pipeline)",
    )
    checkpoint_location: str = setting(key="checkpoint.location", doc="Spark checkpoint directory")
    savepoint_location: str | None = setting(
        None,
        key="savepoint.location",
        doc="where `ethereal-kafka savepoint` writes and `savepoints` lists (default <checkpoint.location>.savepoints)",
    )
    delivery_guarantee: Guarantee = setting(
        Guarantee.EXACTLY_ONCE, key="delivery.guarantee", doc="delivery guarantee of the sinks"
    )
    trigger_interval_ms: int = setting(1000, key="trigger.interval.ms", check=positive, doc="epoch interval")
    spark_master: str = setting("local[2]", key="spark.master", doc="Spark master URL")
    transaction_timeout_ms: int = setting(
        60000, key="transaction.timeout.ms", check=positive, doc="sink transaction timeout (exactly-once)"
    )
    sink_tasks: int = setting(
        2, key="sink.tasks", check=positive, doc="sink tasks of shuffling jobs (fixed for life)"
    )
    output_mode: str = setting(
        "auto",
        key="output.mode",
        choices=("auto", "append", "update", "complete"),
        doc="Spark output mode; auto = append unless a stateful query has no watermark (then update)",
    )
    min_pause_between_epochs_ms: int = setting(
        0,
        key="min.pause.between.epochs.ms",
        check=non_negative,
        doc="least time from one epoch's end to the next's start",
    )
    replay_from: str | None = setting(
        None,
        key="replay.from",
        doc="start a fresh checkpoint from this position (stateful jobs after a reset)",
    )
    shutdown_timeout_ms: int = setting(
        30000,
        key="shutdown.timeout.ms",
        check=positive,
        doc="on SIGTERM/SIGINT, how long the epoch in flight may take to finish before the stop is forced",
    )
    connect_timeout_ms: int = setting(
        15000,
        key="connect.timeout.ms",
        check=positive,
        doc="how long `run` waits, before Spark starts, for each cluster to answer the metadata request that "
        "checks the job's topics",
    )
    metrics_enabled: bool = setting(
        True, key="metrics.enabled", doc="serve Prometheus metrics from the driver (see docs/operations.md)"
    )
    metrics_host: str = setting("127.0.0.1", key="metrics.host", doc="address the metrics endpoint binds to")
    metrics_port: int = setting(
        0, key="metrics.port", check=_port, doc="metrics endpoint port; 0 = a free port, logged at start"
    )
    ui_enabled: bool = setting(
        True, key="ui.enabled", doc="serve the web UI (stream graph, checkpoints, latency) from the driver"
    )
    ui_host: str = setting("127.0.0.1", key="ui.host", doc="address the web UI binds to")
    ui_port: int = setting(0, key="ui.port", check=_port, doc="web UI port; 0 = a free port, logged at start")
    progress: str = setting(
        "auto",
        key="progress",
        choices=("auto", "tty", "log", "off"),
        doc="console progress line on stderr: refreshed in place (tty), a line when it changes and a heartbeat a "
        "minute while idle (log), auto = tty when stderr is a terminal, else log",
    )
    progress_interval_ms: int = setting(
        10000,
        key="progress.interval.ms",
        check=positive,
        doc="how often the log-mode progress line is made (and printed when it changed)",
    )
    state_backend: str = setting(
        "auto",
        key="state.backend",
        choices=("auto", "rocksdb", "memory"),
        doc="Spark state store of stateful operators: auto (per query: memory when all its state is "
        "Spark-native and evicted by the watermark, such as windows and time-bounded joins; rocksdb for the rest), "
        "rocksdb (needed by the framework's operators: process functions, rolling aggregates, Python window "
        "functions) or memory (Spark-native operators only); fixed for a checkpoint's life",
    )

    operator_chaining: bool = setting(
        True,
        key="pipeline.operator.chaining",
        doc="run an exactly-once, partition-preserving DataStream query made of a Kafka source, Python map/"
        "flat_map/filter functions, key_by and one Kafka sink as one function in its source's read task (no JVM round "
        "trip between operators, one Python worker per task; docs/performance.md); false runs every operator as "
        "its own Spark step",
    )

    on_user_error: str = setting(
        "fail",
        key="on.user.error",
        choices=USER_ERROR_POLICIES,
        doc="an element whose user function raises: fail the epoch, skip the element, or send it to "
        "user.error.dlq.topic (dlq; exactly-once, committed with the epoch); see docs/operators.md",
    )
    user_error_dlq_topic: str | None = setting(
        None,
        key="user.error.dlq.topic",
        doc="dead-letter topic of on.user.error=dlq (on the cluster of the job's sources and sinks)",
    )
    restart_strategy: str = setting(
        "none",
        key="restart.strategy",
        choices=RESTART_STRATEGIES,
        doc="after a failed epoch: exit at once (none), or restart the queries from the checkpoint in the same "
        "process, up to restart.attempts times (fixed-delay) or while at most restart.failure-rate.max-failures "
        "failures fall within restart.failure-rate.interval.ms (failure-rate), restart.delay.ms apart",
    )
    restart_attempts: int | None = setting(
        None,
        key="restart.attempts",
        check=positive,
        doc="fixed-delay: restarts before the job gives up (default 3)",
    )
    restart_delay_ms: int | None = setting(
        None,
        key="restart.delay.ms",
        check=non_negative,
        doc="fixed-delay and failure-rate: wait before each restart (default 1000)",
    )
    restart_max_failures: int | None = setting(
        None,
        key="restart.failure-rate.max-failures",
        check=positive,
        doc="failure-rate: most failures within restart.failure-rate.interval.ms (default 3)",
    )
    restart_interval_ms: int | None = setting(
        None,
        key="restart.failure-rate.interval.ms",
        check=positive,
        doc="failure-rate: the sliding interval failures are counted in (default 60000)",
    )

    epoch_stall_timeout_ms: int = setting(
        600000,
        key="epoch.stall.timeout.ms",
        check=non_negative,
        doc="an epoch still writing after this long fails the run, naming it (a stuck task: the queries are stopped, "
        "and restart.strategy may start them again from the checkpoint); 0 = wait forever",
    )

    epoch_sizing: str = setting(
        "adaptive",
        key="epoch.sizing",
        choices=EPOCH_SIZING,
        doc="records admitted per epoch: adaptive (sized to keep epochs near epoch.target.ms, within "
        "[epoch.min.records, epoch.max.records]) or fixed (each source's max.records.per.epoch)",
    )
    epoch_target_ms: int = setting(
        0,
        key="epoch.target.ms",
        check=non_negative,
        doc="adaptive sizing: the epoch duration aimed at; 0 = trigger.interval.ms (under exactly-once at most "
        "half of transaction.timeout.ms)",
    )
    epoch_min_records: int = setting(
        1000,
        key="epoch.min.records",
        check=positive,
        doc="adaptive sizing: least records per source and epoch",
    )
    epoch_max_records: int = setting(
        500000,
        key="epoch.max.records",
        check=positive,
        doc="adaptive sizing: most records per source and epoch (a source's max.records.per.epoch lowers it)",
    )
    autoscale_policy: str = setting(
        "off",
        key="autoscale.policy",
        choices=SCALING_POLICIES,
        doc="executor scaling on a cluster: on consumer lag, on utilisation (throughput), on end-to-end "
        "latency, or off; in local mode decisions are logged only",
    )
    autoscale_min_executors: int = setting(
        1, key="autoscale.min.executors", check=positive, doc="least executors (the job starts with these)"
    )
    autoscale_max_executors: int = setting(
        4, key="autoscale.max.executors", check=positive, doc="most executors"
    )
    autoscale_scale_up_lag: int = setting(
        10000, key="autoscale.scale.up.lag", check=positive, doc="lag policy: add an executor at this lag"
    )
    autoscale_scale_down_lag: int = setting(
        1000,
        key="autoscale.scale.down.lag",
        check=non_negative,
        doc="lag policy: release an executor at or below this lag",
    )
    autoscale_target_utilization: float = setting(
        0.75,
        key="autoscale.target.utilization",
        check=_fraction,
        doc="throughput policy: the share of time the job should spend in epochs; executors follow "
        "ceil(executors x utilisation / target)",
    )
    autoscale_scale_up_latency_ms: int = setting(
        10000,
        key="autoscale.scale.up.latency.ms",
        check=positive,
        doc="latency policy: add an executor when the end-to-end latency p99 reaches this",
    )
    autoscale_scale_down_latency_ms: int = setting(
        2000,
        key="autoscale.scale.down.latency.ms",
        check=non_negative,
        doc="latency policy: release an executor when the end-to-end latency p99 is at or below this",
    )
    autoscale_scale_up_cooldown_ms: int = setting(
        30000,
        key="autoscale.scale.up.cooldown.ms",
        check=non_negative,
        doc="least time between two scale-ups",
    )
    autoscale_scale_down_cooldown_ms: int = setting(
        120000,
        key="autoscale.scale.down.cooldown.ms",
        check=non_negative,
        doc="least time from any scaling to a scale-down",
    )
    autoscale_interval_ms: int = setting(
        5000, key="autoscale.interval.ms", check=positive, doc="how often the scaling policy is evaluated"
    )

    def query_checkpoint(self, query: str) -> str:
        """The Spark checkpoint folder of the job's query `query` (one per query under `checkpoint.location`)."""
        return f"{self.checkpoint_location.rstrip('/')}/{query}"

    @property
    def epoch_target(self) -> int:
        """The adaptive sizing target in ms: `epoch.target.ms`, or the trigger interval (under exactly-once capped
        at half the transaction timeout, so an epoch sized for the target commits well within it)."""
        if self.epoch_target_ms:
            return self.epoch_target_ms
        if self.delivery_guarantee == Guarantee.EXACTLY_ONCE:
            return max(1, min(self.trigger_interval_ms, self.transaction_timeout_ms // 2))
        return self.trigger_interval_ms

    def validate(self) -> None:
        """At least one source and one sink; exactly one of `pipeline` and `transform.sql`."""
        if not self.sources or not self.sinks:
            raise ConfigError("job: sources and sinks must each name at least one connector file")
        if (self.pipeline is None) == (self.transform_sql is None):
            raise ConfigError(
                "job: set exactly one of pipeline=module:function and transform.sql=SELECT ... "
                f"(got {'both' if self.pipeline else 'neither'})"
            )
        self._validate_scaling()
        self._validate_failures()

    def _validate_failures(self) -> None:
        if self.on_user_error == "dlq" and not self.user_error_dlq_topic:
            raise ConfigError("job: on.user.error=dlq needs user.error.dlq.topic")
        if self.user_error_dlq_topic and self.on_user_error != "dlq":
            raise ConfigError(
                f"job: user.error.dlq.topic is set but on.user.error={self.on_user_error}; set on.user.error=dlq "
                "or remove the topic"
            )
        applies = {
            "restart.attempts": (self.restart_attempts, ("fixed-delay",)),
            "restart.delay.ms": (self.restart_delay_ms, ("fixed-delay", "failure-rate")),
            "restart.failure-rate.max-failures": (self.restart_max_failures, ("failure-rate",)),
            "restart.failure-rate.interval.ms": (self.restart_interval_ms, ("failure-rate",)),
        }
        for key, (value, strategies) in applies.items():
            if value is not None and self.restart_strategy not in strategies:
                raise ConfigError(
                    f"job: {key} applies to restart.strategy={' or '.join(strategies)}, but the job sets "
                    f"restart.strategy={self.restart_strategy}"
                )
        policy = self.restart_policy
        if policy.strategy == "failure-rate" and policy.delay_ms * policy.max_failures >= policy.interval_ms:
            raise ConfigError(
                f"job: restart.failure-rate.interval.ms={policy.interval_ms} is not longer than "
                f"restart.failure-rate.max-failures={policy.max_failures} restarts of restart.delay.ms="
                f"{policy.delay_ms}: the job would never give up; lengthen the interval or shorten the delay"
            )

    @property
    def restart_policy(self) -> RestartPolicy:
        """The restart strategy with its defaults filled in (`RestartPolicy`)."""
        return RestartPolicy(
            self.restart_strategy,
            attempts=self.restart_attempts if self.restart_attempts is not None else 3,
            delay_ms=self.restart_delay_ms if self.restart_delay_ms is not None else 1000,
            max_failures=self.restart_max_failures if self.restart_max_failures is not None else 3,
            interval_ms=self.restart_interval_ms if self.restart_interval_ms is not None else 60000,
        )

    def _validate_scaling(self) -> None:
        if self.epoch_min_records > self.epoch_max_records:
            raise ConfigError(
                f"job: epoch.min.records={self.epoch_min_records} exceeds epoch.max.records={self.epoch_max_records}"
            )
        if (
            self.delivery_guarantee == Guarantee.EXACTLY_ONCE
            and self.epoch_target_ms * 2 > self.transaction_timeout_ms
        ):
            raise ConfigError(
                f"job: epoch.target.ms={self.epoch_target_ms} is more than half of transaction.timeout.ms="
                f"{self.transaction_timeout_ms}: an epoch sized for it could outlive its transaction"
            )
        if self.autoscale_min_executors > self.autoscale_max_executors:
            raise ConfigError(
                f"job: autoscale.min.executors={self.autoscale_min_executors} exceeds autoscale.max.executors="
                f"{self.autoscale_max_executors}"
            )
        if self.autoscale_scale_down_lag >= self.autoscale_scale_up_lag:
            raise ConfigError(
                f"job: autoscale.scale.down.lag={self.autoscale_scale_down_lag} must be below "
                f"autoscale.scale.up.lag={self.autoscale_scale_up_lag}"
            )
        if self.autoscale_scale_down_latency_ms >= self.autoscale_scale_up_latency_ms:
            raise ConfigError(
                f"job: autoscale.scale.down.latency.ms={self.autoscale_scale_down_latency_ms} must be below "
                f"autoscale.scale.up.latency.ms={self.autoscale_scale_up_latency_ms}"
            )
        if self.autoscale_policy != "off" and self.passthrough.get("dynamicAllocation.enabled", "") == "true":
            raise ConfigError(
                f"job: autoscale.policy={self.autoscale_policy} and spark.dynamicAllocation.enabled=true both "
                "scale executors; choose one (Spark refuses executor kills under dynamic allocation)"
            )


@dataclasses.dataclass(frozen=True)
class LoadedJob:
    """A job file with its connector files loaded and validated.

    Attributes:
        files: The file each connector was loaded from, by connector name (for error lines that name the file).
    """

    path: Path
    job: JobConfig
    sources: Mapping[str, KafkaSourceConfig]
    sinks: Mapping[str, KafkaSinkConfig]
    tables: Mapping[str, KafkaTableConfig] = dataclasses.field(default_factory=dict)
    files: Mapping[str, Path] = dataclasses.field(default_factory=dict)

    def file_of(self, name: str) -> Path:
        """The file connector `name` came from (the job file when it is not known)."""
        return self.files.get(name, self.path)


def load_connector(
    path: Path, env: Mapping[str, str] | None = None
) -> KafkaSourceConfig | KafkaSinkConfig | KafkaTableConfig:
    """Load one connector file, choosing the model from its `connector.class`.

    Raises:
        ConfigError: unreadable file, missing or unknown `connector.class`, or an invalid setting.
    """
    props = load_properties(path, env)
    kind = props.get("connector.class")
    models: dict[str, type[KafkaSourceConfig] | type[KafkaSinkConfig] | type[KafkaTableConfig]] = {
        "kafka-source": KafkaSourceConfig,
        "kafka-sink": KafkaSinkConfig,
        "kafka-table": KafkaTableConfig,
    }
    if kind not in models:
        raise ConfigError(f"{path}: connector.class must be one of {', '.join(models)} (got {kind!r})")
    return models[kind].from_properties(props, str(path))


def load_job(path: str | Path, env: Mapping[str, str] | None = None) -> LoadedJob:
    """Load a job file and every connector file it names.

    Raises:
        ConfigError: any file is invalid; connector names repeat; a source file is listed as a sink or vice versa.
    """
    job_path = Path(path)
    job = JobConfig.from_properties(load_properties(job_path, env), str(job_path))
    sources: dict[str, KafkaSourceConfig] = {}
    sinks: dict[str, KafkaSinkConfig] = {}
    files: dict[str, Path] = {}
    for kind, names in (("source", job.sources), ("sink", job.sinks)):
        for name in names:
            conf = load_connector(job_path.parent / name, env)
            wanted = KafkaSourceConfig if kind == "source" else KafkaSinkConfig
            if not isinstance(conf, wanted):
                raise ConfigError(
                    f"{job_path}: {name} is listed under {kind}s but is a {conf.connector_class}"
                )
            target: dict[str, KafkaSourceConfig] | dict[str, KafkaSinkConfig] = (
                sources if kind == "source" else sinks
            )
            if conf.name in sources or conf.name in sinks:
                raise ConfigError(f"{job_path}: two connectors are named {conf.name!r}")
            target[conf.name] = conf  # type: ignore[assignment]
            files[conf.name] = job_path.parent / name
    tables: dict[str, KafkaTableConfig] = {}
    for name in job.tables:
        table = load_connector(job_path.parent / name, env)
        if not isinstance(table, KafkaTableConfig):
            raise ConfigError(f"{job_path}: {name} is listed under tables but is a {table.connector_class}")
        if table.name in sources or table.name in sinks or table.name in tables:
            raise ConfigError(f"{job_path}: two connectors are named {table.name!r}")
        tables[table.name] = table
        files[table.name] = job_path.parent / name
    if job.on_user_error == "dlq":
        clusters = {s.bootstrap_servers for s in sources.values()} | {
            s.bootstrap_servers for s in sinks.values()
        }
        if len(clusters) > 1:
            raise ConfigError(
                f"{job_path}: on.user.error=dlq needs the job's sources and sinks on one cluster (the dead letters "
                f"commit in the epoch's transactions), but they name {', '.join(sorted(clusters))}"
            )
    return LoadedJob(job_path, job, sources, sinks, tables, files)


def validate_file(path: str | Path, env: Mapping[str, str] | None = None) -> str:
    """Validate a job or connector file without running anything; returns a one-line summary.

    Raises:
        ConfigError: the file (or a connector it names) is invalid.
    """
    file = Path(path)
    props = load_properties(file, env)
    if "connector.class" in props:
        conf = load_connector(file, env)
        return f"{file}: ok ({conf.connector_class} {conf.name!r})"
    loaded = load_job(file, env)
    return (
        f"{file}: ok (job {loaded.job.app_id!r}, sources {', '.join(loaded.sources)}, "
        f"sinks {', '.join(loaded.sinks)}"
        f"{', tables ' + ', '.join(loaded.tables) if loaded.tables else ''}, {loaded.job.delivery_guarantee})"
    )
