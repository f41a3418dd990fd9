"""The `foreachBatch` function of one query under the coordinator: each epoch's write, phase one and phase two.

For epoch N, `EpochWriter` reads N's end offsets from Spark's offset log, checks that this instance still owns
the app, and writes per the delivery guarantee: under exactly-once it plans the sink tasks (`eos.task_plan`) and
runs them (phase one, `eos.phase_one`), then for shuffling queries has the coordinator commit the input end offsets
(phase two, `eos.phase_two`); it records the epoch in the history. Only when it returns does Spark write its
commit log, so Kafka is never behind Spark.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any

from ethereal_kafka.checkpoint.spark_log import checkpoint_id, epoch_watermark_ms, sync_offset_log
from ethereal_kafka.config.job import Guarantee
from ethereal_kafka.connectors.kafka.offsets import Offsets, SourceOffset
from ethereal_kafka.connectors.kafka.sink import KafkaSink, check_columns
from ethereal_kafka.eos.chained import hand_over, pickled_chain
from ethereal_kafka.eos.coordinator import CheckpointCoordinator
from ethereal_kafka.eos.errors import RecoveryError
from ethereal_kafka.eos.markers import EpochMarker
from ethereal_kafka.eos.names import progress_group, progress_topic
from ethereal_kafka.eos.partitioning import hash_partitioned
from ethereal_kafka.eos.phase_one import RESULT_SCHEMA, write_task
from ethereal_kafka.eos.task_plan import EpochRanges, EpochWrite, TaskSlot
from ethereal_kafka.plan.errors import failed_operator, user_error_line
from ethereal_kafka.plan.query import Layout

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from ethereal_kafka.checkpoint.history import EpochRecord


class EpochWriter:
    """`foreachBatch` function of one query under the coordinator (any delivery guarantee)."""

    def __init__(self, coordinator: CheckpointCoordinator, query: str) -> None:
        self.coordinator = coordinator
        self.name = query
        self.query = coordinator.queries[query]
        self.plain = KafkaSink(self.query.sinks)
        chain = self.query.chain
        self._chain = None if chain is None else pickled_chain(chain)  # pickled once: sent with every epoch
        self._last_end = 0.0
        self._task_rows: list[Any] = []  # the current epoch's sink task summary rows (for epoch listeners)
        self._output_ends: dict[str, dict[str, int]] = {}  # the current epoch's, once committed

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        """Write epoch `batch_id`; returns only when its output and offsets are committed.

        Raises:
            EpochRefusedError: the job is stopping (`coordinator.gate` is closed); nothing was written.
        """
        c = self.coordinator
        c.begin(self.name, batch_id)
        pause = c.job.min_pause_between_epochs_ms / 1000 - (time.monotonic() - self._last_end)
        if self._last_end and pause > 0:
            c.gate.pause(pause)
        try:
            with c.gate.epoch(self.name, batch_id):
                self._write(batch, batch_id)
        finally:
            self._last_end = time.monotonic()

    def _write(self, batch: DataFrame, batch_id: int) -> None:
        c = self.coordinator
        began = time.time()
        location = c.location(self.name)
        checkpoint = checkpoint_id(location)
        # Spark wrote offsets/N before calling here: make it durable before anything of the epoch commits, so a host
        # crash cannot leave Kafka holding an epoch that Spark's log has lost.
        sync_offset_log(location, batch_id)
        epoch = EpochRanges.of(location, batch_id, c.query_sources(self.name))
        ends = list(epoch.per_source)
        c.check_owner()
        if self.query.chain is None:  # a chained query's rows are its tasks' summaries
            for config in self.query.sinks:
                check_columns(config, batch)
        guarantee = c.job.delivery_guarantee
        tasks = skipped = 0
        self._task_rows = []
        self._output_ends = {}
        mode: str = self.query.layout
        try:
            if guarantee == Guarantee.AT_MOST_ONCE:
                # Offsets first, output after: a replayed epoch whose offsets were committed (its output may have
                # been written before the crash) writes nothing, so nothing is ever written twice.
                if c.offsets_committed(ends, checkpoint, batch_id, self.name, epoch.digest):
                    written, skipped = 0, 1
                else:
                    c.commit_source_offsets(ends, checkpoint, batch_id, self.name, epoch.digest)
                    written = self.plain.write(batch, batch_id)
                mode = Guarantee.AT_MOST_ONCE
            elif guarantee == Guarantee.AT_LEAST_ONCE:
                written = self.plain.write(batch, batch_id)
                c.commit_source_offsets(ends, checkpoint, batch_id, self.name, epoch.digest)
                mode = Guarantee.AT_LEAST_ONCE
            else:
                written, tasks, skipped = self._exactly_once(batch, batch_id, checkpoint, epoch)
                if self.query.layout == Layout.SHUFFLING:
                    c.commit_source_offsets(ends, checkpoint, batch_id, self.name, epoch.digest)
        except Exception as exc:
            text = str(exc)
            failed = self._entry(
                checkpoint, batch_id, self.query.layout, epoch, 0, tasks, skipped, began,
                user_error_line(text) or text,
            )  # fmt: skip
            operator = failed_operator(text)
            if c.gate.interrupting:  # the runner is stopping the queries: the stop ended the write
                failed = dataclasses.replace(failed, outcome="interrupted")
            elif operator is not None:
                failed = dataclasses.replace(failed, operator=operator)
            c.record(failed, self.name, self._task_rows)
            raise
        done = self._entry(checkpoint, batch_id, mode, epoch, written, tasks, skipped, began, None)
        c.record(done, self.name, self._task_rows)

    def _exactly_once(
        self, batch: DataFrame, batch_id: int, checkpoint: str, epoch: EpochRanges
    ) -> tuple[int, int, int]:
        c = self.coordinator
        chain = self.query.chain
        outputs = self.plain.outputs(batch) if chain is None else self.plain.outputs_for(chain.sink.columns)
        dead_letter_topic = None
        user_dead_letters = False
        if self.query.layout == Layout.PARTITION_PRESERVING:
            (source,) = c.query_sources(self.name)
            slots = tuple(
                TaskSlot(f"{t}-{p}", source.group, t, p, o, epoch.starts.get((t, p), 0))
                for (t, p), o in epoch.ends.items()
            )
            if source.on_error == "dlq" and source.dlq_delivery == "epoch":
                dead_letter_topic = source.dlq_topic
            user_dead_letters = c.job.on_user_error == "dlq"
            frame = batch  # one Spark partition per input partition: a task past the slots refuses to write
        else:
            tasks = c.job.sink_tasks
            group = progress_group(c.app_id, self.name)
            topic = progress_topic(c.app_id)
            slots = tuple(TaskSlot(str(p), group, topic, p, batch_id + 1) for p in range(tasks))
            frame = hash_partitioned(
                batch, tasks, [(s.key_column, c.output_partitions(s.name)) for s in self.query.sinks]
            )
        write = EpochWrite(
            dead_letter_topic=dead_letter_topic,
            user_dead_letters=user_dead_letters,
            app_id=c.app_id,
            instance_id=c.instance_id,
            checkpoint_id=checkpoint,
            epoch=batch_id,
            ranges=epoch.digest,
            query=self.name,
            outputs=outputs,
            slots=slots,
            transaction_timeout_ms=c.job.transaction_timeout_ms,
        )
        if self._chain is not None:
            # The source's read tasks are the sink tasks (`eos.chained`): hand them the epoch for this job only.
            context = batch.sparkSession.sparkContext
            hand_over(context, self.name, write, self._chain)
            try:
                rows = batch.collect()
            finally:
                hand_over(context, self.name, None, None)
        else:
            rows = frame.mapInArrow(lambda it: write_task(write, it), RESULT_SCHEMA).collect()
        self._task_rows = rows
        ran = sorted(int(r["task"]) for r in rows)
        if ran != list(range(len(slots))):
            raise RecoveryError(
                f"sink {self.name}: epoch {batch_id} ran sink tasks {ran} for {len(slots)} slot(s); each slot "
                "needs exactly one Spark partition (a partition-preserving job keeps one per Kafka partition)"
            )
        written = sum(int(r["records"]) for r in rows)
        skipped = sum(int(r["skipped"]) for r in rows)
        # Every task committed (or found its commit): the output of this epoch and the earlier ones lies below.
        self._output_ends = c.output_ends(self.name)
        return written, len(rows), skipped

    def _entry(
        self,
        checkpoint: str,
        epoch: int,
        mode: str,
        ranges: EpochRanges,
        written: int,
        tasks: int,
        skipped: int,
        began: float,
        error: str | None,
    ) -> EpochRecord:
        """The history record of an epoch attempt: committed when `error` is None, else failed (the caller makes
        it "interrupted" when a stop ended the write)."""
        from ethereal_kafka.checkpoint.history import EpochRecord

        merged, starts = ranges.ends, ranges.starts
        records_in = sum(max(0, o - starts.get(tp, o)) for tp, o in merged.items()) if starts else -1
        committed = error is None
        rows = [r for r in self._task_rows if not int(r["skipped"])]
        commits = [float(r["commit_ms"]) for r in rows if r["commit_ms"] is not None]
        app_id = self.coordinator.app_id
        return EpochRecord(
            app_id=app_id,
            checkpoint_id=checkpoint,
            epoch=epoch,
            mode=mode,
            start_offsets=starts.to_json(),
            end_offsets=merged.to_json(),
            records_in=records_in,
            records_out=written,
            tasks=tasks,
            skipped_tasks=skipped,
            started_ms=int(began * 1000),
            duration_ms=int((time.time() - began) * 1000),
            outcome="committed" if committed else "failed",
            error=error,
            query=self.name,
            watermark_ms=epoch_watermark_ms(self.coordinator.location(self.name), epoch),
            commit_ms=max(commits) if commits else None,
            txn_aborts=sum(max(0, int(r["attempts"] or 1) - 1) for r in rows),
            marker=EpochMarker(app_id, checkpoint, epoch, ranges.digest).render() if committed else None,
            marker_offsets=self._marker_offsets(mode, epoch, merged) if committed else {},
            output_ends=self._output_ends if committed else {},
        )

    def _marker_offsets(self, mode: str, epoch: int, ends: Offsets) -> dict[str, SourceOffset]:
        """Where epoch `epoch`'s marker was committed: per consumer group, `{topic: {partition: offset}}`."""
        c = self.coordinator
        out: dict[str, SourceOffset] = {}
        if mode == Layout.SHUFFLING:
            slots = {str(p): epoch + 1 for p in range(c.job.sink_tasks)}
            out[progress_group(c.app_id, self.name)] = {progress_topic(c.app_id): slots}
        for source in c.query_sources(self.name):
            read = ends.only(t for t in ends.topics() if source.reads(t))
            if read:
                out.setdefault(source.group, {}).update(read.to_json())
        return out
