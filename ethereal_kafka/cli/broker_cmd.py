"""`ethereal-kafka broker start | stop | status`: the local Apache Kafka broker (or an N-node cluster) from the
shell."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ethereal_kafka.broker import (
    BrokerSettings,
    ClusterSettings,
    LocalBroker,
    LocalCluster,
    ensure_jars,
    kafka_version,
)
from ethereal_kafka.errors import ConfigError


def register(sub: Any) -> None:
    """Add the `broker` sub-command to the top-level parser's sub-parsers."""
    parser = sub.add_parser("broker", help="start, stop or inspect the local Apache Kafka broker or cluster")
    parser.add_argument(
        "action",
        choices=["start", "stop", "status", "fetch"],
        help="start (prints the bootstrap address last), stop, status, or fetch the pinned jars only",
    )
    parser.add_argument(
        "--nodes",
        type=int,
        default=1,
        help="nodes (KRaft broker+controller each): 1, or e.g. 3 for a cluster with replication 3 and "
        "min.insync.replicas 2 (default name cluster<N>); stop and status act on every node",
    )
    parser.add_argument(
        "--name",
        default=None,
        help="broker name (state under <cache>/brokers/NAME; default: default, or cluster<N> with --nodes)",
    )
    parser.add_argument("--state-dir", type=Path, default=None, help="explicit state directory")
    parser.add_argument("--port", type=int, default=0, help="PLAINTEXT port (default: a free one, kept)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Carry out one broker action; `start` prints the bootstrap address (a cluster's: every node's) last."""
    if args.action == "fetch":
        began = time.monotonic()
        libs = ensure_jars(quiet=False)
        print(f"Apache Kafka {kafka_version()} jars in {libs} [{time.monotonic() - began:.1f}s]")
        return 0
    if args.nodes < 1:
        raise ConfigError(f"--nodes must be 1 or more, not {args.nodes}")
    if args.nodes > 1:
        if args.port:
            raise ConfigError(
                "--port names one broker's port: a cluster's nodes take free ports (kept across restarts)"
            )
        cluster = LocalCluster(
            ClusterSettings(
                name=args.name or f"cluster{args.nodes}", state_dir=args.state_dir, nodes=args.nodes
            )
        )
        return _act(
            cluster, args.action, lambda status: status.nodes, f"not running (state {cluster.state_dir})"
        )
    broker = LocalBroker(
        BrokerSettings(name=args.name or "default", state_dir=args.state_dir, port=args.port)
    )
    return _act(broker, args.action, lambda status: True, "")


def _act(target: Any, action: str, known: Callable[[Any], Any], unknown: str) -> int:
    """Start, stop or show `target` (a `LocalBroker` or `LocalCluster`); `status` prints `unknown` when `known(status)`
    is false (a cluster with no node state). Exit code 3: status of a target that is not running."""
    if action == "start":
        began = time.monotonic()
        status = target.start()
        described = status.describe()  # a cluster's is a line per node: the time goes on a line of its own
        print(f"{described}{chr(10) if chr(10) in described else ' '}[{time.monotonic() - began:.1f}s]")
        print(status.bootstrap)
        return 0
    if action == "stop":
        print("stopped" if target.stop() else "not running")
        return 0
    status = target.status()
    print(status.describe() if known(status) else unknown)
    return 0 if status.running else 3
