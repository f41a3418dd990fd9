"""DataStream jobs that the kill tests run as one process: each SIGKILL lands in every query of the job at once."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tests.integration.keyed_jobs import slot_timers
from tests.integration.pipelines_api import counts_two_ways

if TYPE_CHECKING:
    from ethereal_kafka.api.environment import StreamExecutionEnvironment


def timers_and_two_sinks(env: StreamExecutionEnvironment) -> None:
    """Two queries: `keyed_jobs.slot_timers` (keyed state and event-time timers, source `events`, sinks `out` and
    `cancelled`) and `pipelines_api.counts_two_ways` (a window written to two sinks by one query, source `lines`,
    sinks `counts` and `flat`)."""
    slot_timers(env)
    counts_two_ways(env)
