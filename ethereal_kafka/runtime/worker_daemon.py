"""The Python worker daemon Spark forks its Python workers from (`spark.python.daemon.module`): PySpark's own
daemon, with the modules every worker of a job imports loaded once, before the first fork.

    python -m ethereal_kafka.runtime.worker_daemon pyspark.worker

Spark starts one daemon per worker module and forks a worker from it for each Python task slot (4 to 6 per
start of a `local[2]` job); each worker imported PySpark's Arrow serializers, pandas, pyarrow and the
framework's connectors and serde after the fork (0.3-0.6 CPU-s each, measured). Forked from a daemon that
imported them, a worker shares them. The daemon's loop, the protocol and the worker module (`argv[1]`) are
PySpark's; one thing changes how a worker works, not what it computes: the input rows of a row-based
transformWithState (the framework's stateful operators) are converted column by column (`runtime.row_batches`).

Only modules without side effects at import are loaded (no client, thread or file is created): a job's own
pipeline module is left to the worker, which imports it as before. A `transform.sql` job runs no user code in its
workers and never uses pandas there: `run` sets `ETHEREAL_KAFKA_WORKER_PANDAS=0` for it, and the daemon hides
pandas from itself and its workers (`HidePandas`; ~36 MB less in the daemon and in each worker's RSS).

Output: the daemon and its workers inherit the driver JVM's stdout/stderr, which `run` points at the log folder's
`jvm-output.log` (`runtime.logs.child_output_to`).
"""

from __future__ import annotations

import gc
import importlib
import importlib.abc
import os
import sys
from collections.abc import Sequence
from types import ModuleType

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


#: Set to `0` by `run` for a job whose Python workers run no user code (`transform.sql`): they never use pandas.
PANDAS_ENV = "ETHEREAL_KAFKA_WORKER_PANDAS"
#: What only pandas users need (left out of the preload under `PANDAS_ENV=0`).
PANDAS_MODULES = frozenset({"pandas", "pyarrow.pandas_compat"})


class HidePandas(importlib.abc.MetaPathFinder):
    """First on `sys.meta_path`, makes every import of pandas fail as if it were not installed.

    pyarrow imports pandas (~36 MB) the first time it converts a Python sequence, only to ask whether a value is a
    pandas object, and tries again at every conversion while the import fails: so hidden, a worker runs the way
    pyarrow runs without pandas installed (one of its supported set-ups), and a sequence converts in ~18 us
    instead of ~59 (measured on `pa.array([1, 2, 3])`).
    """

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> None:
        if fullname == "pandas" or fullname.startswith("pandas."):
            raise ImportError(f"{fullname} is not available to this job's Python workers ({PANDAS_ENV}=0)")


def preload(worker_module: str) -> list[str]:
    """Import what the workers of `worker_module` import; returns the modules that could not be imported.

    Under `PANDAS_ENV=0` pandas is hidden (`HidePandas`) from this process and the workers forked from it.
    """
    missing = []
    names = PRELOAD.get(worker_module, (worker_module,))
    if os.environ.get(PANDAS_ENV) == "0" and "pandas" not in sys.modules:
        sys.meta_path.insert(0, HidePandas())
        names = tuple(n for n in names if n not in PANDAS_MODULES)
    for name in names:
        try:
            importlib.import_module(name)
        except (
            Exception
        ):  # an optional module: the worker imports (or fails on) it itself, as without the daemon
            missing.append(name)
    return missing


def main() -> None:
    """Preload, then run PySpark's daemon loop (it reads the worker module from `argv[1]` itself)."""
    module = sys.argv[1] if len(sys.argv) > 1 else "pyspark.worker"
    preload(module)
    if module == "pyspark.worker":
        from ethereal_kafka.runtime.row_batches import install

        install()  # the framework's stateful operators get their input rows column by column
    from pyspark import daemon

    # What was imported stays for the workers' whole life: moved out of the cyclic collector's reach, a worker's
    # collections neither scan it nor write to its pages (which would copy them from the daemon, page by page).
    # Measured on a 4-query join test: the workers' CPU went from 11.7 to 5.2 CPU-s, most of it full collections.
    gc.freeze()
    daemon.manager()


if __name__ == "__main__":
    main()
