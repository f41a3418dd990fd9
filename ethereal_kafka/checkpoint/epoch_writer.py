"""The `foreachBatch` function of one query under the coordinator: each epoch's write, phase one and phase two.

For epoch N, `EpochWriter` reads N's end offsets from Spark's offset log, checks that this instance still owns
the app, and writes per the delivery guarantee: under exactly-once it plans the sink tasks (`EpochWrite`) and runs
them (phase one, `connectors.kafka.transactional`), then for shuffling queries has the coordinator commit the input
end offsets (phase two); it records the epoch in the history. Only when it returns does Spark write its commit
log, so Kafka is never behind Spark.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ethereal_kafka.checkpoint.coordinator import (
    AT_LEAST_ONCE,
    AT_MOST_ONCE,
    CheckpointCoordinator,
)
from ethereal_kafka.checkpoint.errors import RecoveryError
from ethereal_kafka.checkpoint.spark_log import (
    CheckpointLogError,
    checkpoint_id,
    epoch_end_offsets,
    epoch_watermark_ms,
)
from ethereal_kafka.connectors.kafka.epoch_write import (
    SINK_INDEX_COLUMN,
    EpochWrite,
    TaskSlot,
    progress_topic,
)
from ethereal_kafka.connectors.kafka.markers import EpochMarker
from ethereal_kafka.connectors.kafka.sink import KafkaSink, check_columns
from ethereal_kafka.connectors.kafka.source import initial_offsets_file
from ethereal_kafka.connectors.kafka.transactional import RESULT_SCHEMA, write_task
from ethereal_kafka.plan.classify import PARTITION_PRESERVING, SHUFFLING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from ethereal_kafka.checkpoint.history import EpochRecord


class EpochWriter:
    """`foreachBatch` function of one query under the coordinator (any delivery guarantee)."""

    def __init__(self, coordinator: CheckpointCoordinator, query: str) -> None:
        self.coordinator = coordinator
        self.sink = query
        self.shape = coordinator.shapes[query]
        self.config = self.shape.sinks[0]
        self.plain = KafkaSink(self.shape.sinks)
        self._last_end = 0.0
        self._task_rows: list[Any] = []  # the current epoch's sink task summary rows (for epoch listeners)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        """Write epoch `batch_id`; returns only when its output and offsets are committed.

        Raises:
            EpochRefusedError: the job is stopping (`coordinator.gate` is closed); nothing was written.
        """
        c = self.coordinator
        pause = c.settings.min_pause_ms / 1000 - (time.monotonic() - self._last_end)
        if self._last_end and pause > 0:
            c.gate.pause(pause)
        try:
            with c.gate.epoch(self.sink, batch_id):
                self._write(batch, batch_id)
        finally:
            self._last_end = time.monotonic()

    def _write(self, batch: DataFrame, batch_id: int) -> None:
        c = self.coordinator
        began = time.time()
        location = c.location(self.sink)
        checkpoint = checkpoint_id(location)
        ends = epoch_end_offsets(location, batch_id)
        c.check_owner()
        for config in self.shape.sinks:
            check_columns(config, batch)
        shape = self.shape
        guarantee = c.settings.guarantee
        tasks = skipped = 0
        self._task_rows = []
        try:
            if guarantee == AT_MOST_ONCE:
                # Offsets first, output after: a replayed epoch whose offsets were committed (its output may have
                # been written before the crash) writes nothing, so nothing is ever written twice.
                if c.offsets_committed(ends, checkpoint, batch_id, self.sink):
                    written, skipped = 0, 1
                else:
                    c.commit_source_offsets(ends, checkpoint, batch_id, self.sink)
                    written = self.plain.write(batch, batch_id)
                mode = AT_MOST_ONCE
            elif guarantee == AT_LEAST_ONCE:
                written = self.plain.write(batch, batch_id)
                c.commit_source_offsets(ends, checkpoint, batch_id, self.sink)
                mode = AT_LEAST_ONCE
            else:
                mode = shape.mode
                written, tasks, skipped = self._exactly_once(batch, batch_id, checkpoint, ends)
                if mode == SHUFFLING:
                    c.commit_source_offsets(ends, checkpoint, batch_id, self.sink)
        except Exception as exc:
            c.record(
                self._entry(
                    checkpoint, batch_id, shape.mode, ends, 0, tasks, skipped, began, "failed", str(exc)
                ),
                self.sink,
                self._task_rows,
            )
            raise
        c.record(
            self._entry(checkpoint, batch_id, mode, ends, written, tasks, skipped, began, "committed", None),
            self.sink,
            self._task_rows,
        )

    def _exactly_once(
        self, batch: DataFrame, batch_id: int, checkpoint: str, ends: list[dict[str, dict[str, int]]]
    ) -> tuple[int, int, int]:
        c = self.coordinator
        shape = self.shape
        outputs = self.plain.outputs(batch)
        dead_letter_topic = None
        if shape.mode == PARTITION_PRESERVING:
            (source,) = c.query_sources(self.sink)
            inputs = sorted(
                (t, int(p), int(o))
                for offsets in ends
                for t, parts in offsets.items()
                for p, o in parts.items()
            )
            starts = self._start_offsets(batch_id)
            slots = tuple(
                TaskSlot(f"{t}-{p}", source.group, t, p, o, starts.get(t, {}).get(str(p), 0))
                for t, p, o in inputs
            )
            if source.on_error == "dlq" and source.dlq_delivery == "epoch":
                dead_letter_topic = source.dlq_topic
            frame = batch  # one Spark partition per input partition: a task past the slots refuses to write
        else:
            tasks = c.settings.sink_tasks
            group = f"{c.settings.app_id}.ethereal-progress.{self.sink}"
            topic = progress_topic(c.settings.app_id)
            slots = tuple(TaskSlot(str(p), group, topic, p, batch_id + 1) for p in range(tasks))
            frame = _hash_partitioned(
                batch, tasks, [(s.key_column, c.output_partitions(s.name)) for s in shape.sinks]
            )
        write = EpochWrite(
            dead_letter_topic=dead_letter_topic,
            app_id=c.settings.app_id,
            instance_id=c.instance_id,
            checkpoint_id=checkpoint,
            epoch=batch_id,
            query=self.sink,
            outputs=outputs,
            slots=slots,
            transaction_timeout_ms=c.settings.transaction_timeout_ms,
        )
        rows = frame.mapInArrow(lambda it: write_task(write, it), RESULT_SCHEMA).collect()
        self._task_rows = rows
        ran = sorted(int(r["task"]) for r in rows)
        if ran != list(range(len(slots))):
            raise RecoveryError(
                f"sink {self.sink}: epoch {batch_id} ran sink tasks {ran} for {len(slots)} slot(s); each slot "
                "needs exactly one Spark partition (a partition-preserving job keeps one per Kafka partition)"
            )
        written = sum(int(r["records"]) for r in rows)
        skipped = sum(int(r["skipped"]) for r in rows)
        return written, len(rows), skipped

    def _start_offsets(self, epoch: int) -> dict[str, dict[str, int]]:
        """Start offsets of `epoch`: the previous epoch's end offsets, or the pinned initial offsets ({} if none)."""
        location = self.coordinator.location(self.sink)
        merged: dict[str, dict[str, int]] = {}
        try:
            previous = epoch_end_offsets(location, epoch - 1) if epoch > 0 else []
        except CheckpointLogError:
            previous = []
        if epoch == 0:
            for source in self.coordinator.query_sources(self.sink):
                pinned = Path(f"{source.checkpoint_location}/ethereal-kafka/{initial_offsets_file(source)}")
                if source.checkpoint_location and pinned.exists():
                    previous.append(json.loads(pinned.read_text(encoding="utf-8")))
        for offsets in previous:
            for topic, parts in offsets.items():
                merged.setdefault(topic, {}).update({str(p): int(o) for p, o in parts.items()})
        return merged

    def _entry(
        self,
        checkpoint: str,
        epoch: int,
        mode: str,
        ends: list[dict[str, dict[str, int]]],
        written: int,
        tasks: int,
        skipped: int,
        began: float,
        outcome: str,
        error: str | None,
    ) -> EpochRecord:
        from ethereal_kafka.checkpoint.history import EpochRecord

        merged: dict[str, dict[str, int]] = {}
        for offsets in ends:
            for topic, parts in offsets.items():
                merged.setdefault(topic, {}).update(parts)
        starts = self._start_offsets(epoch)
        records_in = (
            sum(
                max(0, o - starts.get(t, {}).get(p, o))
                for t, parts in merged.items()
                for p, o in parts.items()
            )
            if starts
            else -1
        )
        committed = outcome == "committed"
        rows = [r for r in self._task_rows if not int(r["skipped"])]
        commits = [float(r["commit_ms"]) for r in rows if r["commit_ms"] is not None]
        app_id = self.coordinator.settings.app_id
        return EpochRecord(
            app_id=app_id,
            checkpoint_id=checkpoint,
            epoch=epoch,
            mode=mode,
            start_offsets=starts,
            end_offsets=merged,
            records_in=records_in,
            records_out=written,
            tasks=tasks,
            skipped_tasks=skipped,
            started_ms=int(began * 1000),
            duration_ms=int((time.time() - began) * 1000),
            outcome=outcome,
            error=error,
            query=self.sink,
            watermark_ms=epoch_watermark_ms(self.coordinator.location(self.sink), epoch),
            commit_ms=max(commits) if commits else None,
            txn_aborts=sum(max(0, int(r["attempts"] or 1) - 1) for r in rows),
            marker=EpochMarker(app_id, checkpoint, epoch).render() if committed else None,
            marker_offsets=self._marker_offsets(mode, epoch, merged) if committed else {},
        )

    def _marker_offsets(
        self, mode: str, epoch: int, ends: dict[str, dict[str, int]]
    ) -> dict[str, dict[str, dict[str, int]]]:
        """Where epoch `epoch`'s marker was committed: per consumer group, `{topic: {partition: offset}}`."""
        c = self.coordinator
        out: dict[str, dict[str, dict[str, int]]] = {}
        if mode == SHUFFLING:
            group = f"{c.settings.app_id}.ethereal-progress.{self.sink}"
            slots = {str(p): epoch + 1 for p in range(c.settings.sink_tasks)}
            out[group] = {progress_topic(c.settings.app_id): slots}
        for source in c.query_sources(self.sink):
            read = {t: dict(parts) for t, parts in ends.items() if c._reads(source, t)}
            if read:
                out.setdefault(source.group, {}).update(read)
        return out


#: Columns giving a row's place in its key's order, best first: a framework operator's emission sequence, the
#: source position a DataStream element carries, or a DataFrame's `offset` column.
_POSITIONS: tuple[tuple[str, ...], ...] = (("__seq",), ("__part", "__off"), ("offset",))


def _hash_partitioned(batch: DataFrame, tasks: int, sinks: list[tuple[str, int | None]]) -> DataFrame:
    """Rows over exactly `tasks` Spark partitions, sorted inside each, so what reaches sink task p on a replay is
    what reached it the first time, in the same order.

    Args:
        sinks: Per sink of the query (in `__sink` index order), its key column and its fixed topic's partition
            count (None when rows name their topic).

    With fixed sink topics (and no `partition` column of the user's), each row's Kafka partition is computed here
    from its key (Spark's murmur3 `hash`) and rows are grouped by (sink, partition): every Kafka partition is
    written by exactly one task, and epochs commit in order, so each output partition receives the same records
    in the same order on every replay.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, MapType

    frame = batch
    multi = len(sinks) > 1 and SINK_INDEX_COLUMN in frame.columns
    if "partition" not in frame.columns:
        choices = [
            (i, F.pmod(F.hash(F.col(key)), F.lit(count)))
            for i, (key, count) in enumerate(sinks)
            if count and key in frame.columns
        ]
        if multi and choices:
            expr = None
            for i, chosen in choices:
                expr = (F if expr is None else expr).when(F.col(SINK_INDEX_COLUMN) == i, chosen)
            frame = frame.withColumn("partition", expr)  # type: ignore[arg-type]
        elif not multi and choices:
            frame = frame.withColumn("partition", choices[0][1])
    orderable = [f.name for f in frame.schema.fields if not isinstance(f.dataType, MapType | ArrayType)]
    key_column = sinks[0][0]
    if "partition" in frame.columns:
        by = [SINK_INDEX_COLUMN, "partition"] if multi else ["partition"]
    elif multi:
        by = [SINK_INDEX_COLUMN]
    else:
        by = [key_column if key_column in frame.columns else orderable[0]]
    first = [c for c in by if c in orderable]
    # Within a key, rows keep the order they were emitted or read in (a framework operator's `__seq`, else the
    # source position), not the order of their values; the other columns only break ties, for determinism.
    key_first = [c for c in (key_column,) if c in orderable and c not in first]
    position = next((cols for cols in _POSITIONS if all(c in orderable for c in cols)), ())
    then = [*first, *key_first, *[c for c in position if c not in first]]
    return frame.repartition(tasks, *by).sortWithinPartitions(*then, *[c for c in orderable if c not in then])
