"""How big one epoch of a source may be: at most `max.records.per.epoch` records and `max.bytes.per.epoch` bytes.

Spark logs an epoch's end offsets before it runs and replays exactly those after a crash, so an epoch too big to
commit within the transaction timeout would fail again at every replay. Under exactly-once every source is
therefore bounded by default (`default_bounds`; the job runner fills them in):

- with fixed epoch sizing the bounds are each epoch's size: at most `EOS_MAX_RECORDS` and `EOS_MAX_BYTES`, less
  when the transaction timeout is short, so that an epoch commits within half of it at the floor rates
  (`FLOOR_RECORDS_PER_S`, `FLOOR_BYTES_PER_S`), and the start-up check (`longest_commit_s`) compares the
  transaction timeout with what the bounds let one epoch carry;
- with adaptive sizing (the default) the epoch sizer bounds an epoch's *duration* at the rate it measures (an
  epoch it plans takes at most `admission.STEP_CEILING` x its aim, the aim at most half the transaction timeout),
  so a floor rate 25x below what a task writes would only multiply the per-epoch cost of a backlog (Nexmark q5
  ran 2.1x faster with 200,000-record epochs than with 50,000). There the bounds cap what one epoch holds in
  memory: `ADAPTIVE_MAX_BYTES`, and the job's `epoch.max.records` for records.

Bytes are known only once records are read: each read task records the average size of the records it read in
a small file beside the source's pinned initial offsets (`record-bytes-<name>@<group>.json`), and epoch planning
turns the byte budget into records with it (before any read, `ASSUMED_RECORD_BYTES`). Planning is the only user:
a replay reuses the logged offsets, so the estimate never changes what an epoch reads.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable
from pathlib import Path

from ethereal_kafka.config.connectors import KafkaSourceConfig
from ethereal_kafka.errors import ConfigError

#: Default bounds of a source's epoch under exactly-once (per source, all its partitions together).
EOS_MAX_RECORDS = 50_000
EOS_MAX_BYTES = 32 * 1024 * 1024
#: The record size assumed before a read has measured one.
ASSUMED_RECORD_BYTES = 1024
#: Conservative rates one sink task writes at at least (measured here: ~25x these on 2 cores); the start-up check
#: assumes no more, so that the bounds fit the transaction timeout with room to spare.
FLOOR_RECORDS_PER_S = 2_000
FLOOR_BYTES_PER_S = 1024 * 1024
#: The byte bound of an adaptively sized source's epoch under exactly-once (what one epoch may hold in memory; the
#: sizer keeps its duration within the transaction timeout).
ADAPTIVE_MAX_BYTES = 64 * 1024 * 1024


def default_bounds(
    transaction_timeout_ms: int, epoch_interval_ms: int, adaptive: bool = False
) -> tuple[int, int]:
    """The bounds (records, bytes) a source gets under exactly-once when it sets none (0: no bound of the
    source's own).

    Fixed sizing: `EOS_MAX_RECORDS` and `EOS_MAX_BYTES`, lowered so that, at the floor rates, an epoch commits
    within half of what the transaction timeout leaves after the epoch interval (at least 100 records and 64 KiB).
    Adaptive sizing: no records bound (the job's `epoch.max.records` caps the sizer) and `ADAPTIVE_MAX_BYTES`.
    """
    if adaptive:
        return 0, ADAPTIVE_MAX_BYTES
    budget_s = max(0.0, (transaction_timeout_ms - epoch_interval_ms) / 1000) / 2
    records = max(100, min(EOS_MAX_RECORDS, int(budget_s * FLOOR_RECORDS_PER_S)))
    size = max(64 * 1024, min(EOS_MAX_BYTES, int(budget_s * FLOOR_BYTES_PER_S)))
    return records, size


def size_file(config: KafkaSourceConfig) -> Path | None:
    """Where the source's measured record size lives (None without a checkpoint location)."""
    if not config.checkpoint_location:
        return None
    name = f"record-bytes-{config.name}@{config.group}.json"
    return Path(config.checkpoint_location) / "ethereal-kafka" / name


def record_size(config: KafkaSourceConfig) -> float:
    """The average record size last measured by a read task, else `ASSUMED_RECORD_BYTES`."""
    path = size_file(config)
    if path is not None:
        with contextlib.suppress(OSError, ValueError, KeyError, ZeroDivisionError):
            measured = json.loads(path.read_text(encoding="utf-8"))
            return max(1.0, float(measured["bytes"]) / float(measured["records"]))
    return float(ASSUMED_RECORD_BYTES)


def measured(config: KafkaSourceConfig, records: int, size_bytes: int) -> None:
    """Record what a read task read (executor side; the last task's measure wins). Never raises."""
    path = size_file(config)
    if path is None or records <= 0:
        return
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.partial")
        partial.write_text(json.dumps({"records": records, "bytes": size_bytes}), encoding="utf-8")
        os.replace(partial, path)


def records_bound(config: KafkaSourceConfig) -> int:
    """At most how many records the next epoch of the source may read (0: unbounded)."""
    bounds = []
    if config.max_records_per_epoch > 0:
        bounds.append(config.max_records_per_epoch)
    if config.max_bytes_per_epoch > 0:
        bounds.append(max(1, int(config.max_bytes_per_epoch // record_size(config))))
    return min(bounds) if bounds else 0


def longest_commit_s(config: KafkaSourceConfig) -> float | None:
    """How long one task may need to commit the largest epoch the source's bounds allow, at the floor rates (the
    whole epoch in one task, as many records as allowed, each as large as allowed: the worst case); None when the
    source is unbounded. A bound left unset (0) is not counted: the check can only speak for the bounds it has."""
    estimates = []
    if config.max_records_per_epoch > 0:
        estimates.append(config.max_records_per_epoch / FLOOR_RECORDS_PER_S)
    if config.max_bytes_per_epoch > 0:
        estimates.append(config.max_bytes_per_epoch / FLOOR_BYTES_PER_S)
    return max(estimates) if estimates else None


def check_bounds_fit(
    sources: Iterable[KafkaSourceConfig], transaction_timeout_ms: int, epoch_interval_ms: int
) -> None:
    """Refuse a job whose epochs could outlive its transactions: what bounds a transaction is how much one epoch
    can carry (`longest_commit_s`), not the trigger interval. Called at start-up under exactly-once. An adaptively
    sized source only needs a bound: the epoch sizer keeps its epochs' duration within the timeout (its aim is at
    most half of it, `JobConfig.epoch_target` and `admission.AdmissionSettings.longest_ms`).

    Raises:
        ConfigError: a source is unbounded, or its fixed-size bounds need longer than `transaction.timeout.ms` to
            commit.
    """
    for source in sources:
        longest = longest_commit_s(source)
        if longest is None:
            raise ConfigError(
                f"source {source.name}: exactly-once needs bounded epochs; set max.records.per.epoch or "
                "max.bytes.per.epoch (the job runner sets both by default)"
            )
        if source.epoch_sizing == "adaptive":
            continue
        needed_ms = int(longest * 1000) + epoch_interval_ms
        if transaction_timeout_ms < needed_ms:
            raise ConfigError(
                f"transaction.timeout.ms={transaction_timeout_ms} is too short for source {source.name}'s epochs: up "
                f"to {source.max_records_per_epoch} records / {source.max_bytes_per_epoch} bytes may take {needed_ms} "
                f"ms to commit at {FLOOR_RECORDS_PER_S} records/s or {FLOOR_BYTES_PER_S // 1024} KiB/s per task; "
                "lower max.records.per.epoch / max.bytes.per.epoch, or raise transaction.timeout.ms"
            )
