"""`ethereal-kafka run` as a long-running processor: graceful SIGTERM, one-line fatal errors, `transform.sql`."""

from __future__ import annotations

import datetime
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from ethereal_kafka.checkpoint.history import CheckpointHistory
from ethereal_kafka.connectors.kafka.topics import produce, read_committed
from ethereal_kafka.demo import demo_job_file, demo_orders, expected_large, expected_revenue
from ethereal_kafka.examples import eos
from ethereal_kafka.testing.cluster import KafkaCluster
from ethereal_kafka.testing.crash import compare
from ethereal_kafka.testing.plugin import RunJob, TopicFactory
from ethereal_kafka.testing.spark_cluster import session_pids
from tests.integration.eos_helpers import feed, pairs, write_job

DEMO_JOB = demo_job_file()
RUN = [sys.executable, "-m", "ethereal_kafka.cli", "run"]


def _records(bootstrap: str, topic: str) -> list[tuple[str, str]]:
    """The committed output as (key, canonical JSON value) pairs."""
    return [
        ((r.key or b"").decode(), json.dumps(json.loads(r.value or b"{}"), sort_keys=True))
        for r in read_committed(bootstrap, topic, timeout_s=60)
    ]


def _reference(orders: list[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    return [(str(o["customer"]), json.dumps(o, sort_keys=True)) for o in expected_large(orders)]


def _windows(bootstrap: str, topic: str) -> list[tuple[str, int, float]]:
    """The committed revenue windows as (customer, window start ms, revenue)."""
    out = []
    for record in read_committed(bootstrap, topic, timeout_s=60):
        window = json.loads(record.value or b"{}")
        start = datetime.datetime.fromisoformat(str(window["window_start"]).replace("Z", "+00:00"))
        out.append((window["customer"], round(start.timestamp() * 1000), round(float(window["revenue"]), 2)))
    return out


def _our_tracebacks(log: str) -> list[str]:
    """The tracebacks in a run's log, except PySpark's streaming source runner ending on EOF when its query stops
    (PySpark ends that process by closing its socket, and the process may print the EOFError before it dies)."""
    blocks = log.split("Traceback (most recent call last):")[1:]
    return [block[:600] for block in blocks if "python_streaming_source_runner.py" not in block[:600]]


def _wait_gone(pid: int, timeout_s: float = 30.0) -> list[int]:
    """Processes left in the session of `pid` (the Spark JVM and Python workers of a run) after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while (left := session_pids([pid])) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def _write_sql_job(
    folder: Path, bootstrap: str, source: str, sink: str, sql: str, sink_extra: str = ""
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "orders.properties").write_text(
        f"connector.class=kafka-source\nname=orders\nbootstrap.servers={bootstrap}\ntopics={source}\n"
        "starting.offsets=earliest\nmax.records.per.epoch=400\nvalue.format=json\n"
        "value.schema=order_id bigint, customer string, amount double\n"
    )
    (folder / "out.properties").write_text(
        f"connector.class=kafka-sink\nname=large-orders\nbootstrap.servers={bootstrap}\ntopic={sink}\n{sink_extra}"
    )
    job = folder / "job.properties"
    job.write_text(
        f"app.id=sql-{uuid.uuid4().hex[:8]}\nsources=orders.properties\nsinks=out.properties\n"
        f"checkpoint.location={folder / 'checkpoint'}\ntrigger.interval.ms=300\ntransform.sql={sql}\n"
    )
    return job


def test_sigterm_ends_the_epoch_in_flight_and_a_restart_is_exact(
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    run_job: RunJob,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The demo job (`ethereal_kafka/demo/job/demo-job.properties`: large orders, and revenue per customer per 10 s window) runs
    as a processor; SIGTERM while it works stops it between epochs with exit 0; a restart finishes the input; a
    read_committed consumer sees both references exactly."""
    bs = kafka_cluster.bootstrap
    src, dst, revenue = topic_factory(partitions=2), topic_factory(partitions=2), topic_factory(partitions=2)
    orders = demo_orders(3000)  # 6+ epochs of 500: SIGTERM lands while there is work left
    produce(bs, src, orders)
    env = {
        **os.environ,
        "ETHEREAL_KAFKA_BOOTSTRAP": bs,
        "ETHEREAL_KAFKA_STATE": str(tmp_path / "state"),
        "DEMO_RUN": uuid.uuid4().hex[:8],
        "DEMO_INPUT_TOPIC": src,
        "DEMO_OUTPUT_TOPIC": dst,
        "DEMO_REVENUE_TOPIC": revenue,
    }
    log_path = tmp_path / "first.log"  # a file, not an unread pipe (a full pipe blocks the job)
    began = time.monotonic()
    first = subprocess.Popen(
        [*RUN, str(DEMO_JOB), "--log-dir", str(tmp_path / "logs")],
        stdout=log_path.open("w"),
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 150
        while (
            time.monotonic() < deadline and first.poll() is None and not read_committed(bs, dst, timeout_s=1)
        ):
            time.sleep(0.5)
        assert first.poll() is None, log_path.read_text()[-3000:]
        signalled = time.monotonic()
        first.send_signal(signal.SIGTERM)  # the driver only, as systemd (KillMode=mixed) or Kubernetes do
        code = first.wait(timeout=90)
        stop_s = time.monotonic() - signalled
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
    log = log_path.read_text(errors="replace")
    assert code == 0, log[-3000:]
    assert "SIGTERM received: stopping between epochs" in log
    last = [line for line in log.splitlines() if "ethereal-kafka: stopped on SIGTERM" in line]
    assert last and ": graceful in " in last[-1], log[-3000:]
    assert not _our_tracebacks(log), log[-3000:]
    # A healthy run fences nobody: every sink task attempt has a producer of its own (it used to log librdkafka's
    # "FATAL ... fenced by a newer instance" whenever Spark moved a task to another Python worker). librdkafka's
    # lines are in the log folder: the driver's in ethereal-kafka.log, the Python workers' in librdkafka-workers.log.
    kafka_lines = [
        line
        for name in ("ethereal-kafka.log", "librdkafka-workers.log")
        if (tmp_path / "logs" / name).exists()
        for line in (tmp_path / "logs" / name).read_text(errors="replace").splitlines()
        if "ethereal_kafka.librdkafka" in line or name.startswith("librdkafka")
    ]
    fenced = [line for line in log.splitlines() + kafka_lines if "_FENCED" in line or "FATAL" in line]
    assert not fenced, fenced[:3]
    assert _wait_gone(first.pid) == [], "the first run left Spark processes behind"
    partial = _records(bs, dst)
    assert 0 < len(partial) < len(expected_large(orders)), "SIGTERM should land while input is left"

    # The restart runs in-process (the demo job's connector files read these variables).
    for name, value in env.items():
        if name.startswith(("ETHEREAL_KAFKA_", "DEMO_")):
            monkeypatch.setenv(name, value)
    second = run_job(DEMO_JOB)
    assert second.report is not None and second.report.how == "finished"
    result = compare(_reference(orders), _records(bs, dst))
    windows = compare([(c, s, r) for (c, s), r in expected_revenue(orders).items()], _windows(bs, revenue))
    print(
        f"large orders {result.line(0)}; windows {windows.line(0)}; stopped in {stop_s:.1f}s after SIGTERM "
        f"({last[-1].split('ethereal-kafka: ')[-1]}); test {time.monotonic() - began:.0f}s"
    )
    assert (result.duplicates, result.lost, result.unexpected) == (0, 0, 0)
    assert (windows.duplicates, windows.lost, windows.unexpected) == (0, 0, 0)


def test_a_failing_query_exits_1_with_one_line_on_stderr(
    kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    """A record the transform rejects at run time (in an executor task) fails the query: exit 1, and stderr ends
    with one `error:` line naming the root cause, while the full JVM trace goes to the log folder."""
    bs = kafka_cluster.bootstrap
    src, dst = topic_factory(partitions=2), topic_factory(partitions=2)
    produce(bs, src, demo_orders(200))
    job = _write_sql_job(
        tmp_path,
        bs,
        src,
        dst,
        "SELECT customer AS key, CASE WHEN amount > 90 THEN raise_error('amount out of range') "
        "ELSE to_json(named_struct('order_id', order_id)) END AS value FROM orders",
    )
    logs = tmp_path / "logs"
    result = subprocess.run(
        [*RUN, str(job), "--available-now", "--log-dir", str(logs)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 1, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("error: query large-orders failed at epoch 0: "), lines[-1]
    assert "[USER_RAISED_EXCEPTION] amount out of range" in lines[-1]
    assert lines[-1].endswith(f"(full trace under {logs})")
    assert "Traceback" not in result.stderr and "\tat org.apache.spark" not in result.stderr
    assert "\tat org.apache.spark" in (logs / "spark.log").read_text(errors="replace")
    assert read_committed(bs, dst, timeout_s=2) == []


def test_transform_sql_filters_and_projects_json_exactly(
    kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path, run_job: RunJob
) -> None:
    """A job declared entirely in properties: `transform.sql` over the `orders` view, JSON in, the sink's
    `value.column=*` JSON out; exact against a plain-Python filter/projection."""
    bs = kafka_cluster.bootstrap
    src, dst = topic_factory(partitions=2), topic_factory(partitions=2)
    orders = demo_orders(1000)
    produce(bs, src, orders)
    job = _write_sql_job(
        tmp_path,
        bs,
        src,
        dst,
        "SELECT customer AS key, order_id, upper(customer) AS customer, amount * 2 AS doubled "
        "FROM orders WHERE amount >= 50 AND order_id % 3 <> 0",
        sink_extra="value.column=*\nvalue.format=json\n",
    )
    run_job(job)
    expected = []
    for _, raw in orders:
        o = json.loads(raw)
        if o["amount"] >= 50 and o["order_id"] % 3 != 0:
            value = {"order_id": o["order_id"], "customer": o["customer"].upper(), "doubled": o["amount"] * 2}
            expected.append((o["customer"], json.dumps(value, sort_keys=True)))
    cmp = compare(expected, _records(bs, dst))
    print(cmp.line(0))
    assert cmp.records > 0 and (cmp.duplicates, cmp.lost, cmp.unexpected) == (0, 0, 0)


def test_ctrl_c_stops_between_epochs_and_a_forced_stop_keeps_the_output_exact(
    kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path, run_job: RunJob
) -> None:
    """Ctrl-C (a real SIGINT to the process) stops between epochs like SIGTERM; past `shutdown.timeout.ms` the stop
    is forced: the epoch in flight (its transactions held open by the fault delay) is interrupted, the process still
    exits 0 without a traceback, and the next start's fencing and replay keep the output exact."""
    bs = kafka_cluster.bootstrap
    src, dst = topic_factory(partitions=2), topic_factory(partitions=2)
    inputs = eos.events(2000)
    feed(bs, src, inputs, 2)
    files = write_job(
        tmp_path,
        bs,
        src,
        dst,
        "ethereal_kafka.examples.eos:stateless",
        extra_job="shutdown.timeout.ms=1000\n",
    )
    env = {
        **os.environ,
        "ETHEREAL_KAFKA_FAULT_TXN_DELAY_MS": "6000",
    }  # each epoch's transactions stay open 6 s
    forced, outcomes = "", []
    for attempt in range(3):  # the signal lands between epochs ~5% of the time: then try again
        log_path = tmp_path / f"attempt-{attempt}.log"
        before = len(read_committed(bs, dst, timeout_s=1))
        proc = subprocess.Popen(
            [*RUN, str(files.job), "--log-dir", str(tmp_path / "logs")],
            stdout=log_path.open("w"),
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 150
            while time.monotonic() < deadline and len(read_committed(bs, dst, timeout_s=1)) <= before:
                time.sleep(0.3)
            # An epoch just committed; the next one is planned within a second or two and then holds its
            # transactions open for 6 s: signal in the middle of that.
            time.sleep(3.0)
            proc.send_signal(signal.SIGINT)  # Ctrl-C: PySpark's own handler must not take it
            code = proc.wait(timeout=90)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log = log_path.read_text(errors="replace")
        assert code == 0, log[-3000:]
        assert _wait_gone(proc.pid) == []
        stopped = [line for line in log.splitlines() if "ethereal-kafka: stopped on SIGINT" in line]
        assert stopped and not _our_tracebacks(log) and "KeyboardInterrupt" not in log, log[-3000:]
        outcomes.append(stopped[-1].split("ethereal-kafka: ")[-1])
        if ": forced (shutdown.timeout.ms=1000 passed)" in stopped[-1]:
            forced = stopped[-1]
            break
    assert forced and "interrupted: out epoch" in forced, outcomes
    with CheckpointHistory(files.app_id, read_only=True) as history:
        attempts = [(r.epoch, r.outcome) for r in history.records() if r.outcome != "committed"]
    print(f"attempts not committed: {attempts}")
    # The interrupted epoch's attempt (when its write ended before the process did) is a stop, not a failure.
    assert all(outcome == "interrupted" for _, outcome in attempts), attempts
    run_job(files.job)
    cmp = compare(eos.stateless_reference(inputs), pairs(read_committed(bs, dst, timeout_s=60)))
    print(f"{cmp.line(0)}; {forced.split('ethereal-kafka: ')[-1]}")
    assert (cmp.duplicates, cmp.lost, cmp.unexpected) == (0, 0, 0)


def test_a_stuck_epoch_fails_the_run_naming_it_and_the_next_start_is_exact(
    kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path, run_job: RunJob
) -> None:
    """A task that never returns holds its epoch and its query forever (Spark has no task timeout). Here every sink
    task holds its transaction open for ten minutes (the fault delay): past `epoch.stall.timeout.ms` the run stops
    its queries and fails with one line naming the query and the epoch, long before the task would end, and
    nothing of the epoch is visible; the next start replays it and the output is exact."""
    bs = kafka_cluster.bootstrap
    src, dst = topic_factory(partitions=2), topic_factory(partitions=2)
    inputs = eos.events(1000)
    feed(bs, src, inputs, 2)
    files = write_job(
        tmp_path,
        bs,
        src,
        dst,
        "ethereal_kafka.examples.eos:stateless",
        extra_job="epoch.stall.timeout.ms=4000\n",
    )
    began = time.monotonic()
    stuck = run_job(files.job, env={"ETHEREAL_KAFKA_FAULT_TXN_DELAY_MS": "600000"}, check=False)
    elapsed = time.monotonic() - began
    line = str(stuck.error)
    assert not stuck.ok and "\n" not in line, line
    assert re.search(
        r"query \S+ epoch \d+ has been writing for \d+s, longer than epoch\.stall\.timeout\.ms=4000: a task is "
        r"stuck; the queries were stopped and the epoch is replayed when they start again",
        line,
    ), line
    assert elapsed < 120, f"{elapsed:.0f}s to give up on a stuck epoch"
    assert read_committed(bs, dst, timeout_s=2) == []
    run_job(files.job)
    cmp = compare(eos.stateless_reference(inputs), pairs(read_committed(bs, dst, timeout_s=60)))
    print(f"{cmp.line(0)}; stuck run: {elapsed:.0f}s")
    assert (cmp.duplicates, cmp.lost, cmp.unexpected) == (0, 0, 0)
