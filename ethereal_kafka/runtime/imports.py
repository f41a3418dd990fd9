"""Where a job's pipeline module is imported from: the job file's folder, then the working directory.

Like Flink's `-pyfs`, a job's Python code may sit beside its job file: `pipeline=my_jobs.orders:build` in
`/srv/jobs/orders/job.properties` imports `/srv/jobs/orders/my_jobs/orders.py` without `PYTHONPATH`. The driver
imports it through `sys.path` (`make_importable`); Spark's Python workers import it (a pickled function refers to its
module by name) through the `PYTHONPATH` the JVM inherits when it starts (`export_to_workers`).
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path


def search_path(job_file: str | Path | None) -> list[str]:
    """The folders a job's pipeline module is looked up in, first match wins: the job file's folder (when given),
    then the working directory. Absolute paths, without repeats."""
    folders = [Path(job_file).resolve().parent] if job_file is not None else []
    folders.append(Path.cwd().resolve())
    out: list[str] = []
    for folder in folders:
        if str(folder) not in out:
            out.append(str(folder))
    return out


def make_importable(job_file: str | Path | None) -> None:
    """Put `search_path(job_file)` at the front of `sys.path` (in its order) in this process.

    Called on the driver before the pipeline module is imported (`runtime.job.resolve_pipeline`); idempotent. A
    folder already on `sys.path` keeps its place behind the job's folder.
    """
    folders = search_path(job_file)
    for folder in reversed(folders):
        if folder in sys.path:
            sys.path.remove(folder)
        sys.path.insert(0, folder)
    importlib.invalidate_caches()  # a folder created after start-up is looked at afresh


def export_to_workers(job_file: str | Path | None) -> None:
    """Prepend `search_path(job_file)` to this process's `PYTHONPATH`.

    Called by `runtime.runner.run` before Spark starts: the embedded JVM inherits the variable and hands it to every
    Python worker it launches, so executors of a local run import the pipeline module as the driver does. It has no
    effect on a session that already runs (the test kit's shared one) nor on a cluster's executors, which need the
    code shipped (`spark-submit --py-files`).
    """
    existing = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    folders = search_path(job_file)
    os.environ["PYTHONPATH"] = os.pathsep.join([*folders, *(p for p in existing if p not in folders)])
