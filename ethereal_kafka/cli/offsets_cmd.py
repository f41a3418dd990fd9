"""`ethereal-kafka offsets APP`: where an app stands in Kafka, per input partition and per progress partition.

Per input partition of each source: the group's committed offset, the end offset (what a read_committed reader
can read now), the lag between them, and the marker the committed offset carries (the epoch and checkpoint that
committed it, or the replay that reset it). Then the progress markers of the app's shuffling queries. Read-only:
safe while the app runs.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from typing import Any

from ethereal_kafka.cli.app_job import add_app_arguments, format_table, reach_clusters, resolve_app
from ethereal_kafka.eos.committed import (
    CommittedOffset,
    PartitionOffsets,
    ProgressOffsets,
    progress_offsets,
    progress_queries,
    source_offsets,
)

SOURCE_COLUMNS = ("SOURCE", "GROUP", "TOPIC", "PARTITION", "COMMITTED", "END", "LAG", "MARKER")
PROGRESS_COLUMNS = ("QUERY", "GROUP", "PARTITION", "OFFSET", "MARKER")
_NUMERIC = ("PARTITION", "COMMITTED", "END", "LAG", "OFFSET")


def register(sub: Any) -> None:
    """Add the `offsets` sub-command."""
    parser = sub.add_parser(
        "offsets", help="show an app's committed offsets, end offsets, lag and epoch markers per partition"
    )
    add_app_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Print the app's offsets as tables, or (`--json`) as one JSON object (see `report`).

    Raises:
        AppNotFoundError, ConfigError: the app or its job file cannot be found or loaded.
        KafkaConnectionError: the cluster did not answer after bounded retries.
    """
    app = resolve_app(args)
    reach_clusters(app)  # a cluster that is not there fails in about a second
    # The last committed offsets: a stable read would wait out a crashed run's open transaction, then fail.
    partitions = [row for source in app.sources.values() for row in source_offsets(source, stable=False)]
    sink = app.sink
    queries = progress_queries(app.app_id, sink.bootstrap_servers, sink.passthrough, app.checkpoint_root)
    progress = progress_offsets(app.app_id, sink.bootstrap_servers, sink.passthrough, queries, stable=False)
    if args.json:
        print(json.dumps(report(app.app_id, partitions, progress), sort_keys=True))
    else:
        print(render(app.app_id, partitions, progress))
    return 0


def marker_json(offset: CommittedOffset) -> dict[str, Any] | None:
    """The marker an offset carries, as JSON: `{"kind": "epoch", ...}`, `{"kind": "replay", ...}` or None."""
    marker, replay = offset.marker, offset.replay
    if marker is not None:
        return {
            "kind": "epoch",
            "app_id": marker.app_id,
            "checkpoint_id": marker.checkpoint_id,
            "epoch": marker.epoch,
        }
    if replay is not None:
        return {"kind": "replay", "app_id": replay.app_id, "replayed_ms": replay.replayed_ms}
    return None


def marker_text(offset: CommittedOffset, app_id: str) -> str:
    """One short cell: `epoch 7 @ 3f2a9c1d`, `replay 2025-01-01T12:00:00Z`, `foreign` metadata, or `-`."""
    marker, replay = offset.marker, offset.replay
    other = ""
    if marker is not None:
        if marker.app_id != app_id:
            other = f" (app {marker.app_id})"
        return f"epoch {marker.epoch} @ {marker.checkpoint_id[:8]}{other}"
    if replay is not None:
        if replay.app_id != app_id:
            other = f" (app {replay.app_id})"
        return f"replay {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(replay.replayed_ms / 1000))}{other}"
    return "foreign" if offset.metadata else "-"


def report(
    app_id: str, partitions: Sequence[PartitionOffsets], progress: Sequence[ProgressOffsets]
) -> dict[str, Any]:
    """The JSON document of `offsets --json`.

    `{"app_id", "lag": total (`total_lag`) or null, "partitions": [{"source", "group", "topic", "partition", "committed",
    "earliest", "end", "lag", "marker", "metadata"}], "progress": [{"query", "group", "topic", "partitions":
    [{"partition", "offset", "marker", "metadata"}]}]}`; `committed`/`lag`/`offset` are null where the group has no
    offset, `marker` as `marker_json`.
    """
    return {
        "app_id": app_id,
        "lag": total_lag(partitions),
        "partitions": [
            {
                "source": p.source,
                "group": p.group,
                "topic": p.topic,
                "partition": p.partition,
                "committed": p.committed.offset,
                "earliest": p.earliest,
                "end": p.end,
                "lag": p.lag,
                "marker": marker_json(p.committed),
                "metadata": p.committed.metadata,
            }
            for p in partitions
        ],
        "progress": [
            {
                "query": q.query,
                "group": q.group,
                "topic": q.topic,
                "partitions": [
                    {
                        "partition": c.partition,
                        "offset": c.offset,
                        "marker": marker_json(c),
                        "metadata": c.metadata,
                    }
                    for c in q.partitions
                ],
            }
            for q in progress
        ],
    }


def total_lag(partitions: Sequence[PartitionOffsets]) -> int | None:
    """The app's lag: per input partition the largest lag of any of its consumer groups (the slowest query), summed
    over the distinct partitions; None when no group has an offset."""
    worst: dict[tuple[str, int], int] = {}
    for p in partitions:
        if p.lag is not None:
            worst[(p.topic, p.partition)] = max(worst.get((p.topic, p.partition), 0), p.lag)
    return sum(worst.values()) if worst else None


def render(app_id: str, partitions: Sequence[PartitionOffsets], progress: Sequence[ProgressOffsets]) -> str:
    """The human form: a line naming the app, its distinct input partitions (and the consumer groups reading them,
    when a source is read by several queries) and its total lag (`total_lag`), the input table, then the progress
    table."""
    readers: dict[tuple[str, int], int] = {}
    for p in partitions:
        readers[(p.topic, p.partition)] = readers.get((p.topic, p.partition), 0) + 1
    most = max(readers.values(), default=1)
    read_by = f" (read by {most} queries, one consumer group each)" if most > 1 else ""
    distinct = len(readers)
    lag = total_lag(partitions)
    head = f"app {app_id}: {distinct} input partition(s){read_by}, total lag {'-' if lag is None else lag}"
    rows = [
        (
            p.source,
            p.group,
            p.topic,
            p.partition,
            p.committed.offset,
            p.end,
            p.lag,
            marker_text(p.committed, app_id),
        )
        for p in partitions
    ]
    out = [head, "", format_table(SOURCE_COLUMNS, rows, _NUMERIC)]
    progress_rows = [
        (q.query, q.group, c.partition, c.offset, marker_text(c, app_id))
        for q in progress
        for c in q.partitions
    ]
    if progress_rows:
        out += [
            "",
            f"progress markers (topic {progress[0].topic}):",
            format_table(PROGRESS_COLUMNS, progress_rows, _NUMERIC),
        ]
    return "\n".join(out)
