"""`ethereal-kafka validate FILE...`: check job and connector files without running anything."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ethereal_kafka.config import validate_file
from ethereal_kafka.errors import ConfigError


def register(sub: Any) -> None:
    """Add the `validate` sub-command."""
    parser = sub.add_parser("validate", help="validate job and connector .properties files")
    parser.add_argument("files", nargs="+", help="job or connector .properties files")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Validate every file; print one line per file; exit 1 if any is invalid."""
    failed = 0
    for path in args.files:
        try:
            print(validate_file(path))
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0
