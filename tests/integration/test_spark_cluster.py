"""Exactly-once on a real Spark standalone cluster (a master and two workers on 127.0.0.1, from the pip pyspark
distribution; the session's `spark_cluster` fixture, see conftest.py): the job's work runs in executor processes,
not in the driver, and the output is still exact.

Both deployment paths are covered: `spark-submit` with the documented entry script (master and settings from
spark-submit), and `ethereal-kafka run` with `spark.master=spark://...` in the job file.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from ethereal_kafka.examples import eos
from ethereal_kafka.faults import FAIL_BEFORE_COMMIT_ENV
from ethereal_kafka.testing.cluster import KafkaCluster
from ethereal_kafka.testing.plugin import TopicFactory
from ethereal_kafka.testing.spark_cluster import StandaloneSparkCluster, alive_workers
from tests.integration.eos_helpers import JobFiles, check_running_totals, feed, write_job

pytestmark = pytest.mark.timeout(900)


def _job(
    tmp_path: Path, bs: str, topics: TopicFactory, extra: str = ""
) -> tuple[JobFiles, list[tuple[bytes, bytes]]]:
    src, dst = topics(partitions=2), topics(partitions=2)
    inputs = eos.events(1500)
    feed(bs, src, inputs, 2)
    # A keyed running aggregate: shuffle, state store and one transaction per sink task, all on executors.
    files = write_job(
        tmp_path,
        bs,
        src,
        dst,
        "ethereal_kafka.examples.eos:running_total",
        max_records=500,
        extra_job=f"spark.ui.enabled=false\n{extra}",
    )
    return files, inputs


def _check_exact(bs: str, files: JobFiles, inputs: list[tuple[bytes, bytes]]) -> str:
    return check_running_totals(bs, files.sink_topic, inputs)


def _ran_on_executors(cluster: StandaloneSparkCluster, app_name: str) -> int:
    """Tasks the app's executors ran (from their logs in the workers' work folders); asserts the app used both."""
    state = cluster.state() or {}
    apps = [
        a for a in state.get("completedapps", []) + state.get("activeapps", []) if a.get("name") == app_name
    ]
    assert apps, f"application {app_name} never registered with the master"
    app_id = apps[-1]["id"]
    tasks_per_worker = []
    for worker in sorted(p for p in cluster.state_dir.glob("worker-*") if p.is_dir()):
        logs = list(worker.glob(f"{app_id}/*/stderr"))
        tasks_per_worker.append(sum(log.read_text(errors="replace").count("Running task") for log in logs))
    assert len(tasks_per_worker) == 2 and all(n > 0 for n in tasks_per_worker), tasks_per_worker
    return sum(tasks_per_worker)


def _run_job(
    launcher: list[str], job: Path, log_dir: Path, spark_cluster: StandaloneSparkCluster
) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run `<launcher> run JOB --available-now` against the cluster; the result and its wall time in seconds."""
    began = time.monotonic()
    result = subprocess.run(
        [*launcher, "run", str(job), "--available-now", "--log-dir", str(log_dir)],
        capture_output=True,
        text=True,
        env=spark_cluster.env(),
        timeout=600,
        check=False,
    )
    return result, time.monotonic() - began


def test_spark_submit_runs_the_exactly_once_job_on_the_cluster_through_task_retries(
    spark_cluster: StandaloneSparkCluster,
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
) -> None:
    """The documented deployment: `spark-submit --master spark://HOST:PORT <entry script> run job.properties`. Also:
    the first attempt of every sink task fails after producing its records and before committing them; Spark
    retries each task on the cluster, the retry fences the failed attempt's open transaction, and the output is
    still exact."""
    bs = kafka_cluster.bootstrap
    assert len(alive_workers(spark_cluster.state() or {})) == 2
    files, inputs = _job(tmp_path, bs, topic_factory, extra=f"spark.executorEnv.{FAIL_BEFORE_COMMIT_ENV}=1\n")
    entry = subprocess.run(
        [sys.executable, "-m", "ethereal_kafka.deploy"], capture_output=True, text=True, check=True
    ).stdout.strip()
    result, took = _run_job([*spark_cluster.submit_command(), entry], files.job, tmp_path, spark_cluster)
    assert result.returncode == 0, result.stderr[-4000:]
    # spark-submit merges the Python driver's stderr into its own standard output.
    assert "stopped: input consumed" in result.stdout
    tasks = _ran_on_executors(spark_cluster, f"ethereal-kafka-{files.app_id}")
    # The driver JVM's log (task failures and their retries) is spark-submit's output, or the log folder's file.
    logs = [result.stdout, result.stderr]
    logs += [p.read_text(errors="replace") for p in tmp_path.glob("*.log")]
    retried = max(text.count("injected failure after produce") for text in logs)
    print(
        f"[spark-submit] {_check_exact(bs, files, inputs)}; {tasks} executor tasks; {retried} failed attempts "
        f"retried; job {took:.1f}s"
    )
    assert retried >= 2, "every sink task's first attempt failed after producing and was retried"


def _executor_pids(app_id: str) -> list[int]:
    """The live executor JVMs of the Spark application `app_id` (by their `--app-id` argument)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"org.apache.spark.executor.CoarseGrainedExecutorBackend" in args and app_id.encode() in args:
            pids.append(int(proc.name))
    return pids


def test_an_executor_killed_inside_a_transaction_loses_and_repeats_nothing(
    spark_cluster: StandaloneSparkCluster,
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
) -> None:
    """`ethereal-kafka run` with `spark.master=spark://...` in the job file. The driver lives, one executor's JVM is
    SIGKILLed while a sink task on it holds an open transaction (seen through the fault trace): Spark declares the
    executor lost and runs its tasks again elsewhere; the new attempts fence the dead one's transactional ids
    (aborting what it left open) and commit. The output is exact."""
    import os
    import signal

    from ethereal_kafka.faults import TRACE_ENV, TXN_DELAY_ENV

    bs = kafka_cluster.bootstrap
    trace = tmp_path / "trace.log"
    extra = (
        f"spark.master={spark_cluster.master_url}\nspark.executorEnv.{TRACE_ENV}={trace}\n"
        f"spark.executorEnv.{TXN_DELAY_ENV}=1500\n"
    )
    files, inputs = _job(tmp_path, bs, topic_factory, extra=extra)
    launched = time.monotonic()
    stderr = tmp_path / "job.stderr"
    job = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ethereal_kafka.cli",
            "run",
            str(files.job),
            "--available-now",
            "--log-dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=stderr.open("w"),
        env=spark_cluster.env(),
    )
    killed = None
    try:
        deadline = time.monotonic() + 300
        while killed is None and time.monotonic() < deadline and job.poll() is None:
            lines = trace.read_text().splitlines() if trace.exists() else []
            # After the first committed epoch, aim at a task inside its open transaction.
            committed = any(line.split()[-1] == "done" for line in lines)
            opened = [line for line in lines[-4:] if line.split()[-1] == "open"]
            if committed and opened:
                apps = (spark_cluster.state() or {}).get("activeapps", [])
                ours = [a["id"] for a in apps if a.get("name") == f"ethereal-kafka-{files.app_id}"]
                pids = _executor_pids(ours[-1]) if ours else []
                if pids:
                    os.kill(pids[0], signal.SIGKILL)
                    killed = (pids[0], opened[-1])
            time.sleep(0.05)
        job.wait(timeout=600)
    finally:
        if job.poll() is None:
            job.kill()
    err = stderr.read_text(errors="replace")
    assert killed is not None, f"no executor was killed (job exit {job.returncode}): {err[-3000:]}"
    assert job.returncode == 0, err[-4000:]
    assert f"starting on {spark_cluster.master_url}" in err, "the job file's spark.master was used"
    log = (tmp_path / "spark.log").read_text(errors="replace")
    assert "Lost executor" in log or "lost executor" in log.lower(), "Spark declared the executor lost"
    print(
        f"[executor killed: pid {killed[0]} at '{killed[1]}'] {_check_exact(bs, files, inputs)}; "
        f"job {time.monotonic() - launched:.1f}s"
    )
