"""The Python worker daemon Spark forks its Python workers from (`spark.python.daemon.module`): PySpark's own
daemon, with the modules every worker of a job imports loaded once, before the first fork.

    python -m ethereal_kafka.runtime.worker_daemon pyspark.worker

Spark starts one daemon per worker module and forks a worker from it for each Python task slot (4 to 6 per
start of a `local[2]` job); each worker imported PySpark's Arrow serializers, pandas, pyarrow and the
framework's connectors and serde after the fork (0.3-0.6 CPU-s each, measured). Forked from a daemon that
imported them, a worker shares them. Nothing here changes what a worker does: the daemon's loop, the protocol
and the worker module (`argv[1]`) are PySpark's.

Only modules without side effects at import are loaded (no client, thread or file is created): a job's own
pipeline module is left to the worker, which imports it as before.

Output: in a local run (`$ETHEREAL_KAFKA_WORKER_LOG_DIR` set by `run`), each forked worker writes its stdout and
stderr to `python-workers.log` in the run's log folder, apart from the JVM's output (`runtime.logs.child_output_to`
sends that, and the output of the Python processes Spark starts without this daemon, to `jvm-output.log`): a user
function's `print` lands there. The daemon's own stdout is left alone: it hands Spark its port through it.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import IO, Any

from ethereal_kafka.connectors.kafka.clients import LOG_DIR_ENV

#: The file in a local run's log folder that its Python workers' stdout and stderr go to.
WORKER_OUTPUT_FILE = "python-workers.log"

#: What the forked workers of each worker module import (the module itself first); a module that is not
#: installed is skipped.
PRELOAD: dict[str, tuple[str, ...]] = {
    "pyspark.worker": (
        "pyspark.worker",
        "pyspark.sql.pandas.serializers",
        "pyarrow.compute",
        "orjson",
        "ethereal_kafka.connectors.kafka.source",
        "ethereal_kafka.connectors.kafka.transactional",
        "ethereal_kafka.connectors.kafka.sink",
        "ethereal_kafka.serde.json_encode",
        "ethereal_kafka.serde.json_decode",
        "ethereal_kafka.runtime.transform",
    ),
}


def preload(worker_module: str) -> list[str]:
    """Import what the workers of `worker_module` import; returns the modules that could not be imported."""
    missing = []
    for name in PRELOAD.get(worker_module, (worker_module,)):
        try:
            importlib.import_module(name)
        except (
            Exception
        ):  # an optional module: the worker imports (or fails on) it itself, as without the daemon
            missing.append(name)
    return missing


def route_output(worker_module: str, folder: str | None) -> bool:
    """Make the workers of `worker_module` (forked from this daemon) send their stdout and stderr to
    `folder/python-workers.log` once they start; returns whether it did (not without a folder, nor for a module
    that cannot be imported: the worker then fails as it would without this daemon).

    The module's `main(infile, outfile)`, which PySpark's daemon calls in each forked child, is wrapped; the
    daemon process itself is unchanged.
    """
    if not folder:
        return False
    try:
        module = importlib.import_module(worker_module)
    except Exception:
        return False
    run: Callable[[IO[Any], IO[Any]], Any] = module.main
    path = os.path.join(folder, WORKER_OUTPUT_FILE)

    def main(infile: IO[Any], outfile: IO[Any]) -> Any:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError:  # the folder went away: the output goes where it went without this daemon
            return run(infile, outfile)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        # Line-buffered: a forked worker leaves by os._exit, which flushes nothing.
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 (the worker's stdout until it exits)
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        return run(infile, outfile)

    setattr(module, "main", main)  # noqa: B010 (PySpark's daemon looks the function up by name)
    return True


def main() -> None:
    """Preload, route the workers' output, then run PySpark's daemon loop (it reads the worker module from
    `argv[1]` itself)."""
    worker_module = sys.argv[1] if len(sys.argv) > 1 else "pyspark.worker"
    preload(worker_module)
    route_output(worker_module, os.environ.get(LOG_DIR_ENV))
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main()
