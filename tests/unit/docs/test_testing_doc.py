"""docs/testing-your-job.md: its example project is complete and `ethereal-kafka validate` accepts its job as written
(the integration test `test_docs_example.py` runs it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.doc_blocks import write_doc_files

CLI = str(Path(sys.executable).parent / "ethereal-kafka")
PAGE = "testing-your-job.md"


def test_the_example_project_validates_as_written(tmp_path: Path) -> None:
    files = write_doc_files(PAGE, tmp_path)
    assert set(files) == {
        "jobs/orders/job.properties",
        "jobs/orders/orders-source.properties",
        "jobs/orders/large-orders-sink.properties",
        "jobs/orders/large_orders.py",
        "tests/test_large_orders.py",
    }
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [CLI, "validate", "--no-plan", str(files["jobs/orders/job.properties"])],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
