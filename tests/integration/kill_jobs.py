"""DataStream jobs that the kill tests run as one process: each SIGKILL lands in every query of the job at once."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ethereal_kafka.examples.eos import three_queries
from tests.integration.connected_jobs import FollowedRuleDetector, Names, limits_and
from tests.integration.keyed_jobs import slot_timers
from tests.integration.pipelines_api import chained_words, counts_two_ways

if TYPE_CHECKING:
    from ethereal_kafka.api.environment import StreamExecutionEnvironment

#: The connected queries' names in the shared run (`events` and `out` are `slot_timers`').
CONNECTED = Names(events="payments", limits="limits", out="checked", alerts="alerts")


def timers_two_sinks_and_rules(env: StreamExecutionEnvironment) -> None:
    """Four queries: `keyed_jobs.slot_timers` (keyed state and event-time timers, source `events`, sinks `out` and
    `cancelled`), `pipelines_api.counts_two_ways` (a window written to two sinks by one query, source `lines`, sinks
    `counts` and `flat`), and `connected_jobs.limits_and` with `FollowedRuleDetector` (connected keyed streams with
    shared state, and broadcast state with timers; sources `payments` and `limits`, sinks `checked` and `alerts`)."""
    slot_timers(env)
    counts_two_ways(env)
    limits_and(env, FollowedRuleDetector(), CONNECTED)


def both_apis(env: StreamExecutionEnvironment) -> None:
    """`timers_two_sinks_and_rules`'s four DataStream queries, `pipelines_api.chained_words` (Python functions
    only, chained into its source's read tasks; source `lines` read by a group of its own, sink `words`) and, added
    with `env.add_dataframe_pipeline`, the three DataFrame queries of `examples.eos.three_queries` (sources
    `stateless_in`, `running_total_in`, `windowed_count_in`; sinks `stateless`, `running_total`,
    `windowed_count`): eight queries in one process."""
    timers_two_sinks_and_rules(env)
    chained_words(env)
    env.add_dataframe_pipeline(three_queries)


def rules_only(env: StreamExecutionEnvironment) -> None:
    """The connected queries of `timers_two_sinks_and_rules` alone, under the same names: the run without kills
    the killed one is compared with."""
    limits_and(env, FollowedRuleDetector(), CONNECTED)
