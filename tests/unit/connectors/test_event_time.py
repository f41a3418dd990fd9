"""The event-time carrier's files and offsets (`connectors.event_time`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql.types import StringType, StructField, StructType, TimestampType

from ethereal_kafka.connectors.event_time import (
    KEPT,
    OFFSET_KEY,
    RUN_KEY,
    CarrierReader,
    EventTimeError,
    carrier_schema,
    first_epoch,
    mark_replay,
    maxima_behind,
    maxima_path,
    post_maxima,
    prepare_carry,
    read_maxima,
)


def _log(checkpoint: Path, kind: str, epoch: int, *sources: object) -> None:
    folder = checkpoint / kind
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["v1", json.dumps({"batchWatermarkMs": 0})] + [json.dumps(s) for s in sources]
    (folder / str(epoch)).write_text("\n".join(lines), encoding="utf-8")


def test_posted_maxima_are_read_per_committed_epoch(tmp_path: Path) -> None:
    path = maxima_path(tmp_path)
    assert read_maxima(path, 3) == {}
    for epoch in range(KEPT + 3):
        post_maxima(path, epoch, {"1": 1000 + epoch})
    assert read_maxima(path, None) == {}
    assert read_maxima(path, 9) == {"1": 1009}
    assert read_maxima(path, 99) == {"1": 1000 + KEPT + 2}
    assert len(json.loads(path.read_text())["entries"]) == KEPT
    # a replayed epoch replaces its entry and drops any later one
    post_maxima(path, 5, {"1": 7})
    assert read_maxima(path, 99) == {"1": 7}


def test_the_offset_carries_the_last_committed_epochs_maxima_and_the_start(tmp_path: Path) -> None:
    post_maxima(maxima_path(tmp_path), 0, {"1": 10})
    post_maxima(
        maxima_path(tmp_path), 1, {"1": 20}
    )  # posted, then the run died before Spark committed epoch 1
    _log(tmp_path, "commits", 0)
    schema = StructType([StructField("user", StringType(), False), StructField("__ts", TimestampType())])
    reader = CarrierReader(str(tmp_path), "1", carrier_schema(schema.json()))
    assert first_epoch(tmp_path) == 1
    assert reader.latestOffset({}, None) == {OFFSET_KEY: {"1": 10}, RUN_KEY: 1}  # type: ignore[arg-type]
    # the offset is the start's: later epochs of the run post more, and it stays (no epoch of the carrier's own)
    _log(tmp_path, "commits", 1)
    post_maxima(maxima_path(tmp_path), 2, {"1": 30})
    assert reader.latestOffset({}, None) == {OFFSET_KEY: {"1": 10}, RUN_KEY: 1}  # type: ignore[arg-type]
    assert reader.partitions({}, {OFFSET_KEY: {"2": 5}, RUN_KEY: 1}) == []  # node 1 read nothing yet
    (partition,) = reader.partitions({}, {OFFSET_KEY: {"1": 20, "2": 5}, RUN_KEY: 1})
    ((user, ts),) = list(reader.read(partition))
    assert (user, int(ts.timestamp() * 1_000_000)) == (None, 20)
    assert all(f.nullable for f in carrier_schema(schema.json()).fields)


def test_a_replayed_epoch_is_marked_with_the_start_and_the_maxima_before_it(tmp_path: Path) -> None:
    started = {OFFSET_KEY: {"1": 10}, RUN_KEY: 0}  # the offset of the start that logged both epochs
    _log(tmp_path, "offsets", 0, {"t": {"0": 5}}, started)
    _log(tmp_path, "commits", 0)
    post_maxima(maxima_path(tmp_path), 0, {"1": 15})
    _log(tmp_path, "offsets", 1, {"t": {"0": 9}}, started)
    post_maxima(maxima_path(tmp_path), 1, {"1": 25})  # posted; the crash came before Spark committed epoch 1
    (tmp_path / "offsets" / ".1.crc").write_bytes(b"stale")
    assert mark_replay(tmp_path) == 1
    lines = (tmp_path / "offsets" / "1").read_text().split("\n")
    assert json.loads(lines[2]) == {"t": {"0": 9}}
    assert json.loads(lines[3]) == {OFFSET_KEY: {"1": 15}, RUN_KEY: 1}
    assert not (tmp_path / "offsets" / ".1.crc").exists()
    # nothing to replay once epoch 1 is committed
    _log(tmp_path, "commits", 1)
    assert mark_replay(tmp_path) is None


def test_maxima_behind_spark_or_malformed_are_named(tmp_path: Path) -> None:
    _log(tmp_path, "commits", 0)
    _log(tmp_path, "commits", 1)
    line = maxima_behind(tmp_path)
    assert line is not None and "through no epoch" in line and "committed epoch 1" in line
    post_maxima(maxima_path(tmp_path), 1, {"1": 5})
    assert maxima_behind(tmp_path) is None
    maxima_path(tmp_path).write_text("{not json", encoding="utf-8")
    with pytest.raises(EventTimeError, match=str(maxima_path(tmp_path))):
        read_maxima(maxima_path(tmp_path), 1)


def test_a_start_renames_graph_position_keys_and_refuses_a_version_without_a_carried_input(
    tmp_path: Path,
) -> None:
    path = maxima_path(tmp_path)
    post_maxima(path, 0, {"2": 10, "5": 20})  # as a version that kept them by watermark node id wrote them
    post_maxima(path, 1, {"2": 11, "5": 21})
    _log(tmp_path, "commits", 0)
    carried = {2: "input:orders@ts", 5: "input:payments@ts"}
    prepare_carry(tmp_path, carried)
    assert read_maxima(path, 0) == {"input:orders@ts": 10, "input:payments@ts": 20}
    assert read_maxima(path, 1) == {"input:orders@ts": 11, "input:payments@ts": 21}
    # moved and reordered in a new version: the keys still match
    prepare_carry(tmp_path, {9: "input:payments@ts", 4: "input:orders@ts"})
    # the payments' watermark now takes another timestamp: their event time would be lost
    with pytest.raises(EventTimeError) as refused:
        prepare_carry(tmp_path, {2: "input:orders@ts", 5: "input:payments@paid_at"})
    assert str(refused.value).startswith(
        f"{path}: the checkpoint carries the event time of input:payments@ts, which this version of the job does "
        "not watermark (it carries input:orders@ts, input:payments@paid_at)"
    )
    assert read_maxima(path, 0) == {"input:orders@ts": 10, "input:payments@ts": 20}, (
        "a refusal changes nothing"
    )
    # a new input is fine: it starts as a fresh input would
    prepare_carry(tmp_path, {**carried, 7: "input:refunds@ts"})
