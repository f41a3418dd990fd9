"""The web UI in a real browser (Debian's headless chromium through Playwright), on a real job on the real broker.

One job (`ui_jobs.windowed_and_copy`: two queries, a framework window with a late-data side output, a Python
filter and map) runs in-process on the session's SparkSession with its UI and metrics endpoint on, twice:

1. Its first epochs' transactions are held open past a 2 s `transaction.timeout.ms` (`ETHEREAL_KAFKA_FAULT_TXN_
   DELAY_MS`, handed to the Python workers through the SparkContext's executor environment), so the broker aborts
   them and the sink tasks redo them: the timeline must show such an epoch. Then the second part of the input
   arrives with a poisoned event that the `copy` query's map raises on (`ui_jobs.POISON_ENV`): one epoch fails
   and that query stops. The run is stopped.
2. The job starts again (same app, same checkpoint, no fault) and consumes the rest: the history holds two runs.

The browser checks the graph (nodes, edges, per-operator figures, labels inside their nodes), the timeline
against the checkpoint history, the latency percentiles against the metrics endpoint's histogram, the breaks
and markers of the charts at the restart, the exceptions page, and the job page's settings in force; then
`ethereal-kafka ui APP` serves the same pages for the stopped app. Per-operator rows are also checked against a
plain-Python count of the input. Screenshots of the pages are saved under the test's tmp path (and to
`$ETHEREAL_KAFKA_UI_SCREENSHOTS`, when set: `docs/images/make_screenshots.py` does, for the docs).
"""

from __future__ import annotations

import contextlib
import json
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
from ethereal_kafka.config.job import LoadedJob, load_job
from ethereal_kafka.connectors.kafka.clients import close_cached_clients
from ethereal_kafka.connectors.kafka.topics import create_topic, produce, read_committed
from ethereal_kafka.faults import TXN_DELAY_ENV as FAULT_DELAY_ENV
from ethereal_kafka.runtime.description import RunDescription
from ethereal_kafka.runtime.run_metrics import RunMetrics, open_metrics
from ethereal_kafka.runtime.runner import job_sources, open_ui, start
from ethereal_kafka.testing.cluster import KafkaCluster
from ethereal_kafka.ui.offline import HistoryUi
from ethereal_kafka.ui.server import UiServer
from tests import ui_records
from tests.integration.browser import chromium_page, open_page
from tests.integration.ui_jobs import POISON_AMOUNT, POISON_ENV, SIZE

PARTITIONS = 2
#: In-order events (the docs' screenshots run more: `EK_UI_TEST_EVENTS`).
EVENTS = int(os.environ.get("EK_UI_TEST_EVENTS", "600"))
#: Events with a negative amount, which the window query's Python filter drops.
INVALID = 6
LATE_EVENTS = 12
USERS = 6
QUERIES = {"late+totals", "copy"}
#: Records per epoch and source at most (`epoch.max.records`; the source file sets no bound of its own).
EPOCH_RECORDS = max(150, EVENTS // 8)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class UiRun:
    """The second (running) run of this module's job, and what the first left."""

    app_id: str
    job_path: Path
    bootstrap: str
    topics: dict[str, str]
    metrics_port: int
    ui_url: str
    running: Any
    metrics: RunMetrics
    ui: Any
    coordinator: Any
    produced: dict[str, int]
    screenshots: Path
    stopped: bool = False
    timings: dict[str, float] = field(default_factory=dict)

    def stop(self) -> None:
        """Stop the queries, the UI and the metrics (idempotent)."""
        if self.stopped:
            return
        self.stopped = True
        _stop(self.running, self.ui, self.metrics, self.coordinator)


def _stop(running: Any, ui: Any, metrics: RunMetrics, coordinator: Any) -> None:
    """Stop a run as the runner does: queries, UI, metrics, then the coordinator (its history writer too)."""
    try:
        running.stop()
    finally:
        ui.close()
        metrics.close()
        coordinator.close()
        # As the runner does after Spark stops: no cached client keeps polling a broker that goes away.
        close_cached_clients()


def _events(first: int, count: int, base: int) -> list[dict[str, Any]]:
    """`count` in-order events from index `first` (event time one day ago, 200 ms apart)."""
    return [
        {"user": f"u{i % USERS}", "amount": i % 50, "ts": base + i * 200} for i in range(first, first + count)
    ]


def _feed(bootstrap: str, topic: str, events: list[dict[str, Any]]) -> int:
    """Produce `events` round-robin over the partitions, keyed by user (record timestamps are now)."""
    per_partition: dict[int, list[tuple[bytes, bytes]]] = {p: [] for p in range(PARTITIONS)}
    for i, value in enumerate(events):
        per_partition[i % PARTITIONS].append((value["user"].encode(), json.dumps(value).encode()))
    return sum(produce(bootstrap, topic, records, partition=p) for p, records in per_partition.items())


def _inputs() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The input in two parts: the first run reads the first; the second brings the poisoned event (for `copy`),
    the rest of the in-order events, invalid ones (dropped by the window's filter) and late ones."""
    base = (int(time.time() * 1000) - 86_400_000) // 60_000 * 60_000
    cut = EVENTS * 3 // 5
    first = _events(0, cut, base)
    second = [{"user": "u1", "amount": POISON_AMOUNT, "ts": base + cut * 200}]
    second += _events(cut, EVENTS - cut, base)
    second += [{"user": f"u{i}", "amount": -1, "ts": base + cut * 200 + i} for i in range(INVALID)]
    second += [{"user": f"u{i % USERS}", "amount": 1, "ts": base + 100 + i} for i in range(LATE_EVENTS)]
    return first, second


def _write_job(
    folder: Path, app: str, bootstrap: str, topics: dict[str, str], metrics_port: int, ui_port: int
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "events.properties").write_text(
        f"connector.class=kafka-source\nname=events\nbootstrap.servers={bootstrap}\ntopics={topics['events']}\n"
        "starting.offsets=earliest\nvalue.format=json\n"
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
        f"epoch.sizing=adaptive\nepoch.max.records={EPOCH_RECORDS}\nepoch.min.records={EPOCH_RECORDS // 2}\n"
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


def _wait(what: str, done: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if done():
            return
        time.sleep(0.5)
    pytest.fail(f"{what} within {timeout_s:.0f} s")


def _start(spark: Any, loaded: LoadedJob, folder: Path) -> tuple[Any, RunMetrics, Any, Any]:
    metrics = open_metrics(spark, loaded)
    ui = open_ui(loaded, metrics)
    assert ui is not None and ui.url is not None
    try:
        running, coordinator = start(spark, loaded, metrics=metrics, observers=[ui], log_dir=folder / "logs")
    except BaseException:
        ui.close()
        metrics.close()
        raise
    return running, metrics, ui, coordinator


def _first_run(
    spark: Any, loaded: LoadedJob, folder: Path, bootstrap: str, topic: str, later: list[Any]
) -> None:
    """Run 1 (see the module docstring): an aborted-and-redone epoch, then a failed one; stopped at the end."""
    # The broker aborts a transaction older than its timeout at its next cleanup check (1 s on the test broker).
    delay_ms = 6000
    with _worker_env(spark, {FAULT_DELAY_ENV: str(delay_ms), POISON_ENV: "1"}) as environment:
        running, metrics, ui, coordinator = _start(spark, loaded, folder)
        try:
            # The map's worker environment is fixed when the query starts; the sink's delay is read per epoch.
            environment.pop(POISON_ENV, None)
            _wait(
                "no epoch was aborted and redone",
                lambda: any(e["txn_aborts"] > 0 for e in ui.epochs(-1)["entries"]),
                180,
            )
            environment.pop(FAULT_DELAY_ENV, None)  # later epochs commit at the first attempt
            _feed(bootstrap, topic, later)
            _wait(
                "the poisoned event failed no epoch of copy",
                lambda: any(
                    e["outcome"] == "failed" for e in ui.epochs(-1)["entries"] if e["query"] == "copy"
                ),
                180,
            )
        finally:
            _stop(running, ui, metrics, coordinator)


def _consumed(ui: Any, produced: dict[str, int]) -> bool:
    """Every query committed an epoch ending at the end of the input (the history as the UI holds it)."""
    ends: dict[str, dict[str, int]] = {q: {} for q in QUERIES}
    for e in ui.epochs(-1)["entries"]:
        if e["outcome"] == "committed" and e["query"] in ends:
            for parts in e["end_offsets"].values():
                for partition, offset in parts.items():
                    ends[e["query"]][partition] = max(ends[e["query"]].get(partition, 0), offset)
    return all(ends[q] == produced for q in QUERIES)


def _settled(ui: Any, quiet_s: float) -> Any:
    """A condition: no epoch was recorded for `quiet_s` seconds (measured from the first call)."""
    seen = {"count": -1, "since": time.monotonic()}

    def done() -> bool:
        count = len(ui.epochs(-1)["entries"])
        if count != seen["count"]:
            seen.update(count=count, since=time.monotonic())
        return time.monotonic() - seen["since"] >= quiet_s

    return done


@pytest.fixture(scope="module", name="run")
def ui_run(
    kafka_cluster: KafkaCluster, spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[UiRun]:
    """The job's first run (an aborted-and-redone epoch, a failed epoch), stopped, and its second run until the
    input is consumed; the second is stopped at the end of the module."""
    began = time.monotonic()
    bs = kafka_cluster.bootstrap
    stamp = uuid.uuid4().hex[:8]
    topics = {
        name: create_topic(bs, f"ui-{name}-{stamp}", PARTITIONS)
        for name in ("events", "totals", "late", "copy")
    }
    first, second = _inputs()
    _feed(bs, topics["events"], first)
    folder = tmp_path_factory.mktemp("ui-job")
    app = f"ui-{stamp}"
    job_path = _write_job(folder, app, bs, topics, _free_port(), _free_port())
    _first_run(spark, load_job(job_path), folder, bs, topics["events"], second)
    first_run_s = time.monotonic() - began
    metrics_port = _free_port()
    job_path = _write_job(folder, app, bs, topics, metrics_port, _free_port())
    running, metrics, ui, coordinator = _start(spark, load_job(job_path), folder)
    everything = first + second
    produced = {str(p): len(everything[p::PARTITIONS]) for p in range(PARTITIONS)}
    run = UiRun(
        app,
        job_path,
        bs,
        topics,
        metrics_port,
        ui.url,
        running,
        metrics,
        ui,
        coordinator,
        produced,
        tmp_path_factory.mktemp("screenshots"),
    )
    try:
        _wait("the job did not consume its input", lambda: _consumed(ui, produced), 240)
        # After the last data, the window's query runs an epoch without data to close windows: wait until no
        # epoch has been recorded for a while, so that the history, the topics and the metrics agree.
        _wait("the job did not settle", _settled(ui, 3.0), 60)
        run.timings["job_ready_s"] = time.monotonic() - began
        yield run
    finally:
        run.stop()
        # The suite's time budget counts this job's runs: `pytest -s` shows them.
        print(f"\nui job: first run {first_run_s:.1f} s, ready {run.timings.get('job_ready_s', -1):.1f} s")


@pytest.fixture(scope="module")
def browser_page() -> Iterator[Any]:
    """One headless chromium page for all of the module's browser tests (a browser start costs seconds)."""
    with chromium_page() as page:
        yield page


@pytest.fixture
def page(browser_page: Any) -> Iterator[Any]:
    """The module's page for one test; the test fails if its pages raised a script error or lost a request."""
    browser_page.errors.clear()
    yield browser_page
    assert browser_page.errors == []


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


def _live(run: UiRun) -> dict[str, Any]:
    assert run.metrics.metrics is not None
    return run.metrics.metrics.figures()["queries"]


def _node_ids(page: Any) -> dict[tuple[str | None, str], str]:
    """`{(query box, operator name): node id}` of the drawn graph."""
    drawn = page.evaluate("EK.graphElements()")
    return {(n["parent"], n["name"]): n["id"] for n in drawn["nodes"] if n["name"]}


def _label(page: Any, nid: str) -> str:
    return str(page.evaluate(f"EK.cy().getElementById({json.dumps(nid)}).data('label')")).replace("\n", " ")


@pytest.mark.timeout(600)  # the module's job runs in this first test's set-up
def test_operator_rows_match_a_count_of_the_input(run: UiRun) -> None:
    """Per-operator rows over both runs against a plain-Python count of the input: the select and the map see
    every event once, the filter drops the invalid ones, and the window's rows out are the records its two sinks
    hold. Each epoch counts once, as its last committed attempt ran: an epoch whose transactions committed while the
    first run was being stopped (recorded interrupted) is replayed by the second run (skipped-on-replay),
    which computes the same rows again."""
    everything = [json.loads(r.value) for r in read_committed(run.bootstrap, run.topics["events"])]
    assert len(everything) == sum(run.produced.values())
    last: dict[tuple[str | None, int], Any] = {}
    for record in sorted(_history(run.app_id), key=lambda r: (r.run_started_ms or 0, r.started_ms)):
        if record.outcome == "committed":
            last[(record.query, record.epoch)] = record
    totals: dict[str, list[int]] = {}
    for record in last.values():
        assert record.operators, (record.query, record.epoch)  # every committed epoch has its figures
        for nid, rows in record.operators.items():
            assert None not in rows, (nid, rows)
            total = totals.setdefault(nid, [0, 0])
            total[0] += rows[0]
            total[1] += rows[1]
    names = {n["label"]: n["id"] for n in run.ui.plan()["nodes"] if n.get("query") == "late+totals"}
    copy = {n["label"]: n["id"] for n in run.ui.plan()["nodes"] if n.get("query") == "copy"}
    kept = [e for e in everything if e["amount"] >= 0]
    window_out = len(read_committed(run.bootstrap, run.topics["totals"])) + len(
        read_committed(run.bootstrap, run.topics["late"])
    )
    expected = {
        names[f"select user, amount, ts, {SIZE}"]: [len(everything)] * 2,
        names["filter valid"]: [len(everything), len(kept)],
        names["window tumbling 5 s: aggregate CountSum"]: [len(kept), window_out],
        copy["map tag"]: [len(everything)] * 2,
    }
    got = {nid: totals.get(nid) for nid in expected}
    print(f"per-operator rows over both runs: {got} (reference {expected})")
    assert got == expected


def test_graph_has_the_jobs_operators_connectors_and_edges(page: Any, run: UiRun) -> None:
    """The graph has the job's queries, operators (with where they run), connectors and edges; live figures."""
    open_page(page, run.ui_url, "graph", min_polls=2)
    page.wait_for_function("EK.graphElements() !== null")
    drawn = page.evaluate("EK.graphElements()")
    nodes = {n["id"]: n for n in drawn["nodes"]}
    assert {f"q:{q}" for q in QUERIES} <= set(nodes)
    runs = {(n["parent"], n["name"]): n["runs"] for n in drawn["nodes"] if n["name"]}
    select = f"select user, amount, ts, {SIZE}"
    assert runs[(None, "events")] == "kafka-source"
    assert runs[("q:late+totals", "totals")] == "kafka-sink"
    assert runs[("q:late+totals", "late")] == "kafka-sink"
    assert runs[("q:copy", "copy")] == "kafka-sink"
    assert runs[("q:late+totals", select)] == "spark-native"
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
    assert ("events", select, "") in {(a, b, "") for a, b, _ in edges}
    assert ("window tumbling 5 s: aggregate CountSum", "totals") in {(a, b) for a, b, _ in edges}
    assert ("window tumbling 5 s: aggregate CountSum", "late", "side output late") in edges
    assert ("map tag", "copy") in {(a, b) for a, b, _ in edges}
    # Live figures: the source node shows what the metrics counted (this run: both queries read every event).
    live = _live(run)
    read = sum(live[q]["records_in"].get("events", 0) for q in QUERIES)
    page.wait_for_function(
        f"EK.graphElements().nodes.some(n => n.id === 'source:events' && n.label.includes('in {read:,}'))",
        timeout=15_000,
    )
    assert page.locator("#operators tbody tr").count() == len(nodes) - len(QUERIES)
    _screenshot(page, run, "graph")


def _open_graph(page: Any, url: str, min_polls: int = 1) -> None:
    open_page(page, url, "graph", min_polls=min_polls)
    page.wait_for_function("EK.graphElements() !== null")


def test_graph_shows_each_operators_rows_rate_and_watermark(page: Any, run: UiRun) -> None:
    """Every operator node shows its rows in and out as the job's metrics counted them (n/a where Spark counts
    none), its rate between the page's last two live snapshots, and its watermark: the query's after the
    watermark node, none before it and in the copy query."""
    _open_graph(page, run.ui_url, min_polls=2)
    ids = _node_ids(page)
    shown = 0
    for query in QUERIES:
        for nid, rows in _live(run)[query]["operators"].items():
            # The label and the two snapshots its rate came from, read together (the page polls meanwhile).
            seen = page.evaluate(
                """([query, nid]) => {
                  const out = (s) => ((((s.queries[query] || {}).operators || {})[nid]) || {}).out || 0;
                  const now = EK.state.live, before = EK.state.previousLive;
                  return {label: EK.cy().getElementById(nid).data("label"), rows: now.queries[query].operators[nid],
                          rate: (out(now) - out(before)) / ((now.at - before.at) / 1000)};
                }""",
                [query, nid],
            )
            assert seen["rows"] == rows, (nid, seen, rows)  # the job is idle: the page has the same counts
            label = seen["label"].replace("\n", " ")
            n_in, n_out = ("n/a" if v is None else f"{v:,}" for v in (rows["in"], rows["out"]))
            line = f"in {n_in} · out {n_out}"
            if rows["out"] is not None:
                rate = max(0.0, seen["rate"])
                line += f" · {round(rate):,} rec/s" if rate >= 100 else f" · {rate:.1f} rec/s"
            assert line in label, (nid, line, label)
            shown += 1
    assert shown >= 6
    live = _live(run)
    for query, name in (
        ("late+totals", "filter valid"),
        ("late+totals", "window tumbling 5 s: aggregate CountSum"),
        ("copy", "map tag"),
    ):
        rows = live[query]["operators"][ids[(f"q:{query}", name)]]
        assert rows["in"] and rows["out"] is not None, (name, rows)  # Spark's own counts, not n/a
    watermark = live["late+totals"]["watermark_s"]
    assert watermark
    clock = time.strftime("%H:%M:%S", time.gmtime(watermark))
    for name in ("filter valid", "key_by user", "window tumbling 5 s: aggregate CountSum", "totals", "late"):
        assert f"watermark {clock}" in _label(page, ids[("q:late+totals", name)]), name
    for where in (
        ("q:late+totals", f"select user, amount, ts, {SIZE}"),
        ("q:copy", "map tag"),
        ("q:copy", "copy"),
    ):
        assert "no watermark" in _label(page, ids[where]), where


def _labels_inside(page: Any) -> None:
    """Every operator's and connector's label lies inside its node's shape."""
    outside = page.evaluate("EK.labelsOutside()")
    assert outside == [], outside


def test_graph_labels_stay_inside_their_nodes(page: Any, run: UiRun) -> None:
    """No label reaches outside its node, the select's long SQL expression included (wrapped, not cut)."""
    _open_graph(page, run.ui_url)
    _labels_inside(page)
    select = _node_ids(page)[("q:copy", f"select user, amount, ts, {SIZE}")]
    label = page.evaluate(f"EK.cy().getElementById({json.dumps(select)}).data('label')")
    assert label.count("\n") >= 5 and " ".join(label.split()).startswith(
        f"select user, amount, ts, {SIZE}"
    ), label


def test_timeline_shows_every_epoch_and_the_redone_one(page: Any, run: UiRun) -> None:
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
    assert page.locator("#cp-chart .run-gap").count() == 1  # the restart is marked on the chart
    _screenshot(page, run, "checkpoints")


def test_latency_percentiles_are_the_metrics_histograms(page: Any, run: UiRun) -> None:
    """The whole-run percentiles are what `histogram_quantile` gives over the endpoint's histogram (clamped into
    the observed extremes)."""
    samples = _scrape(run.metrics_port)
    open_page(page, run.ui_url, "latency", min_polls=1)
    live = _live(run)
    for query in QUERIES:
        buckets: dict[float, float] = {}
        for labels, value in samples["ethereal_kafka_end_to_end_latency_seconds_bucket"]:
            if labels["query"] == query:
                le = float("inf") if labels["le"] == "+Inf" else float(labels["le"])
                buckets[le] = buckets.get(le, 0.0) + value
        assert buckets and max(buckets.values()) >= sum(live[query]["records_in"].values()) > 0
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


def test_charts_break_their_lines_at_the_restart_and_mark_it(page: Any, run: UiRun) -> None:
    """The latency page's charts break their lines where the app stopped and started again, and mark it."""
    runs = sorted({r.run_started_ms for r in _history(run.app_id)})
    assert len(runs) == 2 and None not in runs, runs
    open_page(page, run.ui_url, "latency", min_polls=1)
    for chart in ("lat-chart", "dur-chart", "lag-chart"):
        page.wait_for_function(f"document.querySelectorAll('#{chart} .run-gap').length === 1")
        gap = page.locator(f"#{chart} .run-gap").first
        assert int(gap.get_attribute("data-started") or 0) == runs[1]
        data = page.evaluate(f"EK.charts['{chart}'].plot.data")
        breaks = page.evaluate(f"EK.charts['{chart}'].breaks")
        xs, series = data[0], data[1:]
        assert len(breaks) == 1, (chart, breaks)  # one all-null point between the runs: no line across
        at = breaks[0]
        assert all(s[at] is None for s in series), (chart, [s[at] for s in series])
        assert xs[at - 1] * 1000 < runs[1] < xs[at + 1] * 1000 + 1, (chart, xs)
        assert page.evaluate(f"EK.charts['{chart}'].plot.series.slice(1).every(s => !s.spanGaps)")


def test_exceptions_page_shows_failed_epochs_readably(page: Any, run: UiRun) -> None:
    """Every failed epoch is an entry (which query and epoch, when). The user function's failure in `copy` reads as
    one line naming the operator, the user's file and line, the exception and the record. A multi-line error (a
    JVM error), when there is one, shows its innermost exception on one line, not Py4J's wrapper, and its whole text
    folded below, line by line as recorded. An epoch the first run's stop interrupted (in the other query) is
    recorded "interrupted": a stop, not a failure, it is no entry."""
    history = _history(run.app_id)
    failed = [r for r in history if r.outcome == "failed"]
    user = [r for r in failed if r.query == "copy"]
    assert user
    open_page(page, run.ui_url, "exceptions", min_polls=1)
    assert page.locator("#exceptions .exception").count() == len(failed)
    assert page.locator("nav a[data-page=exceptions] .count").inner_text() == str(len(failed))
    entry = page.locator(f"#exceptions .exception[data-query='copy'][data-epoch='{user[0].epoch}']").first
    line = entry.locator("[data-testid=error-line]").inner_text()
    assert line == (user[0].error or "").strip(), line
    for part in (
        "operator map",
        "ui_jobs.py:",
        "PoisonedRecordError",
        f"topic {run.topics['events']}",
        "offset",
    ):
        assert part in line, (part, line)
    for record in (r for r in failed if "\n" in (r.error or "").strip()):
        entry = page.locator(
            f"#exceptions .exception[data-query='{record.query}'][data-epoch='{record.epoch}']"
        ).first
        line = entry.locator("[data-testid=error-line]").inner_text()
        assert "\n" not in line and not line.startswith("An error occurred while calling"), line
        trace = entry.locator("[data-testid=trace]")
        assert not trace.is_visible()  # folded
        entry.locator("details summary").click()
        assert trace.is_visible() and trace.inner_text().strip() == (record.error or "").strip()
        assert trace.evaluate("t => getComputedStyle(t).whiteSpace") == "pre"
    _screenshot(page, run, "exceptions")


def test_job_page_shows_the_settings_in_force(page: Any, run: UiRun) -> None:
    """The job page shows the settings in force (the source as the runner bounds and sizes it, and what the file
    said), the adaptive budget, secrets masked."""
    open_page(page, run.ui_url, "job", min_polls=2)
    facts = page.inner_text("[data-testid=facts]")
    assert "running (live)" in facts and "local[" in facts, facts
    config = page.inner_text("[data-testid=config]")
    assert "kafka.sasl.password" in config and "hunter2" not in config
    source = "table[data-config='source events']"
    in_force = run.ui.description.config["sources"]["events"]
    # The runner's own rule over the job file (the file sets no bound on the source, the job one for sizing).
    bound = job_sources(load_job(run.job_path), fresh=False)["events"].max_records_per_epoch
    assert 0 < bound <= EPOCH_RECORDS
    row = page.locator(f"{source} tr[data-key='max.records.per.epoch']")
    assert row.locator("td").nth(1).inner_text() == str(in_force["max.records.per.epoch"]) == str(bound)
    assert "job file: 0" in row.inner_text() and "changed" in (row.get_attribute("class") or "")
    sizing = page.locator(f"{source} tr[data-key='epoch.sizing']")
    assert sizing.locator("td").nth(1).inner_text() == "adaptive" and "job file: fixed" in sizing.inner_text()
    page.wait_for_function(f'!document.querySelector("{source} tr.budget").hidden')
    budgets = page.locator(f"{source} tr.budget td.budget-value").inner_text()
    live = _live(run)
    for query in QUERIES:
        assert f"{live[query]['epoch_budgets']['events']:,} ({query})" in budgets, budgets
    assert "No auto-scaling decisions" in page.inner_text("[data-testid=decisions]")
    _screenshot(page, run, "job")


def _leave(page: Any) -> None:
    """Leave the page shown (its polls in flight are cancelled, which is no error of the next page's)."""
    page.goto("about:blank")
    page.errors.clear()


def test_one_record_stopped_app_shows_that_records_latency(page: Any, tmp_path: Path) -> None:
    """A stopped app whose last run read one record that waited 65 s: the latency page shows 65 s for every
    percentile (not the bucket's interpolation, p50 90 s / p99 119.4 s)."""
    record = ui_records.one_record_epoch("ui-one-record")
    with CheckpointHistory(record.app_id, tmp_path / "history") as history:
        history.record(record)
    plan = {"style": "dataframe", "queries": [{"name": "q", "sinks": ["out"]}], "nodes": [], "edges": []}
    described = RunDescription(
        app_id=record.app_id,
        started_ms=record.started_ms,
        plan=plan,
        config={},
        job_file="job.properties",
        checkpoint_location=str(tmp_path),
        delivery_guarantee="exactly-once",
    )
    data = HistoryUi(described, tmp_path / "history")
    server = UiServer(data)
    try:
        _leave(page)
        open_page(page, server.url, "latency", min_polls=1)
        row = "#percentiles tr[data-query='q']"
        page.wait_for_selector(f"{row} td.p50[data-value]:not([data-value=''])")
        assert page.inner_text(f"{row} td.count") == "1"
        for name in ("p50", "p95", "p99"):
            cell = f"{row} td.{name}"
            assert float(page.get_attribute(cell, "data-value") or "nan") == pytest.approx(
                ui_records.LATENCY_S, abs=0.01
            )
            assert page.inner_text(cell) == f"{ui_records.LATENCY_S:.1f} s", name
        _leave(page)
    finally:
        server.close()
        data.close()


@pytest.mark.timeout(240)
def test_ui_command_serves_a_stopped_app(page: Any, run: UiRun) -> None:
    """`ethereal-kafka ui APP` serves the stopped app's pages from its history: the timeline, the graph with the
    last run's per-operator figures (labels inside), the latency page's restart mark, the exceptions; read-only."""
    run.stop()
    history = _history(run.app_id)
    last_run = max(r.run_started_ms or 0 for r in history)
    process = subprocess.Popen(
        [sys.executable, "-m", "ethereal_kafka.cli", "ui", run.app_id, "--port", str(_free_port())],
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
        _leave(page)
        open_page(page, url, "checkpoints", min_polls=1)
        assert "stopped app" in page.inner_text("[data-testid=mode]")
        page.wait_for_function(f"document.querySelectorAll('#epochs tbody tr').length == {len(history)}")
        assert page.locator("#epochs tbody tr[data-outcome='aborted-and-redone']").count() >= 1
        _open_graph(page, url)
        names = {n["name"] for n in page.evaluate("EK.graphElements()")["nodes"]}
        assert {"events", "totals", "late", "copy", "map tag", "filter valid"} <= names
        # Per-operator figures of the last run, from its epochs in the history.
        tag = _node_ids(page)[("q:copy", "map tag")]
        rows = [
            r.operators[tag]
            for r in history
            if r.run_started_ms == last_run
            and r.outcome == "committed"
            and r.operators
            and tag in r.operators
        ]
        total = sum(row[1] for row in rows)
        assert total > 0 and f"out {total:,}" in _label(page, tag)
        _labels_inside(page)
        open_page(page, url, "latency", min_polls=1)
        page.wait_for_selector("#percentiles tr[data-query='copy'] td.p50[data-value]:not([data-value=''])")
        assert page.locator("#dur-chart .run-gap").count() == 1
        open_page(page, url, "exceptions", min_polls=1)
        assert page.locator("#exceptions .exception[data-query='copy']").count() >= 1
        assert page.errors == []
        _leave(page)
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
