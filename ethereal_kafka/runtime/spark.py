"""Build the SparkSession with the settings the framework depends on: embedded (local) by default, or the one
spark-submit prepared when the job runs under spark-submit.

Nothing here runs at import time: `local_session()` is called by the CLI, the demo and the test kit.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ethereal_kafka.errors import SparkSetupError

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Settings every ethereal-kafka job needs, whatever the master (see docs/exactly-once.md for why).
REQUIRED_CONF: Mapping[str, str] = {
    # A speculative task's Kafka writes cannot be undone: one attempt per task.
    "spark.speculation": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
}

#: The Spark setting that picks the state store (fixed in a query's checkpoint once it ran).
STATE_STORE_KEY = "spark.sql.streaming.stateStore.providerClass"
#: Spark's state store provider of each `state.backend` job setting.
STATE_STORE_PROVIDERS: Mapping[str, str] = {
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "memory": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
}

#: Defaults a job (or spark-submit) may override: the framework's stateful operators (transformWithState) need
#: the RocksDB state store, so it is the default; `state.backend=memory` chooses the in-memory (HDFS-backed) one.
#: The Python worker daemon: PySpark's, forking workers that share the modules they all import
#: (`runtime.worker_daemon`).
#: RocksDB changelog checkpointing: an epoch uploads the changes it made to each state store (a small changelog
#: file) instead of a checkpoint of the whole store (a RocksDB checkpoint, a zip and every new SST file, per store
#: and partition); snapshots are taken in the background. Spark switches a query's existing checkpoint between
#: the two ways in either direction, so a job that ran without it resumes with it (and back).
#: RocksDB's row count: Spark keeps each state store's number of rows (`numRowsTotal` in a query's progress) by
#: looking every written and removed key up first, a second RocksDB access per row. Off, Nexmark's joins ran
#: 1.2-1.4x faster (q8 49.8k -> 59.3k, q7 35.4k -> 49.5k events/s steady, docs/performance.md) and Spark reports 0
#: rows; the job's metrics then leave the state-rows gauge out (`state_rows_counted`) rather than show 0. A job
#: that wants the gauge sets `spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows=true`.
#: The in-memory store's cached versions: Spark keeps each store's last 2 committed versions in the heap (the last
#: one to build the next epoch on, the one before it for an epoch that fails and runs again), each a whole copy of
#: the store's map. 1 keeps the version the next epoch needs; an epoch run again loads the version before from the
#: checkpoint's files (Spark's documented trade-off: '1' covers the success case). Nexmark's q7 and q8 (in-memory
#: joins and windows): peak RSS 1.95 -> 1.74 GB and 2.29 -> 2.10 GB at the same speed (docs/performance.md).
DAEMON_KEY = "spark.python.daemon.module"
RETAINED_VERSIONS_KEY = "spark.sql.streaming.maxBatchesToRetainInMemory"
CHANGELOG_KEY = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
TRACK_ROWS_KEY = "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows"
DEFAULT_CONF: Mapping[str, str] = {
    STATE_STORE_KEY: STATE_STORE_PROVIDERS["rocksdb"],
    DAEMON_KEY: "ethereal_kafka.runtime.worker_daemon",
    CHANGELOG_KEY: "true",
    TRACK_ROWS_KEY: "false",
    RETAINED_VERSIONS_KEY: "1",
}


def state_rows_counted(conf: Mapping[str, str]) -> bool:
    """Whether Spark counts the rows of the state stores under the session settings `conf` (`numRowsTotal`): always
    with the in-memory store, with RocksDB only while `TRACK_ROWS_KEY` is on (Spark's default: on)."""
    if conf.get(STATE_STORE_KEY, "") != STATE_STORE_PROVIDERS["rocksdb"]:
        return True
    return conf.get(TRACK_ROWS_KEY, "true").strip().lower() != "false"


#: How a local session writes its streaming checkpoint files (offsets, commits, state store files): through
#: Hadoop's FileSystem API. Spark's default (the FileContext API) resolves symbolic links on the local file system
#: by running `readlink` processes, eight per file it writes, from the driver JVM and the executors (3,584
#: processes in one run of a 4-query join test, measured with a `readlink` wrapper on PATH). On a local file
#: system both APIs write a temporary file and rename it after checking that the target does not exist (neither
#: is atomic against a concurrent writer; the instance guard keeps a job's checkpoint to one writer). A cluster
#: keeps Spark's default: its checkpoint lives on a shared file system, where the FileContext rename is atomic.
CHECKPOINT_MANAGER_KEY = "spark.sql.streaming.checkpointFileManagerClass"
FILESYSTEM_CHECKPOINT_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)

#: Settings that suit a small local machine; a cluster deployment may override them.
#: Spark's own UI is off, yet its status store keeps the last 1,000 SQL executions, jobs and stages (about one of
#: each per epoch) on the driver's heap: bounded to the last 100. (How much of the heap an embedded driver keeps
#: resident: `runtime.jvm.LEAN_HEAP_OPTIONS`; `spark.driver.memory` is only its limit.)
LOCAL_CONF: Mapping[str, str] = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
    "spark.python.worker.reuse": "true",
    "spark.driver.memory": "1g",
    "spark.sql.ui.retainedExecutions": "100",
    "spark.ui.retainedJobs": "100",
    "spark.ui.retainedStages": "100",
    CHECKPOINT_MANAGER_KEY: FILESYSTEM_CHECKPOINT_MANAGER,
}


def prepare_environment(master: str = "local[2]") -> None:
    """Set the environment a PySpark driver needs on a small Linux box.

    Python workers must use this interpreter (`PYSPARK_PYTHON`, which the driver hands to every executor) and, with
    a local master, connect back over loopback, or they time out. A remote master must see the driver's real
    address, so `SPARK_LOCAL_IP` is only defaulted for `local*` masters. Values already set are kept.
    """
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")
    # numpy (imported with pandas by every Python worker and planner process) starts a BLAS thread per core that
    # spins while idle; no operator here does linear algebra.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    # pyarrow's default pool (mimalloc) kept 27-43 MB of freed Arrow buffers in each Python worker; the C library's
    # allocator returns them (bench/memory.py, 1M records: the workers' RSS ~100 MB lower, their CPU not higher).
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")


def launched_by_spark_submit() -> bool:
    """True when this Python process is a driver that `spark-submit` started.

    spark-submit starts the driver JVM first and runs the Python program with the JVM's gateway port in
    `PYSPARK_GATEWAY_PORT`; an embedded session launches its own JVM instead.
    """
    return "PYSPARK_GATEWAY_PORT" in os.environ


def submitted_conf() -> dict[str, str]:
    """The settings spark-submit gave the driver JVM (`--master`, `--conf`, `spark-defaults.conf`); {} otherwise."""
    if not launched_by_spark_submit():
        return {}
    from pyspark import SparkConf, SparkContext

    # Connects to spark-submit's JVM (no new JVM): without the gateway, SparkConf() would not see its settings.
    SparkContext._ensure_initialized()
    return {str(k): str(v) for k, v in SparkConf().getAll()}


def session_settings(
    master: str, conf: Mapping[str, str] | None, submitted: Mapping[str, str]
) -> tuple[str | None, dict[str, str]]:
    """Decide the master and the settings a session is built with (pure; see `local_session`).

    Returns:
        The master to set (None: keep spark-submit's) and the settings to apply, in order.
    """
    if submitted:
        defaults = {k: v for k, v in DEFAULT_CONF.items() if k not in submitted}
        keep = {k: v for k, v in (conf or {}).items() if k not in submitted}
        return (None if "spark.master" in submitted else master), {**defaults, **keep, **REQUIRED_CONF}
    base = LOCAL_CONF if master.startswith("local") else {}
    return master, {**base, **DEFAULT_CONF, **REQUIRED_CONF, **(conf or {})}


def local_session(
    app_name: str = "ethereal-kafka",
    master: str = "local[2]",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Return a SparkSession (created or reused) with the framework's settings and the Kafka data source registered.

    Embedded (the default): `master` and `LOCAL_CONF` (local masters only), `DEFAULT_CONF`, then `REQUIRED_CONF`,
    then `conf`.
    Under spark-submit (`launched_by_spark_submit()`): spark-submit's master and settings are kept; `conf` fills in
    only keys spark-submit did not set, and `REQUIRED_CONF` is always applied (a contradicting submitted value is
    overridden with a warning).

    Args:
        app_name: Spark application name (spark-submit's `--name` wins).
        master: Spark master URL (`local[2]` by default; `spark://...` for a standalone cluster).
        conf: Extra settings.

    Raises:
        SparkSetupError: Spark could not start (for instance, no Java).
    """
    submitted = submitted_conf()
    chosen, settings = session_settings(master, conf, submitted)
    if not submitted:  # the driver JVM starts here: from the SPARK_HOME mirror, mapping the class archive
        from ethereal_kafka.runtime.jvm import with_archive, with_lean_heap
        from ethereal_kafka.runtime.spark_home import use_mirror

        use_mirror()
        settings = with_archive(with_lean_heap(settings))
    prepare_environment(chosen or submitted.get("spark.master", ""))
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    if not submitted.get("spark.app.name") or submitted["spark.app.name"].endswith(".py"):
        builder = builder.appName(app_name)
    if chosen is not None:
        builder = builder.master(chosen)
    elif master != submitted["spark.master"]:
        log.info("launched by spark-submit: master %s (not %s)", submitted["spark.master"], master)
    for key, value in REQUIRED_CONF.items():
        if key in submitted and submitted[key] != value:
            log.warning("%s=%s overridden: ethereal-kafka requires %s", key, submitted[key], value)
    for key, value in settings.items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as exc:
        raise SparkSetupError(
            f"could not start Spark ({chosen or submitted.get('spark.master')}): {exc}"
        ) from exc
    spark.sparkContext.setLogLevel("WARN")
    if not submitted and (chosen or "").startswith("local"):
        fork_python_processes(spark)
    register_sources(spark)
    return spark


def fork_python_processes(spark: SparkSession) -> bool:
    """Have the session's Python processes (worker daemon, source runners, planners, stateful drivers) forked from a
    fork server (`runtime.fork_server`); returns whether they are. Call before any Python function or data source is registered: each carries the Python executable
    of its registration. Only for local masters (an executor host would lack the launcher) and when the session
    runs this interpreter (a `PYSPARK_PYTHON` of the user's own is kept). Never raises."""
    from ethereal_kafka.runtime.fork_server import running_launcher, session_launcher

    context: Any = spark.sparkContext
    if context.pythonExec != sys.executable:  # routed already (a reused session), or the user's own Python
        return bool(context.pythonExec == running_launcher())
    launcher = session_launcher()
    if launcher is None:
        return False
    context.pythonExec = launcher
    return True


def register_sources(spark: SparkSession) -> None:
    """Register ethereal-kafka's Python data sources with `spark` (idempotent)."""
    from ethereal_kafka.connectors.event_time import EventTimeCarrierSource
    from ethereal_kafka.eos.source import ExactlyOnceKafkaSource

    skip_static_source_lookup(spark)
    spark.dataSource.register(ExactlyOnceKafkaSource)
    spark.dataSource.register(EventTimeCarrierSource)


#: Spark's record of the statically installed Python data sources (a `private[spark] var` of the
#: `DataSourceManager` object; `None` until the first lookup).
_STATIC_SOURCES_CLASS = "org.apache.spark.sql.execution.datasources.DataSourceManager$"


def skip_static_source_lookup(spark: SparkSession) -> bool:
    """Tell the driver JVM that no statically installed Python data source exists, unless it looked already;
    returns whether it was told.

    At the first data source registration Spark starts a Python process that imports every installed `pyspark_*`
    package to find static data sources (`DataSourceManager.initialStaticDataSourceBuilders`): measured at 1.0 s
    and 0.9 CPU-s of each start on the 2-core test machine. A job reads through the framework's connectors only,
    so the lookup finds nothing it uses; the record is set to "none" before it runs. A `pyspark_*` source is
    still usable after `spark.dataSource.register(...)`. Spark versions without the record are left alone (the
    lookup runs as before). Never raises.
    """
    try:
        jvm: Any = spark.sparkContext._jvm
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        holder = jvm.java.lang.Class.forName(_STATIC_SOURCES_CLASS, True, loader)
        manager = holder.getField("MODULE$").get(None)
        if not manager.dataSourceBuilders().isEmpty():
            return False
        getattr(manager, "dataSourceBuilders_$eq")(jvm.scala.Some(jvm.scala.collection.immutable.HashMap()))
        return True
    except Exception as exc:  # an internal of Spark's: a version without it costs only the lookup
        log.debug("static data source lookup left to Spark: %s", exc)
        return False
