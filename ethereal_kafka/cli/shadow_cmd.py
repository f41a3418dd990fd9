"""`ethereal-kafka shadow JOB --from-savepoint PATH --until now|OFFSETS --into SUFFIX` and `ethereal-kafka diff APP
--shadow SUFFIX`: prove a new version against production before switching to it.

`shadow` runs the version in JOB over input production already processed (from a savepoint of production to one of
its committed epochs) into topics `<topic>.<SUFFIX>`, under its own app id (`runtime.shadow`); production is not
touched. `diff` then compares, per key, the shadow's output with production's output of the same input
(`runtime.output_diff`): exit 0 when they are the same, 1 when any key differs or a topic could not be compared.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    """Add the `shadow` and `diff` sub-commands."""
    from ethereal_kafka.cli.app_job import add_app_arguments

    shadow = sub.add_parser(
        "shadow", help="run a version over a range production processed, into shadow topics, for `diff`"
    )
    shadow.add_argument(
        "job", help="job .properties file of the version to run (its app.id names production)"
    )
    shadow.add_argument(
        "--from-savepoint",
        required=True,
        metavar="PATH",
        help="a savepoint of production: where the range starts",
    )
    shadow.add_argument(
        "--until",
        default="now",
        metavar="now|OFFSETS",
        help="where the range ends: now (production's newest committed epoch) or topic:partition:offset,... "
        "(the end of a committed epoch of production)",
    )
    shadow.add_argument(
        "--into", required=True, metavar="SUFFIX", help="the shadow's name: it writes topic T as T.SUFFIX"
    )
    shadow.add_argument(
        "--allow-non-restored-state",
        action="store_true",
        help="drop the savepoint's state of operators the version lacks (else refused)",
    )
    shadow.set_defaults(handler=run_shadow_cmd)
    diff = sub.add_parser("diff", help="compare a shadow run's output with production's, per key")
    add_app_arguments(diff)
    diff.add_argument("--shadow", required=True, metavar="SUFFIX", help="the shadow's name (`shadow --into`)")
    diff.add_argument(
        "--show", type=int, default=10, metavar="N", help="differing keys shown per topic (default 10)"
    )
    diff.set_defaults(handler=run_diff)


def run_shadow_cmd(args: argparse.Namespace) -> int:
    """Run the shadow and say what it wrote.

    Raises:
        ShadowError, SavepointError: see `runtime.shadow.run_shadow`.
    """
    from ethereal_kafka.checkpoint.shadows import parse_until
    from ethereal_kafka.cli.app_job import reach_clusters, resolve_app
    from ethereal_kafka.runtime.shadow import run_shadow

    until = parse_until(args.until)
    app = resolve_app(argparse.Namespace(app=None, job=args.job))
    reach_clusters(app)
    record = run_shadow(
        app.loaded, Path(args.from_savepoint), until, args.into, args.allow_non_restored_state
    )
    span = ", ".join(
        f"{topic}:{p} {record.input_starts.get(topic, {}).get(p, '?')}..{end}"
        for topic, parts in sorted(record.input_ends.items())
        for p, end in sorted(parts.items())
    )
    records = "?" if record.shadow_records < 0 else str(record.shadow_records)
    print(
        f"shadow {record.suffix} of app {record.app_id}: {records} record(s) over {span} under app id "
        f"{record.shadow_app_id}; production is untouched"
    )
    for output in record.outputs:
        print(f"  {output.topic} -> {output.shadow_topic}")
    for topic in record.extra_topics:
        print(f"  (new in this version) -> {topic}")
    print(f"compare: ethereal-kafka diff {record.app_id} --shadow {record.suffix}")
    return 0


def run_diff(args: argparse.Namespace) -> int:
    """Print the diff; 0 when the shadow's output equals production's, else 1.

    Raises:
        ShadowError: no such shadow run of the app.
        KafkaConnectionError: a range could not be read.
    """
    from ethereal_kafka.checkpoint.shadows import read_record
    from ethereal_kafka.cli.app_job import resolve_app
    from ethereal_kafka.runtime.output_diff import diff_shadow, render

    app = resolve_app(args)
    record = read_record(app.app_id, args.shadow)
    diffs = diff_shadow(record, app.sink.bootstrap_servers, app.sink.passthrough)
    for line in render(diffs, max(0, args.show)):
        print(line)
    differ = any(d.skipped is not None or d.differences for d in diffs)
    print(
        f"shadow {record.suffix} of app {record.app_id}: "
        + ("differs from production" if differ else "the same as production, key for key")
    )
    return 1 if differ else 0
