"""`ethereal-kafka produce TOPIC`: records from a file or stdin, one per line, as kafka-console-producer and kcat do.

    ethereal-kafka produce orders --file orders.jsonl            # one transaction: every line visible, or none
    echo 'alice:{"amount": 80}' | ethereal-kafka produce orders --key-separator :
    ethereal-kafka produce orders --json < records.jsonl          # {"key", "value", "headers", "partition", ...}

Lines become records as `connectors.kafka.console` describes (text, a key before `--key-separator`, or JSON
lines); `--header NAME=VALUE` adds a header to each. A `--file` is sent in one transaction (a bad line or a failed
delivery leaves nothing visible); stdin is sent as it is read, with an idempotent producer, unless
`--transactional`. The cluster: `--bootstrap`, else `$KAFKA_BOOTSTRAP`, else the local broker.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from typing import Any

from ethereal_kafka.cli.kafka_target import add_cluster_arguments, connect
from ethereal_kafka.connectors.kafka.console import parse_header, read_records
from ethereal_kafka.connectors.kafka.console_io import produce_records
from ethereal_kafka.errors import ConfigError


def register(sub: Any) -> None:
    """Add the `produce` sub-command."""
    parser = sub.add_parser("produce", help="produce records to a topic from a file or stdin, one per line")
    parser.add_argument("topic", metavar="TOPIC")
    parser.add_argument(
        "--file", metavar="FILE", help="read the records from FILE (default: stdin; - is stdin)"
    )
    parser.add_argument(
        "--key-separator", metavar="SEP", help="the text before SEP on each line is the record's key"
    )
    parser.add_argument(
        "--json", action="store_true", help="each line is a JSON object: key, value, headers, ..."
    )
    parser.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a header of every record (repeatable)",
    )
    parser.add_argument("--partition", type=int, metavar="P", help="write every record to partition P")
    parser.add_argument(
        "--transactional",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="all records in one transaction, visible together or not at all (default: with --file)",
    )
    add_cluster_arguments(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Produce the records; prints `produced N record(s) to TOPIC` (and how)."""
    if args.json and args.key_separator is not None:
        raise ConfigError("--json and --key-separator exclude each other (a JSON line names its key)")
    headers = tuple(parse_header(h) for h in args.header)
    from_file = args.file not in (None, "-")
    transactional = from_file if args.transactional is None else args.transactional
    cluster, _ = connect(args)
    if from_file:
        try:
            with open(args.file, encoding="utf-8") as lines:
                done = _produce(args, cluster, lines, args.file, headers, transactional)
        except OSError as exc:
            raise ConfigError(f"cannot read {args.file}: {exc.strerror or exc}") from exc
    else:
        if sys.stdin.isatty():
            print(f"one record per line to {args.topic}; end with Ctrl-D", file=sys.stderr)
        done = _produce(args, cluster, sys.stdin, "<stdin>", headers, transactional)
    how = " in one transaction" if done.transactional else ""
    print(f"produced {done.records} record(s) to {args.topic}{how}")
    return 0


def _produce(
    args: argparse.Namespace,
    cluster: Any,
    lines: Iterable[str],
    source: str,
    headers: tuple[tuple[str, bytes | None], ...],
    transactional: bool,
) -> Any:
    records = read_records(lines, source, args.json, args.key_separator, headers, args.partition)
    return produce_records(cluster.bootstrap, args.topic, records, cluster.settings, transactional)
