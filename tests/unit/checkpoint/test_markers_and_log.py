import json
from pathlib import Path

import pytest

from ethereal_kafka.checkpoint.spark_log import (
    CheckpointLogError,
    checkpoint_id,
    epoch_end_offsets,
    has_progress,
)
from ethereal_kafka.connectors.kafka.offsets import Offsets
from ethereal_kafka.eos.errors import CheckpointMismatchError
from ethereal_kafka.eos.markers import EpochMarker, ranges_digest


def test_marker_round_trip_and_app_ids_with_colons() -> None:
    for marker in (
        EpochMarker("orders:v2", "3f2a", 41),
        EpochMarker("orders:v2", "3f2a", 41, "0123456789abcdef"),
    ):
        assert EpochMarker.parse(marker.render()) == marker
    assert EpochMarker("a", "c", 7, "00ff").render() == "a:c:7:r00ff"


@pytest.mark.parametrize("text", [None, "", "x", "app:ckpt:notanumber", "no-colons-here"])
def test_foreign_metadata_is_no_marker(text: str | None) -> None:
    assert EpochMarker.parse(text) is None


def test_only_the_same_epoch_over_the_same_ranges_counts_as_committed() -> None:
    marker = EpochMarker("app", "ckpt-a", 7, "aaaa")
    assert marker.committed("app", "ckpt-a", 7, "aaaa", "here")
    assert not marker.committed("app", "ckpt-a", 8, "bbbb", "here"), "a later epoch still has to be written"
    assert not marker.committed("app", "ckpt-b", 0, "cccc", "here"), "a reset checkpoint never skips output"
    assert not marker.committed("other", "ckpt-a", 3, "cccc", "here")
    assert EpochMarker("app", "ckpt-a", 7).committed("app", "ckpt-a", 7, "aaaa", "here"), (
        "a marker without ranges"
    )


def test_a_marker_ahead_of_the_epoch_or_over_other_ranges_is_a_mismatch_not_a_skip() -> None:
    """Spark's checkpoint behind Kafka: the marker records a later epoch (the log lost epochs), or this epoch over
    other ranges (the log re-planned it). Skipping lost output, so it is an error naming where the marker is."""
    marker = EpochMarker("app", "ckpt-a", 9, "aaaa")
    with pytest.raises(CheckpointMismatchError, match=r"group g, t\[0\] holds epoch 9 .* now runs epoch 5"):
        marker.committed("app", "ckpt-a", 5, "bbbb", "group g, t[0]")
    with pytest.raises(CheckpointMismatchError, match="other input ranges"):
        marker.committed("app", "ckpt-a", 9, "bbbb", "group g, t[0]")


def test_the_ranges_digest_follows_every_bound_and_nothing_else() -> None:
    starts = Offsets({("t", 0): 100, ("t", 1): 200})
    ends = Offsets({("t", 0): 150, ("t", 1): 260})
    digest = ranges_digest(starts, ends)
    assert digest == ranges_digest(Offsets(dict(starts)), Offsets(dict(ends))), (
        "a pure function of the offsets"
    )
    assert ranges_digest(starts, ends.merged({("t", 1): 261})) != digest
    assert ranges_digest(starts.merged({("t", 0): 101}), ends) != digest
    assert ranges_digest(Offsets(), ends) == ranges_digest(Offsets({("t", 0): 0, ("t", 1): 0}), ends)


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
