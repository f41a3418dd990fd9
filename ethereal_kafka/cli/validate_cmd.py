"""`ethereal-kafka validate FILE...`: check job and connector files without running anything.

Runs the checks `run` runs before Spark starts (`runtime.preflight`): keys and values, schemas, the `kafka.*`
settings (judged by librdkafka), the pipeline module and function, and the connector names the pipeline uses. With
`--connect` it also asks each cluster whether it answers and has every topic. Every problem is one `error:` line
naming the file it comes from.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ethereal_kafka.config import load_connector, load_job, validate_file
from ethereal_kafka.config.properties import load_properties
from ethereal_kafka.errors import ConfigError
from ethereal_kafka.runtime.preflight import connector_problems, preflight, topic_problems


def register(sub: Any) -> None:
    """Add the `validate` sub-command."""
    parser = sub.add_parser("validate", help="validate job and connector .properties files")
    parser.add_argument("files", nargs="+", help="job or connector .properties files")
    parser.add_argument(
        "--connect",
        action="store_true",
        help="also check that the brokers answer and that every source and sink topic exists",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        help="with --connect: seconds a cluster may take to answer (default 10)",
    )
    parser.set_defaults(handler=run)


def problems_of(path: str, connect: bool, timeout_s: float) -> list[str]:
    """Every problem of one job or connector file (and of the connectors a job names), one line each.

    Raises:
        ConfigError: the file (or a connector file it names) does not load: one line naming that file.
    """
    if "connector.class" in load_properties(path):
        config = load_connector(Path(path))
        found = connector_problems(config, path)
        if connect and not found:
            found = topic_problems({Path(path): config}, timeout_s)
        return found
    return preflight(load_job(path), connect=connect, timeout_s=timeout_s)


def run(args: argparse.Namespace) -> int:
    """Validate every file; print `FILE: ok (...)` per good file and one `error:` line per problem; exit 1 if any
    file has a problem."""
    failed = 0
    for path in args.files:
        try:
            summary = validate_file(path)
            problems = problems_of(path, args.connect, args.timeout)
        except ConfigError as exc:
            problems = [str(exc)]
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
        if problems:
            failed += 1
        else:
            print(summary)
    return 1 if failed else 0
