"""The web UI in a real browser (Debian's headless chromium through Playwright), on a real job on the real broker.

One job (`ui_jobs.windowed_and_copy`: two queries, a framework window with a late-data side output, a Python map)
runs in-process on the session's SparkSession with its UI and metrics endpoint on. Its first epochs' transactions
are held open past a 2 s `transaction.timeout.ms` (`ETHEREAL_KAFKA_FAULT_TXN_DELAY_MS`, handed to the Python
workers through the SparkContext's executor environment), so the broker aborts them and the sink tasks redo them:
the timeline must show such an epoch. The browser checks the graph's nodes and edges, the timeline against the
checkpoint history, and the latency percentiles against the metrics endpoint's histogram; then `ethereal-kafka ui
APP` serves the same pages for the stopped app. Screenshots of the pages are saved under the test's tmp path (and
to `$ETHEREAL_KAFKA_UI_SCREENSHOTS`, when set, for docs/images).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ethereal_kafka.checkpoint.history import CheckpointHistory
from ethereal_kafka.config.job import load_job
from ethereal_kafka.connectors.kafka.clients import close_cached_clients
from ethereal_kafka.connectors.kafka.topics import create_topic, produce
from ethereal_kafka.faults import TXN_DELAY_ENV as FAULT_DELAY_ENV
from ethereal_kafka.runtime.metrics import RunMetrics, open_metrics
from ethereal_kafka.runtime.runner import open_ui, start
from ethereal_kafka.testing.cluster import KafkaCluster
from tests.integration.browser import chromium_page, open_page

PARTITIONS = 2
EVENTS = 600
LATE_EVENTS = 12
USERS = 6
QUERIES = {"late+totals", "copy"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class UiRun:
    """The running job of this module's tests."""

    app_id: str
    job_path: Path
    metrics_port: int
    ui_url: str
    running: Any
    metrics: RunMetrics
    ui: Any
    events: int
    screenshots: Path
    stopped: bool = False
    timings: dict[str, float] = field(default_factory=dict)

    def stop(self) -> None:
        """Stop the queries, the UI and the metrics (idempotent)."""
        if self.stopped:
            return
        self.stopped = True
        try:
            self.running.stop()
        finally:
            self.ui.close()
            self.metrics.close()
            # As the runner does after Spark stops: no cached client keeps polling a broker that goes away.
            close_cached_clients()


def _feed(bootstrap: str, topic: str) -> int:
    """In-order events over `USERS` users (event time one day ago, 200 ms apart), then late ones far behind."""
    import json

    base = (int(time.time() * 1000) - 86_400_000) // 60_000 * 60_000
    per_partition: dict[int, list[tuple[bytes, bytes]]] = {p: [] for p in range(PARTITIONS)}
    for i in range(EVENTS):
        user = f"u{i % USERS}"
        value = {"user": user, "amount": i % 50, "ts": base + i * 200}
        per_partition[i % PARTITIONS].append((user.encode(), json.dumps(value).encode()))
    for i in range(LATE_EVENTS):
        user = f"u{i % USERS}"
        value = {"user": user, "amount": 1, "ts": base + 100 + i}
        per_partition[i % PARTITIONS].append((user.encode(), json.dumps(value).encode()))
    # Record timestamps are now (CreateTime): the end-to-end latency is seconds, not the event time's day.
    return sum(produce(bootstrap, topic, records, partition=p) for p, records in per_partition.items())


def _write_job(folder: Path, bootstrap: str, topics: dict[str, str], metrics_port: int, ui_port: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    app = f"ui-{uuid.uuid4().hex[:8]}"
    (folder / "events.properties").write_text(
        f"connector.class=kafka-source\nname=events\nbootstrap.servers={bootstrap}\ntopics={topics['events']}\n"
        "starting.offsets=earliest\nmax.records.per.epoch=200\nvalue.format=json\n"
        "value.schema=user string, amount long, ts long\nkafka.sasl.password=hunter2\n"
    )
    for sink in ("totals", "late", "copy"):
        (folder / f"{sink}.properties").write_text(
            f"connector.class=kafka-sink\nname={sink}\nbootstrap.servers={bootstrap}\ntopic={topics[sink]}\n"
            "value.format=json\nkey.format=string\n"
        )
    (folder / "job.properties").write_text(
        f"app.id={app}\nsources=events.properties\nsinks=totals.properties,late.properties,copy.properties\n"
        f"pipeline=tests.integration.ui_jobs:windowed_and_copy\ncheckpoint.location={folder / 'checkpoint'}\n"
        "trigger.interval.ms=200\nsink.tasks=2\ntransaction.timeout.ms=2000\nprogress=off\n"
        f"metrics.port={metrics_port}\nui.port={ui_port}\n"
    )
    return folder / "job.properties"


@contextlib.contextmanager
def _worker_env(spark: Any, values: dict[str, str]) -> Iterator[dict[str, str]]:
    """Environment variables for the Python workers of the Spark jobs planned while inside (PySpark hands the
    SparkContext's executor environment to every Python function it ships); removed on exit."""
    environment = spark.sparkContext.environment
    environment.update(values)
    try:
        yield environment
    finally:
        for key in values:
            environment.pop(key, None)


def _scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return samples


def histogram_quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """Prometheus' `histogram_quantile` over cumulative `(le, count)` buckets (the reference the UI must match)."""
    buckets = sorted(buckets)
    total = buckets[-1][1]
    rank = q * total
    index = next(i for i, (_, count) in enumerate(buckets) if count >= rank)
    if index == len(buckets) - 1:
        return buckets[-2][0]
    start = 0.0 if index == 0 else buckets[index - 1][0]
    below = 0.0 if index == 0 else buckets[index - 1][1]
    end, count = buckets[index]
    return start + (end - start) * (rank - below) / (count - below)


@pytest.fixture(scope="module")
def ui_run(
    kafka_cluster: KafkaCluster, spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[UiRun]:
    """The job, started with its first epochs' transactions outliving the transaction timeout, run until its input
    is consumed (and one epoch was aborted and redone); stopped at the end of the module."""
    began = time.monotonic()
    bs = kafka_cluster.bootstrap
    stamp = uuid.uuid4().hex[:8]
    topics = {
        name: create_topic(bs, f"ui-{name}-{stamp}", PARTITIONS)
        for name in ("events", "totals", "late", "copy")
    }
    events = _feed(bs, topics["events"])
    folder = tmp_path_factory.mktemp("ui-job")
    metrics_port = _free_port()
    job_path = _write_job(folder, bs, topics, metrics_port, _free_port())
    loaded = load_job(job_path)
    # The broker aborts a transaction older than its timeout at its next cleanup check (1 s on the test broker).
    delay_ms = 6000 if kafka_cluster.broker is not None else 15000
    metrics = open_metrics(spark, loaded)
    ui = open_ui(loaded, metrics)
    assert ui is not None and ui.url is not None
    with _worker_env(spark, {FAULT_DELAY_ENV: str(delay_ms)}) as environment:
        running, _coordinator = start(spark, loaded, metrics=metrics, observers=[ui], log_dir=folder / "logs")
        run = UiRun(
            loaded.job.app_id,
            job_path,
            metrics_port,
            ui.url,
            running,
            metrics,
            ui,
            events,
            tmp_path_factory.mktemp("screenshots"),
        )
        try:
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline:
                if any(e["txn_aborts"] > 0 for e in ui.epochs(-1)["entries"]):
                    environment.pop(FAULT_DELAY_ENV, None)  # later epochs commit at the first attempt
                    break
                time.sleep(0.5)
            else:
                pytest.fail("no epoch was aborted and redone within 180 s")
        except BaseException:
            run.stop()
            raise
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            figures = metrics.metrics.figures()["queries"] if metrics.metrics is not None else {}
            done = all(sum(figures.get(q, {}).get("records_in", {}).values()) >= events for q in QUERIES)
            lags = [
                v for q in figures.values() for s in q["lag"].values() for t in s.values() for v in t.values()
            ]
            if done and lags and not any(lags):
                break
            time.sleep(0.5)
        else:
            pytest.fail(
                f"the job did not consume its input: {metrics.metrics.figures() if metrics.metrics else None}"
            )
        time.sleep(1.0)  # the last epochs' progress reports and histories settle
        run.timings["job_ready_s"] = time.monotonic() - began
        yield run
    finally:
        run.stop()


def _screenshot(page: Any, run: UiRun, name: str) -> Path:
    path = run.screenshots / f"ui-{name}.png"
    page.screenshot(path=str(path), full_page=True)
    target = os.environ.get("ETHEREAL_KAFKA_UI_SCREENSHOTS")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(target) / path.name)
    return path


def _history(app_id: str) -> list[Any]:
    with CheckpointHistory(app_id, read_only=True) as history:
        return history.records()


def check_graph(page: Any, run: UiRun) -> None:
    """The graph has the job's queries, operators (with where they run), connectors and edges."""
    open_page(page, run.ui_url, "graph", min_polls=2)
    page.wait_for_function("EK.graphElements() !== null")
    drawn = page.evaluate("EK.graphElements()")
    nodes = {n["id"]: n for n in drawn["nodes"]}
    assert {f"q:{q}" for q in QUERIES} <= set(nodes)
    runs = {(n["parent"], n["name"]): n["runs"] for n in drawn["nodes"] if n["name"]}
    assert runs[(None, "events")] == "kafka-source"
    assert runs[("q:late+totals", "totals")] == "kafka-sink"
    assert runs[("q:late+totals", "late")] == "kafka-sink"
    assert runs[("q:copy", "copy")] == "kafka-sink"
    assert runs[("q:late+totals", "select user, amount, ts")] == "spark-native"
    assert runs[("q:late+totals", "watermark ts (-1 s)")] == "spark-native"
    assert runs[("q:late+totals", "filter valid")] == "python"
    assert runs[("q:late+totals", "key_by user")] == "spark-native"
    assert runs[("q:late+totals", "window tumbling 5 s: aggregate CountSum")] == "framework"
    assert runs[("q:copy", "map tag")] == "python"
    by_name = {n["id"]: n["name"] for n in drawn["nodes"]}
    edges = {
        (by_name[e["source"]], by_name[e["target"]], (e["label"] or "").split("\n")[0])
        for e in drawn["edges"]
    }
    assert ("events", "select user, amount, ts", "") in {(a, b, "") for a, b, _ in edges}
    assert ("window tumbling 5 s: aggregate CountSum", "totals") in {(a, b) for a, b, _ in edges}
    assert ("window tumbling 5 s: aggregate CountSum", "late", "side output late") in edges
    assert ("map tag", "copy") in {(a, b) for a, b, _ in edges}
    # Live figures: the source node shows what the metrics counted.
    page.wait_for_function(
        "EK.graphElements().nodes.some(n => n.id === 'source:events' && n.label.includes('in '))",
        timeout=15_000,
    )
    label = next(
        n["label"] for n in page.evaluate("EK.graphElements()")["nodes"] if n["id"] == "source:events"
    )
    assert f"in {2 * run.events:,}" in label, label  # two queries read every event
    assert page.locator("#operators tbody tr").count() == len(nodes) - len(QUERIES)
    _screenshot(page, run, "graph")


def check_timeline(page: Any, run: UiRun) -> None:
    """Every epoch of the history is a row; the aborted-and-redone one stands out and shows its details."""
    open_page(page, run.ui_url, "checkpoints", min_polls=1)
    for _attempt in range(
        3
    ):  # an epoch recorded between the two reads (Spark's last no-data epoch) reads again
        history = _history(run.app_id)
        page.wait_for_function(f"document.querySelectorAll('#epochs tbody tr').length >= {len(history)}")
        rows = page.eval_on_selector_all(
            "#epochs tbody tr",
            "rows => rows.map(r => [r.dataset.query, Number(r.dataset.epoch), r.dataset.outcome])",
        )
        # Two queries record their epochs from two threads: compare as multisets, not in order.
        expected = sorted((r.query, r.epoch, r.outcome_detail) for r in history)
        if sorted(tuple(r) for r in rows) == expected:
            break
        time.sleep(2.5)
    assert sorted(tuple(r) for r in rows) == expected
    redone = [r for r in history if r.outcome_detail == "aborted-and-redone"]
    assert redone, [r.outcome_detail for r in history]
    target = redone[0]
    row = page.locator(
        f"#epochs tbody tr[data-outcome='aborted-and-redone'][data-epoch='{target.epoch}']"
    ).first
    color = row.evaluate("r => getComputedStyle(r).backgroundColor")
    assert color not in ("rgba(0, 0, 0, 0)", "rgb(255, 255, 255)"), color  # it stands out
    row.click()
    page.wait_for_selector("[data-testid=marker]")
    assert page.inner_text("[data-testid=marker]") == target.marker
    offsets = page.inner_text("[data-testid=detail-offsets]")
    for topic, parts in target.end_offsets.items():
        for partition, end in parts.items():
            assert f"{topic}\t{partition}\t{target.start_offsets[topic][partition]}\t{end}" in offsets, (
                offsets
            )
    _screenshot(page, run, "checkpoints")


def check_latency(page: Any, run: UiRun) -> None:
    """The whole-run percentiles are what `histogram_quantile` gives over the endpoint's histogram."""
    samples = _scrape(run.metrics_port)
    open_page(page, run.ui_url, "latency", min_polls=1)
    for query in QUERIES:
        buckets: dict[float, float] = {}
        for labels, value in samples["ethereal_kafka_end_to_end_latency_seconds_bucket"]:
            if labels["query"] == query:
                le = float("inf") if labels["le"] == "+Inf" else float(labels["le"])
                buckets[le] = buckets.get(le, 0.0) + value
        assert buckets and max(buckets.values()) >= run.events
        row = f"#percentiles tr[data-query='{query}']"
        page.wait_for_selector(f"{row} td.p99[data-value]:not([data-value=''])")
        count = page.inner_text(f"{row} td.count").replace(",", "")
        assert int(count) == int(max(buckets.values()))
        # histogram_quantile's figure, clamped into the exact extremes the UI's histogram knows.
        low = float(page.get_attribute(f"{row} td.p50", "data-low") or "-inf")
        high = float(page.get_attribute(f"{row} td.p50", "data-high") or "inf")
        assert low <= high
        for name, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99)):
            shown = float(page.get_attribute(f"{row} td.{name}", "data-value") or "nan")
            expected = min(high, max(low, histogram_quantile(q, list(buckets.items()))))
            assert shown == pytest.approx(expected, rel=1e-9), (query, name)
    page.wait_for_function("document.querySelectorAll('#lat-chart .u-over, #lag-chart .u-over').length == 2")
    _screenshot(page, run, "latency")


@pytest.mark.timeout(480)
def test_ui_shows_graph_timeline_and_latency_of_a_running_job(ui_run: UiRun) -> None:
    began = time.monotonic()
    with chromium_page() as page:
        check_graph(page, ui_run)
        check_timeline(page, ui_run)
        check_latency(page, ui_run)
        open_page(page, ui_run.ui_url, "job", min_polls=1)
        facts = page.inner_text("[data-testid=facts]")
        assert "running (live)" in facts and "local[" in facts, facts
        config = page.inner_text("[data-testid=config]")
        assert "kafka.sasl.password" in config and "hunter2" not in config
        assert "No auto-scaling decisions" in page.inner_text("[data-testid=decisions]")
        _screenshot(page, ui_run, "job")
        assert page.errors == []
    print(
        f"job ready in {ui_run.timings['job_ready_s']:.1f}s; browser checks {time.monotonic() - began:.1f}s; "
        f"screenshots in {ui_run.screenshots}"
    )


@pytest.mark.timeout(240)
def test_ui_command_serves_a_stopped_app(ui_run: UiRun) -> None:
    ui_run.stop()
    history = _history(ui_run.app_id)
    process = subprocess.Popen(
        [sys.executable, "-m", "ethereal_kafka.cli", "ui", ui_run.app_id, "--port", str(_free_port())],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("ui at http://127.0.0.1:"), line + (
            process.stderr.read() if process.poll() else ""
        )
        url = line.split()[2]
        with chromium_page() as page:
            open_page(page, url, "checkpoints", min_polls=1)
            assert "stopped app" in page.inner_text("[data-testid=mode]")
            page.wait_for_function(f"document.querySelectorAll('#epochs tbody tr').length == {len(history)}")
            assert page.locator("#epochs tbody tr[data-outcome='aborted-and-redone']").count() >= 1
            open_page(page, url, "graph", min_polls=1)
            page.wait_for_function("EK.graphElements() !== null")
            names = {n["name"] for n in page.evaluate("EK.graphElements()")["nodes"]}
            assert {"events", "totals", "late", "copy", "map tag", "filter valid"} <= names
            open_page(page, url, "latency", min_polls=1)
            page.wait_for_selector(
                "#percentiles tr[data-query='copy'] td.p50[data-value]:not([data-value=''])"
            )
            assert page.errors == []
        # Read-only: anything but GET/HEAD is refused.
        request = urllib.request.Request(f"{url}api/epochs", method="POST", data=b"")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=5)
        assert refused.value.code == 405
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
