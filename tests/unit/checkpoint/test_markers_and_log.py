import json
from pathlib import Path

import pytest

from ethereal_kafka.checkpoint.spark_log import (
    CheckpointLogError,
    checkpoint_id,
    epoch_end_offsets,
    has_progress,
)
from ethereal_kafka.eos.markers import EpochMarker


def test_marker_round_trip_and_app_ids_with_colons() -> None:
    marker = EpochMarker("orders:v2", "3f2a", 41)
    assert EpochMarker.parse(marker.render()) == marker


@pytest.mark.parametrize("text", [None, "", "x", "app:ckpt:notanumber", "no-colons-here"])
def test_foreign_metadata_is_no_marker(text: str | None) -> None:
    assert EpochMarker.parse(text) is None


def test_only_the_same_app_and_checkpoint_at_or_past_the_epoch_covers_it() -> None:
    marker = EpochMarker("app", "ckpt-a", 7)
    assert marker.covers("app", "ckpt-a", 7)
    assert marker.covers("app", "ckpt-a", 3)
    assert not marker.covers("app", "ckpt-a", 8)
    assert not marker.covers("app", "ckpt-b", 0), "a reset checkpoint never skips output"
    assert not marker.covers("other", "ckpt-a", 1)


def _checkpoint(tmp_path: Path) -> Path:
    (tmp_path / "offsets").mkdir()
    (tmp_path / "metadata").write_text(json.dumps({"id": "d47116c0"}) + "\n")
    (tmp_path / "offsets" / "3").write_text(
        'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1}\n{"orders": {"0": 428, "1": 572}}\n{"other": {"0": 1}}\n'
    )
    return tmp_path


def test_reads_query_id_and_end_offsets_per_source(tmp_path: Path) -> None:
    location = _checkpoint(tmp_path)
    assert checkpoint_id(location) == "d47116c0"
    assert [o.to_json() for o in epoch_end_offsets(location, 3)] == [
        {"orders": {"0": 428, "1": 572}},
        {"other": {"0": 1}},
    ]
    assert has_progress(location)


def test_missing_epoch_or_metadata_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CheckpointLogError, match="offsets/9 is missing"):
        epoch_end_offsets(_checkpoint(tmp_path), 9)
    with pytest.raises(CheckpointLogError, match="query id"):
        checkpoint_id(tmp_path / "nowhere")
    assert not has_progress(tmp_path / "nowhere")
