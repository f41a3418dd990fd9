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

Output: the daemon and its workers inherit the driver JVM's stdout/stderr, which `run` points at the log folder's
`jvm-output.log` (`runtime.logs.child_output_to`).
"""

from __future__ import annotations

import gc
import importlib
import sys

#: What the forked workers of each worker module import (the module itself first); a module that is not
#: installed is skipped.
PRELOAD: dict[str, tuple[str, ...]] = {
    "pyspark.worker": (
        "pyspark.worker",
        "pyspark.sql.pandas.serializers",
        "pyarrow.compute",
        # pyarrow imports pandas (when installed) the first time `pa.array` converts a Python sequence, to check for
        # pandas objects: 0.2-0.6 CPU-s and ~37 MB of private memory in every worker that had not imported it.
        "pandas",
        "pyarrow.pandas_compat",
        "pyarrow.vendored.version",
        "orjson",
        "ethereal_kafka.eos.source",
        "ethereal_kafka.eos.phase_one",
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


def main() -> None:
    """Preload, then run PySpark's daemon loop (it reads the worker module from `argv[1]` itself)."""
    preload(sys.argv[1] if len(sys.argv) > 1 else "pyspark.worker")
    from pyspark import daemon

    # What was imported stays for the workers' whole life: moved out of the cyclic collector's reach, a worker's
    # collections neither scan it nor write to its pages (which would copy them from the daemon, page by page).
    # Measured on a 4-query join test: the workers' CPU went from 11.7 to 5.2 CPU-s, most of it full collections.
    gc.freeze()
    daemon.manager()


if __name__ == "__main__":
    main()
