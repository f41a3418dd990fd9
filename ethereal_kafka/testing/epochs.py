"""Read a finished query's epochs back from its Spark checkpoint, so a plain-Python reference can replay them.

Spark logs, before an epoch runs, its end offsets per source and its batch watermark and timestamp
(`offsets/<N>`); a replay reuses them. An operator's output is a function of its input records *and* of those
epoch boundaries and watermarks (what is late depends on them), so references of event-time operators take the
logged epochs as input instead of guessing them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Epoch:
    """One logged epoch.

    Attributes:
        batch_id: Spark's batch id (the epoch number).
        watermark_ms: The watermark the epoch's operators used (Spark's eviction watermark).
        timestamp_ms: The epoch's batch timestamp (processing time).
        ends: End offsets, per source (in query order): `{(topic, partition): offset}`.
    """

    batch_id: int
    watermark_ms: int
    timestamp_ms: int
    ends: tuple[dict[tuple[str, int], int], ...]


def read_epochs(query_checkpoint: str | Path) -> list[Epoch]:
    """Every epoch in `<query_checkpoint>/offsets`, in order."""
    folder = Path(query_checkpoint) / "offsets"
    epochs = []
    for path in sorted((p for p in folder.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)):
        lines = path.read_text(encoding="utf-8").splitlines()
        meta = json.loads(lines[1])
        ends = []
        for line in lines[2:]:
            value = json.loads(line) if line.strip() and line.strip() != "-" else {}
            ends.append(
                {
                    (t, int(p)): int(o)
                    for t, parts in value.items()
                    if not t.startswith("@")
                    for p, o in parts.items()
                }
            )
        epochs.append(
            Epoch(
                int(path.name),
                int(meta.get("batchWatermarkMs", 0)),
                int(meta.get("batchTimestampMs", 0)),
                tuple(ends),
            )
        )
    return epochs


def split_by_epochs(
    records: Iterable[T],
    position: Callable[[T], tuple[str, int, int]],
    epochs: Sequence[Epoch],
    source: int = 0,
) -> list[list[T]]:
    """Assign each record (by its `(topic, partition, offset)`) to the first epoch whose end offset passes it.

    Records beyond the last epoch's ends are left out (they were never read).
    """
    out: list[list[T]] = [[] for _ in epochs]
    for record in records:
        topic, partition, offset = position(record)
        for i, epoch in enumerate(epochs):
            if offset < epoch.ends[source].get((topic, partition), 0):
                out[i].append(record)
                break
    return out
