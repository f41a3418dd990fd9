"""How the session's master and settings are chosen, embedded or under spark-submit."""

from __future__ import annotations

import pytest

from ethereal_kafka.runtime.spark import (
    CHANGELOG_KEY,
    CHECKPOINT_MANAGER_KEY,
    FILESYSTEM_CHECKPOINT_MANAGER,
    LOCAL_CONF,
    REQUIRED_CONF,
    launched_by_spark_submit,
    session_settings,
)


def test_embedded_local_gets_the_local_defaults_then_required_then_the_job() -> None:
    master, settings = session_settings("local[2]", {"spark.sql.shuffle.partitions": "4"}, {})
    assert master == "local[2]"
    assert settings["spark.driver.host"] == LOCAL_CONF["spark.driver.host"]
    assert settings["spark.sql.shuffle.partitions"] == "4"
    assert all(settings[k] == v for k, v in REQUIRED_CONF.items())


def test_embedded_cluster_master_gets_no_loopback_settings() -> None:
    master, settings = session_settings("spark://10.0.0.5:7077", {}, {})
    assert master == "spark://10.0.0.5:7077"
    assert "spark.driver.host" not in settings and "spark.driver.bindAddress" not in settings


def test_a_local_session_writes_checkpoints_through_the_filesystem_api_a_cluster_keeps_sparks() -> None:
    _, local = session_settings("local[2]", {}, {})
    _, cluster = session_settings("spark://10.0.0.5:7077", {}, {})
    assert local[CHECKPOINT_MANAGER_KEY] == FILESYSTEM_CHECKPOINT_MANAGER
    assert CHECKPOINT_MANAGER_KEY not in cluster
    _, chosen = session_settings("local[2]", {CHECKPOINT_MANAGER_KEY: "x.Mine"}, {})
    assert chosen[CHECKPOINT_MANAGER_KEY] == "x.Mine"  # a job's own choice wins
    assert local[CHANGELOG_KEY] == cluster[CHANGELOG_KEY] == "true"


def test_under_spark_submit_its_master_and_settings_win_but_required_ones_apply() -> None:
    submitted = {
        "spark.master": "spark://h:7077",
        "spark.sql.shuffle.partitions": "8",
        "spark.speculation": "true",
    }
    master, settings = session_settings(
        "local[2]", {"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"}, submitted
    )
    assert master is None  # keep spark-submit's
    assert "spark.sql.shuffle.partitions" not in settings  # spark-submit set it
    assert settings["spark.ui.enabled"] == "false"  # the job fills in what spark-submit left open
    assert settings["spark.speculation"] == "false"  # required, whatever was submitted
    assert not set(LOCAL_CONF) - {"spark.sql.shuffle.partitions", "spark.ui.enabled"} & set(settings)


def test_spark_submit_without_a_master_keeps_the_jobs() -> None:
    master, _ = session_settings("spark://job:7077", {}, {"spark.app.name": "x.py"})
    assert master == "spark://job:7077"


def test_detection_follows_the_gateway_spark_submit_hands_down(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    assert not launched_by_spark_submit()
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "40000")
    assert launched_by_spark_submit()
