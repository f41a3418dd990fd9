"""`ethereal-kafka demo`: the demo topic-to-topic pipeline on embedded Spark and a local broker (`make demo`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    """Add the `demo` sub-command."""
    parser = sub.add_parser("demo", help="run the demo topic-to-topic job on a local broker and local Spark")
    parser.add_argument(
        "--connectors",
        type=Path,
        default=None,
        help="folder holding demo-job.properties and its connector files (default: the copies the package ships)",
    )
    parser.add_argument("--records", type=int, default=2000, help="orders to feed into the input topic")
    parser.add_argument(
        "--bootstrap",
        default=None,
        help="use this running Kafka cluster instead of starting a local broker (topics: $DEMO_INPUT_TOPIC, ...)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run the demo and print its output."""
    from ethereal_kafka.demo import run_demo

    run_demo(args.connectors, args.records, args.bootstrap)
    return 0
