"""Find the job behind an `APP` argument (for `offsets` and `replay`), and print aligned tables.

`APP` is looked up in the run record `ethereal-kafka run` writes when a job starts on this host
(`<cache>/apps/APP/job.json`: the job file and the checkpoint root it used, as absolute paths). `--job FILE` names the
job file instead (its checkpoint location is then read as `run` would read it, relative to the current folder).
Either way the job file is loaded again, so its connectors are configured as they are now; nothing secret is
stored in the record or printed.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ethereal_kafka.checkpoint.apps import RunRecord, read_run_record
from ethereal_kafka.checkpoint.errors import AppNotFoundError
from ethereal_kafka.config.connectors import KafkaSinkConfig, KafkaSourceConfig
from ethereal_kafka.config.job import LoadedJob, load_job
from ethereal_kafka.errors import ConfigError


@dataclass(frozen=True)
class AppJob:
    """A job found from `APP` / `--job`.

    Attributes:
        loaded: The job file, loaded now, with `checkpoint.location` as the app last used it (from the record).
        sources: The sources as the job runs them (`group.id` defaulted to the app id).
        record: This host's run record of the app, if any.
    """

    app_id: str
    loaded: LoadedJob
    checkpoint_root: str
    sources: dict[str, KafkaSourceConfig]
    record: RunRecord | None

    @property
    def sink(self) -> KafkaSinkConfig:
        """The first sink: its cluster holds the app's progress topic and internal groups."""
        return next(iter(self.loaded.sinks.values()))


def add_app_arguments(parser: Any) -> None:
    """Add `APP` (optional when `--job` is given) and `--job FILE` to a sub-command's parser."""
    parser.add_argument("app", metavar="APP", nargs="?", help="the app.id of a job that ran on this host")
    parser.add_argument(
        "--job", metavar="FILE", help="the job .properties file (instead of, or to check, APP)"
    )


def add_history_argument(parser: Any) -> None:
    """Add `--state-dir DIR` (the checkpoint history's folder) to a sub-command's parser."""
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="explicit history directory (default: <cache>/apps/APP/history)",
    )


def resolve_app(args: argparse.Namespace) -> AppJob:
    """The job named by `args.app` and/or `args.job`.

    Raises:
        ConfigError: neither is given, they disagree, or the job file is invalid.
        AppNotFoundError: no run record of APP on this host (and no `--job`).
    """
    from ethereal_kafka.runtime.runner import job_sources

    if args.job:
        loaded = load_job(args.job)
        app_id = loaded.job.app_id
        if args.app and args.app != app_id:
            raise ConfigError(f"--job {args.job} is app {app_id!r}, not {args.app!r}")
        record = read_run_record(app_id)
    elif args.app:
        app_id = args.app
        record = read_run_record(app_id)
        if record is None:
            raise AppNotFoundError(
                f"no job known as app {app_id!r} on this host (`ethereal-kafka run` records a job when it "
                "starts); pass --job FILE"
            )
        loaded = load_job(record.job_file)
        if loaded.job.app_id != app_id:
            raise ConfigError(f"{record.job_file} now names app {loaded.job.app_id!r}, not {app_id!r}")
        job = dataclasses.replace(loaded.job, checkpoint_location=record.checkpoint_location)
        loaded = dataclasses.replace(loaded, job=job)
    else:
        raise ConfigError("name the app: APP or --job FILE")
    sources = job_sources(loaded, fresh=False)
    return AppJob(app_id, loaded, loaded.job.checkpoint_location, with_query_groups(sources, record), record)


def with_query_groups(
    sources: dict[str, KafkaSourceConfig], record: RunRecord | None
) -> dict[str, KafkaSourceConfig]:
    """One entry per (source, consumer group) the job commits to: a source read by several queries has one group
    per query (`<group>.<query>`, listed in the run record); entries are keyed `name` or `name@group`."""
    out: dict[str, KafkaSourceConfig] = {}
    for name, config in sources.items():
        groups = (record.groups.get(name) if record is not None else None) or [config.group]
        for group in groups:
            key = name if group == config.group else f"{name}@{group}"
            out[key] = dataclasses.replace(config, group_id=group)
    return out


def format_table(
    columns: Sequence[str], rows: Iterable[Sequence[object]], numeric: Iterable[str] = ()
) -> str:
    """Rows as an aligned text table under a header; `numeric` columns are right-aligned, None shows as `-`."""
    right = set(numeric)
    cells = [list(columns), *([("-" if v is None else str(v)) for v in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    lines = []
    for row in cells:
        parts = [
            cell.rjust(width) if name in right else cell.ljust(width)
            for name, cell, width in zip(columns, row, widths, strict=True)
        ]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)
