"""The SPARK_HOME mirror embedded sessions launch from (`runtime.spark_home`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ethereal_kafka.runtime import spark_home


def _installed(tmp_path: Path) -> Path:
    real = tmp_path / "pyspark"
    (real / "jars").mkdir(parents=True)
    (real / "bin").mkdir()
    (real / "python" / "lib").mkdir(parents=True)
    (real / "python" / "lib" / "pyspark.zip").write_bytes(b"PK")
    return real


def test_the_mirror_links_every_entry_but_the_python_zips(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ETHEREAL_KAFKA_HOME", str(tmp_path / "cache"))
    real = _installed(tmp_path)
    mirror = spark_home.ensure_mirror(real)
    assert (mirror / "jars").resolve() == real / "jars" and (mirror / "bin").resolve() == real / "bin"
    assert (mirror / "python" / "lib").is_dir() and not any((mirror / "python" / "lib").iterdir())
    assert spark_home.ensure_mirror(real) == mirror  # made once, then reused
    assert [p.name for p in mirror.parent.iterdir()] == [mirror.name]  # no scratch folder left


def test_use_mirror_keeps_a_spark_home_already_set_and_honours_the_switch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ETHEREAL_KAFKA_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("SPARK_HOME", "/opt/spark")
    spark_home.use_mirror()
    assert spark_home.launch_home() == Path("/opt/spark")
    monkeypatch.delenv("SPARK_HOME")
    monkeypatch.setenv(spark_home.ENV_SWITCH, "0")
    spark_home.use_mirror()
    assert "SPARK_HOME" not in os.environ
    assert spark_home.launch_home() == spark_home.installed_spark_home()
