"""`ethereal-kafka topics create|list|describe|delete`: topics from the shell, as Kafka's kafka-topics does them.

    ethereal-kafka topics create orders --partitions 3 [--replication-factor 1] [--config cleanup.policy=compact]
    ethereal-kafka topics list [--all]             # internal topics (`__*`, apps' progress topics) with --all
    ethereal-kafka topics describe orders [--json] # partitions, leaders, replicas, ISR, offsets, topic settings
    ethereal-kafka topics delete orders [--yes]

The cluster: `--bootstrap`, else `$KAFKA_BOOTSTRAP`, else the local broker (`cli.kafka_target`).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ethereal_kafka.cli.app_job import format_table
from ethereal_kafka.cli.kafka_target import add_cluster_arguments, connect
from ethereal_kafka.connectors.kafka.errors import TopicError
from ethereal_kafka.connectors.kafka.topic_admin import (
    TopicInfo,
    create_topic,
    delete_topic,
    describe_topic,
    topic_names,
)
from ethereal_kafka.eos.names import progress_topic

PARTITION_COLUMNS = ("PARTITION", "LEADER", "REPLICAS", "ISR", "EARLIEST", "END", "STABLE")
_NUMERIC = ("PARTITION", "LEADER", "EARLIEST", "END", "STABLE")

#: The suffix of the apps' progress topics (`<app.id>.ethereal-progress`): internal, like Kafka's `__*` topics.
_PROGRESS_SUFFIX = progress_topic("")


def register(sub: Any) -> None:
    """Add the `topics` sub-command and its actions."""
    parser = sub.add_parser("topics", help="create, list, describe or delete topics")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    create = actions.add_parser("create", help="create a topic")
    create.add_argument("name", metavar="TOPIC")
    create.add_argument("--partitions", type=int, default=-1, help="partitions (default: the broker's)")
    create.add_argument(
        "--replication-factor", type=int, default=-1, help="replicas per partition (default: the broker's)"
    )
    create.add_argument(
        "--config", action="append", default=[], metavar="KEY=VALUE", help="a topic setting (repeatable)"
    )
    create.add_argument("--if-not-exists", action="store_true", help="an existing topic is no error")
    create.set_defaults(handler=run_create)

    listing = actions.add_parser("list", help="list the topics, one per line")
    listing.add_argument(
        "--all", action="store_true", help="internal topics too (Kafka's __*, the apps' progress topics)"
    )
    listing.set_defaults(handler=run_list)

    describe = actions.add_parser(
        "describe", help="partitions, leaders, replicas, in-sync replicas, offsets and settings of a topic"
    )
    describe.add_argument("name", metavar="TOPIC")
    describe.add_argument("--json", action="store_true", help="print one JSON object")
    describe.set_defaults(handler=run_describe)

    delete = actions.add_parser("delete", help="delete a topic and its records")
    delete.add_argument("name", metavar="TOPIC")
    delete.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    delete.add_argument("--if-exists", action="store_true", help="a missing topic is no error")
    delete.set_defaults(handler=run_delete)

    for action in (create, listing, describe, delete):
        add_cluster_arguments(action)


def parse_settings(items: list[str]) -> dict[str, str]:
    """`--config KEY=VALUE` arguments as a mapping.

    Raises:
        TopicError: an item without `=` or with an empty key.
    """
    settings: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise TopicError(f"--config {item!r}: expected KEY=VALUE")
        settings[key.strip()] = value
    return settings


def run_create(args: argparse.Namespace) -> int:
    """Create the topic; prints `created topic T: N partition(s) at BOOTSTRAP`."""
    config = parse_settings(args.config)
    cluster, _ = connect(args)
    created, partitions = create_topic(
        cluster.bootstrap,
        args.name,
        args.partitions,
        args.replication_factor,
        config,
        cluster.settings,
        args.if_not_exists,
    )
    if created:
        print(f"created topic {args.name}: {partitions} partition(s) at {cluster.bootstrap}")
    else:
        print(f"topic {args.name} already exists: {partitions} partition(s) at {cluster.bootstrap}")
    return 0


def is_internal(name: str) -> bool:
    """Kafka's own topics (`__consumer_offsets`, `__transaction_state`, ...) and the apps' progress topics."""
    return name.startswith("__") or name.endswith(_PROGRESS_SUFFIX)


def run_list(args: argparse.Namespace) -> int:
    """Print the topic names, sorted, one per line (internal ones only with `--all`)."""
    cluster, _ = connect(args)
    for name in topic_names(cluster.bootstrap, cluster.settings):
        if args.all or not is_internal(name):
            print(name)
    return 0


def run_describe(args: argparse.Namespace) -> int:
    """Print the topic as a table (or `--json`: `TopicInfo.to_json`)."""
    cluster, _ = connect(args)
    info = describe_topic(cluster.bootstrap, args.name, cluster.settings)
    print(json.dumps(info.to_json(), sort_keys=True) if args.json else render(info))
    return 0


def render(info: TopicInfo) -> str:
    """A head line (partitions, replication factor), the topic's own settings, and one row per partition: leader,
    replicas, in-sync replicas, earliest, end (high watermark) and stable (last stable) offsets."""
    lines = [
        f"topic {info.name}: {len(info.partitions)} partition(s), replication factor {info.replication_factor}"
    ]
    if info.configs:
        shown = ", ".join(f"{k}={'********' if v is None else v}" for k, v in info.configs.items())
        lines.append(f"settings: {shown}")
    rows = [
        (
            p.partition,
            p.leader,
            ",".join(map(str, p.replicas)),
            ",".join(map(str, p.isr)),
            p.earliest,
            p.end,
            p.stable,
        )
        for p in info.partitions
    ]
    lines += ["", format_table(PARTITION_COLUMNS, rows, _NUMERIC)]
    return "\n".join(lines)


def run_delete(args: argparse.Namespace) -> int:
    """Delete the topic after confirmation (`--yes`, or an answer on the terminal)."""
    cluster, _ = connect(args)
    if not args.yes:
        if not sys.stdin.isatty():
            raise TopicError(
                f"deleting topic {args.name} removes its records: pass --yes to confirm (no terminal to ask)"
            )
        answer = input(f"Delete topic {args.name} and its records at {cluster.bootstrap}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            raise TopicError(f"topic {args.name} not deleted")
    if delete_topic(cluster.bootstrap, args.name, cluster.settings, args.if_exists):
        print(f"deleted topic {args.name} at {cluster.bootstrap}")
    else:
        print(f"topic {args.name} does not exist at {cluster.bootstrap}")
    return 0
