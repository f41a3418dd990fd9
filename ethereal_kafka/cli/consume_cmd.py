"""`ethereal-kafka consume TOPIC`: print a topic's records, as kafka-console-consumer and kcat do, read_committed.

    ethereal-kafka consume orders                          # every record there now, then exit
    ethereal-kafka consume orders --keys --headers         # headers, key and value, tab-separated
    ethereal-kafka consume orders --pretty --from -5       # the last 5 of each partition, JSON indented
    ethereal-kafka consume orders --follow --from latest   # new records until Ctrl-C

A read_committed reader by default: what exactly-once output is judged by (records of aborted or still open
transactions are not shown); `--isolation read_uncommitted` shows everything written. Nothing is committed: no
consumer group is joined or moved. The records go to stdout, one line each (`connectors.kafka.console.render`),
and a last line to stderr says how many were read. The cluster: `--bootstrap`, else `$KAFKA_BOOTSTRAP`, else the
local broker.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Any

from ethereal_kafka.cli.kafka_target import add_cluster_arguments, connect
from ethereal_kafka.connectors.kafka.console import parse_start, render
from ethereal_kafka.connectors.kafka.console_io import consume_records


def register(sub: Any) -> None:
    """Add the `consume` sub-command."""
    parser = sub.add_parser("consume", help="print a topic's records (read_committed), then exit or follow")
    parser.add_argument("topic", metavar="TOPIC")
    parser.add_argument(
        "--from",
        dest="start",
        default="earliest",
        metavar="POSITION",
        help="earliest (default) | latest | an offset N | -N (the last N of each partition) | timestamp:MS",
    )
    parser.add_argument("--max", type=int, metavar="N", help="stop after N records")
    parser.add_argument("--partition", type=int, metavar="P", help="read only partition P")
    parser.add_argument("--follow", "-f", action="store_true", help="keep printing new records until Ctrl-C")
    parser.add_argument(
        "--timeout",
        type=float,
        metavar="S",
        help="stop when no record came for S seconds (default: never with --follow, else 30)",
    )
    parser.add_argument(
        "--isolation",
        choices=("read_committed", "read_uncommitted"),
        default="read_committed",
        help="read_committed (default): no record of an aborted or open transaction",
    )
    shape = parser.add_mutually_exclusive_group()
    shape.add_argument(
        "--json", action="store_true", help="one JSON object per record (produce --json reads it)"
    )
    shape.add_argument(
        "--pretty", action="store_true", help="--json indented, JSON keys and values shown as JSON"
    )
    parser.add_argument("--keys", action="store_true", help="print each record's key before its value")
    parser.add_argument(
        "--headers", action="store_true", help="print each record's headers first (NAME=VALUE,...)"
    )
    parser.add_argument(
        "--separator", default="\t", metavar="SEP", help="between headers, key and value (a tab)"
    )
    add_cluster_arguments(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Print the records; the last line, on stderr, says how many."""
    start = parse_start(args.start)
    fmt = "pretty" if args.pretty else "json" if args.json else "text"
    cluster, _ = connect(args)
    records = consume_records(
        cluster.bootstrap,
        args.topic,
        start,
        cluster.settings,
        args.partition,
        args.isolation,
        args.follow,
        args.timeout,
    )
    count, code = 0, 0
    with contextlib.closing(records):
        try:
            for record in records:
                if args.max is not None and count >= args.max:
                    break
                print(render(record, fmt, args.keys, args.headers, args.separator), flush=True)
                count += 1
        except BrokenPipeError:  # `consume ... | head`: the reader left
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except KeyboardInterrupt:  # Ctrl-C ends a --follow: say how many came, exit as interrupted
            code = 130
    print(f"{count} record(s) from {args.topic} ({args.isolation})", file=sys.stderr)
    return code
