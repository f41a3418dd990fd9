"""`ethereal-kafka demo` finds its job and connector files in the installed package, from any working directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ethereal_kafka import errors

CLI = str(Path(sys.executable).parent / "ethereal-kafka")


def test_the_demo_job_resolves_and_validates_outside_a_checkout(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    found = subprocess.run(
        [sys.executable, "-c", "from ethereal_kafka.demo import demo_job_file; print(demo_job_file())"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert found.returncode == 0, found.stderr
    job = Path(found.stdout.strip())
    package = Path(errors.__file__).parent
    assert job == package / "demo" / "job" / "demo-job.properties"
    shipped = sorted(p.name for p in job.parent.glob("*.properties"))
    assert shipped == [
        "demo-job.properties",
        "demo-large-orders-sink.properties",
        "demo-orders-source.properties",
        "demo-revenue-sink.properties",
    ]
    done = subprocess.run(
        [CLI, "validate", "--no-plan", str(job)], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(
        f"{job}: ok (job 'ethereal-kafka-demo-0', sources orders, sinks large-orders"
    )


def test_the_package_data_declares_the_demo_files() -> None:
    """A wheel carries only declared package data: the demo's files must be in pyproject's list."""
    pyproject = (Path(errors.__file__).parents[1] / "pyproject.toml").read_text()
    assert '"demo/job/*.properties"' in pyproject
