"""`ethereal-kafka validate` plans the job as `run` does: a graph the planner refuses, or a pipeline whose user code
raises while it is built, fails `validate` with one line naming the file, instead of passing it and failing `run`.

The planning tests use the session's SparkSession (`validate` plans on the active session); the import failure is
found without Spark (`--no-plan`).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ethereal_kafka.cli import main

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SOURCE = (
    "connector.class=kafka-source\nname=orders\nbootstrap.servers=127.0.0.1:9\ntopics=orders\n"
    "value.format=json\nvalue.schema=id long, amount long\n"
)
SINK = "connector.class=kafka-sink\nname=out\nbootstrap.servers=127.0.0.1:9\ntopic=out\nvalue.format=json\n"

ECHO = """\
from ethereal_kafka.api.functions import KeyedProcessFunction


class Echo(KeyedProcessFunction):
    def process_element(self, value, ctx):
        yield value
"""
COUNT = """\
from ethereal_kafka.api.functions import AggregateFunction


class Count(AggregateFunction):
    def create_accumulator(self):
        return 0

    def add(self, value, acc):
        return acc + 1

    def get_result(self, acc):
        return acc
"""


def job(tmp_path: Path, pipeline: str, modules: dict[str, str] | None = None) -> tuple[Path, Path]:
    """A job folder with package `pkg` (a unique name: modules are imported once per process) whose module
    `jobs.py` holds `pipeline`; returns the job file and that module's path."""
    package = f"vp_{uuid.uuid4().hex[:8]}"
    folder = tmp_path / "jobs"
    (folder / package).mkdir(parents=True)
    (folder / package / "__init__.py").write_text("")
    for name, text in (modules or {}).items():
        (folder / package / name).write_text(text.replace("pkg.", f"{package}."))
    module = folder / package / "jobs.py"
    module.write_text(pipeline.replace("pkg.", f"{package}."))
    (folder / "in.properties").write_text(SOURCE)
    (folder / "out.properties").write_text(SINK)
    job_file = folder / "job.properties"
    job_file.write_text(
        f"app.id=plan-{package}\nsources=in.properties\nsinks=out.properties\npipeline={package}.jobs:build\n"
        f"checkpoint.location={tmp_path / 'checkpoint'}\n"
    )
    return job_file, module


def errors(capsys: pytest.CaptureFixture[str] | Any) -> list[str]:
    """The `error:` lines of a validate run (`capsys`, or what it captured)."""
    err = capsys.err if hasattr(capsys, "err") else capsys.readouterr().err
    lines = err.splitlines()
    assert lines and all(line.startswith("error: ") for line in lines), lines
    return lines


@pytest.mark.spark
def test_an_operator_misuse_the_planner_refuses_fails_validate(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job_file, module = job(
        tmp_path,
        "from pkg.echo import Echo\n\n\ndef build(env):\n"
        "    env.from_source('orders').key_by('id').process(Echo(), time_mode='event').sink_to('out')\n",
        {"echo.py": ECHO},
    )
    assert main(["validate", "--no-plan", str(job_file)]) == 0, "the checks without Spark cannot see it"
    capsys.readouterr()
    assert main(["validate", str(job_file)]) == 1
    [line] = errors(capsys)
    assert line.startswith(f"error: {module}: process#") and line.endswith(f"(job {job_file})"), line
    assert "time_mode='event' needs event time" in line


@pytest.mark.spark
def test_a_missing_output_type_the_planner_catches_fails_validate(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job_file, module = job(
        tmp_path,
        "from pkg.count import Count\n\n\ndef build(env):\n"
        "    env.from_source('orders').key_by('id').aggregate(Count()).sink_to('out')\n",
        {"count.py": COUNT},
    )
    assert main(["validate", str(job_file)]) == 1
    [line] = errors(capsys)
    assert line.startswith(f"error: {module}: ") and "aggregate needs output_type" in line, line


@pytest.mark.spark
def test_a_type_error_spark_finds_while_planning_is_one_line(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A sink whose format cannot hold the stream (bytes from a long): Spark's analysis refuses the plan with the
    whole plan in its message; validate prints its first line."""
    job_file, _ = job(
        tmp_path,
        "from pkg.count import Count\n\n\ndef build(env):\n"
        "    env.from_source('orders').key_by('id').aggregate(Count(), output_type='value long').sink_to('out')\n",
        {"count.py": COUNT},
    )
    sink = job_file.parent / "out.properties"
    sink.write_text(sink.read_text().replace("value.format=json", "value.format=bytes"))
    assert main(["validate", str(job_file)]) == 1
    captured = capsys.readouterr()
    [line] = errors(captured)
    assert "AnalysisException" in line and "cannot cast" in line and "Project [" not in line, line
    assert "DataFrameQueryContextLogger" not in captured.err


@pytest.mark.spark
def test_a_job_that_plans_is_ok(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job_file, _ = job(
        tmp_path,
        "from pkg.count import Count\n\n\ndef build(env):\n"
        "    env.from_source('orders').key_by('id').aggregate(Count(), output_type='value long').sink_to('out')\n",
        {"count.py": COUNT},
    )
    assert main(["validate", str(job_file)]) == 0, capsys.readouterr().err
    assert capsys.readouterr().out.startswith(f"{job_file}: ok (job 'plan-")


def test_a_user_function_module_that_fails_to_import_fails_validate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The pipeline imports its functions while it builds the graph; their module fails to import. Found without
    Spark, naming the failing line of that module."""
    job_file, _ = job(
        tmp_path,
        "def build(env):\n    from pkg.helpers import enrich\n\n"
        "    env.from_source('orders').map(enrich).sink_to('out')\n",
        {"helpers.py": "import not_installed_anywhere\n\n\ndef enrich(e):\n    return e\n"},
    )
    helpers = next(job_file.parent.glob("vp_*/helpers.py"))
    assert main(["validate", "--no-plan", str(job_file)]) == 1
    [line] = errors(capsys)
    assert line == (
        f"error: {helpers}:1: ModuleNotFoundError: No module named 'not_installed_anywhere' (building the "
        f"pipeline of job {job_file})"
    )
