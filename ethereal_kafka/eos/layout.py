"""The write layout of a shuffling query, fixed for its checkpoint's life: its sink tasks and its output topics'
partition counts.

A shuffling query hashes every row to one of `sink.tasks` tasks (and, for a fixed output topic, to one of its
partitions), and each task's epoch marker says which epochs that task committed. Change either number and a
replayed epoch sends rows to tasks whose markers cover the epoch already: they skip, and the rows are lost. So the
layout is recorded beside the query's Spark checkpoint at its first start (`<checkpoint>/<query>/ethereal-kafka/
layout.json`) and a start with another layout is refused, naming what changed and how to rescale (stop, then
replay into a fresh checkpoint: docs/operations.md#rescaling-a-job).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ethereal_kafka.errors import ConfigError

RESCALE_DOC = "docs/operations.md#rescaling-a-job"


@dataclass(frozen=True)
class WriteLayout:
    """How a shuffling query spreads its rows: its sink tasks, and per sink its fixed topic's partition count
    (None: rows name their topic)."""

    sink_tasks: int
    partitions: Mapping[str, int | None] = field(default_factory=dict)


def layout_file(query_checkpoint: str | Path) -> Path:
    """Where the query's recorded layout lives."""
    return Path(query_checkpoint) / "ethereal-kafka" / "layout.json"


def read_layout(query_checkpoint: str | Path) -> WriteLayout | None:
    """The recorded layout, or None before the query's first start (or for a checkpoint that is not local)."""
    try:
        raw = json.loads(layout_file(query_checkpoint).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return WriteLayout(int(raw["sink_tasks"]), {str(k): v for k, v in raw.get("partitions", {}).items()})


def record_layout(query_checkpoint: str | Path, layout: WriteLayout) -> None:
    """Record `layout` for the query (atomically)."""
    path = layout_file(query_checkpoint)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.partial")
    partial.write_text(
        json.dumps({"sink_tasks": layout.sink_tasks, "partitions": dict(layout.partitions)}), encoding="utf-8"
    )
    os.replace(partial, path)


def check_layout(query: str, recorded: WriteLayout, current: WriteLayout) -> None:
    """Refuse a start whose layout differs from the one the query's checkpoint was made with.

    Raises:
        ConfigError: one line naming what changed (sink.tasks, or a sink topic's partition count) and how to
            rescale.
    """
    changes = []
    if recorded.sink_tasks != current.sink_tasks:
        changes.append(f"sink.tasks {recorded.sink_tasks} -> {current.sink_tasks}")
    for sink, before in sorted(recorded.partitions.items()):
        after = current.partitions.get(sink, before)
        if after != before:
            changes.append(f"sink {sink}'s topic partitions {before} -> {after}")
    if changes:
        raise ConfigError(
            f"query {query}: {'; '.join(changes)} since its checkpoint was made: a replayed epoch would send rows to "
            f"sink tasks whose markers make them skip (lost output); to rescale, stop the job and replay it into a "
            f"fresh checkpoint ({RESCALE_DOC}), or put the old value back"
        )


def check_or_record_layout(query: str, query_checkpoint: str | Path, current: WriteLayout) -> None:
    """Record `current` as the query's layout at its first start; afterwards refuse a start with another one.

    Raises:
        ConfigError: the layout differs from the recorded one (see `check_layout`).
    """
    recorded = read_layout(query_checkpoint)
    if recorded is None:
        record_layout(query_checkpoint, current)
    else:
        check_layout(query, recorded, current)
