"""Find the job behind an `APP` argument (for `offsets` and `replay`), and print aligned tables.

`APP` is looked up in the run record `ethereal-kafka run` writes when a job starts on this host
(`<cache>/apps/APP/job.json`: the job file and the checkpoint root it used, as absolute paths, the environment
variables its files read and each connector's bootstrap servers). The job file is loaded again with the
environment the app ran with, whatever this shell has set (`config.variables`), and each connector reaches the
cluster the app ran against; secrets are not in the record and come from this shell. `--job FILE` names the job
file instead: it is loaded with this shell's environment, and its checkpoint location is read as `run` would read
it, relative to the current folder. Nothing secret is printed.

Before their first request, `offsets` and `replay` reach each cluster once (`reach_clusters`): a cluster that
refuses fails in about a second, one that does not answer after the job's `connect.timeout.ms`.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from ethereal_kafka.checkpoint.apps import RunRecord, read_run_record
from ethereal_kafka.checkpoint.errors import AppNotFoundError
from ethereal_kafka.config.connectors import KafkaSinkConfig, KafkaSourceConfig, KafkaTableConfig
from ethereal_kafka.config.job import LoadedJob, load_job
from ethereal_kafka.config.variables import recorded_environment
from ethereal_kafka.connectors.kafka.reach import reach
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
        loaded = load_as_run(record)
        if loaded.job.app_id != app_id:
            raise ConfigError(f"{record.job_file} now names app {loaded.job.app_id!r}, not {app_id!r}")
    else:
        raise ConfigError("name the app: APP or --job FILE")
    sources = job_sources(loaded, fresh=False)
    return AppJob(app_id, loaded, loaded.job.checkpoint_location, with_query_groups(sources, record), record)


def load_as_run(record: RunRecord) -> LoadedJob:
    """The recorded job file loaded with the environment the app ran with (`RunRecord.env`), its checkpoint location
    and each connector's bootstrap servers as the run recorded them.

    Raises:
        ConfigError: the job file is gone or no longer valid, or it reads a variable (a secret) this shell lacks.
    """
    loaded = load_job(record.job_file, recorded_environment(record.env))
    job = dataclasses.replace(loaded.job, checkpoint_location=record.checkpoint_location)
    return dataclasses.replace(
        loaded,
        job=job,
        sources=_as_ran(loaded.sources, record.clusters),
        sinks=_as_ran(loaded.sinks, record.clusters),
        tables=_as_ran(loaded.tables, record.clusters),
    )


C = TypeVar("C", KafkaSourceConfig, KafkaSinkConfig, KafkaTableConfig)


def _as_ran(configs: Mapping[str, C], clusters: Mapping[str, str]) -> dict[str, C]:
    return {
        name: dataclasses.replace(config, bootstrap_servers=clusters[name]) if name in clusters else config
        for name, config in configs.items()
    }


def reach_clusters(app: AppJob) -> None:
    """Reach every cluster the app's sources and sinks use, once each, within the job's `connect.timeout.ms`.

    Raises:
        KafkaConnectionError: a cluster refused (in about a second) or did not answer; the message names it.
    """
    timeout_s = app.loaded.job.connect_timeout_ms / 1000
    seen: set[str] = set()
    configs: list[KafkaSourceConfig | KafkaSinkConfig] = [*app.sources.values(), *app.loaded.sinks.values()]
    for config in configs:
        if config.bootstrap_servers not in seen:
            seen.add(config.bootstrap_servers)
            reach(config.bootstrap_servers, config.passthrough, timeout_s)


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
