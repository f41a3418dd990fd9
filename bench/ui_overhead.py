"""What the web UI costs a job: the same exactly-once job with the UI off, and on with a headless browser polling it.

    .venv/bin/python bench/ui_overhead.py --records 300000 --rounds 3

Feeds one input topic, then runs `ethereal-kafka run JOB --available-now` (the `eos:stateless` example, exactly-once)
`--rounds` times per setting, alternating UI off / UI on. With the UI on, Debian's headless chromium opens the
stream graph page for the whole run (it polls the UI every 2 s, as a person's open tab does) and switches to the
checkpoint and latency pages now and then. Per run: records/s from the first epoch's start to the last epoch's
commit (Spark start-up excluded, from the checkpoint history), and the CPU-seconds of the job's whole process tree
(driver, Spark JVM, Python workers; sampled with psutil, so PySpark's daemon, which ignores SIGCHLD, is counted)
per million records. The browser's own CPU is reported apart: it is the viewer's, not the job's.
Writes bench/results/ui-overhead.json.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import TreeCpu, bench_broker, drained, write_result

from ethereal_kafka.connectors.kafka.topics import create_topic
from ethereal_kafka.examples import eos
from tests.integration.browser import chromium_page
from tests.integration.eos_helpers import feed, write_job


def browse(url_box: dict[str, str], stop: threading.Event, stats: dict[str, Any]) -> None:
    """Keep the UI open in headless chromium until `stop`: the graph page, with a look at the others."""
    while "url" not in url_box and not stop.is_set():
        time.sleep(0.1)
    if stop.is_set():
        return
    with chromium_page() as page:
        page.goto(url_box["url"] + "#graph")
        pages = ["graph", "checkpoints", "graph", "latency"]
        turn = 0
        while not stop.wait(3.0):
            turn += 1
            if turn % 5 == 0:
                page.goto(url_box["url"] + "#" + pages[(turn // 5) % len(pages)])
        stats["polls"] = int(page.evaluate("Number(document.body.dataset.polls || 0)"))
        stats["errors"] = list(page.errors)


def run_once(bootstrap: str, src: str, records: int, ui: bool, per_epoch: int, index: int) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix=f"ek-ui-bench-{'on' if ui else 'off'}-"))
    dst = create_topic(bootstrap, f"ui-bench-out-{index}-{int(time.time())}", 2)
    files = write_job(
        folder,
        bootstrap,
        src,
        dst,
        "ethereal_kafka.examples.eos:stateless",
        max_records=per_epoch,
        extra_job=f"ui.enabled={'true' if ui else 'false'}\nprogress=off\n",
    )
    err = folder / "job.err"
    url_box: dict[str, str] = {}
    stop = threading.Event()
    stats: dict[str, Any] = {}
    viewer = threading.Thread(target=browse, args=(url_box, stop, stats), daemon=True) if ui else None
    began = time.monotonic()
    with err.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "ethereal_kafka.cli", "run", str(files.job), "--available-now"],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    if viewer is not None:
        viewer.start()
    with TreeCpu(process.pid) as cpu:
        while process.poll() is None:
            if ui and "url" not in url_box:
                found = re.search(r"ui at (http://\S+)", err.read_text(errors="replace"))
                if found:
                    url_box["url"] = found.group(1)
            time.sleep(0.2)
        cpu.sample()
    stop.set()
    if viewer is not None:
        viewer.join(timeout=60)
    if process.returncode != 0:
        raise SystemExit(f"job failed: {err.read_text()[-3000:]}")
    epochs, processed, seconds = drained(files.app_id)
    return {
        "ui": ui,
        "records": processed,
        "epochs": len(epochs),
        "epoch_seconds": round(seconds, 2),
        "records_per_s": round(processed / seconds),
        "cpu_s": round(cpu.seconds, 1),
        "cpu_s_per_1m": round(cpu.seconds / processed * 1_000_000, 2),
        "process_wall_s": round(time.monotonic() - began, 1),
        **({"browser_polls": stats.get("polls"), "browser_errors": stats.get("errors")} if ui else {}),
    }


def serving_cost(polls: int = 300, epochs: int = 5000) -> dict[str, Any]:
    """CPU a browser's polling costs the driver, measured in-process: a live UI over metrics of 2 queries and
    `epochs` kept epochs, polled as the page does (epochs since the last seen, live figures; overview and plan
    every 15th poll, latency every 5th) over real HTTP. The client's CPU is counted too: an upper bound."""
    import urllib.request

    from ethereal_kafka.checkpoint.history import EpochRecord
    from ethereal_kafka.runtime.description import RunDescription
    from ethereal_kafka.runtime.histogram import Histogram
    from ethereal_kafka.runtime.metrics import LATENCY_BUCKETS, JobMetrics
    from ethereal_kafka.ui.live import LiveUi
    from ethereal_kafka.ui.server import UiServer

    metrics = JobMetrics("bench", {})
    for query in ("a", "b"):
        metrics.add_query(query, [f"{query}-out"])
        metrics.records_in[(query, "events")] = 10**6
        metrics.records_out[(query, f"{query}-out")] = 10**6
        metrics.lag.update({(query, "events", "in", str(p)): 5 for p in range(8)})
        metrics.latency_seconds[(query, "events")] = Histogram(LATENCY_BUCKETS)
        metrics.latency_seconds[(query, "events")].observe(0.4, 10**6)
    ui = LiveUi(metrics)
    plan = {"queries": [], "nodes": [], "edges": []}
    ui.description = RunDescription("bench", 0, plan, {}, "/j", "/c", "exactly-once")
    latency = Histogram(LATENCY_BUCKETS)
    latency.observe(0.4, 1000)
    for i in range(epochs):
        ui.on_epoch(
            "a",
            EpochRecord(
                app_id="bench",
                checkpoint_id="c" * 36,
                epoch=i,
                mode="shuffling",
                start_offsets={"in": {str(p): i * 100 for p in range(8)}},
                end_offsets={"in": {str(p): i * 100 + 100 for p in range(8)}},
                records_in=800,
                records_out=800,
                tasks=2,
                skipped_tasks=0,
                started_ms=i * 1000,
                duration_ms=300,
                outcome="committed",
                query="a",
                lag={"in": {str(p): 5 for p in range(8)}},
                latency=latency.to_dict(),
            ),
            [],
        )
    server = UiServer(ui)

    def get(path: str) -> None:
        with urllib.request.urlopen(server.url + path, timeout=5) as response:
            response.read()

    try:
        get("api/epochs?after=-1")  # the page's first load (every kept epoch), not counted
        began_cpu, began = time.process_time(), time.perf_counter()
        for n in range(polls):
            if n % 15 == 0:
                get("api/overview")
                get("api/plan")
            get(f"api/epochs?after={epochs - 2}")
            get("api/live")
            if n % 5 == 0:
                get("api/latency")
        cpu = time.process_time() - began_cpu
        wall = time.perf_counter() - began
    finally:
        server.close()
    per_poll_ms = cpu / polls * 1000
    return {
        "polls": polls,
        "cpu_ms_per_poll": round(per_poll_ms, 2),
        "wall_ms_per_poll": round(wall / polls * 1000, 2),
        # The page polls every 2 s: the share of one core a page open all the time takes from the driver.
        "core_share_pct_at_one_poll_per_2s": round(per_poll_ms / 2000 * 100, 3),
    }


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    rates = [r["records_per_s"] for r in runs]
    cpu = [r["cpu_s_per_1m"] for r in runs]
    return {
        "records_per_s_mean": round(statistics.mean(rates)),
        "records_per_s_runs": rates,
        "cpu_s_per_1m_mean": round(statistics.mean(cpu), 2),
        "cpu_s_per_1m_runs": cpu,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-records-per-epoch", type=int, default=50_000)
    parser.add_argument("--serving-only", action="store_true", help="only the in-process serving cost")
    args = parser.parse_args()
    serving = serving_cost()
    print(json.dumps({"serving": serving}), flush=True)
    if args.serving_only:
        write_result("ui-serving-cost", {"serving": serving})
        return
    with bench_broker() as bootstrap:
        src = create_topic(bootstrap, f"ui-bench-in-{int(time.time())}", 2)
        feed(bootstrap, src, eos.events(args.records), 2)
        runs = []
        for _round in range(args.rounds):
            for ui in (False, True):
                run = run_once(bootstrap, src, args.records, ui, args.max_records_per_epoch, len(runs))
                print(json.dumps(run), flush=True)
                runs.append(run)
    off = summary([r for r in runs if not r["ui"]])
    on = summary([r for r in runs if r["ui"]])
    result = {
        "records": args.records,
        "rounds": args.rounds,
        "ui_off": off,
        "ui_on": on,
        "throughput_change_pct": round((on["records_per_s_mean"] / off["records_per_s_mean"] - 1) * 100, 2),
        "cpu_per_record_change_pct": round((on["cpu_s_per_1m_mean"] / off["cpu_s_per_1m_mean"] - 1) * 100, 2),
        "serving": serving,
        "runs": runs,
    }
    path = write_result("ui-overhead", result)
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=2))
    print(f"written to {path}")


if __name__ == "__main__":
    main()
