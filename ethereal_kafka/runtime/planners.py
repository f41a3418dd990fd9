"""The data source planners' daemons let go once every query of a start has planned its reads.

Spark plans a query's Python source when the query starts: `create_data_source` when its DataFrame is made and
`plan_data_source_read` in its first epoch (the read function is then cached for the query's life). It runs both
in daemons of their own (PySpark's `pyspark.daemon`, one per planner module) which it keeps for the session's
life, each with its last planner for a minute: ~330 MB of a stateless job's ~1.5 GB, unused after the start.
`PlannerRelease`, an epoch listener of the coordinator, asks the session's fork server (`runtime.fork_server`) to
end them once each query of the start has committed an epoch. A later start (a restart after a failure, or the
test kit's next job in the same session) plans again: Spark finds the daemon gone and starts it again, forked from
the server as before.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

log = logging.getLogger(__name__)


class PlannerRelease:
    """An epoch listener (`CheckpointCoordinator.epoch_listeners`) that calls `release` once, after each of
    `queries` has committed an epoch (what its source planned by then is all it will plan until it starts again).

    `release` returns whether anything was asked to let go (False without a fork server); its failures are the
    coordinator's to log, never an epoch's.
    """

    def __init__(self, queries: Iterable[str], release: Callable[[], bool]) -> None:
        self._waiting = set(queries)
        self._release = release
        self.released = False

    def __call__(self, query: str, record: Any, _tasks: Any) -> None:
        if self.released or record.outcome != "committed":
            return
        self._waiting.discard(query)
        if self._waiting:
            return
        self.released = True
        if self._release():
            log.debug("every query has planned its reads: the data source planners' daemons let go")


def planner_release(queries: Iterable[str]) -> PlannerRelease:
    """A `PlannerRelease` of `queries` that asks this process's fork server (`fork_server.release_planners`)."""
    from ethereal_kafka.runtime.fork_server import release_planners

    return PlannerRelease(queries, release_planners)
