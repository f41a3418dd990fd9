"""`checkpoint.shadows.production_range`: where a shadow run's input and production's output of it start and end,
from the app's history; and `runtime.output_diff.compare`, the per-key comparison."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from ethereal_kafka.checkpoint.history import EpochRecord
from ethereal_kafka.checkpoint.savepoints import Manifest, QueryPosition
from ethereal_kafka.checkpoint.shadows import (
    OutputRange,
    ShadowError,
    ShadowRecord,
    parse_until,
    production_range,
)
from ethereal_kafka.connectors.kafka.topics import ReadRecord
from ethereal_kafka.runtime.output_diff import compare, render

APP = "shop"


def _epoch(
    epoch: int,
    start: int,
    end: int,
    out: int | None,
    checkpoint: str = "c1",
    query: str = "q",
    outcome: str = "committed",
    topic: str = "out",
) -> EpochRecord:
    return EpochRecord(
        app_id=APP,
        checkpoint_id=checkpoint,
        epoch=epoch,
        mode="shuffling",
        start_offsets={"in": {"0": start}},
        end_offsets={"in": {"0": end}},
        records_in=end - start,
        records_out=0,
        tasks=2,
        skipped_tasks=0,
        started_ms=0,
        duration_ms=1,
        outcome=outcome,
        query=query,
        output_ends={topic: {"0": out, "1": out + 1}} if out is not None else {},
    )


def _manifest(epoch: int, offset: int, output: Mapping[str, Mapping[str, int]] | None = None) -> Manifest:
    position = QueryPosition("q", "c1", epoch, None, [["in", 0, offset]])
    return Manifest("sp", APP, 1, "job", (position,), (), output or {})


def test_a_range_runs_from_the_savepoint_to_the_newest_committed_epoch() -> None:
    history = [
        _epoch(0, 0, 10, 5),
        _epoch(1, 10, 20, 9),  # the savepoint's epoch
        _epoch(2, 20, 30, None, outcome="failed"),
        _epoch(2, 20, 30, 14),
        _epoch(3, 30, 35, 20),
    ]
    found = production_range(APP, history, _manifest(1, 20), None)
    assert found.input_starts == {("in", 0): 20} and found.input_ends == {("in", 0): 35}
    assert found.output_starts == {"out": {"0": 9, "1": 10}}
    assert found.output_ends == {"out": {"0": 20, "1": 21}}
    assert found.epochs == {"q": "c1:3"} and found.writers == {"out": ["q"]}


def test_the_savepoint_gives_the_output_start_an_older_history_lacks() -> None:
    history = [_epoch(1, 10, 20, None), _epoch(2, 20, 30, 14)]
    found = production_range(APP, history, _manifest(1, 20, {"out": {"0": 8, "1": 9}}), None)
    assert found.output_starts == {"out": {"0": 8, "1": 9}}
    with pytest.raises(ShadowError, match="does not say where the output"):
        production_range(APP, history, _manifest(1, 20), None)


def test_a_restore_from_the_savepoint_starts_the_range_in_the_new_checkpoint() -> None:
    """Production ran past the savepoint, was restored from it (a new checkpoint whose epoch 0 holds and reads
    nothing), and ran on: the range is the restored run's, its output after the hold epoch."""
    history = [
        _epoch(1, 10, 20, 9),
        _epoch(2, 20, 30, 14),  # read past the savepoint, then rewound by the restore
        _epoch(0, 20, 20, 16, checkpoint="c2"),
        _epoch(1, 20, 30, 22, checkpoint="c2"),
        _epoch(2, 30, 40, 25, checkpoint="c2"),
    ]
    found = production_range(APP, history, _manifest(1, 20), None)
    assert found.output_starts == {"out": {"0": 16, "1": 17}}
    assert found.output_ends == {"out": {"0": 25, "1": 26}} and found.epochs == {"q": "c2:2"}


def test_until_takes_the_end_of_a_committed_epoch_only() -> None:
    history = [_epoch(1, 10, 20, 9), _epoch(2, 20, 30, 14), _epoch(3, 30, 40, 18)]
    found = production_range(APP, history, _manifest(1, 20), parse_until("in:0:30"))
    assert found.input_ends == {("in", 0): 30} and found.output_ends == {"out": {"0": 14, "1": 15}}
    with pytest.raises(ShadowError, match=r"no committed epoch ended at in:0:35; --until takes"):
        production_range(APP, history, _manifest(1, 20), parse_until("in:0:35"))
    with pytest.raises(ShadowError, match="nothing to shadow"):
        production_range(APP, history, _manifest(1, 20), parse_until("in:0:20"))
    with pytest.raises(ShadowError, match="expected now or topic:partition:offset"):
        parse_until("in:0")


def test_a_rewind_inside_the_range_is_refused() -> None:
    """Production replayed from an earlier offset after the savepoint: its output holds part of the range twice."""
    history = [_epoch(1, 10, 20, 9), _epoch(2, 20, 30, 14), _epoch(3, 25, 40, 20)]
    with pytest.raises(ShadowError, match="does not go back to the savepoint in one run"):
        production_range(APP, history, _manifest(1, 20), None)


def test_another_apps_savepoint_and_queries_at_different_offsets_are_refused() -> None:
    with pytest.raises(ShadowError, match="is of app shop, not other"):
        production_range("other", [_epoch(1, 10, 20, 9)], _manifest(1, 20), None)
    second = QueryPosition("r", "c9", 4, None, [["in", 0, 20]])
    manifest = Manifest("sp", APP, 1, "job", (*_manifest(1, 20).queries, second), (), {"o2": {"0": 1}})
    history = [
        _epoch(1, 10, 20, 9),
        _epoch(2, 20, 30, 14),
        _epoch(4, 10, 20, 1, checkpoint="c9", query="r", topic="o2"),
        _epoch(5, 20, 25, 3, checkpoint="c9", query="r", topic="o2"),
    ]
    with pytest.raises(
        ShadowError, match=r"query r and another query end in:0 at different offsets \(30 and 25\)"
    ):
        production_range(APP, history, manifest, None)


def test_a_shadow_record_reads_back_equal() -> None:
    record = ShadowRecord(
        APP, "s", "shop.shadow-s", "/sp", "job", {"in": {"0": 1}}, {"in": {"0": 5}}, {"q": "c1:2"},
        (OutputRange("out", "out.s", {"0": 1}, {"0": 4}, ("q",)),), 3, 7, ("new.s",),
    )  # fmt: skip
    assert ShadowRecord.from_json(record.to_json(), "x") == record


def _read(key: str | None, value: str, offset: int = 0) -> ReadRecord:
    return ReadRecord("t", 0, offset, None if key is None else key.encode(), value.encode(), 0, ())


def test_compare_finds_changed_added_and_removed_keys_in_order() -> None:
    production = [_read("a", "1"), _read("b", "1"), _read("a", "2"), _read("c", "1"), _read(None, "n")]
    shadow = [_read("a", "1"), _read("a", "2"), _read("b", "9"), _read("d", "1"), _read(None, "n")]
    same, differences = compare(production, shadow)
    assert same == 2  # a, and the records without a key
    assert [(d.key, d.how, d.index) for d in differences] == [
        (b"b", "changed", 0),
        (b"c", "removed", 0),
        (b"d", "added", 0),
    ]
    # Order within a key counts; a longer run of records differs where the shorter one ends.
    _, reordered = compare([_read("a", "1"), _read("a", "2")], [_read("a", "2"), _read("a", "1")])
    assert [(d.how, d.index) for d in reordered] == [("changed", 0)]
    _, longer = compare([_read("a", "1")], [_read("a", "1"), _read("a", "2")])
    assert [(d.how, d.index, d.production, d.shadow) for d in longer] == [("changed", 1, None, (b"2", ()))]


def test_render_says_what_differs_one_line_each() -> None:
    from ethereal_kafka.runtime.output_diff import TopicDiff

    _, differences = compare([_read("b", "1")], [_read("b", "9")])
    lines = render([TopicDiff("out", "out.s", 1, 1, 1, 0, differences)], show=5)
    assert lines == [
        "out vs out.s: 1 production record(s), 1 shadow record(s); 1 key(s): 0 same, 1 changed, 0 added, 0 removed",
        "  changed key 'b': record 1: production '1', shadow '9'",
    ]
