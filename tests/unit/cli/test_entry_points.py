"""`python -m ethereal_kafka` and `ethereal-kafka --version` run as a user types them (real processes)."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

CLI = str(Path(sys.executable).parent / "ethereal-kafka")


def test_python_dash_m_runs_the_cli(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ethereal_kafka", "--help"], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: ethereal-kafka") and "validate" in done.stdout


def test_version_prints_the_package_version(tmp_path: Path) -> None:
    for command in ([CLI, "--version"], [sys.executable, "-m", "ethereal_kafka", "--version"]):
        done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"ethereal-kafka {version('ethereal-kafka')}"
