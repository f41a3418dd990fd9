"""`ethereal-kafka broker start | stop | status`: the local Apache Kafka broker from the shell."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from ethereal_kafka.broker import BrokerSettings, LocalBroker, ensure_jars, kafka_version


def register(sub: Any) -> None:
    """Add the `broker` sub-command to the top-level parser's sub-parsers."""
    parser = sub.add_parser("broker", help="start, stop or inspect the local Apache Kafka broker")
    parser.add_argument(
        "action",
        choices=["start", "stop", "status", "fetch"],
        help="start (prints the bootstrap address last), stop, status, or fetch the pinned jars only",
    )
    parser.add_argument("--name", default="default", help="broker name (state under <cache>/brokers/NAME)")
    parser.add_argument("--state-dir", type=Path, default=None, help="explicit state directory")
    parser.add_argument("--port", type=int, default=0, help="PLAINTEXT port (default: a free one, kept)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Carry out one broker action; `start` prints the bootstrap address as its last line."""
    if args.action == "fetch":
        began = time.monotonic()
        libs = ensure_jars(quiet=False)
        print(f"Apache Kafka {kafka_version()} jars in {libs} [{time.monotonic() - began:.1f}s]")
        return 0
    broker = LocalBroker(BrokerSettings(name=args.name, state_dir=args.state_dir, port=args.port))
    if args.action == "start":
        began = time.monotonic()
        status = broker.start()
        print(f"{status.describe()} [{time.monotonic() - began:.1f}s]")
        print(status.bootstrap)
        return 0
    if args.action == "stop":
        stopped = broker.stop()
        print("stopped" if stopped else "not running")
        return 0
    status = broker.status()
    print(status.describe())
    return 0 if status.running else 3
