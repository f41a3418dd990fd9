"""The `ethereal-kafka` command line: one module per sub-command, errors printed as one line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ethereal_kafka.cli import (
    broker_cmd,
    checkpoints_cmd,
    consume_cmd,
    demo_cmd,
    offsets_cmd,
    produce_cmd,
    replay_cmd,
    run_cmd,
    savepoint_cmd,
    shadow_cmd,
    spark_archive_cmd,
    topics_cmd,
    ui_cmd,
    validate_cmd,
)
from ethereal_kafka.errors import EtherealKafkaError


def package_version() -> str:
    """The installed distribution's version (`unknown` when the package runs from a bare source tree)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ethereal-kafka")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser with every sub-command registered."""
    parser = argparse.ArgumentParser(
        prog="ethereal-kafka",
        description="Exactly-once Kafka topic-to-topic stream processing on Apache Spark.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    broker_cmd.register(sub)
    demo_cmd.register(sub)
    validate_cmd.register(sub)
    run_cmd.register(sub)
    checkpoints_cmd.register(sub)
    offsets_cmd.register(sub)
    replay_cmd.register(sub)
    savepoint_cmd.register(sub)
    shadow_cmd.register(sub)
    topics_cmd.register(sub)
    produce_cmd.register(sub)
    consume_cmd.register(sub)
    spark_archive_cmd.register(sub)
    ui_cmd.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit code.

    A framework error (`EtherealKafkaError`) is printed as one line, `error: ...`, and exits 1.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
    except EtherealKafkaError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
