"""Take the web UI's screenshots in this folder from the browser tests' job, run larger than in the suite.

    nice -n 19 .venv/bin/python docs/images/make_screenshots.py [--events 20000]

Runs `tests/integration/test_ui.py` (its own broker and SparkSession, Debian's chromium) with `EK_UI_TEST_EVENTS`
set and `ETHEREAL_KAFKA_UI_SCREENSHOTS` naming this folder; the tests save `ui-*.png` there as they check each page.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000, help="in-order events of the job's input")
    args = parser.parse_args()
    env = {**os.environ, "EK_UI_TEST_EVENTS": str(args.events), "ETHEREAL_KAFKA_UI_SCREENSHOTS": str(HERE)}
    command = [sys.executable, "-m", "pytest", "tests/integration/test_ui.py", "-q", "-p", "no:cacheprovider"]
    return subprocess.call(command, cwd=ROOT, env=env)


if __name__ == "__main__":
    sys.exit(main())
