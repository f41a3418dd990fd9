"""`ethereal-kafka spark-archive`: build the class-data-sharing archive that shortens every Spark start."""

from __future__ import annotations

import argparse
import time
from typing import Any


def register(sub: Any) -> None:
    """Add the `spark-archive` sub-command."""
    parser = sub.add_parser(
        "spark-archive",
        help="build the Java class archive that embedded Spark sessions start from (make install runs it)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Build (or rebuild) the archive for this Java and this Spark; prints its path last."""
    from ethereal_kafka.runtime.jvm import build_archive

    began = time.monotonic()
    path = build_archive()
    print(
        f"Spark class archive built in {time.monotonic() - began:.1f}s ({path.stat().st_size / 1e6:.0f} MB)"
    )
    print(path)
    return 0
