"""Logging of `ethereal-kafka run`: short lines on stderr, the full story in a log folder.

On stderr an operator sees the framework's lifecycle lines (started, stopping, stopped), the progress line and, for
a fatal error, one `error: ...` line at the end. The log folder (`--log-dir`, default `<cache>/apps/<app.id>/logs`,
see `default_log_dir`) keeps everything with stack traces: `spark.log` (Spark's log4j output of the driver JVM,
rolled at 20 MB; the JVM is started with that configuration, `spark_log_options`) and `ethereal-kafka.log` (the
framework's Python log, with the full trace of a failure, and librdkafka's own lines from the driver's Kafka
clients); the Python workers of a local session write theirs to `librdkafka-workers.log` (`clients.LOG_DIR_ENV`).

A line written while the progress line is live on a terminal first erases it (`progress.above_live_line`), so
nothing is glued onto it.

Nothing here runs at import time; `configure_python_logging`, `spark_log_options` and `route_spark_logs` are called
by the runner.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ethereal_kafka.connectors.kafka.clients import LIBRDKAFKA_LOGGER
from ethereal_kafka.paths import cache_home
from ethereal_kafka.runtime.progress import above_live_line

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: The framework's logger tree.
LOGGER = "ethereal_kafka"
_HANDLER_NAME = "ethereal-kafka-run"

#: The driver JVM's log4j2 configuration of a run: everything (WARN and up, with stack traces) in the log folder,
#: nothing on the terminal (the framework's one-line error says what failed and where the trace is).
_LOG4J2 = """\
status = error
name = ethereal-kafka-run
appender.file.type = RollingFile
appender.file.name = file
appender.file.fileName = {log}
appender.file.filePattern = {log}.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yy/MM/dd HH:mm:ss.SSS}} %p %t %c: %m%n%ex
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = 20MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = 3
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
"""


#: Environment variable naming the folder every run's default log folder goes under (`<it>/<app.id>`).
LOG_ROOT_ENV = "ETHEREAL_KAFKA_LOG_DIR"


def default_log_dir(app_id: str) -> Path:
    """Where a run logs when `--log-dir` is not given: `$ETHEREAL_KAFKA_LOG_DIR/<app.id>` when that is set, else
    `<cache>/apps/<app.id>/logs` beside the app's history (`paths.cache_home`: `$ETHEREAL_KAFKA_HOME`, else
    `$XDG_CACHE_HOME/ethereal-kafka`, else `~/.cache/ethereal-kafka`), so two users of a host never share one."""
    root = os.environ.get(LOG_ROOT_ENV)
    if root:
        return Path(root).expanduser() / app_id
    return cache_home() / "apps" / app_id / "logs"


class ConsoleHandler(logging.StreamHandler[TextIO]):
    """The terminal's handler: each line is written above the live progress line (erased first, then redrawn)."""

    def emit(self, record: logging.LogRecord) -> None:
        """Write `record` as one line, with the progress line out of its way."""
        with above_live_line():
            super().emit(record)


def configure_python_logging(log_dir: Path) -> Path:
    """Send the framework's log to stderr (INFO, one line each) and to `<log_dir>/ethereal-kafka.log` (DEBUG);
    librdkafka's lines of this process's clients (`clients.librdkafka_logger`) go to that file only.

    Called once by the runner before Spark starts; returns the log file. Idempotent per process: handlers added by
    an earlier call are replaced.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    path = log_dir / "ethereal-kafka.log"
    logger = logging.getLogger(LOGGER)
    kafka = logging.getLogger(LIBRDKAFKA_LOGGER)
    for owner in (logger, kafka):
        ours = [h for h in owner.handlers if h.get_name() == _HANDLER_NAME or owner is kafka]
        for handler in ours:
            owner.removeHandler(handler)
            handler.close()
    console = ConsoleHandler(sys.stderr)
    console.setLevel(logging.INFO)
    console.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)s ethereal-kafka: %(message)s", "%H:%M:%S")
    )
    file = logging.FileHandler(path, encoding="utf-8")
    file.setLevel(logging.DEBUG)
    file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s"))
    for handler in (console, file):
        handler.set_name(_HANDLER_NAME)
        logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    kafka.addHandler(file)
    kafka.setLevel(logging.DEBUG)
    kafka.propagate = False
    return path


def spark_log_config(log_dir: Path) -> Path:
    """Write the driver JVM's log4j2 configuration for a run logging to `log_dir` (everything in
    `<log_dir>/spark.log`, nothing on the terminal); returns the configuration file."""
    log_dir.mkdir(parents=True, exist_ok=True)
    config = log_dir / "log4j2.properties"
    config.write_text(_LOG4J2.format(log=log_dir / "spark.log"), encoding="utf-8")
    return config


def spark_log_options(log_dir: Path) -> str:
    """The driver Java option that makes the JVM log to `log_dir` from its first line (`spark_log_config`).

    Called by the runner for an embedded session, before the JVM starts (it goes into
    `spark.driver.extraJavaOptions`); Spark's start-up warnings then never reach the terminal.
    """
    return f"-Dlog4j2.configurationFile={spark_log_config(log_dir).as_uri()}"


def route_spark_logs(spark: SparkSession, log_dir: Path) -> Path:
    """Reconfigure a running driver JVM's log4j as `spark_log_config` says; returns `<log_dir>/spark.log`.

    Called by the runner after the embedded session starts (not under spark-submit, where the deployment's log4j
    configuration rules): a session the JVM options did not reach (one already running in this process) logs to
    the folder from here on. Executors on a cluster keep their own logging.
    """
    config = spark_log_config(log_dir)
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    context = jvm.org.apache.logging.log4j.LogManager.getContext(False)
    context.setConfigLocation(jvm.java.io.File(str(config)).toURI())
    return log_dir / "spark.log"


#: The file in a run's log folder that takes what the driver JVM (and every process it starts: Python workers,
#: Spark's Python runners) writes to its stdout and stderr.
JVM_OUTPUT_FILE = "jvm-output.log"


@contextmanager
def child_output_to(path: Path) -> Iterator[Path]:
    """While open, processes this one starts write their stdout and stderr to `path` (appended); this process's
    own output is unchanged once the block ends.

    `run` starts the driver JVM inside it: Spark copies the output of the Python processes it starts (PySpark's
    transformWithState driver worker prints five multi-line messages per query start, a user function may
    `print`) and the JVM's own lines (`WARNING: Using incubator modules`, a thread's uncaught exception) to the
    JVM's stdout/stderr, which would otherwise be the terminal. Works on the file descriptors (1 and 2), as a
    child inherits them; the process's own writes inside the block go to `path` too, so the block must be short.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(target, 1)
        os.dup2(target, 2)
        yield path
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (target, *saved):
            os.close(fd)
