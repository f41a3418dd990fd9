"""Executor auto-scaling on the session's Spark standalone cluster (two 1-core workers on 127.0.0.1): a lag spike
scales out within the policy's bounds, lag back to ~0 scales in after the cooldown, and a job that scales out and in
while SIGKILLs land writes exactly the plain-Python reference (duplicates=0 lost=0)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ethereal_kafka import faults
from ethereal_kafka.examples import eos
from ethereal_kafka.testing.cluster import KafkaCluster
from ethereal_kafka.testing.crash import compare, run_with_kills
from ethereal_kafka.testing.plugin import TopicFactory
from ethereal_kafka.testing.spark_cluster import StandaloneSparkCluster
from tests.integration.eos_helpers import check_running_totals, feed, output, pairs, write_job

pytestmark = pytest.mark.timeout(600)

POLICY = (
    "autoscale.policy=lag\nautoscale.min.executors=1\nautoscale.max.executors=2\nautoscale.interval.ms=500\n"
    "autoscale.scale.up.cooldown.ms=1000\nspark.ui.enabled=false\nprogress=off\n"
)


def _logged_port(log: Path, what: str) -> int:
    """The port the job logged for its `what` endpoint (`metrics at http://127.0.0.1:N/metrics`, `ui at ...`)."""
    found = re.search(rf"INFO ethereal-kafka: {what} at http://127\.0\.0\.1:(\d+)/", log.read_text())
    assert found, f"the job logged no {what} address"
    return int(found.group(1))


def _get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode())
    except OSError:
        return None


def _gauge(metrics_port: int, name: str, **labels: str) -> float | None:
    text = _get(f"http://127.0.0.1:{metrics_port}/metrics")
    for family in text_string_to_metric_families(text or ""):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return None


def _decisions(ui_port: int) -> list[dict[str, Any]]:
    body = _get(f"http://127.0.0.1:{ui_port}/api/decisions")
    return list(json.loads(body)["decisions"]) if body else []


def _wait(what: str, ready: Callable[[], bool], timeout_s: float, process: subprocess.Popen[bytes]) -> float:
    began = time.monotonic()
    while time.monotonic() - began < timeout_s:
        if ready():
            return time.monotonic() - began
        assert process.poll() is None, f"the job exited ({process.returncode}) while waiting for {what}"
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")


def test_lag_spike_scales_out_within_bounds_and_back_in_after_the_cooldown(
    spark_cluster: StandaloneSparkCluster,
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
) -> None:
    bs = kafka_cluster.bootstrap
    src, dst = topic_factory(partitions=2), topic_factory(partitions=2)
    down_cooldown_ms = 15000
    files = write_job(
        tmp_path,
        bs,
        src,
        dst,
        "ethereal_kafka.examples.eos:stateless",
        max_records=0,
        extra_job=f"spark.master={spark_cluster.master_url}\n{POLICY}autoscale.scale.up.lag=3000\n"
        f"autoscale.scale.down.lag=100\nautoscale.scale.down.cooldown.ms={down_cooldown_ms}\n"
        "epoch.max.records=1500\n",
    )
    log = tmp_path / "job.log"
    job = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ethereal_kafka.cli",
            "run",
            str(files.job),
            "--log-dir",
            str(tmp_path / "logs"),
        ],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        env=spark_cluster.env(),
        start_new_session=True,
    )
    try:
        started = _wait("the job to run", lambda: "running: queries" in log.read_text(), 240, job)
        # Both ports are left at 0 (a free port, logged at start): a port picked by the test could be taken by
        # another process's connection before the job binds it (it was once: "Address already in use").
        metrics_port, ui_port = _logged_port(log, "metrics"), _logged_port(log, "ui")
        placed = _decisions(ui_port)
        assert [d["executors_after"] for d in placed] in ([], [1]), placed
        registered = lambda: _gauge(metrics_port, "ethereal_kafka_executors", state="registered")  # noqa: E731
        _wait("one executor", lambda: registered() == 1, 60, job)
        inputs = eos.events(8000)
        feed(bs, src, inputs, 2)  # the spike
        _wait("a scale-up", lambda: any(d["action"] == "scale-up" for d in _decisions(ui_port)), 60, job)
        took = _wait("a second executor to register", lambda: registered() == 2, 90, job)
        _wait(
            "the lag back to ~0",
            lambda: len(output(bs, dst)) >= len(eos.stateless_reference(inputs)),
            240,
            job,
        )
        _wait("a scale-down", lambda: _decisions(ui_port)[-1]["action"] == "scale-down", 60, job)
        _wait("one executor again", lambda: registered() == 1, 60, job)
        decisions = _decisions(ui_port)
    finally:
        if job.poll() is None:
            job.send_signal(signal.SIGTERM)
        try:
            code = job.wait(timeout=90)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(job.pid, signal.SIGKILL)
    text = log.read_text()
    assert code == 0, text[-3000:]
    changes = [d for d in decisions if not d["reason"].startswith("start:")]
    ups = [d for d in changes if d["action"] == "scale-up"]
    downs = [d for d in changes if d["action"] == "scale-down"]
    assert all(d["applied"] for d in changes)
    assert max(d["executors_after"] for d in changes) == 2, "never past autoscale.max.executors"
    assert min(d["executors_after"] for d in changes) == 1, "never below autoscale.min.executors"
    assert ups[0]["executors_before"] == 1 and re.match(
        r"lag \d+ >= autoscale.scale.up.lag 3000", ups[0]["reason"]
    )
    last_down = downs[-1]
    assert re.match(r"lag \d+ <= autoscale.scale.down.lag 100", last_down["reason"])
    before = [d["time_ms"] for d in changes if d["time_ms"] < last_down["time_ms"]]
    assert last_down["time_ms"] - max(before) >= down_cooldown_ms, "scaled in before the cooldown"
    assert "autoscale: scale-up 1 -> 2 executors: lag" in text
    result = compare(eos.stateless_reference(inputs), pairs(output(bs, dst)))
    assert (result.duplicates, result.lost, result.unexpected) == (0, 0, 0)
    print(
        f"[autoscale] job running {started:.1f}s after start; decisions "
        f"{[(d['action'], d['executors_before'], d['executors_after'], d['reason']) for d in changes]}; "
        f"second executor registered {took:.1f}s after the scale-up; {result.line(0)}"
    )


def test_scaling_out_and_in_while_sigkills_land_keeps_the_output_exact(
    spark_cluster: StandaloneSparkCluster,
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
) -> None:
    bs = kafka_cluster.bootstrap
    src, dst = topic_factory(partitions=2), topic_factory(partitions=2)
    inputs = eos.events(12_000)
    feed(bs, src, inputs, 2)
    crash_log = tmp_path / "crash.log"
    # Executors do not inherit the driver's environment: the kill harness's transaction trace reaches them through
    # Spark's executor environment.
    trace = f"spark.executorEnv.{faults.TRACE_ENV}={crash_log.with_suffix('.trace')}\n"
    files = write_job(
        tmp_path,
        bs,
        src,
        dst,
        "ethereal_kafka.examples.eos:running_total",
        max_records=0,
        extra_job=f"spark.master={spark_cluster.master_url}\n{POLICY}autoscale.scale.up.lag=4000\n"
        "autoscale.scale.down.lag=1500\nautoscale.scale.down.cooldown.ms=2000\nepoch.max.records=1200\n"
        f"metrics.enabled=false\nui.enabled=false\n{trace}",
    )
    run = run_with_kills(
        files.job,
        kills=2,
        seed=5,
        env=spark_cluster.env(),
        log=crash_log,
        epochs_before_kill=(1, 2),
        timeout_s=540,
    )
    text = run.log.read_text(errors="replace")
    ups = re.findall(r"autoscale: scale-up (\d) -> (\d) executors", text)
    downs = re.findall(r"autoscale: scale-down (\d) -> (\d) executors: lag", text)
    for line in run.landed:
        print(f"[kill] {line}")
    for number, segment in enumerate(text.split("=== run ")[1:], start=1):
        scaling = re.findall(r"autoscale: (scale-\w+ \d -> \d) executors", segment)
        print(f"[run {number}] {'killed' if '=== SIGKILL' in segment else 'finished'}; autoscale: {scaling}")
    print(
        f"[autoscale+kills] runs={run.runs} scale-ups={ups} scale-downs={downs} kills={run.kills} in "
        f"{run.seconds:.0f}s"
    )
    assert run.kills == 2 and all("in flight" in line or "between epochs" in line for line in run.landed)
    assert ups and downs, "the job did not scale both ways"
    print(f"[autoscale+kills] {check_running_totals(bs, dst, inputs)} kills={run.kills}")
