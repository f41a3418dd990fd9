"""Read what Spark's streaming checkpoint says: the query id (the incarnation), each epoch's end offsets and
watermark.

Spark writes `offsets/N` (the end offsets of epoch N, one line per source) before any task of epoch N runs, and
`metadata` (the query id) when the checkpoint is created. Both are read-only here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ethereal_kafka.connectors.kafka.offsets import Offsets
from ethereal_kafka.errors import EtherealKafkaError
from ethereal_kafka.paths import fsync_path


class CheckpointLogError(EtherealKafkaError):
    """The Spark checkpoint is missing a file the coordinator needs (a corrupt or foreign checkpoint)."""


def checkpoint_id(location: str | Path) -> str:
    """The Spark query id stored in `<checkpoint>/metadata`: stable for the checkpoint's life, new after a reset.

    Raises:
        CheckpointLogError: the metadata file is missing or unreadable.
    """
    path = Path(location) / "metadata"
    try:
        return str(json.loads(path.read_text(encoding="utf-8").splitlines()[0])["id"])
    except (OSError, ValueError, KeyError, IndexError) as exc:
        raise CheckpointLogError(f"cannot read the query id from {path}: {exc}") from exc


def epoch_end_offsets(location: str | Path, epoch: int) -> list[Offsets]:
    """End offsets of `epoch`, one per source, as Spark logged them before running it.

    Raises:
        CheckpointLogError: `offsets/<epoch>` is missing or malformed.
    """
    path = Path(location) / "offsets" / str(epoch)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise CheckpointLogError(f"Spark offset log {path} is missing: {exc.strerror}") from exc
    if len(lines) < 3 or not lines[0].startswith("v"):
        raise CheckpointLogError(f"Spark offset log {path} is malformed")
    sources: list[Offsets] = []
    for line in lines[2:]:
        value: Any = json.loads(line) if line.strip() and line.strip() != "-" else {}
        # Keys starting with "@" are not topics the source reads (e.g. pinned lookup-table offsets).
        sources.append(Offsets.from_json({t: parts for t, parts in value.items() if not t.startswith("@")}))
    return sources


def epoch_watermark_ms(location: str | Path, epoch: int) -> int | None:
    """The event-time watermark epoch `epoch` ran with (`batchWatermarkMs` of `offsets/<epoch>`, epoch ms; 0 before
    any watermark), or None when the log is missing or says nothing about it. For display: never raises."""
    path = Path(location) / "offsets" / str(epoch)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
        value = json.loads(lines[1]).get("batchWatermarkMs") if len(lines) > 1 else None
    except (OSError, ValueError, AttributeError):
        return None
    return int(value) if isinstance(value, int | float) else None


def next_watermark_ms(location: str | Path, epoch: int) -> int | None:
    """The watermark Spark computed after `epoch` for the epoch after it (`nextBatchWatermarkMs` of `commits/<epoch>`,
    epoch ms), or None when the commit is missing or says nothing about it."""
    path = Path(location) / "commits" / str(epoch)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
        value = json.loads(lines[1]).get("nextBatchWatermarkMs") if len(lines) > 1 else None
    except (OSError, ValueError, AttributeError):
        return None
    return int(value) if isinstance(value, int | float) else None


def has_state(location: str | Path) -> bool:
    """True when the checkpoint holds operator state (a `state/` folder with files)."""
    state = Path(location) / "state"
    return state.is_dir() and any(state.rglob("*"))


def has_progress(location: str | Path) -> bool:
    """True when the checkpoint has logged at least one epoch."""
    return bool(logged_epochs(location))


def logged_epochs(location: str | Path) -> list[int]:
    """The epochs Spark's offset log holds (`offsets/N`), sorted; empty without a local log."""
    offsets = Path(location) / "offsets"
    if not offsets.is_dir():
        return []
    return sorted(int(p.name) for p in offsets.iterdir() if p.name.isdigit())


def uncommitted_epoch(location: str | Path) -> int | None:
    """The last epoch Spark logged (`offsets/N`) but did not commit (`commits/N`): the one a restart replays; None
    when the last logged epoch committed, or nothing is logged."""
    logged = logged_epochs(location)
    if not logged:
        return None
    commits = Path(location) / "commits"
    return None if (commits / str(logged[-1])).exists() else logged[-1]


def sync_offset_log(location: str | Path, epoch: int) -> None:
    """Flush `offsets/<epoch>` (and the folder's entry for it, and the checkpoint's `metadata`) to stable storage.

    Spark's local checkpoint file manager writes a file and renames it into place without fsync, so a host crash
    can lose an epoch's log entry after the epoch committed in Kafka; Spark would then plan the epoch again with
    other bounds. Called by the epoch writer before anything of the epoch commits. A checkpoint that is not a local
    folder is left to its file system.

    Raises:
        CheckpointLogError: `offsets/<epoch>` cannot be opened.
    """
    if "://" in str(location) and not str(location).startswith("file:"):
        return
    root = Path(str(location).removeprefix("file:"))
    path = root / "offsets" / str(epoch)
    try:
        fsync_path(path)
        fsync_path(path.parent)
        fsync_path(root / "metadata")
    except OSError as exc:
        raise CheckpointLogError(f"cannot flush Spark offset log {path}: {exc.strerror}") from exc
