"""Build the embedded local SparkSession with the settings the framework depends on.

Nothing here runs at import time: `local_session()` is called by the CLI, the demo and the test kit.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ethereal_kafka.errors import SparkSetupError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Settings every ethereal-kafka job needs, whatever the master (see docs/exactly-once.md for why).
REQUIRED_CONF: Mapping[str, str] = {
    # A speculative task's Kafka writes cannot be undone: one attempt per task.
    "spark.speculation": "false",
    # transformWithStateInPandas needs the RocksDB state store provider.
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    ),
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
}

#: Settings that suit a small local machine; a cluster deployment may override them.
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
}


def prepare_environment() -> None:
    """Set the environment a PySpark driver needs on a small Linux box.

    Python workers must use this interpreter and connect back over loopback, or they time out.
    """
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")


def local_session(
    app_name: str = "ethereal-kafka",
    master: str = "local[2]",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Return a SparkSession (created or reused) with the framework's settings and the Kafka data source registered.

    Args:
        app_name: Spark application name.
        master: Spark master URL (`local[2]` by default; `spark://...` for a standalone cluster).
        conf: Extra settings, applied last.

    Raises:
        SparkSetupError: Spark could not start (for instance, no Java).
    """
    prepare_environment()
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name).master(master)
    for key, value in {**LOCAL_CONF, **REQUIRED_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as exc:
        raise SparkSetupError(f"could not start Spark ({master}): {exc}") from exc
    spark.sparkContext.setLogLevel("WARN")
    register_sources(spark)
    return spark


def register_sources(spark: SparkSession) -> None:
    """Register ethereal-kafka's Python data sources with `spark` (idempotent)."""
    from ethereal_kafka.connectors.kafka.source import KafkaDataSource

    spark.dataSource.register(KafkaDataSource)
