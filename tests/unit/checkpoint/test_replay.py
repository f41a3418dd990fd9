"""Replay planning pieces that need no broker: `--from` parsing, markers, the intent file, the running check."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from ethereal_kafka.checkpoint.apps import RunRecord
from ethereal_kafka.checkpoint.errors import AppRunningError, ReplayError
from ethereal_kafka.eos.committed import CommittedOffset
from ethereal_kafka.eos.errors import RecoveryError
from ethereal_kafka.eos.markers import EpochMarker, ReplayMarker
from ethereal_kafka.eos.replay import (
    APPLIED_FILE,
    INTENT_FILE,
    PartitionReset,
    ReplayIntent,
    ReplayPlan,
    ReplayStart,
    check_stopped,
    checkpoint_dir,
    has_checkpoint,
    moved_aside_path,
    take_replay_intent,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("earliest", ReplayStart("earliest")),
        (" earliest ", ReplayStart("earliest")),
        ("timestamp:1700000000000", ReplayStart("timestamp", timestamp_ms=1_700_000_000_000)),
        ("orders:0:42", ReplayStart("offsets", offsets=(("orders", 0, 42),))),
        (
            "orders.v2:0:42, orders.v2:1:0,pay_ments-x:3:7",
            ReplayStart(
                "offsets", offsets=(("orders.v2", 0, 42), ("orders.v2", 1, 0), ("pay_ments-x", 3, 7))
            ),
        ),
    ],
)
def test_from_forms_parse(text: str, expected: ReplayStart) -> None:
    parsed = ReplayStart.parse(text)
    assert parsed == expected
    assert ReplayStart.parse(parsed.render()) == parsed


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("latest", "expected earliest, timestamp:<ms> or topic:partition:offset"),
        ("timestamp:", "timestamp:<ms> needs epoch milliseconds"),
        ("timestamp:-5", "timestamp:<ms> needs epoch milliseconds"),
        ("timestamp:1.5", "timestamp:<ms> needs epoch milliseconds"),
        ("orders:0", "bad item 'orders:0'"),
        ("orders:0:-1", "bad item 'orders:0:-1'"),
        ("orders:x:1", "bad item 'orders:x:1'"),
        ("orders:0:1,", "bad item ''"),
        ("orders:0:1,orders:0:2", "named twice: orders:0"),
    ],
)
def test_bad_from_is_a_replay_error(text: str, message: str) -> None:
    with pytest.raises(ReplayError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ReplayStart.parse(text)


def test_replay_marker_round_trips_and_is_never_an_epoch_marker() -> None:
    marker = ReplayMarker("shop.orders-v1", 1_700_000_000_123)
    text = marker.render()
    assert ReplayMarker.parse(text) == marker
    assert EpochMarker.parse(text) is None, (
        "a replay marker must make no task skip and no recovery check refuse"
    )
    assert ReplayMarker.parse(EpochMarker("shop", "ckpt", 3).render()) is None
    for foreign in (None, "", "replay@12", ":replay@12", "shop:replay@", "shop:replay@1x"):
        assert ReplayMarker.parse(foreign) is None


def test_plan_starts_group_positions_per_source() -> None:
    plan = ReplayPlan(
        "shop",
        ReplayStart("earliest"),
        (
            PartitionReset("orders", "shop", "o", 0, 10, 0, 10),
            PartitionReset("payments", "shop", "p", 0, None, 3, 5),
            PartitionReset("orders", "shop", "o", 1, 12, 2, 20),
        ),
    )
    assert plan.starts() == {"orders": "o:0:0,o:1:2", "payments": "p:0:3"}
    assert plan.group_starts() == {}


def test_a_savepoint_of_queries_that_stood_apart_starts_each_querys_group_where_it_stood() -> None:
    start = ReplayStart(
        "savepoint",
        offsets=(("o", 1, 4),),
        savepoint="/sp",
        by_query=(("q1", (("o", 0, 10), ("o", 1, 4))), ("x.q1", (("o", 0, 12),))),
    )
    assert start.disputed() == {("o", 0): ["q1", "x.q1"]}
    assert start.given_for("shop.q1") == {("o", 0): 10, ("o", 1): 4}
    assert start.given_for("shop.x.q1") == {("o", 0): 12, ("o", 1): 4}, "the longest query name that fits"
    assert start.given_for("shop") == {("o", 1): 4}
    plan = ReplayPlan(
        "shop",
        start,
        (
            PartitionReset("orders", "shop.q1", "o", 0, 10, 10, 20),
            PartitionReset("orders", "shop.q1", "o", 1, 4, 4, 20),
            PartitionReset("orders", "shop.x.q1", "o", 0, 12, 12, 20),
            PartitionReset("orders", "shop.x.q1", "o", 1, 4, 4, 20),
            PartitionReset("payments", "shop", "p", 0, 3, 3, 5),
        ),
    )
    assert plan.starts() == {"orders": "o:1:4", "payments": "p:0:3"}
    assert plan.group_starts() == {"orders": {"shop.q1": "o:0:10,o:1:4", "shop.x.q1": "o:0:12,o:1:4"}}
    apart = ReplayPlan("shop", start, tuple(r for r in plan.resets if r.partition == 0 and r.topic == "o"))
    assert apart.starts() == {"orders": "group-offsets"}, "no partition agreed: each group has its own start"


def test_moved_aside_path_is_a_sibling_and_never_reused(tmp_path: Path) -> None:
    root = tmp_path / "checkpoint"
    first = moved_aside_path(root, 1_700_000_000_000)
    assert first == tmp_path / "checkpoint.before-replay-20231114T221320Z"
    first.mkdir()
    assert (
        moved_aside_path(root, 1_700_000_000_000) == tmp_path / "checkpoint.before-replay-20231114T221320Z-2"
    )


def test_checkpoint_dir_accepts_local_paths_only() -> None:
    assert checkpoint_dir("/data/ckpt") == Path("/data/ckpt")
    assert checkpoint_dir("file:///data/ckpt") == Path("/data/ckpt")
    with pytest.raises(ReplayError, match="not a local folder"):
        checkpoint_dir("s3a://bucket/ckpt")


def _intent(root: Path, app: str = "shop", starts: object = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    path = root / INTENT_FILE
    path.write_text(
        json.dumps({"app_id": app, "from": "earliest", "starts": starts or {"orders": "o:0:5,o:1:0"}})
    )
    return path


def test_intent_applies_while_the_checkpoint_is_fresh_and_is_retired_after(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    path = _intent(root)
    for _ in range(2):  # a run that crashes before its first epoch applies it again
        assert take_replay_intent(str(root), "shop", fresh=True) == ReplayIntent(
            {"orders": "o:0:5,o:1:0"}, {}
        )
        assert path.exists()
    assert take_replay_intent(str(root), "shop", fresh=False) is None
    assert not path.exists() and (root / APPLIED_FILE).exists()
    assert take_replay_intent(str(root), "shop", fresh=True) is None, "a retired intent never applies again"


def test_intent_of_another_app_or_missing_is_ignored_and_a_broken_one_refuses(tmp_path: Path) -> None:
    assert take_replay_intent(str(tmp_path / "none"), "shop", fresh=True) is None
    assert take_replay_intent("hdfs://nn/ckpt", "shop", fresh=True) is None
    _intent(tmp_path / "other", app="billing")
    assert take_replay_intent(str(tmp_path / "other"), "shop", fresh=True) is None
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / INTENT_FILE).write_text("{not json")
    with pytest.raises(RecoveryError, match="unreadable"):
        take_replay_intent(str(broken), "shop", fresh=True)


def _record(instance: str, host: str | None = None) -> RunRecord:
    return RunRecord("shop", "/jobs/shop.properties", "/ckpt", instance, host or socket.gethostname(), 1, 0)


def test_check_stopped_refuses_only_a_live_claim_of_another_host() -> None:
    import socket
    import time

    from ethereal_kafka.eos.markers import OwnerClaim

    now = int(time.time() * 1000)
    here = socket.gethostname()

    def claim(owner: OwnerClaim, beat_ms: int = now) -> CommittedOffset:
        return CommittedOffset("shop.ethereal-progress", 0, beat_ms, owner.render())

    elsewhere = OwnerClaim("abc123", host="elsewhere", pid=7)
    check_stopped("shop", None, None, force=False)  # never claimed
    check_stopped(
        "shop", _record("abc123"), claim(OwnerClaim("abc123", host=here)), force=False
    )  # lock proves it
    check_stopped("shop", None, claim(elsewhere, beat_ms=now - 60_000), force=False)  # its heartbeat lapsed
    check_stopped("shop", None, claim(OwnerClaim("abc123", host="elsewhere", released=True)), force=False)
    legacy = CommittedOffset("shop.ethereal-progress", 0, now, "abc123")  # a bare instance id, fresh
    for record, found in ((None, claim(elsewhere)), (_record("other"), claim(elsewhere)), (None, legacy)):
        with pytest.raises(AppRunningError, match=r"may still run there.*--force"):
            check_stopped("shop", record, found, force=False)
        check_stopped("shop", record, found, force=True)


def test_only_a_root_with_more_than_an_intent_is_moved(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    assert not has_checkpoint(root)
    _intent(root)
    assert not has_checkpoint(root), "a second replay before any run rewrites the intent in place"
    (root / "out").mkdir()
    assert has_checkpoint(root)


def test_a_restore_from_a_savepoint_the_app_read_past_warns_that_output_repeats() -> None:
    from ethereal_kafka.cli.replay_cmd import rewind_warning

    resets = (
        PartitionReset("orders", "shop", "o", 0, 10, 4, 12),
        PartitionReset("orders", "shop.q2", "o", 0, 10, 4, 12),  # a second query's group: the same records
        PartitionReset("orders", "shop", "o", 1, 7, 7, 9),
    )
    saved = ReplayStart("savepoint", offsets=(("o", 0, 4), ("o", 1, 7)), savepoint="/sp/sp-x")
    line = rewind_warning(ReplayPlan("shop", saved, resets))
    assert line == (
        "warning: app shop has read 6 record(s) past this savepoint on 1 partition(s): their output is written "
        "again (point the sinks at new topics to keep one copy)"
    )
    at_the_savepoint = (PartitionReset("orders", "shop", "o", 0, 4, 4, 12),)
    assert rewind_warning(ReplayPlan("shop", saved, at_the_savepoint)) is None
    assert rewind_warning(ReplayPlan("shop", ReplayStart("earliest"), resets)) is None


def test_a_restores_savepoint_is_read_from_the_retired_intent_too(tmp_path: Path) -> None:
    """An epoch 0 a crash cut short is replayed after its intent was retired: the restore must still apply."""
    from ethereal_kafka.eos.replay import APPLIED_FILE, INTENT_FILE, intent_savepoint

    (tmp_path / INTENT_FILE).write_text(
        json.dumps({"app_id": "shop", "starts": {}, "savepoint": "/sp/sp-x", "allow_non_restored": True})
    )
    assert intent_savepoint(str(tmp_path), "shop") == ("/sp/sp-x", True)
    (tmp_path / INTENT_FILE).rename(tmp_path / APPLIED_FILE)
    assert intent_savepoint(str(tmp_path), "shop") == ("/sp/sp-x", True)
    assert intent_savepoint(str(tmp_path), "other") is None
