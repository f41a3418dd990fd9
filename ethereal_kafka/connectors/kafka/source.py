"""The Kafka source: a Spark Python DataSource (`format("ethereal-kafka")`) with a micro-batch stream reader.

Options are the connector's `.properties` keys (see `KafkaSourceConfig`), so a connector file can be passed as is:
`spark.readStream.format("ethereal-kafka").options(**props).load()`.

Contract with Spark (see SPARK-NOTES.md):
- `initialOffset` runs once per query without a checkpoint; `latestOffset(start, limit)` fixes the end offsets of
  the next epoch, bounded by `max.records.per.epoch` unless Spark passes `ReadAllAvailable`, and with adaptive
  sizing by the budget the job's epoch sizer posted in the checkpoint (`admission`). These driver-side methods run
  in the Python process Spark starts for the source, not in the driver's Python process.
- `partitions(start, end)` is a pure function of its arguments: one input partition per Kafka partition with data,
  so a replayed epoch reads exactly the same records.
- `read` yields Arrow record batches of the Kafka columns plus the decoded key/value fields; poison records are
  handled per `on.error` (see `decoding`). Each successful read reports its counts and timestamps to the driver
  (`read_stats`), for the job's metrics.
- With `pin.tables` (set by the compiler for lookup joins), the end offsets also record the tables' offsets under
  `@table/<name>` keys, and each row carries them in the hidden `__pins` column (see `connectors.table_pins`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from ethereal_kafka.config.connectors import KafkaSourceConfig
from ethereal_kafka.connectors.kafka.admission import budget_path, read_budget
from ethereal_kafka.connectors.kafka.clients import consumer_config
from ethereal_kafka.connectors.kafka.dead_letters import DeadLetter
from ethereal_kafka.connectors.kafka.decoding import DecodeStats, SourceLayout, decode_batches
from ethereal_kafka.connectors.kafka.epoch_bounds import measured, records_bound
from ethereal_kafka.connectors.kafka.offsets import (
    Offsets,
    SourceOffset,
    TopicPartitionKey,
    from_flat,
    limit_offsets,
    ranges,
    to_flat,
)
from ethereal_kafka.connectors.kafka.positions import PositionResolver
from ethereal_kafka.connectors.kafka.range_reader import messages_to_batch, read_messages
from ethereal_kafka.connectors.kafka.read_stats import ReadTally
from ethereal_kafka.connectors.table_pins import (
    PINS_COLUMN,
    TablePinner,
    add_pins_column,
    decode_tables,
    encode_pins,
    pins_of,
    topics_only,
)
from ethereal_kafka.errors import ConfigError
from ethereal_kafka.paths import write_durably

#: The row limit of a source bounded by bytes only (the byte budget then sets each epoch's bound).
_UNLIMITED_ROWS = 2**31 - 1


def initial_offsets_file(config: KafkaSourceConfig) -> str:
    """The name of the file pinning a source's initial offsets in `<checkpoint>/sources/ethereal-kafka/`: one per
    source and consumer group, so queries reading one source with their own groups pin their own."""
    return f"initial-offsets-{config.name}@{config.group}.json"


def hold_path(config: KafkaSourceConfig) -> Path | None:
    """The file that, while it exists, makes the source admit no record (`KafkaStreamReader.latestOffset`): a
    restore into a query with event time holds its first epoch to the carried event time alone
    (`runtime.savepoint`). One per source and consumer group, beside the pinned initial offsets; None without a
    checkpoint location."""
    if not config.checkpoint_location:
        return None
    return Path(config.checkpoint_location) / "ethereal-kafka" / f"hold-{config.name}@{config.group}"


def pinned_initial_offsets(config: KafkaSourceConfig) -> Offsets | None:
    """The initial offsets a query's first epoch started from, as the source pinned them in its checkpoint (see
    `KafkaStreamReader.initialOffset`); None when not pinned (no checkpoint location, or not yet asked)."""
    if not config.checkpoint_location:
        return None
    pinned = Path(config.checkpoint_location) / "ethereal-kafka" / initial_offsets_file(config)
    try:
        return Offsets.from_json(json.loads(pinned.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return None


@dataclass(frozen=True)
class KafkaInputPartition(InputPartition):
    """One Spark input partition: offsets `[start, until)` of one Kafka partition (and the epoch's table pins)."""

    topic: str
    partition: int
    start: int
    until: int
    pins: str

    def __init__(self, topic: str, partition: int, start: int, until: int, pins: str = "") -> None:
        object.__setattr__(self, "pins", pins)
        object.__setattr__(self, "topic", topic)
        object.__setattr__(self, "partition", partition)
        object.__setattr__(self, "start", start)
        object.__setattr__(self, "until", until)
        object.__setattr__(self, "value", f"{topic}:{partition}:{start}-{until}")


class KafkaDataSource(DataSource):
    """`spark.readStream.format("ethereal-kafka")`: Kafka topics as a stream of Arrow batches."""

    @classmethod
    def name(cls) -> str:
        """The format name Spark knows this source by."""
        return "ethereal-kafka"

    def _properties(self) -> dict[str, str]:
        """The options that are connector properties (a subclass may hold options of its own)."""
        return dict(self.options)

    def _layout(self) -> SourceLayout:
        config = KafkaSourceConfig.from_properties(self._properties(), source="source options")
        return SourceLayout.from_config(config)

    def schema(self) -> StructType:
        """The Kafka columns plus the decoded key/value fields (see `decoding.SourceLayout`), and `__pins` with
        `pin.tables`."""
        layout = self._layout()
        schema = cast(StructType, layout.spark_schema())
        return schema.add(PINS_COLUMN, "string") if layout.config.pin_tables else schema

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """Validate the options and return the micro-batch reader (driver side)."""
        return self.reader_class(self._layout())

    #: The stream reader this source builds; a subclass may name its own (`eos.source` hands dead letters kept
    #: with `dlq.delivery=epoch` to the exactly-once protocol).
    reader_class: type[KafkaStreamReader]


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans epochs on the driver and reads their offset ranges on executors."""

    def __init__(self, layout: SourceLayout) -> None:
        self.layout = layout
        self.config = layout.config
        self._resolver: PositionResolver | None = None
        self._target: dict[TopicPartitionKey, int] | None = None
        self._pinner: TablePinner | None = None

    @property
    def resolver(self) -> PositionResolver:
        """The driver-side position resolver, created on first use (never pickled to executors)."""
        if self._resolver is None:
            self._resolver = PositionResolver(self.config)
        return self._resolver

    def __getstate__(self) -> dict[str, Any]:
        return {
            "layout": self.layout,
            "config": self.config,
            "_resolver": None,
            "_target": None,
            "_pinner": None,
        }

    # -- driver side ---------------------------------------------------------------------------------------------
    def initialOffset(self) -> SourceOffset:
        """Start positions per `starting.offsets` (only for a query without a checkpoint).

        Spark does not log a Python source's initial offset: a query that crashes during its first epoch asks
        again. With `checkpoint.location` set (jobs set it), the first answer is pinned in the checkpoint and
        returned on every later call, so the replayed first epoch reads the same records.
        """
        pinned = self._pinned_initial_path()
        if pinned is not None and pinned.exists():
            return cast(SourceOffset, json.loads(pinned.read_text(encoding="utf-8")))
        offsets = from_flat(self.resolver.initial())
        if pinned is not None:
            # Durable: the first epoch's input ranges (and their digest in the epoch markers) start here.
            write_durably(pinned, json.dumps(offsets))
        return offsets

    def _pinned_initial_path(self) -> Path | None:
        if not self.config.checkpoint_location:
            return None
        return Path(self.config.checkpoint_location) / "ethereal-kafka" / initial_offsets_file(self.config)

    def getDefaultReadLimit(self) -> ReadLimit:
        """`ReadMaxRows` when the source has epoch bounds, or everything available when it has none. Spark asks
        once per query; `latestOffset` applies the bounds as they are at each epoch (the byte budget depends on
        the record size measured so far, the adaptive budget on the epochs measured so far)."""
        if self.config.max_records_per_epoch > 0:
            return ReadMaxRows(self.config.max_records_per_epoch)
        if self.config.max_bytes_per_epoch > 0 or budget_path(self.config) is not None:
            return ReadMaxRows(_UNLIMITED_ROWS)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the end offsets of an `availableNow` run: nothing produced later is read by it."""
        tps = self.resolver.topic_partitions()
        self._target = self.resolver.latest(tps)

    def latestOffset(self, start: SourceOffset, limit: ReadLimit) -> SourceOffset:
        """End offsets of the next epoch: the latest stable offsets, within `limit` (none while `hold_path` exists).

        New partitions appear here (they start at their earliest offset); no partition ever moves backwards.
        """
        begin = to_flat(topics_only(start))
        held = hold_path(self.config)
        if held is not None and held.exists():
            latest = dict(begin)  # a restore's first epoch: the carried event time only
        elif self._target is not None:
            latest = dict(self._target)
        else:
            latest = self.resolver.latest(self.resolver.topic_partitions())
        ends = self.config.ends()
        if ends is not None:  # a shadow run's range: nothing past it, nothing of a partition it does not name
            latest = {tp: min(off, ends.get(tp, 0)) for tp, off in latest.items()}
        latest = {tp: max(off, begin.get(tp, 0)) for tp, off in latest.items()}
        for tp, off in begin.items():
            latest.setdefault(tp, off)
        if isinstance(limit, ReadMaxRows):
            # The byte budget turns into fewer records as the measured record size grows: bound again now.
            bound = records_bound(self.config)
            admitted = self.admitted(limit.max_rows)
            latest = limit_offsets(begin, latest, min(admitted, bound) if bound > 0 else admitted)
        if not self.config.pin_tables:
            return from_flat(latest)
        if self._pinner is None:
            tables = decode_tables(self.config.pin_tables)
            self._pinner = TablePinner(tables, self.config.checkpoint_location)
        return self._pinner.pin(start, from_flat(latest))

    def admitted(self, max_rows: int) -> int:
        """Offsets the next epoch may admit: the posted adaptive budget (when there is one), never more than
        `max_rows`. Read at every planning, so the epoch sizer's latest decision applies to the next epoch."""
        path = budget_path(self.config)
        budget = read_budget(path) if path is not None else None
        return max_rows if budget is None else max(1, min(max_rows, budget))

    def reportLatestOffset(self) -> SourceOffset | None:
        """The latest offsets, for Spark's progress reports (lag)."""
        return from_flat(self.resolver.latest(self.resolver.topic_partitions()))

    def partitions(self, start: SourceOffset, end: SourceOffset) -> Sequence[InputPartition]:
        """One input partition per Kafka partition in `end`, in sorted order, empty ranges included; pure.

        Keeping empty ranges makes Spark partition i of every epoch the i-th partition of `end`, so a
        partition-preserving sink task knows which input partition (and group offset) it owns.
        """
        pins = encode_pins(pins_of(end))
        spans = ranges(topics_only(start), topics_only(end), include_empty=True)
        return [KafkaInputPartition(t, p, a, b, pins) for t, p, a, b in spans]

    def commit(self, end: SourceOffset) -> None:
        """Spark finished `end`; offsets are committed to Kafka by the sink/coordinator, not here."""

    def stop(self) -> None:
        """Release driver-side clients."""
        if self._resolver is not None:
            self._resolver.close()
            self._resolver = None
        if self._pinner is not None:
            self._pinner.close()
            self._pinner = None

    # -- executor side -------------------------------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read one planned range as Arrow batches; runs in a Spark task on an executor."""
        assert isinstance(partition, KafkaInputPartition)
        if partition.until <= partition.start:
            return
        conf = consumer_config(
            self.config.bootstrap_servers,
            f"{self.config.group}.reader",
            self.config.isolation_level,
            self.config.passthrough,
        )
        chunks = read_messages(
            conf,
            partition.topic,
            partition.partition,
            partition.start,
            partition.until,
            self.config.batch_size,
            self.config.read_timeout_ms,
        )
        tally = ReadTally(
            self.config.name, partition.topic, partition.partition, partition.start, partition.until
        )

        def finish(stats: DecodeStats, letters: list[DeadLetter]) -> None:
            if letters:
                self.keep_dead_letters(partition, letters)
            tally.publish(stats.dead_lettered, stats.skipped)
            measured(self.config, tally.records, tally.bytes)

        batches = decode_batches(
            self.layout, (tally.observe(messages_to_batch(chunk)) for chunk in chunks), on_finish=finish
        )
        yield from add_pins_column(batches, partition.pins) if self.config.pin_tables else batches

    def keep_dead_letters(self, partition: KafkaInputPartition, letters: list[DeadLetter]) -> None:
        """Hand on the dead letters the decoder kept for their epoch's commit (`dlq.delivery=epoch`); called on the
        executor once a read of `partition` succeeded.

        Raises:
            ConfigError: this plain source cannot keep them; `dlq.delivery=epoch` needs the exactly-once runner's
                source (`ethereal_kafka.eos.source`), which commits them with their epoch.
        """
        raise ConfigError(
            f"source {self.config.name}: dlq.delivery=epoch keeps dead letters for the exactly-once protocol, "
            "which this source is not registered with; use dlq.delivery=immediate"
        )


KafkaDataSource.reader_class = KafkaStreamReader
