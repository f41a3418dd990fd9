"""Where a streaming query's epochs spend their time, from a Spark event log: the fixed and the per-record part.

    .venv/bin/python bench/epoch_cost.py /tmp/ek-events/           # every event log in a folder (or files)

Any Spark streaming query can write the event log: ethereal-kafka with `--ek-setting spark.eventLog.enabled=true
--ek-setting spark.eventLog.dir=DIR` (bench/nexmark.py), Spark's own engine with `--spark-conf` the same. Reads
every `QueryProgressEvent` (one per epoch: its input rows, Spark's phases in `durationMs`, the state operators'
commit times) and the stages' task times, and prints, over the epochs with input after the first `--skip`:

- the median of each phase per epoch: `latestOffset` (the source's planning of the epoch's end offsets),
  `queryPlanning` (Spark's optimizer and physical planning), `addBatch` (running the epoch: the stages, and for
  ethereal-kafka the foreachBatch write with both phases of the exactly-once commit), `walCommit` and
  `commitOffsets` (Spark's offset and commit logs), the state stores' commit (`commitTimeMs`, summed over
  operators), the stages per epoch and their tasks' summed executor run time;
- a least-squares fit of the epoch's duration (`triggerExecution`) on its input rows: the fixed cost per epoch and
  the cost per 1,000 rows.

Writes nothing; prints a Markdown table (use `--json` for the numbers).
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PROGRESS = "org.apache.spark.sql.streaming.StreamingQueryListener$QueryProgressEvent"
PHASES = (
    "latestOffset",
    "getBatch",
    "queryPlanning",
    "addBatch",
    "walCommit",
    "commitOffsets",
    "triggerExecution",
)


def _lines(path: Path) -> Iterator[str]:
    """The lines of an event log file, zstd/lz4/snappy-compressed or not (Spark 4 compresses with zstd)."""
    codec = {".zstd": "zstd", ".lz4": "lz4", ".snappy": "snappy"}.get(path.suffix)
    if codec is None:
        with path.open(encoding="utf-8") as text:
            yield from text
        return
    import pyarrow as pa

    with pa.CompressedInputStream(pa.OSFile(str(path)), codec) as stream:
        yield from io.TextIOWrapper(stream, encoding="utf-8")


def event_logs(given: Path) -> list[Path]:
    """The event log files under `given`: the file itself, or every `events_*` file (Spark 4's rolling logs, one
    folder per application) and every plain log file below a folder."""
    if given.is_file():
        return [given]
    found = sorted(p for p in given.rglob("*") if p.is_file() and not p.name.startswith((".", "appstatus")))
    return [p for p in found if p.name.startswith("events_") or p.parent == given]


def read(path: Path) -> tuple[str, list[dict[str, Any]], dict[int, list[float]]]:
    """The application's name, the progress reports, and per batch id (which Spark's streaming jobs carry) the run
    time (ms) of each of its stages' tasks summed."""
    name = path.name
    progress: list[dict[str, Any]] = []
    stage_batch: dict[int, int] = {}
    stage_time: dict[int, float] = defaultdict(float)
    for line in _lines(path):
        if line.strip():
            event = json.loads(line)
            kind = event.get("Event")
            if kind == "SparkListenerApplicationStart":
                name = str(event.get("App Name", name))
            elif kind == PROGRESS:
                progress.append(event["progress"])
            elif kind == "SparkListenerJobStart":
                batch = (event.get("Properties") or {}).get("streaming.sql.batchId")
                if batch is not None:
                    for stage in event.get("Stage IDs", []):
                        stage_batch[stage] = int(batch)
            elif kind == "SparkListenerTaskEnd":
                metrics = event.get("Task Metrics") or {}
                stage_time[event["Stage ID"]] += float(metrics.get("Executor Run Time", 0))
    stages: dict[int, list[float]] = defaultdict(list)
    for stage, batch in stage_batch.items():
        stages[batch].append(stage_time.get(stage, 0.0))
    return name, progress, stages


def input_rows(progress: dict[str, Any]) -> int:
    """An epoch's input rows: the report's `numInputRows`, or the sum over its sources (event logs carry only
    those)."""
    if "numInputRows" in progress:
        return int(progress["numInputRows"])
    return sum(int(source.get("numInputRows", 0)) for source in progress.get("sources", []))


def summary(path: Path, skip: int) -> dict[str, Any]:
    """The medians and the fit described in the module docstring."""
    name, progress, stages = read(path)
    for report in progress:
        report["numInputRows"] = input_rows(report)
    with_input = [p for p in progress if p["numInputRows"] > 0]
    epochs = (
        with_input[skip:] or with_input
    )  # a query that read its input in one epoch (Spark's own, unbounded)
    if not epochs:
        raise SystemExit(f"{path}: no epoch with input")
    out: dict[str, Any] = {"app": name, "epochs": len(epochs), "rows": sum(p["numInputRows"] for p in epochs)}
    for phase in PHASES:
        out[phase] = statistics.median(p.get("durationMs", {}).get(phase, 0) for p in epochs)
    out["stateCommit"] = statistics.median(
        sum(op.get("commitTimeMs", 0) for op in p.get("stateOperators", [])) for p in epochs
    )
    out["stages"] = statistics.median(len(stages.get(p["batchId"], [])) for p in epochs)
    out["taskTime"] = statistics.median(sum(stages.get(p["batchId"], [])) for p in epochs)
    out["rowsPerEpoch"] = statistics.median(p["numInputRows"] for p in epochs)
    xs = [float(p["numInputRows"]) for p in epochs]
    ys = [float(p["durationMs"]["triggerExecution"]) for p in epochs]
    if len(set(xs)) > 1:
        slope, intercept = statistics.linear_regression(xs, ys)
        out["fixedMs"] = round(intercept, 1)
        out["msPer1000Rows"] = round(slope * 1000, 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("logs", nargs="+", type=Path, help="event log files, or folders (every file in them)")
    parser.add_argument(
        "--skip", type=int, default=3, help="epochs with input left out at the start (warm-up)"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    for given in args.logs:
        for path in event_logs(given):
            try:
                rows.append((path.name, summary(path, args.skip)))
            except SystemExit as exc:  # a log without epochs (a run stopped early): say so, go on
                print(exc, file=sys.stderr)
    if args.json:
        print(json.dumps(dict(rows), indent=2))
        return
    columns = [
        "app",
        "epochs",
        "rowsPerEpoch",
        *PHASES,
        "stateCommit",
        "stages",
        "taskTime",
        "fixedMs",
        "msPer1000Rows",
    ]
    print("| log | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for name, row in rows:
        print(f"| {name} | " + " | ".join(str(row.get(c, "n/a")) for c in columns) + " |")


if __name__ == "__main__":
    main()
