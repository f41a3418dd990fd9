"""The program spark-submit runs: the `ethereal-kafka` command line, unchanged, on the driver spark-submit starts.

    spark-submit --master spark://HOST:7077 "$(python -m ethereal_kafka.deploy)" run job.properties

spark-submit needs a Python file as its primary resource (`python -m ethereal_kafka.deploy` prints this file's
path); it only calls `ethereal_kafka.cli.main` with the remaining arguments. The session then takes its master and
settings from spark-submit (see `runtime.spark.local_session`). Python puts a script's folder first on `sys.path`;
this folder holds only `__init__.py`, `__main__.py` and this file, so that shadows no module.
"""

from __future__ import annotations

import sys


def main() -> int:
    """Run the command line with this script's arguments; returns its exit code."""
    from ethereal_kafka.cli import main as cli_main

    return cli_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
