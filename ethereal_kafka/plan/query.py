"""A streaming query of a job, as every layer above the plan sees it: its name, what it reads and writes, and how
the exactly-once protocol writes it (its layout).

The plan makes one `Query` per Spark streaming query (`plan.compiler`, or `runtime.pipeline` for DataFrame
pipelines); the runner starts it with its DataFrame, the coordinator writes its epochs (`eos`), the metrics and the
web UI name its figures by it. A `Query` is a frozen, picklable value; its DataFrame travels beside it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from ethereal_kafka.config.connectors import KafkaSinkConfig, KafkaSourceConfig

if TYPE_CHECKING:
    from ethereal_kafka.plan.chaining import ChainedPipeline


class Layout(StrEnum):
    """How a query's rows reach its sink tasks (`plan.classify`), which decides how its epochs commit (`eos`)."""

    #: No exchange, no state, one source: Spark partition i of every epoch is input partition i, so each sink task
    #: commits its input offsets and its output in one transaction.
    PARTITION_PRESERVING = "partition-preserving"
    #: Anything else: sink tasks commit progress markers, and phase two commits the input offsets once every task
    #: has committed.
    SHUFFLING = "shuffling"


@dataclass(frozen=True)
class Query:
    """One streaming query.

    Attributes:
        name: Fixed for the job's life: names the query's checkpoint folder, transactional ids and progress group
            (a query writing one sink is named after it; several: their names joined with `+`).
        sinks: The sink connectors it writes, in the order rows index them (`__sink`) when there are several; each
            connector's `key.column`/`value.column` name this query's columns.
        sources: The source connectors as this query reads them (several queries reading one topic each use their
            own consumer group); empty = every source of the job as given.
        layout: Partition-preserving or shuffling (`plan.classify`).
        stateful: The query keeps operator state between epochs (its Spark checkpoint holds it).
        output_mode: Spark's output mode.
        spark_conf: Session settings the query must start with (fixed in its checkpoint from the first start), e.g.
            `spark.sql.streaming.multipleWatermarkPolicy=max` when an input declares `with_idleness`.
        late_sinks: The sinks fed by a window's late-data side output (the metrics count their records as late).
        carried_event_time: `(node id, carry key, bound ms)` of the watermark nodes whose inputs' event time the
            query carries across restarts (`plan.event_time`); after each epoch's write the runner posts their
            observed maxima.
        state_store: The state store `state.backend=auto` gives the query when it first starts (`rocksdb` or
            `memory`, `plan.classify`); Spark keeps a checkpoint's store on every restart.
        chain: The query as one chained function per task (`plan.chaining`), run by the exactly-once source's read
            task (`eos.chained`); None when the query runs as its Spark plan.
    """

    name: str
    sinks: tuple[KafkaSinkConfig, ...]
    sources: tuple[KafkaSourceConfig, ...] = ()
    layout: Layout = Layout.SHUFFLING
    stateful: bool = False
    output_mode: str = "append"
    spark_conf: Mapping[str, str] = field(default_factory=dict)
    late_sinks: tuple[str, ...] = ()
    carried_event_time: tuple[tuple[int, str, int], ...] = ()
    state_store: str = "rocksdb"
    chain: ChainedPipeline | None = field(default=None, compare=False, repr=False)
