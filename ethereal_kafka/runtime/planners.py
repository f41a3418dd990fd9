"""The data source planners' daemons let go once every query of a start has planned its reads.

Spark plans a query's Python source when the query starts: `create_data_source` when its DataFrame is made and
`plan_data_source_read` when it plans its first epoch (the read function is then cached for the query's life),
before its `foreachBatch` function runs (Spark's `ForeachBatchSink` hands that function a batch already planned).
It runs both in daemons of their own (PySpark's `pyspark.daemon`, one per planner module) which it keeps for the
session's life, each with its last planner for a minute: ~330 MB of a stateless job's ~1.5 GB, unused after the
start. `PlannerRelease`, told by the coordinator when a query's writer begins an epoch, asks the session's fork
server (`runtime.fork_server`) to end them once each query of the start has begun one, before the first epoch's
tasks start their Python workers. A later start (a restart after a failure, or the
test kit's next job in the same session) plans again: Spark finds the daemon gone and starts it again, forked from
the server as before.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

log = logging.getLogger(__name__)


class PlannerRelease:
    """An epoch-begin listener (`CheckpointCoordinator.epoch_begin_listeners`) that calls `release` once, when each
    of `queries` has begun an epoch (what its sources planned by then is all they plan until the query starts
    again).

    `release` returns whether anything was asked to let go (False without a fork server); its failures are the
    coordinator's to log, never an epoch's.
    """

    def __init__(self, queries: Iterable[str], release: Callable[[], bool]) -> None:
        self._waiting = set(queries)
        self._release = release
        self.released = False

    def __call__(self, query: str, _epoch: int) -> None:
        if self.released:
            return
        self._waiting.discard(query)
        if self._waiting:
            return
        self.released = True
        if self._release():
            log.debug("every query has planned its reads: the data source planners' daemons are let go")


def planner_release(queries: Iterable[str]) -> PlannerRelease:
    """A `PlannerRelease` of `queries` that asks this process's fork server (`fork_server.release_planners`)."""
    from ethereal_kafka.runtime.fork_server import release_planners

    return PlannerRelease(queries, release_planners)
