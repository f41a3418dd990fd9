"""The write layout of a query, fixed for its checkpoint's life: partition-preserving or shuffling, and for a
shuffling query its sink tasks and its output topics' partition counts.

A shuffling query hashes every row to one of `sink.tasks` tasks (and, for a fixed output topic, to one of its
partitions), and each task's epoch marker says which epochs that task committed. Change either number and a
replayed epoch sends rows to tasks whose markers cover the epoch already: they skip, and the rows are lost. So the
layout is recorded beside the query's Spark checkpoint at its first start (`<checkpoint>/<query>/ethereal-kafka/
layout.json`) and a start with another layout is refused, naming what changed and how to rescale (stop, then
replay into a fresh checkpoint: docs/operations.md#rescaling-a-job).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ethereal_kafka.errors import ConfigError
from ethereal_kafka.paths import write_durably

RESCALE_DOC = "docs/operations.md#rescaling-a-job"


@dataclass(frozen=True)
class WriteLayout:
    """How a query writes: its layout (`plan.query.Layout`; a file written before it was recorded is a shuffling
    query's), and for a shuffling query its sink tasks and per sink its fixed topic's partition count (None: rows
    name their topic)."""

    sink_tasks: int
    partitions: Mapping[str, int | None] = field(default_factory=dict)
    layout: str = "shuffling"


def layout_file(query_checkpoint: str | Path) -> Path:
    """Where the query's recorded layout lives."""
    return Path(query_checkpoint) / "ethereal-kafka" / "layout.json"


def read_layout(query_checkpoint: str | Path) -> WriteLayout | None:
    """The recorded layout, or None before the query's first start (or for a checkpoint that is not local)."""
    try:
        raw = json.loads(layout_file(query_checkpoint).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    partitions = {str(k): v for k, v in raw.get("partitions", {}).items()}
    return WriteLayout(int(raw["sink_tasks"]), partitions, str(raw.get("layout", "shuffling")))


def record_layout(query_checkpoint: str | Path, layout: WriteLayout) -> None:
    """Record `layout` for the query (atomically)."""
    write_durably(
        layout_file(query_checkpoint),
        json.dumps(
            {"layout": layout.layout, "sink_tasks": layout.sink_tasks, "partitions": dict(layout.partitions)}
        ),
    )


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


def check_or_record_layout(
    query: str,
    query_checkpoint: str | Path,
    current: WriteLayout,
    epoch_in_flight: int | None,
    record: bool = True,
) -> None:
    """Record `current` as the query's layout at its first start; afterwards refuse a start whose shuffling layout
    changed (see `check_layout`), and a switch between partition-preserving and shuffling while an epoch is half
    committed: its committed tasks wrote their markers where the old layout keeps them, so the new layout's tasks
    would not find them and would write the epoch again. A switch between epochs is recorded.

    Args:
        epoch_in_flight: An epoch Spark logged but did not commit, of which Kafka already holds markers under the
            recorded layout (None: there is none).
        record: False checks only (a pass before the id pool is fenced, repeated after it with `record`).

    Raises:
        ConfigError: one line naming the change.
    """
    recorded = read_layout(query_checkpoint)
    if recorded is not None and recorded.layout != current.layout:
        if epoch_in_flight is not None:
            raise ConfigError(
                f"query {query}: its layout changed {recorded.layout} -> {current.layout} while epoch "
                f"{epoch_in_flight} is half committed (some of its sink tasks committed under the old layout, whose "
                "markers the new one does not read, so it would be written twice); run the previous version until "
                "the epoch commits (stop it gracefully), then switch"
            )
        recorded = None
    if recorded is None:
        if record:
            record_layout(query_checkpoint, current)
    elif current.layout == "shuffling":
        check_layout(query, recorded, current)
