"""`ethereal-kafka validate FILE...`: check job and connector files without running anything."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ethereal_kafka.config import KafkaSinkConfig, KafkaSourceConfig, load_connector, load_job, validate_file
from ethereal_kafka.config.connectors import KafkaTableConfig
from ethereal_kafka.config.properties import load_properties
from ethereal_kafka.connectors.kafka.checks import check_connector
from ethereal_kafka.errors import ConfigError


def register(sub: Any) -> None:
    """Add the `validate` sub-command."""
    parser = sub.add_parser("validate", help="validate job and connector .properties files")
    parser.add_argument("files", nargs="+", help="job or connector .properties files")
    parser.set_defaults(handler=run)


def connectors_of(path: str) -> list[KafkaSourceConfig | KafkaSinkConfig | KafkaTableConfig]:
    """The connector configurations a file defines (itself, or the ones its job names)."""
    if "connector.class" in load_properties(path):
        return [load_connector(Path(path))]
    loaded = load_job(path)
    return [*loaded.sources.values(), *loaded.sinks.values(), *loaded.tables.values()]


def run(args: argparse.Namespace) -> int:
    """Validate every file; print one line per file; exit 1 if any is invalid."""
    failed = 0
    for path in args.files:
        try:
            summary = validate_file(path)
            for connector in connectors_of(path):
                check_connector(connector)
            print(summary)
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0
