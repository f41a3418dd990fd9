"""`ethereal-kafka run` errors name the culprit, fast, and keep Spark's log lines off the terminal (real processes,
the session's broker)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

from ethereal_kafka.connectors.kafka.topics import produce, read_committed
from ethereal_kafka.runtime.logs import JVM_OUTPUT_FILE
from ethereal_kafka.testing.cluster import KafkaCluster
from ethereal_kafka.testing.plugin import TopicFactory
from tests.integration.test_run_lifecycle import _write_sql_job

CLI = str(Path(sys.executable).parent / "ethereal-kafka")
#: A framework line on stderr: lifecycle (`12:00:01 INFO ethereal-kafka: ...`), the progress line, or the error.
FRAMEWORK_LINE = re.compile(r"^(\d\d:\d\d:\d\d (INFO|WARNING|ERROR) ethereal-kafka: |error: |{app} \| )")
#: The one line the driver JVM itself prints as it starts (Spark's launcher always adds the Vector API module): it goes
#: to the log folder's `jvm-output.log` with the rest of the JVM's own output, not to the terminal.
JVM_LAUNCH_LINE = "WARNING: Using incubator modules: jdk.incubator.vector"


def _job(folder: Path, bootstrap: str, source: str, sink: str) -> Path:
    """A `transform.sql` job reading JSON orders (`on.error` left at its default, `fail`)."""
    return _write_sql_job(
        folder,
        bootstrap,
        source,
        sink,
        "SELECT CAST(order_id AS STRING) AS key, to_json(named_struct('amount', amount)) AS value FROM orders",
    )


def _run(job: Path, logs: Path, timeout_s: float = 60) -> tuple[subprocess.CompletedProcess[str], float]:
    began = time.monotonic()
    done = subprocess.run(
        [CLI, "run", str(job), "--available-now", "--log-dir", str(logs)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    return done, time.monotonic() - began


def test_a_missing_sink_topic_is_refused_before_spark_starts(
    kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    """Used to fail after minutes with `_INCONSISTENT ... message(s) failed delivery`, naming no topic."""
    bs = kafka_cluster.bootstrap
    job = _job(tmp_path, bs, topic_factory(), "no-such-sink-topic")
    done, elapsed = _run(job, tmp_path / "logs")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"error: {tmp_path / 'out.properties'}: topic 'no-such-sink-topic' does not exist at {bs}"
    ]
    assert elapsed < 10, f"run took {elapsed:.1f}s to refuse (Spark started?)"
    assert not (tmp_path / "logs" / "spark.log").exists()


def test_a_missing_source_topic_is_refused_before_spark_starts(
    kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    bs = kafka_cluster.bootstrap
    job = _job(tmp_path, bs, "no-such-source-topic", topic_factory())
    done, elapsed = _run(job, tmp_path / "logs")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"error: {tmp_path / 'orders.properties'}: topic 'no-such-source-topic' does not exist at {bs}"
    ]
    assert elapsed < 10, f"run took {elapsed:.1f}s to refuse (Spark started?)"


def test_a_poison_record_with_on_error_fail_shows_framework_lines_only(
    kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    """`on.error=fail`: stderr carries the framework's lines and ends with the one-line error; Spark's ERROR and
    WARN lines (8 of them before) are in the log folder's `spark.log`, whose path is printed once."""
    bs = kafka_cluster.bootstrap
    src, dst = topic_factory(), topic_factory()
    produce(
        bs, src, [(b"1", b'{"order_id": 1, "amount": 5.0}'), (b"2", b"not json"), (b"3", b'{"order_id": 3}')]
    )
    job = _job(tmp_path, bs, src, dst)
    logs = tmp_path / "logs"
    done, elapsed = _run(job, logs, timeout_s=240)
    app = job.read_text().split("\n", 1)[0].removeprefix("app.id=")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1, done.stderr[-3000:]
    assert lines[-1].startswith("error: ") and f"(full trace under {logs})" in lines[-1], lines[-1]
    pattern = re.compile(FRAMEWORK_LINE.pattern.format(app=re.escape(app)))
    strangers = [line for line in lines if not pattern.match(line)]
    assert strangers == [], (
        strangers
    )  # no Spark `25/11/24 12:00:01 WARN ...` / `ERROR ...` lines, no JVM line
    assert JVM_LAUNCH_LINE in (logs / JVM_OUTPUT_FILE).read_text(errors="replace")
    assert sum(f"logs: {logs}" in line for line in lines) == 1
    spark_log = (logs / "spark.log").read_text(errors="replace")
    assert " ERROR " in spark_log and "\tat org.apache.spark" in spark_log
    assert read_committed(bs, dst, timeout_s=2) == []
    print(f"on.error=fail run: exit 1 after {elapsed:.1f}s; {len(lines)} stderr lines:", *lines, sep="\n")
