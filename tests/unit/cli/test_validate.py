"""`ethereal-kafka validate`: accepts good files, rejects bad ones with a clear message and a non-zero exit."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ethereal_kafka.cli import main
from ethereal_kafka.demo import demo_job_file

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REPO = Path(__file__).resolve().parents[3]


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.mark.spark
def test_shipped_demo_and_example_files_are_valid(
    spark: SparkSession, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every shipped job file passes the checks and plans (on the session's SparkSession)."""
    folders = (demo_job_file().parent, REPO / "connectors" / "examples")
    files = sorted(str(p) for folder in folders for p in folder.glob("*.properties"))
    assert len(files) > 4
    assert main(["validate", *files]) == 0
    out = capsys.readouterr().out
    assert out.count(": ok (") == len(files)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "connector.class=kafka-source\nbootstrap.servers=x\ntopics=a\ntopcs=b\n",
            "unknown kafka source key(s) topcs",
        ),
        (
            "connector.class=kafka-source\nbootstrap.servers=x\ntopics=a\nvalue.format=json\n",
            "needs value.schema",
        ),
        (
            "connector.class=kafka-source\nbootstrap.servers=x\ntopics=a\nvalue.format=json\nvalue.schema=a strin\n",
            "unsupported Spark type 'strin'",
        ),
        (
            "connector.class=kafka-source\nbootstrap.servers=x\ntopics=a\nvalue.format=avro\nvalue.schema.file=/nope.avsc\n",
            "/nope.avsc",
        ),
        ("connector.class=kafka-sink\ntopic=out\n", "missing required kafka sink key(s): bootstrap.servers"),
        ("connector.class=kafka-pipe\n", "connector.class must be one of kafka-source, kafka-sink"),
        (
            "connector.class=kafka-sink\nbootstrap.servers=${NOT_SET_ANYWHERE}\n",
            "${NOT_SET_ANYWHERE} is not set",
        ),
    ],
)
def test_bad_connector_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    assert main(["validate", _write(tmp_path, "c.properties", text)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err


def test_job_file_checks_its_connectors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write(
        tmp_path, "in.properties", "connector.class=kafka-source\nbootstrap.servers=x\ntopics=a\nname=in\n"
    )
    _write(
        tmp_path,
        "out.properties",
        "connector.class=kafka-sink\nbootstrap.servers=x\nname=out\nkey.format=yaml\n",
    )
    job = _write(
        tmp_path,
        "job.properties",
        "app.id=j\nsources=in.properties\nsinks=out.properties\npipeline=m:f\ncheckpoint.location=/tmp/x\n",
    )
    assert main(["validate", job]) == 1
    assert "key.format='yaml': expected one of bytes, string, json, avro" in capsys.readouterr().err


def test_secrets_never_reach_the_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(
        tmp_path,
        "c.properties",
        "connector.class=kafka-sink\nbootstrap.servers=x\nkafka.sasl.password=hunter2\nbogus=1\n",
    )
    assert main(["validate", path]) == 1
    captured = capsys.readouterr()
    assert "hunter2" not in captured.out + captured.err
