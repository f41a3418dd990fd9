"""The framework window logic for one key (`plan.operators.window_logic`): assignment, merging, triggers, lateness."""

from __future__ import annotations

from typing import Any

import pytest

from ethereal_kafka.api.errors import GraphError
from ethereal_kafka.api.windows import (
    ContinuousEventTimeTrigger,
    CountTrigger,
    CountWindows,
    EventTimeSessionWindows,
    EventTimeTrigger,
    GlobalWindows,
    PurgingTrigger,
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
)
from ethereal_kafka.plan.operators.window_logic import GLOBAL, KeyWindows, Pane, WindowSpec


class Values:
    """Contents: the list of added values (merge concatenates)."""

    def empty(self) -> list[Any]:
        return []

    def add(self, contents: list[Any], element: dict[str, Any], order: tuple[int, int, int]) -> list[Any]:
        return [*contents, element["v"]]

    def merge(self, a: list[Any], b: list[Any]) -> list[Any]:
        return a + b


def make(assigner: Any, trigger: Any = None, lateness: int = 0) -> tuple[KeyWindows, list[tuple[Any, ...]]]:
    fired: list[tuple[Any, ...]] = []
    spec = WindowSpec.build(assigner, trigger, lateness, False, "window#1")

    def fire(pane: Pane, late: bool) -> None:
        fired.append((pane.start, pane.end, list(pane.contents), late))

    return KeyWindows(spec, Values(), fire), fired


def add(windows: KeyWindows, ts: int, value: Any, watermark: int, offset: int = 0) -> bool:
    return windows.add({"v": value}, (ts, 0, offset), watermark)


def test_tumbling_fires_once_when_the_watermark_reaches_the_end() -> None:
    windows, fired = make(TumblingEventTimeWindows.of(10))
    assert add(windows, 3, "a", 0) and add(windows, 12, "b", 0)
    windows.advance(9)
    assert fired == []
    windows.advance(10)
    windows.advance(10)  # Spark's timers call it again after the rows: nothing new
    assert fired == [(0, 10, ["a"], False)]
    assert (0, 10) in windows.removed and set(windows.panes) == {(10, 20)}
    assert windows.timers(10) == {20}


def test_lateness_keeps_the_window_and_each_late_element_fires_it_again() -> None:
    windows, fired = make(TumblingEventTimeWindows.of(10), lateness=5)
    add(windows, 1, "a", 0)
    windows.advance(12)
    assert add(windows, 2, "b", 12) and add(windows, 3, "c", 12)
    assert fired == [(0, 10, ["a"], False), (0, 10, ["a", "b"], True), (0, 10, ["a", "b", "c"], True)]
    assert windows.timers(12) == {15}
    windows.advance(15)
    assert not windows.panes
    assert not add(windows, 4, "late", 15)  # end + lateness <= W: late, not added
    assert len(fired) == 3


def test_a_late_element_for_a_window_that_never_existed_fires_it_within_lateness() -> None:
    windows, fired = make(TumblingEventTimeWindows.of(10), lateness=5)
    assert add(windows, 7, "x", 13)
    assert fired == [(0, 10, ["x"], True)]
    assert not add(windows, 7, "y", 15)


def test_sliding_windows_hold_an_element_in_size_over_slide_windows() -> None:
    windows, fired = make(SlidingEventTimeWindows.of(10, 5))
    add(windows, 7, "a", 0)
    assert sorted(windows.panes) == [(0, 10), (5, 15)]
    windows.advance(15)
    assert [f[:2] for f in fired] == [(0, 10), (5, 15)]


def test_sliding_element_is_late_only_when_every_window_is_gone() -> None:
    windows, _ = make(SlidingEventTimeWindows.of(10, 5))
    assert add(windows, 7, "a", 10)  # (0, 10) is gone, (5, 15) still open
    assert sorted(windows.panes) == [(5, 15)]
    assert not add(windows, 7, "b", 15)


def test_sessions_merge_overlapping_and_touching_windows() -> None:
    windows, fired = make(EventTimeSessionWindows.with_gap(10))
    add(windows, 0, "a", 0)
    add(windows, 30, "c", 0)
    assert sorted(windows.panes) == [(0, 10), (30, 40)]
    add(windows, 20, "b", 0)  # [20, 30) touches [30, 40)
    assert sorted(windows.panes) == [(0, 10), (20, 40)]
    add(windows, 10, "bridge", 0)  # [10, 20) touches both neighbours
    assert sorted(windows.panes) == [(0, 40)]
    assert windows.panes[(0, 40)].contents == ["a", "c", "b", "bridge"]  # merged by start, then added
    windows.advance(40)
    assert fired == [(0, 40, ["a", "c", "b", "bridge"], False)]


def test_session_lateness_is_judged_on_the_merged_session() -> None:
    windows, fired = make(EventTimeSessionWindows.with_gap(10), lateness=0)
    add(windows, 100, "a", 0)
    add(windows, 105, "b", 0)
    # W = 112: the element's own session [101, 111) is over, but it joins the open session [100, 115).
    assert add(windows, 101, "c", 112)
    assert add(windows, 90, "d", 112)  # [90, 100) touches [100, 115): merged [90, 115) is still open
    assert sorted(windows.panes) == [(90, 115)]
    assert not add(windows, 70, "e", 112)  # [70, 80) touches nothing and ended: late
    assert fired == []


def test_session_max_length_caps_and_splits() -> None:
    windows, _ = make(EventTimeSessionWindows.with_gap(10).with_max_length(25))
    for ts in (0, 8, 16):
        add(windows, ts, ts, 0)
    assert sorted(windows.panes) == [(0, 25)]  # 16 + 10 = 26 capped at 0 + 25
    add(windows, 24, 24, 0)  # before start + max length: joins, the end stays capped
    assert sorted(windows.panes) == [(0, 25)]
    add(windows, 25, 25, 0)  # at start + max length: a new session, although it touches
    assert sorted(windows.panes) == [(0, 25), (25, 35)]


def test_session_max_length_merges_a_bridge_only_while_it_fits() -> None:
    fits, _ = make(EventTimeSessionWindows.with_gap(10).with_max_length(30))
    add(fits, 0, "a", 0)
    add(fits, 18, "b", 0)
    add(fits, 9, "bridge", 0)  # [9, 19) overlaps both; every element stays before 0 + 30
    assert sorted(fits.panes) == [(0, 28)]
    assert fits.panes[(0, 28)].contents == ["a", "b", "bridge"]
    refused, _ = make(EventTimeSessionWindows.with_gap(10).with_max_length(20))
    add(refused, 0, "a", 0)
    add(refused, 20, "b", 0)
    add(refused, 10, "bridge", 0)  # [10, 20) touches both; the element at 20 would be at 0 + 20: left out
    assert sorted(refused.panes) == [(0, 20), (20, 30)]
    assert refused.panes[(0, 20)].contents == ["a", "bridge"]


def test_count_trigger_on_a_global_window_fires_every_n_and_keeps_accumulating() -> None:
    windows, fired = make(GlobalWindows.create(), CountTrigger.of(2))
    for i in range(5):
        add(windows, i, i, 0)
    assert fired == [(0, 0, [0, 1], False), (0, 0, [0, 1, 2, 3], False)]
    assert windows.timers(0) == set()


def test_purging_count_trigger_clears_after_each_firing() -> None:
    windows, fired = make(GlobalWindows.create(), PurgingTrigger.of(CountTrigger.of(2)))
    for i in range(5):
        add(windows, i, i, 0)
    assert fired == [(0, 0, [0, 1], False), (0, 0, [2, 3], False)]
    assert windows.panes[GLOBAL].contents == [4]


def test_tumbling_count_windows_are_purging_count_triggers() -> None:
    windows, fired = make(CountWindows(3))
    for i in range(7):
        add(windows, 100 - i, i, 0)
    assert [f[2] for f in fired] == [[0, 1, 2], [3, 4, 5]]


def test_sliding_count_windows_keep_the_last_size_elements() -> None:
    windows, fired = make(CountWindows(3, 2))
    for i in range(7):
        add(windows, i, i, 0)
    assert [f[2] for f in fired] == [[0, 1], [1, 2, 3], [3, 4, 5]]


def test_count_trigger_on_time_windows_never_fires_at_the_end() -> None:
    windows, fired = make(TumblingEventTimeWindows.of(10), CountTrigger.of(2), lateness=5)
    add(windows, 1, "a", 0)
    windows.advance(12)
    assert fired == []
    assert windows.timers(12) == {15}  # only the cleanup
    add(windows, 2, "b", 12)
    assert fired == [(0, 10, ["a", "b"], False)]
    windows.advance(15)
    assert not windows.panes


def test_continuous_trigger_fires_once_per_epoch_for_passed_points_and_at_the_end() -> None:
    windows, fired = make(TumblingEventTimeWindows.of(100), ContinuousEventTimeTrigger.of(20))
    add(windows, 5, "a", 0)
    assert windows.timers(0) == {20, 100}
    windows.advance(19)
    assert fired == []
    windows.advance(65)  # passed 20, 40 and 60: one firing
    assert fired == [(0, 100, ["a"], False)]
    assert windows.timers(65) == {80, 100}
    add(windows, 70, "b", 65)
    windows.advance(100)  # 80 passed too, but the end firing covers it
    assert fired == [(0, 100, ["a"], False), (0, 100, ["a", "b"], False)]


def test_continuous_trigger_on_a_global_window() -> None:
    windows, fired = make(GlobalWindows.create(), PurgingTrigger.of(ContinuousEventTimeTrigger.of(10)))
    add(windows, 3, "a", 0)
    windows.advance(10)
    add(windows, 12, "b", 10)
    windows.advance(15)
    windows.advance(31)
    assert fired == [(0, 0, ["a"], False), (0, 0, ["b"], False)]
    assert windows.timers(31) == {40}


def test_purging_event_time_trigger_fires_only_late_elements_afterwards() -> None:
    windows, fired = make(TumblingEventTimeWindows.of(10), PurgingTrigger.of(EventTimeTrigger.create()), 10)
    add(windows, 1, "a", 0)
    windows.advance(10)
    add(windows, 2, "b", 10)
    assert fired == [(0, 10, ["a"], False), (0, 10, ["b"], True)]


@pytest.mark.parametrize(
    ("assigner", "trigger", "lateness", "late"),
    [
        (GlobalWindows.create(), None, 0, False),
        (GlobalWindows.create(), CountTrigger.of(2), 5, False),
        (CountWindows(3), None, 0, True),
    ],
)
def test_invalid_combinations_are_graph_errors(
    assigner: Any, trigger: Any, lateness: int, late: bool
) -> None:
    with pytest.raises(GraphError, match="window#1"):
        WindowSpec.build(assigner, trigger, lateness, late, "window#1")
