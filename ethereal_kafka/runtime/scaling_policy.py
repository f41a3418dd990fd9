"""The executor scaling policy: pure decisions from what the job's metrics show and the clock passed in.

`decide(settings, state, load, now_ms)` is called by the autoscaler (`runtime.autoscaler`) every
`autoscale.interval.ms` with the load of the last interval; it returns a `Decision` (scale up, scale down or hold,
with the reason in words) and `ScalerState.after` folds an applied decision into the state. No wall clock, no Spark:
unit tests feed series of loads and clocks.

Policies (`autoscale.policy`):
- `lag`: one executor more when the consumer lag is at least `autoscale.scale.up.lag`, one fewer when it is at most
  `autoscale.scale.down.lag`.
- `throughput`: executors follow `ceil(executors x utilisation / autoscale.target.utilization)` (the utilisation is
  the share of the interval the busiest query spent inside epochs), holding within 10 % of the target.
- `latency`: one executor more when the end-to-end latency p99 of the interval reaches
  `autoscale.scale.up.latency.ms`, one fewer when it is at most `autoscale.scale.down.latency.ms` (or when no record
  arrived: an idle job).
Always: never outside `[autoscale.min.executors, autoscale.max.executors]`; a scale-up waits
`autoscale.scale.up.cooldown.ms` after the previous scale-up; a scale-down waits `autoscale.scale.down.cooldown.ms`
after any change (the start included), so a job that just grew is not shrunk by the next quiet interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ethereal_kafka.config.job import JobConfig

SCALE_UP = "scale-up"
SCALE_DOWN = "scale-down"
HOLD = "hold"
#: The throughput policy holds while utilisation is within this fraction of its target.
UTILIZATION_TOLERANCE = 0.1


@dataclass(frozen=True)
class ScalingSettings:
    """The `autoscale.*` settings of a job (see `config.job.JobConfig` for each one's meaning)."""

    policy: str
    min_executors: int
    max_executors: int
    scale_up_lag: int = 10000
    scale_down_lag: int = 1000
    target_utilization: float = 0.75
    scale_up_latency_ms: int = 10000
    scale_down_latency_ms: int = 2000
    scale_up_cooldown_ms: int = 30000
    scale_down_cooldown_ms: int = 120000
    interval_ms: int = 5000

    @classmethod
    def from_job(cls, job: JobConfig) -> ScalingSettings:
        """The policy settings declared in `job`."""
        return cls(
            policy=job.autoscale_policy,
            min_executors=job.autoscale_min_executors,
            max_executors=job.autoscale_max_executors,
            scale_up_lag=job.autoscale_scale_up_lag,
            scale_down_lag=job.autoscale_scale_down_lag,
            target_utilization=job.autoscale_target_utilization,
            scale_up_latency_ms=job.autoscale_scale_up_latency_ms,
            scale_down_latency_ms=job.autoscale_scale_down_latency_ms,
            scale_up_cooldown_ms=job.autoscale_scale_up_cooldown_ms,
            scale_down_cooldown_ms=job.autoscale_scale_down_cooldown_ms,
            interval_ms=job.autoscale_interval_ms,
        )


@dataclass(frozen=True)
class Load:
    """What the policy sees at one evaluation.

    Attributes:
        lag: Total consumer lag in records (as of each query's last planned epoch); None before Spark reported it.
        utilization: Share of the last interval the busiest query spent inside epochs; None on the first evaluation.
        latency_p99_ms: End-to-end latency p99 of the records committed in the last interval; None when none was.
    """

    lag: int | None = None
    utilization: float | None = None
    latency_p99_ms: float | None = None


@dataclass(frozen=True)
class ScalerState:
    """What the policy remembers between evaluations.

    Attributes:
        executors: The executor count the autoscaler last asked for.
        last_up_ms: When it last scaled up (None: never).
        last_change_ms: When it last changed the count, or when it started.
    """

    executors: int
    last_up_ms: int | None
    last_change_ms: int

    def after(self, decision: Decision, now_ms: int) -> ScalerState:
        """The state once `decision` is applied at `now_ms` (a hold changes nothing)."""
        if decision.action == HOLD:
            return self
        up = now_ms if decision.action == SCALE_UP else self.last_up_ms
        return ScalerState(decision.executors_after, up, now_ms)


@dataclass(frozen=True)
class Decision:
    """One evaluation's outcome."""

    action: str
    executors_before: int
    executors_after: int
    reason: str


def decide(settings: ScalingSettings, state: ScalerState, load: Load, now_ms: int) -> Decision:
    """The policy's decision at `now_ms` for `load` (see the module docstring); pure."""
    current = state.executors
    if current < settings.min_executors:
        return Decision(SCALE_UP, current, settings.min_executors, "below autoscale.min.executors")
    if current > settings.max_executors:
        return Decision(SCALE_DOWN, current, settings.max_executors, "above autoscale.max.executors")
    wanted, why = _wanted(settings, current, load)
    if wanted > current:
        if current >= settings.max_executors:
            return Decision(HOLD, current, current, f"{why}; at autoscale.max.executors")
        if state.last_up_ms is not None and now_ms - state.last_up_ms < settings.scale_up_cooldown_ms:
            left = settings.scale_up_cooldown_ms - (now_ms - state.last_up_ms)
            return Decision(HOLD, current, current, f"{why}; scale-up cooldown, {left} ms left")
        return Decision(SCALE_UP, current, min(wanted, settings.max_executors), why)
    if wanted < current:
        if current <= settings.min_executors:
            return Decision(HOLD, current, current, f"{why}; at autoscale.min.executors")
        if now_ms - state.last_change_ms < settings.scale_down_cooldown_ms:
            left = settings.scale_down_cooldown_ms - (now_ms - state.last_change_ms)
            return Decision(HOLD, current, current, f"{why}; scale-down cooldown, {left} ms left")
        return Decision(SCALE_DOWN, current, max(wanted, settings.min_executors), why)
    return Decision(HOLD, current, current, why or "no signal")


def _wanted(settings: ScalingSettings, current: int, load: Load) -> tuple[int, str]:
    """The executor count the policy asks for (before bounds and cooldowns) and why."""
    if settings.policy == "lag":
        if load.lag is None:
            return current, "no lag reported yet"
        if load.lag >= settings.scale_up_lag:
            return current + 1, f"lag {load.lag} >= autoscale.scale.up.lag {settings.scale_up_lag}"
        if load.lag <= settings.scale_down_lag:
            return current - 1, f"lag {load.lag} <= autoscale.scale.down.lag {settings.scale_down_lag}"
        return current, f"lag {load.lag} between the thresholds"
    if settings.policy == "throughput":
        if load.utilization is None:
            return current, "no utilisation measured yet"
        ratio = load.utilization / settings.target_utilization
        wanted = current
        if abs(ratio - 1) > UTILIZATION_TOLERANCE:
            # Like Kubernetes' HPA; the epsilon keeps 2 x 0.75 / 0.75 from rounding up to 3.
            wanted = max(1, math.ceil(current * ratio - 1e-9))
        text = f"utilisation {load.utilization:.2f} (target {settings.target_utilization:.2f})"
        return wanted, f"{text}: {wanted} executor(s) wanted"
    if settings.policy == "latency":
        p99 = load.latency_p99_ms
        if p99 is None:
            return current - 1, "no record committed in the interval (idle)"
        text = f"end-to-end latency p99 {p99:.0f} ms"
        if p99 >= settings.scale_up_latency_ms:
            return current + 1, f"{text} >= autoscale.scale.up.latency.ms {settings.scale_up_latency_ms}"
        if p99 <= settings.scale_down_latency_ms:
            return current - 1, f"{text} <= autoscale.scale.down.latency.ms {settings.scale_down_latency_ms}"
        return current, f"{text} between the thresholds"
    return current, ""
