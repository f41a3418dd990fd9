"""Exactly-once soak: a stateful job (keyed running aggregate) SIGKILLed many times while it consumes its input.

    .venv/bin/python bench/soak.py --kills 100 --records 20000

Prints the harness line `records=N duplicates=D lost=L kills=K` and writes bench/results/soak.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import bench_broker, write_result

from ethereal_kafka.examples import eos
from ethereal_kafka.testing.crash import run_with_kills
from ethereal_kafka.testing.kafka_io import create_topic
from tests.integration.eos_helpers import feed, output, write_job


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--min-s", type=float, default=3.0)
    parser.add_argument("--max-s", type=float, default=12.0)
    args = parser.parse_args()
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
            },
        )
        print(line)


if __name__ == "__main__":
    main()
