"""Logging of `ethereal-kafka run`: short lines on stderr, the full story in a log folder.

On stderr an operator sees the framework's lifecycle lines (started, stopping, stopped) and, for Spark's own
warnings and errors, only their first line; a fatal error ends the output with one `error: ...` line. The log folder
(`--log-dir`, default `<cache>/apps/<app.id>/logs`, see `default_log_dir`) keeps everything with stack traces: `spark.log` (Spark's
log4j output of the driver JVM, rolled at 20 MB) and `ethereal-kafka.log` (the framework's Python log, with the full
trace of a failure).

Nothing here runs at import time; `configure_python_logging` and `route_spark_logs` are called by the runner.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ethereal_kafka.broker.jars import cache_home

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: The framework's logger tree.
LOGGER = "ethereal_kafka"
_HANDLER_NAME = "ethereal-kafka-run"

_LOG4J2 = """\
status = error
name = ethereal-kafka-run
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.alwaysWriteExceptions = false
appender.console.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %replace{{%m}}{{(?s)[\\r\\n].*}}{{ (more in {log})}}%n
appender.console.filter.threshold.type = ThresholdFilter
appender.console.filter.threshold.level = warn
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
rootLogger.appenderRef.console.ref = console
rootLogger.appenderRef.file.ref = file
"""


#: Environment variable naming the folder every run's default log folder goes under (`<it>/<app.id>`).
LOG_ROOT_ENV = "ETHEREAL_KAFKA_LOG_DIR"


def default_log_dir(app_id: str) -> Path:
    """Where a run logs when `--log-dir` is not given: `$ETHEREAL_KAFKA_LOG_DIR/<app.id>` when that is set, else
    `<cache>/apps/<app.id>/logs` beside the app's history (`broker.jars.cache_home`: `$ETHEREAL_KAFKA_HOME`, else
    `$XDG_CACHE_HOME/ethereal-kafka`, else `~/.cache/ethereal-kafka`), so two users of a host never share one."""
    root = os.environ.get(LOG_ROOT_ENV)
    if root:
        return Path(root).expanduser() / app_id
    return cache_home() / "apps" / app_id / "logs"


def configure_python_logging(log_dir: Path) -> Path:
    """Send the framework's log to stderr (INFO, one line each) and to `<log_dir>/ethereal-kafka.log` (DEBUG).

    Called once by the runner before Spark starts; returns the log file. Idempotent per process: handlers added by
    an earlier call are replaced.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    path = log_dir / "ethereal-kafka.log"
    logger = logging.getLogger(LOGGER)
    for handler in [h for h in logger.handlers if h.get_name() == _HANDLER_NAME]:
        logger.removeHandler(handler)
        handler.close()
    console = logging.StreamHandler(sys.stderr)
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
    return path


def route_spark_logs(spark: SparkSession, log_dir: Path) -> Path:
    """Reconfigure the driver JVM's log4j: first lines of warnings and errors on stderr, everything with stack
    traces in `<log_dir>/spark.log`. Returns that file.

    Called by the runner after the embedded session starts (not under spark-submit, where the deployment's log4j
    configuration rules). Executors on a cluster keep their own logging.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / "spark.log"
    config = log_dir / "log4j2.properties"
    config.write_text(_LOG4J2.format(log=log), encoding="utf-8")
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    context = jvm.org.apache.logging.log4j.LogManager.getContext(False)
    context.setConfigLocation(jvm.java.io.File(str(config)).toURI())
    return log
