"""A topic-to-topic transform declared in the job file (`transform.sql=SELECT ...`) instead of a pipeline function.

The query runs in Spark SQL against streaming temporary views named after the job's sources (a source named
`orders` is the view `orders`; quote names that are not plain identifiers with backticks: `` `large-orders` ``).
Each view has the source's columns: `key`, `value`, `topic`, `partition`, `offset`, `timestamp`, `timestamp_type`,
`headers`, plus the fields decoded from a json/avro key or value. The result must give the only sink its columns:
`key` and `value` (the sink's `key.column`/`value.column`), or the record's fields with `value.column=*`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from ethereal_kafka.config.job import LoadedJob
from ethereal_kafka.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from ethereal_kafka.runtime.job import Pipeline


def sql_pipeline(spark: SparkSession, loaded: LoadedJob) -> Pipeline:
    """The job's `transform.sql` as a DataFrame pipeline function (`function(sources) -> DataFrame`).

    Called by `runtime.pipeline.build_queries` on the driver, once per run, when the job sets `transform.sql`. The
    returned function registers each source frame as a temporary view named after the source (replacing a view of
    that name) and returns the query's streaming DataFrame.

    Raises:
        ConfigError: the job has no `transform.sql`, or more than one sink (a SQL transform feeds exactly one);
            the returned function raises it when the query does not parse or names unknown views or columns.
    """
    sql = loaded.job.transform_sql
    if not sql:
        raise ConfigError(f"{loaded.path}: transform.sql is not set")
    if len(loaded.sinks) != 1:
        raise ConfigError(
            f"{loaded.path}: transform.sql feeds exactly one sink, but the job has {len(loaded.sinks)} "
            f"({', '.join(loaded.sinks)}); use pipeline=module:function for several"
        )

    def transform(sources: Mapping[str, DataFrame]) -> DataFrame:
        from pyspark.errors import PySparkException

        for name, frame in sources.items():
            frame.createOrReplaceTempView(quote_identifier(name))
        try:
            return spark.sql(sql)
        except PySparkException as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConfigError(
                f"{loaded.path}: transform.sql does not run against views {', '.join(sources)}: {first}"
            ) from exc

    return transform


def dataframe_pipeline(spark: SparkSession, loaded: LoadedJob) -> Pipeline:
    """The job's pipeline function: its `transform.sql` (see `sql_pipeline`), else the imported `pipeline`.

    Raises:
        ConfigError: see `sql_pipeline` and `runtime.job.resolve_pipeline`.
    """
    from ethereal_kafka.runtime.job import resolve_pipeline

    if loaded.job.transform_sql is not None:
        return sql_pipeline(spark, loaded)
    if loaded.job.pipeline is None:
        raise ConfigError(f"{loaded.path}: set pipeline=module:function or transform.sql=SELECT ...")
    return resolve_pipeline(loaded.job.pipeline, loaded.path)


def quote_identifier(name: str) -> str:
    """`name` as a Spark SQL identifier in backticks (so `large-orders` is one name, not a subtraction)."""
    return "`" + name.replace("`", "``") + "`"
