"""`ethereal-kafka validate` and `run` catch a job's mistakes before Spark starts, one line per problem naming its
file. Real processes, from a working directory other than the job's, without PYTHONPATH."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

CLI = str(Path(sys.executable).parent / "ethereal-kafka")

SOURCE = "connector.class=kafka-source\nname=orders\nbootstrap.servers=127.0.0.1:9\ntopics=orders\n"
SINK = "connector.class=kafka-sink\nname=large-orders\nbootstrap.servers=127.0.0.1:9\ntopic=large-orders\n"
JOB = (
    "app.id=preflight\nsources=orders-source.properties\nsinks=large-sink.properties\n"
    "pipeline=my_jobs.orders:build\ncheckpoint.location={checkpoint}\n"
)
PIPELINE = """\
from pyspark.sql import functions as F


def build(env):
    orders = env.from_source("{source}")
    orders.filter(F.col("amount") >= 50).sink_to("{sink}")
"""


@pytest.fixture
def job_dir(tmp_path: Path) -> Path:
    """A job folder whose pipeline package `my_jobs` sits beside the job file (as in the README)."""
    folder = tmp_path / "jobs"
    (folder / "my_jobs").mkdir(parents=True)
    (folder / "orders-source.properties").write_text(SOURCE)
    (folder / "large-sink.properties").write_text(SINK)
    (folder / "job.properties").write_text(JOB.format(checkpoint=tmp_path / "checkpoint"))
    (folder / "my_jobs" / "__init__.py").write_text("")
    (folder / "my_jobs" / "orders.py").write_text(PIPELINE.format(source="orders", sink="large-orders"))
    return folder


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run the console script in `cwd` without PYTHONPATH, as a user's shell would."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([CLI, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def with_pipeline(job_dir: Path, spec: str) -> Path:
    """The job file of `job_dir`, rewritten to name pipeline `spec`."""
    job = job_dir / "job.properties"
    job.write_text(job.read_text().replace("my_jobs.orders:build", spec))
    return job


def error_lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    lines = done.stderr.splitlines()
    assert lines and all(line.startswith("error: ") for line in lines), done.stderr
    return lines


def test_pipeline_beside_the_job_validates_from_another_directory(job_dir: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = cli("validate", "--no-plan", "../jobs/job.properties", cwd=elsewhere)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "../jobs/job.properties: ok (job 'preflight', sources orders, sinks large-orders, exactly-once)"
    )
    assert done.stderr == ""


def test_pipeline_in_the_working_directory_is_found_too(job_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "shared").mkdir()
    (job_dir / "my_jobs").rename(tmp_path / "shared" / "my_jobs")
    done = cli("validate", "--no-plan", str(job_dir / "job.properties"), cwd=tmp_path / "shared")
    assert done.returncode == 0, done.stderr


def test_missing_pipeline_module(job_dir: Path, tmp_path: Path) -> None:
    job = with_pipeline(job_dir, "my_jobs.ordres:build")
    done = cli("validate", str(job), cwd=tmp_path)
    assert done.returncode == 1
    [line] = error_lines(done)
    assert line.startswith(
        f"error: {job}: pipeline=my_jobs.ordres:build: no module my_jobs.ordres in {job_dir}"
    )


def test_missing_pipeline_function(job_dir: Path, tmp_path: Path) -> None:
    job = with_pipeline(job_dir, "my_jobs.orders:bulid")
    done = cli("validate", str(job), cwd=tmp_path)
    assert done.returncode == 1
    [line] = error_lines(done)
    assert line == (
        f"error: {job}: pipeline=my_jobs.orders:bulid: {job_dir / 'my_jobs' / 'orders.py'} has no function bulid"
    )


def test_kafka_setting_typo_is_refused_by_librdkafka(job_dir: Path, tmp_path: Path) -> None:
    sink = job_dir / "large-sink.properties"
    sink.write_text(SINK + "kafka.linger.mss=5\n")
    for target in (job_dir / "job.properties", sink):  # through the job, and the connector file alone
        done = cli("validate", str(target), cwd=tmp_path)
        assert done.returncode == 1
        [line] = error_lines(done)
        assert line == (
            f'error: {sink}: librdkafka rejects the kafka.* settings: No such configuration property: "linger.mss" '
            "(did you mean kafka.linger.ms?)"
        )


def test_connector_names_the_job_does_not_define(job_dir: Path, tmp_path: Path) -> None:
    module = job_dir / "my_jobs" / "orders.py"
    module.write_text(PIPELINE.format(source="order", sink="large"))
    job = job_dir / "job.properties"
    done = cli("validate", str(job), cwd=tmp_path)
    assert done.returncode == 1
    assert error_lines(done) == [
        f"error: {module}:5: from_source('order'): the job {job} has no source named 'order' (sources: orders)",
        f"error: {module}:6: sink_to('large'): the job {job} has no sink named 'large' (sinks: large-orders)",
    ]


def test_unknown_key_gets_a_suggestion_naming_the_file(job_dir: Path, tmp_path: Path) -> None:
    source = job_dir / "orders-source.properties"
    source.write_text(SOURCE + "starting.offset=earliest\n")
    done = cli("validate", str(job_dir / "job.properties"), cwd=tmp_path)
    assert done.returncode == 1
    [line] = error_lines(done)
    assert (
        line
        == f"error: {source}: unknown kafka source key(s) starting.offset (did you mean starting.offsets?)"
    )


def test_run_refuses_before_spark_starts(job_dir: Path, tmp_path: Path) -> None:
    """`run` makes the same checks first: a bad pipeline costs about a second, and no broker is contacted."""
    job = with_pipeline(job_dir, "my_jobs.orders:bulid")
    began = time.monotonic()
    done = cli("run", str(job), "--log-dir", str(tmp_path / "logs"), cwd=tmp_path)
    elapsed = time.monotonic() - began
    assert done.returncode == 1
    assert error_lines(done)[-1].endswith(f"{job_dir / 'my_jobs' / 'orders.py'} has no function bulid")
    assert elapsed < 10, f"run took {elapsed:.1f}s to refuse (Spark started?)"


def test_dataframe_pipeline_names_the_job_does_not_define(job_dir: Path, tmp_path: Path) -> None:
    module = job_dir / "my_jobs" / "frames.py"
    module.write_text(
        "def build(sources):\n"
        "    orders = sources['order']\n"
        "    return {'large-orders': orders, 'revenue': orders}\n"
    )
    job = with_pipeline(job_dir, "my_jobs.frames:build")
    done = cli("validate", str(job), cwd=tmp_path)
    assert done.returncode == 1
    assert sorted(error_lines(done)) == [
        f"error: {module}:2: sources['order']: the job {job} has no source named 'order' (sources: orders)",
        f"error: {module}:3: return {{'revenue': ...}}: the job {job} has no sink named 'revenue' "
        "(sinks: large-orders)",
    ]


def test_epochs_too_large_for_the_transaction_timeout_are_refused_before_spark(
    job_dir: Path, tmp_path: Path
) -> None:
    """The bound check the checkpoint coordinator makes at start, made by `validate` and by `run` before Spark
    starts (it used to pass `validate` and fail `run` ten seconds later, after Spark's start-up). Fixed epoch
    sizing: with adaptive sizing (the default) the epoch sizer keeps an epoch's duration within the timeout, so a
    large records bound passes."""
    source = job_dir / "orders-source.properties"
    source.write_text(SOURCE + "max.records.per.epoch=200000\n")
    job = job_dir / "job.properties"
    assert cli("validate", "--no-plan", str(job), cwd=tmp_path).returncode == 0
    job.write_text(job.read_text() + "epoch.sizing=fixed\n")
    done = cli("validate", str(job), cwd=tmp_path)
    assert done.returncode == 1
    [line] = error_lines(done)
    assert line.startswith(
        f"error: {source}: transaction.timeout.ms=60000 is too short for source orders's epochs: up to 200000 "
        "records"
    )
    began = time.monotonic()
    done = cli("run", str(job), "--log-dir", str(tmp_path / "logs"), cwd=tmp_path)
    elapsed = time.monotonic() - began
    assert done.returncode == 1 and error_lines(done)[-1] == line
    assert elapsed < 10, f"run took {elapsed:.1f}s to refuse (Spark started?)"
    job.write_text(job.read_text() + "transaction.timeout.ms=300000\n")
    assert cli("validate", "--no-plan", str(job), cwd=tmp_path).returncode == 0
