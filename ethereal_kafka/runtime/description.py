"""What a run was: its plan (which operator runs where, per query), its configuration with secrets masked, where
Spark and the logs were. The runner records it when a job starts; the web UI shows it live and, for a stopped app,
reads it back (`ethereal-kafka ui APP`).

Kept beside the app's run record and checkpoint history: `<cache>/apps/<app.id>/run.json`, rewritten at every
start (atomically: a reader sees the old or the new file, whole). Every connector setting in it is masked the way
`Model.describe()` masks it, so no secret is written.

A start can fail (Spark refusing a version whose state does not match the checkpoint, a user error in the first
epoch): `run.json` then describes a version the checkpoint never ran. The runner also copies the description to
`resumable.json` when the start's first epoch commits (`ResumableRecorder`): the last version whose state the
checkpoint holds, which `validate --against APP` compares a new version with.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ethereal_kafka.checkpoint.apps import app_dir, from_json_object
from ethereal_kafka.checkpoint.history import EpochRecord
from ethereal_kafka.config.connectors import KafkaSourceConfig
from ethereal_kafka.config.job import LoadedJob

DESCRIPTION_FILE = "run.json"
#: The description of the last start that committed an epoch.
RESUMABLE_FILE = "resumable.json"


@dataclass(frozen=True)
class RunDescription:
    """One start of an app, as people look at it.

    Attributes:
        app_id: The app.
        started_ms: When the run started, epoch milliseconds.
        plan: The queries and operators (`plan.describe`).
        config: `{"job": {...}, "sources": {name: {...}}, "sinks": {...}, "tables": {...}}`, secrets masked: the
            settings in force, i.e. the sources as the runner changed them (`runner.job_sources`: bounded
            `max.records.per.epoch`, `epoch.sizing`, group and checkpoint), plus `"as_written"`: `{"sources":
            {name: {key: value in the file, or None when the file left it unset}}}` for each key the runner changed.
        job_file: Absolute path of the job file.
        checkpoint_location: The job's checkpoint root.
        delivery_guarantee: The job's guarantee.
        spark_master: The master the session ran on.
        spark_ui: The Spark UI's address, when it was on.
        log_dir: The run's log folder (None when unknown, e.g. a run started from a test).
        host, pid: Where the driver ran.
    """

    app_id: str
    started_ms: int
    plan: dict[str, Any]
    config: dict[str, Any]
    job_file: str
    checkpoint_location: str
    delivery_guarantee: str
    spark_master: str = ""
    spark_ui: str | None = None
    log_dir: str | None = None
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)

    @classmethod
    def of(
        cls,
        loaded: LoadedJob,
        plan: dict[str, Any],
        spark_master: str = "",
        spark_ui: str | None = None,
        log_dir: str | Path | None = None,
        sources: Mapping[str, KafkaSourceConfig] | None = None,
    ) -> RunDescription:
        """The description of a run of `loaded` starting now; `sources`: the sources as they run (default: as
        the job files declare them)."""
        job = loaded.job
        written = {name: conf.describe() for name, conf in loaded.sources.items()}
        in_force = {name: conf.describe() for name, conf in (sources or loaded.sources).items()}
        config = {
            "job": job.describe(),
            "sources": in_force,
            "sinks": {name: conf.describe() for name, conf in loaded.sinks.items()},
            "tables": {name: conf.describe() for name, conf in loaded.tables.items()},
            "as_written": {"sources": _changed(written, in_force)},
        }
        return cls(
            app_id=job.app_id,
            started_ms=int(time.time() * 1000),
            plan=plan,
            config=json.loads(json.dumps(config, default=str)),
            job_file=str(Path(loaded.path).resolve()),
            checkpoint_location=job.checkpoint_location,
            delivery_guarantee=job.delivery_guarantee,
            spark_master=spark_master,
            spark_ui=spark_ui,
            log_dir=str(log_dir) if log_dir is not None else None,
        )

    def to_json(self) -> str:
        """One JSON object; `from_json` reads it back equal."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RunDescription:
        """Parse `to_json` output, ignoring keys this version does not know.

        Raises:
            ValueError: the text is not such an object.
        """
        return from_json_object(cls, text, "run description")


def _changed(
    written: Mapping[str, Mapping[str, object]], in_force: Mapping[str, Mapping[str, object]]
) -> dict[str, dict[str, object]]:
    """Per connector, `{key: value as written (None: unset)}` of the keys whose value in force differs."""
    out: dict[str, dict[str, object]] = {}
    for name, values in in_force.items():
        before = written.get(name, {})
        changed = {key: before.get(key) for key, value in values.items() if before.get(key) != value}
        if changed:
            out[name] = changed
    return out


def description_path(app_id: str, name: str = DESCRIPTION_FILE) -> Path:
    """`<cache>/apps/<app.id>/run.json` (or `name`, e.g. `RESUMABLE_FILE`)."""
    return app_dir(app_id) / name


def write_description(description: RunDescription, name: str = DESCRIPTION_FILE) -> Path:
    """Write `description` as its app's last run, or as `name` (atomically); returns the path."""
    path = description_path(description.app_id, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    scratch.write_text(description.to_json(), encoding="utf-8")
    os.replace(scratch, path)
    return path


def read_description(app_id: str, name: str = DESCRIPTION_FILE) -> RunDescription | None:
    """The last run's description of `app_id` on this host (or the one kept as `name`), or None when none was
    recorded (or it is unreadable)."""
    try:
        return RunDescription.from_json(description_path(app_id, name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


class ResumableRecorder:
    """Epoch listener (`CheckpointCoordinator.epoch_listeners`): at the first epoch of this start that commits
    (`EpochRecord.outcome`),
    `description` is written as the app's `RESUMABLE_FILE`; later epochs do nothing. A job of several queries
    records it when any of them commits first."""

    def __init__(self, description: RunDescription) -> None:
        self.description = description
        self.done = False

    def __call__(self, query: str, record: EpochRecord, tasks: object) -> None:
        if not self.done and record.outcome == "committed":
            self.done = True
            write_description(self.description, RESUMABLE_FILE)
