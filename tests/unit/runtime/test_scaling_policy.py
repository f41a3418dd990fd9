"""The executor scaling policy: decisions from lag / utilisation / latency series and clocks passed in."""

from __future__ import annotations

from ethereal_kafka.runtime.scaling_policy import (
    HOLD,
    SCALE_DOWN,
    SCALE_UP,
    Decision,
    Load,
    ScalerState,
    ScalingSettings,
    decide,
)

LAG = ScalingSettings(
    policy="lag",
    min_executors=1,
    max_executors=3,
    scale_up_lag=1000,
    scale_down_lag=10,
    scale_up_cooldown_ms=5_000,
    scale_down_cooldown_ms=20_000,
    interval_ms=1000,
)


def run(settings: ScalingSettings, loads: list[Load], start_executors: int = 1) -> list[tuple[int, Decision]]:
    """Evaluate `loads` one per second from t=1s (the start at t=0); the scale actions with their times."""
    state = ScalerState(start_executors, None, 0)
    actions = []
    for i, load in enumerate(loads, start=1):
        now = i * 1000
        decision = decide(settings, state, load, now)
        state = state.after(decision, now)
        if decision.action != HOLD:
            actions.append((now, decision))
    return actions


def test_lag_spike_scales_out_one_step_per_cooldown_never_past_the_maximum() -> None:
    actions = run(LAG, [Load(lag=50_000)] * 30)
    assert [(t, d.executors_before, d.executors_after) for t, d in actions] == [(1000, 1, 2), (6000, 2, 3)]
    assert all(
        d.action == SCALE_UP and "lag 50000 >= autoscale.scale.up.lag 1000" in d.reason for _, d in actions
    )
    state = ScalerState(3, 6000, 6000)
    held = decide(LAG, state, Load(lag=50_000), 40_000)
    assert (held.action, held.executors_after) == (HOLD, 3) and "at autoscale.max.executors" in held.reason


def test_lag_back_to_zero_scales_in_only_after_the_cooldown_since_the_last_change() -> None:
    loads = [Load(lag=50_000)] * 2 + [Load(lag=0)] * 60
    actions = run(LAG, loads)
    ups = [t for t, d in actions if d.action == SCALE_UP]
    downs = [(t, d.executors_before, d.executors_after) for t, d in actions if d.action == SCALE_DOWN]
    assert ups == [1000]
    # Scaled up at 1 s: the first scale-down waits 20 s, the next another 20 s; then the minimum holds.
    assert downs == [(21_000, 2, 1)]
    state = ScalerState(2, 1000, 1000)
    waiting = decide(LAG, state, Load(lag=0), 15_000)
    assert waiting.action == HOLD and "scale-down cooldown, 6000 ms left" in waiting.reason
    at_min = decide(LAG, ScalerState(1, None, 0), Load(lag=0), 99_000)
    assert at_min.action == HOLD and "at autoscale.min.executors" in at_min.reason


def test_lag_between_the_thresholds_or_unknown_holds() -> None:
    state = ScalerState(2, None, 0)
    assert decide(LAG, state, Load(lag=500), 60_000).reason == "lag 500 between the thresholds"
    assert decide(LAG, state, Load(), 60_000).reason == "no lag reported yet"


def test_bounds_are_restored_first_without_cooldown() -> None:
    assert decide(LAG, ScalerState(0, None, 0), Load(lag=0), 1).executors_after == 1
    assert decide(LAG, ScalerState(5, 0, 0), Load(lag=99_999), 1).executors_after == 3


def test_throughput_follows_utilisation_over_target_with_a_tolerance() -> None:
    settings = ScalingSettings(
        policy="throughput",
        min_executors=1,
        max_executors=8,
        target_utilization=0.5,
        scale_up_cooldown_ms=0,
        scale_down_cooldown_ms=0,
    )
    state = ScalerState(2, None, 0)
    assert decide(settings, state, Load(utilization=1.0), 1).executors_after == 4
    assert decide(settings, state, Load(utilization=0.52), 1).action == HOLD
    assert decide(settings, state, Load(utilization=0.1), 1).executors_after == 1
    assert decide(settings, state, Load(utilization=0.75), 1).executors_after == 3
    assert decide(settings, ScalerState(4, None, 0), Load(utilization=1.0), 1).executors_after == 8
    assert decide(settings, state, Load(lag=10**9), 1).reason == "no utilisation measured yet"


def test_latency_policy_and_an_idle_job() -> None:
    settings = ScalingSettings(
        policy="latency",
        min_executors=1,
        max_executors=4,
        scale_up_latency_ms=5000,
        scale_down_latency_ms=1000,
        scale_up_cooldown_ms=0,
        scale_down_cooldown_ms=0,
    )
    state = ScalerState(2, None, 0)
    assert decide(settings, state, Load(latency_p99_ms=10_000), 1).executors_after == 3
    assert decide(settings, state, Load(latency_p99_ms=2500), 1).action == HOLD
    assert decide(settings, state, Load(latency_p99_ms=500), 1).executors_after == 1
    idle = decide(settings, state, Load(), 1)
    assert (idle.action, idle.executors_after) == (SCALE_DOWN, 1) and "idle" in idle.reason


def test_policy_off_never_acts() -> None:
    off = ScalingSettings(policy="off", min_executors=1, max_executors=4)
    assert decide(off, ScalerState(2, None, 0), Load(lag=10**9), 10**9) == Decision(HOLD, 2, 2, "no signal")
