"""`ethereal-kafka checkpoints APP`: the epoch history of an app, readable while the app runs."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from ethereal_kafka.checkpoint.history import CheckpointHistory, EpochRecord
from ethereal_kafka.cli.app_job import add_history_argument

COLUMNS = (
    "QUERY",
    "EPOCH",
    "CHECKPOINT",
    "MODE",
    "OUTCOME",
    "IN",
    "OUT",
    "TASKS",
    "MS",
    "STARTED",
    "OFFSETS",
    "ERROR",
)
_ERROR_WIDTH = 60


def register(sub: Any) -> None:
    """Add the `checkpoints` sub-command to the top-level parser's sub-parsers."""
    parser = sub.add_parser("checkpoints", help="show the recorded epochs of an app (oldest first)")
    parser.add_argument("app", metavar="APP", help="the app.id of the job")
    parser.add_argument("--limit", type=int, default=None, help="show only the newest N epoch attempts")
    parser.add_argument("--json", action="store_true", help="print one JSON object per epoch attempt")
    add_history_argument(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Print the app's epoch attempts, newest last, as a table or (`--json`) as JSON lines.

    Reads without disturbing a running job. An app with a history but no entries yet prints a note and exits 0.

    Raises:
        HistoryError: The app has no history at the given or default path, or it could not be read.
    """
    with CheckpointHistory(args.app, args.state_dir, read_only=True) as history:
        records = history.records(args.limit)
    if args.json:
        for rec in records:
            print(rec.to_json())
        return 0
    if not records:
        print(f"no epochs recorded yet for app {args.app!r}")
        return 0
    print(render_table(records))
    return 0


def render_table(records: Sequence[EpochRecord]) -> str:
    """Return the records as an aligned text table, one row per record in the given order."""
    rows = [COLUMNS, *(_row(rec) for rec in records)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    numeric = {"EPOCH", "IN", "OUT", "MS", "OFFSETS"}
    lines = []
    for row in rows:
        cells = [
            cell.rjust(width) if name in numeric else cell.ljust(width)
            for name, cell, width in zip(COLUMNS, row, widths, strict=True)
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def _row(rec: EpochRecord) -> tuple[str, ...]:
    started = datetime.fromtimestamp(rec.started_ms / 1000, tz=UTC).isoformat(timespec="milliseconds")
    error = " ".join((rec.error or "").split())
    if len(error) > _ERROR_WIDTH:
        error = error[: _ERROR_WIDTH - 3] + "..."
    advanced = rec.offsets_advanced
    return (
        rec.query or "-",
        str(rec.epoch),
        rec.checkpoint_id[:8],
        rec.mode,
        rec.outcome,
        str(rec.records_read) if rec.records_read is not None else "?",
        str(rec.records_out),
        f"{rec.tasks} ({rec.skipped_tasks} skipped)" if rec.skipped_tasks else str(rec.tasks),
        str(rec.duration_ms),
        started.replace("+00:00", "Z"),
        "?" if advanced is None else f"+{advanced}",
        error,
    )
