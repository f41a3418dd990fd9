"""The job file's pipeline choice (`pipeline` or `transform.sql`), `spark.master` and `shutdown.timeout.ms`."""

from __future__ import annotations

import pytest

from ethereal_kafka.config.job import JobConfig
from ethereal_kafka.errors import ConfigError

BASE = {"app.id": "a", "sources": "s.properties", "sinks": "k.properties", "checkpoint.location": "/tmp/c"}


def test_a_pipeline_function_or_a_sql_transform() -> None:
    piped = JobConfig.from_properties({**BASE, "pipeline": "my.jobs:run"})
    assert (piped.pipeline, piped.transform_sql) == ("my.jobs:run", None)
    sql = JobConfig.from_properties({**BASE, "transform.sql": "SELECT key, value FROM events"})
    assert (sql.pipeline, sql.transform_sql) == (None, "SELECT key, value FROM events")


@pytest.mark.parametrize(
    ("extra", "got"),
    [({}, "neither"), ({"pipeline": "my.jobs:run", "transform.sql": "SELECT 1"}, "both")],
)
def test_exactly_one_of_pipeline_and_transform(extra: dict[str, str], got: str) -> None:
    with pytest.raises(
        ConfigError, match=rf"exactly one of pipeline=module:function and transform.sql.*\(got {got}\)"
    ):
        JobConfig.from_properties({**BASE, **extra})


def test_spark_master_is_the_declared_setting_and_other_spark_keys_pass_through() -> None:
    job = JobConfig.from_properties(
        {**BASE, "pipeline": "m:f", "spark.master": "spark://127.0.0.1:7077", "spark.ui.enabled": "false"}
    )
    assert job.spark_master == "spark://127.0.0.1:7077"
    assert job.passthrough == {"ui.enabled": "false"}
    assert JobConfig.from_properties({**BASE, "pipeline": "m:f"}).spark_master == "local[2]"


def test_shutdown_timeout() -> None:
    assert JobConfig.from_properties({**BASE, "pipeline": "m:f"}).shutdown_timeout_ms == 30000
    assert (
        JobConfig.from_properties(
            {**BASE, "pipeline": "m:f", "shutdown.timeout.ms": "500"}
        ).shutdown_timeout_ms
        == 500
    )
    with pytest.raises(ConfigError, match="must be > 0"):
        JobConfig.from_properties({**BASE, "pipeline": "m:f", "shutdown.timeout.ms": "0"})


def test_epoch_sizing_target_follows_the_trigger_within_half_the_transaction_timeout() -> None:
    job = JobConfig.from_properties({**BASE, "pipeline": "m:f"})
    assert (job.epoch_sizing, job.epoch_target, job.epoch_min_records) == ("adaptive", 1000, 1000)
    capped = {**BASE, "pipeline": "m:f", "trigger.interval.ms": "5000", "transaction.timeout.ms": "6000"}
    assert JobConfig.from_properties(capped).epoch_target == 3000
    assert JobConfig.from_properties({**capped, "delivery.guarantee": "at-least-once"}).epoch_target == 5000
    with pytest.raises(
        ConfigError, match=r"epoch.target.ms=4000 is more than half of transaction.timeout.ms"
    ):
        JobConfig.from_properties({**capped, "epoch.target.ms": "4000"})
    with pytest.raises(ConfigError, match=r"epoch.min.records=10 exceeds epoch.max.records=5"):
        JobConfig.from_properties(
            {**BASE, "pipeline": "m:f", "epoch.min.records": "10", "epoch.max.records": "5"}
        )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            {"autoscale.min.executors": "3", "autoscale.max.executors": "2"},
            "autoscale.min.executors=3 exceeds",
        ),
        (
            {"autoscale.scale.down.lag": "10", "autoscale.scale.up.lag": "10"},
            "must be below autoscale.scale.up.lag",
        ),
        ({"autoscale.target.utilization": "1.5"}, r"expected a fraction in \(0, 1\]"),
        ({"autoscale.policy": "cpu"}, "expected one of off, lag, throughput, latency"),
        ({"autoscale.policy": "lag", "spark.dynamicAllocation.enabled": "true"}, "choose one"),
    ],
)
def test_autoscale_settings_are_validated(extra: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        JobConfig.from_properties({**BASE, "pipeline": "m:f", **extra})


def test_autoscale_defaults_to_off() -> None:
    job = JobConfig.from_properties({**BASE, "pipeline": "m:f", "autoscale.policy": "lag"})
    assert (job.autoscale_min_executors, job.autoscale_max_executors, job.autoscale_interval_ms) == (
        1,
        4,
        5000,
    )
    assert JobConfig.from_properties({**BASE, "pipeline": "m:f"}).autoscale_policy == "off"
