"""Exactly-once soak: a stateful job (keyed running aggregate) SIGKILLed many times while it consumes its input.

    .venv/bin/python bench/soak.py --kills 100 --records 60000

Prints the harness line `records=N duplicates=D lost=L kills=K` and writes bench/results/soak.json.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import bench_broker, write_result

from ethereal_kafka.connectors.kafka.topics import create_topic
from ethereal_kafka.examples import eos
from ethereal_kafka.testing.crash import run_with_kills
from tests.integration.eos_helpers import feed, output, write_job


def kill_points(log: Path) -> dict[str, int]:
    """Classify the harness's runs from its log: killed during start-up (before the queries ran), killed while
    the queries ran, and runs that ended by themselves (input consumed); `kills_before_input_consumed` counts the
    kills before the first run that ended by itself (the later ones hit restarts of a drained job)."""
    runs = re.findall(r"=== run \d+ \(kills so far (\d+)\) ===\n(.*?)(?==== run |\Z)", log.read_text(), re.S)
    counts = {
        "killed_in_startup": 0,
        "killed_while_running": 0,
        "ended_by_themselves": 0,
        "kills_before_input_consumed": 0,
    }
    for (before, text), (after, _) in zip(runs, [*runs[1:], ("-1", "")], strict=True):
        if after != "-1" and int(after) > int(before):
            counts["killed_while_running" if "running: queries" in text else "killed_in_startup"] += 1
            if not counts["ended_by_themselves"]:
                counts["kills_before_input_consumed"] += 1
        else:
            counts["ended_by_themselves"] += 1
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--records", type=int, default=60_000)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--min-s", type=float, default=10.0)
    parser.add_argument("--max-s", type=float, default=45.0)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stopped early: still stop the bench broker
    with bench_broker() as bootstrap:
        stamp = int(time.time())
        src = create_topic(bootstrap, f"soak-in-{stamp}", 3)
        dst = create_topic(bootstrap, f"soak-out-{stamp}", 3)
        inputs = eos.events(args.records)
        feed(bootstrap, src, inputs, 3)
        folder = Path(tempfile.mkdtemp(prefix="ek-soak-"))
        files = write_job(
            folder, bootstrap, src, dst, "ethereal_kafka.examples.eos:running_total", max_records=100
        )
        run = run_with_kills(
            files.job,
            args.kills,
            args.seed,
            window_s=(args.min_s, args.max_s),
            env={"ETHEREAL_KAFKA_FAULT_TXN_DELAY_MS": "200"},
            timeout_s=6 * 3600,
            log=folder / "crash.log",
        )
        updates = [json.loads(r.value or b"") for r in output(bootstrap, dst)]
        reference = eos.running_total_reference(inputs)
        seen = Counter((u["key"], u["count"]) for u in updates)
        duplicates = sum(n - 1 for n in seen.values() if n > 1)
        wrong = sum(1 for u in updates if reference[u["key"]][u["count"] - 1] != u["total"])
        finals = {k: max(c for (key, c) in seen if key == k) for k, _ in seen}
        lost = sum(1 for k, totals in reference.items() if finals.get(k) != len(totals))
        line = f"records={len(updates)} duplicates={duplicates} lost={lost} kills={run.kills}"
        write_result(
            "soak",
            {
                "records_in": args.records,
                "updates": len(updates),
                "duplicates": duplicates,
                "lost": lost,
                "wrong_totals": wrong,
                "kills": run.kills,
                "runs": run.runs,
                "seconds": round(run.seconds),
                **kill_points(run.log),
            },
        )
        print(line)


if __name__ == "__main__":
    main()
