"""Posting the event time a query's watermarked inputs read, epoch by epoch (see `connectors.event_time`).

`CarryEventTime` wraps a query's `foreachBatch` function. After the epoch's write returned (its output committed,
Spark's commit not yet written) it reads the epoch's observed maxima from the query's last execution (Spark merges
the tasks' metrics on the driver before an action returns; `runtime.operator_counter` reads its SQL metrics the same
way) and posts them, merged with the maxima of the epochs before, in the query's Spark checkpoint folder. Spark plans
the next epoch only after this returns, so the carrier source always finds the maxima of the last committed epoch.

Unlike the epoch annotators (figures for people), a failure here fails the epoch: a next epoch planned without the
maxima would, after a restart, resume with the wrong watermark. The epoch's output is already committed, so the
retry writes nothing twice.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ethereal_kafka.connectors.event_time import (
    EventTimeError,
    maxima_path,
    observed_name,
    post_maxima,
    read_maxima,
)
from ethereal_kafka.runtime.spark_progress import streaming_query

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


class CarryEventTime:
    """`foreachBatch` function: `write(batch, epoch)`, then the epoch's event-time maxima posted.

    Args:
        write: The query's epoch writer.
        spark: The session the query runs on.
        query_name: The Spark query's name (`{app_id}-{query}`), to find its execution.
        checkpoint: The query's Spark checkpoint folder.
        nodes: The carried watermark nodes, `(node id, carry key, bound ms)` (`Query.carried_event_time`).
    """

    def __init__(
        self,
        write: Callable[[DataFrame, int], None],
        spark: SparkSession,
        query_name: str,
        checkpoint: str,
        nodes: Sequence[tuple[int, str, int]],
    ) -> None:
        self.write = write
        self._spark = spark
        self._query_name = query_name
        self.path: Path = maxima_path(checkpoint)
        self.nodes = tuple(nodes)
        self._handle: Any = None

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        self.write(batch, batch_id)
        maxima = read_maxima(self.path, batch_id - 1)
        for node, value in self.observed(batch_id).items():
            maxima[node] = max(value, maxima.get(node, value))
        post_maxima(self.path, batch_id, maxima)

    def observed(self, batch_id: int) -> dict[str, int]:
        """Carry key → largest event time (µs) the epoch's execution observed (carrier rows included); nodes whose
        input had no row with an event time (or an epoch whose plan did not run) are left out.

        Raises:
            EventTimeError: the query's execution of epoch `batch_id` cannot be found.
        """
        execution = self._execution()
        if execution is None or int(execution.currentBatchId()) != batch_id:
            raise EventTimeError(
                f"query {self._query_name}: cannot read the event time of epoch {batch_id} (no execution of it)"
            )
        metrics = execution.observedMetrics()
        found: dict[str, int] = {}
        for node, key, _ in self.nodes:
            option = metrics.get(observed_name(node))
            if option.isDefined():
                value = option.get().get(0)
                if value is not None:
                    found[key] = int(value)
        return found

    def _execution(self) -> Any:
        """The JVM `IncrementalExecution` of the query's current epoch (its `StreamExecution` looked up once)."""
        if self._handle is None:
            self._handle = streaming_query(self._spark, self._query_name)
        return self._handle.lastExecution() if self._handle is not None else None
