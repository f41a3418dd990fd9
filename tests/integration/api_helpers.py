"""Helpers for DataStream API tests: write a job's files, feed timestamped events, run the job, read results."""

from __future__ import annotations

import json
import time
import uuid
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ethereal_kafka.connectors.kafka.topics import ReadRecord, produce, read_committed
from ethereal_kafka.testing.epochs import Epoch, read_epochs
from tests.integration.eos_helpers import EPOCH_RECORDS_ENV


@dataclass(frozen=True)
class ApiJob:
    """A job written to disk."""

    path: Path
    app_id: str
    checkpoint: Path

    def epochs(self, query: str) -> list[Epoch]:
        """The epochs query `query` logged (its name: the sink name, or sink names joined by '+')."""
        return read_epochs(self.checkpoint / query)


def write_api_job(
    folder: Path,
    bootstrap: str,
    pipeline: str,
    sources: dict[str, tuple[str, str]],
    sinks: dict[str, tuple[str, str]],
    *,
    max_records: int | dict[str, int] = 200,
    extra_job: str = "",
    guarantee: str = "exactly-once",
    pinned: Collection[str] = (),
) -> ApiJob:
    """Write a job file and one connector file per source/sink.

    Args:
        sources: name -> (topic, extra properties lines), e.g. `{"events": (topic, "value.format=json\\n...")}`.
        sinks: name -> (topic, extra properties lines).
        max_records: every source's `max.records.per.epoch`, or one per source name. `EPOCH_RECORDS_ENV` overrides
            it (the crash harness's last run reads larger epochs, `eos_helpers.FINAL_RUN`) except for
            `pinned` sources: with `epoch.sizing=fixed` their epochs are then the same in every run, killed or not.
    """
    folder.mkdir(parents=True, exist_ok=True)
    app = f"api-{uuid.uuid4().hex[:8]}"
    limits = max_records if isinstance(max_records, dict) else dict.fromkeys(sources, max_records)
    for name, (topic, extra) in sources.items():
        limit = str(limits[name]) if name in pinned else f"${{{EPOCH_RECORDS_ENV}:-{limits[name]}}}"
        (folder / f"{name}.source.properties").write_text(
            f"connector.class=kafka-source\nname={name}\nbootstrap.servers={bootstrap}\ntopics={topic}\n"
            f"starting.offsets=earliest\nmax.records.per.epoch={limit}\n{extra}"
        )
    for name, (topic, extra) in sinks.items():
        (folder / f"{name}.sink.properties").write_text(
            f"connector.class=kafka-sink\nname={name}\nbootstrap.servers={bootstrap}\ntopic={topic}\n{extra}"
        )
    checkpoint = folder / "checkpoint"
    (folder / "job.properties").write_text(
        f"app.id={app}\nsources={','.join(f'{n}.source.properties' for n in sources)}\n"
        f"sinks={','.join(f'{n}.sink.properties' for n in sinks)}\npipeline={pipeline}\n"
        f"checkpoint.location={checkpoint}\ndelivery.guarantee={guarantee}\ntrigger.interval.ms=200\n"
        f"sink.tasks=2\ntransaction.timeout.ms=30000\n{extra_job}"
    )
    return ApiJob(folder / "job.properties", app, checkpoint)


def feed_events(bootstrap: str, topic: str, events: list[tuple[int, str, dict[str, Any], int]]) -> None:
    """Produce `(partition, key, value dict, timestamp ms)` events, per partition in list order (JSON values).

    Record timestamps must be recent: Kafka 4 rejects records more than `log.message.timestamp.after.max.ms`
    (1 hour) ahead of the broker's clock, and retention (7 days) deletes older ones at once. Use `base_ts()`.
    """
    by_partition: dict[int, list[tuple[str, dict[str, Any], int]]] = defaultdict(list)
    for partition, key, value, ts in events:
        by_partition[partition].append((key, value, ts))
    for partition, items in sorted(by_partition.items()):
        produce(
            bootstrap,
            topic,
            [(k.encode(), json.dumps(v, separators=(",", ":")).encode()) for k, v, _ in items],
            partition=partition,
            timestamps_ms=[ts for _, _, ts in items],
        )


def base_ts() -> int:
    """A timestamp base for test events: one day ago, floored to the hour (windows align the same way)."""
    hour = 3_600_000
    return (int(time.time() * 1000) - 24 * hour) // hour * hour


def read_json(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    """The committed output of `topic` as parsed JSON values (read_committed, to the end)."""
    return [json.loads(r.value or b"null") for r in read_committed(bootstrap, topic, timeout_s=60)]


def read_records(bootstrap: str, topic: str) -> list[ReadRecord]:
    """The committed records of `topic` (read_committed, to the end)."""
    return read_committed(bootstrap, topic, timeout_s=60)


def by_partition(bootstrap: str, topic: str) -> dict[int, list[tuple[bytes | None, bytes | None]]]:
    """The committed `(key, value)` bytes of `topic`, per partition in offset order (for byte-for-byte checks)."""
    out: dict[int, list[tuple[bytes | None, bytes | None]]] = defaultdict(list)
    for record in read_records(bootstrap, topic):
        out[record.partition].append((record.key, record.value))
    return dict(out)


def per_key(records: list[dict[str, Any]], field: str) -> dict[str, list[str]]:
    """Each key's records (keyed by `field`) in order, as canonical JSON: a key's records go to one partition, in
    the order the operator emitted them."""
    out: dict[str, list[str]] = defaultdict(list)
    for record in records:
        out[record[field]].append(json.dumps(record, sort_keys=True))
    return dict(out)
