"""`ethereal-kafka checkpoints APP`: table and JSON output, --limit, --state-dir, and the missing-history error."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from ethereal_kafka.checkpoint.history import CheckpointHistory, EpochRecord, HistoryError
from ethereal_kafka.cli import checkpoints_cmd

CHECKPOINT = "0123456789abcdef-checkpoint"


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the ethereal-kafka cache at the test's temporary directory."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("ETHEREAL_KAFKA_HOME", str(cache))
    return cache


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="ethereal-kafka")
    checkpoints_cmd.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["checkpoints", *argv])


def _epochs() -> list[EpochRecord]:
    def rec(
        epoch: int, outcome: str = "committed", error: str | None = None, skipped: int = 0
    ) -> EpochRecord:
        return EpochRecord(
            app_id="shop",
            checkpoint_id=CHECKPOINT,
            epoch=epoch,
            mode="shuffling",
            start_offsets={"orders": {"0": 100 * epoch, "1": 50 * epoch}},
            end_offsets={"orders": {"0": 100 * epoch + 100, "1": 50 * epoch + 50}},
            records_in=150,
            records_out=140,
            tasks=4,
            skipped_tasks=skipped,
            started_ms=1_700_000_000_000 + epoch * 1_000,
            duration_ms=321,
            outcome=outcome,
            error=error,
            query="enrich",
            # 150 offsets: 147 records (the read tasks' count) and 3 transaction markers
            records_read=147 if outcome == "committed" else None,
        )

    return [rec(0), rec(1, "failed", "TransactionError: commit\ntimed out"), rec(1, skipped=2)]


@pytest.fixture
def written(home: Path) -> list[EpochRecord]:
    """The app 'shop' with three epoch attempts in its default history location."""
    epochs = _epochs()
    with CheckpointHistory("shop") as history:
        for rec in epochs:
            history.record(rec)
    return epochs


def test_table_lists_attempts_newest_last(
    written: list[EpochRecord], capsys: pytest.CaptureFixture[str]
) -> None:
    assert checkpoints_cmd.run(_parse("shop")) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == list(checkpoints_cmd.COLUMNS)
    assert len(lines) == 4
    first, failed, replay = (line.split() for line in lines[1:])
    assert first == [
        "enrich",
        "0",
        "01234567",
        "shuffling",
        "committed",
        "147",
        "140",
        "4",
        "321",
        "2023-11-14T22:13:20.000Z",
        "+150",
    ]
    assert failed[:6] == ["enrich", "1", "01234567", "shuffling", "failed", "?"]
    assert failed[-4:] == ["TransactionError:", "commit", "timed", "out"]
    assert replay[:5] == ["enrich", "1", "01234567", "shuffling", "committed"]
    assert "4 (2 skipped)" in lines[3]
    assert "2023-11-14T22:13:21.000Z" in lines[3]


def test_limit_keeps_the_newest(written: list[EpochRecord], capsys: pytest.CaptureFixture[str]) -> None:
    assert checkpoints_cmd.run(_parse("shop", "--limit", "1", "--json")) == 0
    out = capsys.readouterr().out.splitlines()
    assert [EpochRecord.from_json(line) for line in out] == written[-1:]


def test_json_prints_one_object_per_line(
    written: list[EpochRecord], capsys: pytest.CaptureFixture[str]
) -> None:
    assert checkpoints_cmd.run(_parse("shop", "--json")) == 0
    out = capsys.readouterr().out.splitlines()
    assert [json.loads(line)["outcome"] for line in out] == ["committed", "failed", "committed"]
    assert [EpochRecord.from_json(line) for line in out] == written


def test_state_dir_points_at_an_explicit_history(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "elsewhere"
    with CheckpointHistory("shop", path) as history:
        history.record(_epochs()[0])
    assert checkpoints_cmd.run(_parse("shop", "--state-dir", str(path))) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2


def test_reads_while_the_writer_is_open(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with CheckpointHistory("shop") as history:
        history.record(_epochs()[0])
        assert checkpoints_cmd.run(_parse("shop", "--json")) == 0
        history.record(_epochs()[1])
        assert checkpoints_cmd.run(_parse("shop", "--json")) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3


def test_empty_history_says_so(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    CheckpointHistory("shop").close()
    assert checkpoints_cmd.run(_parse("shop")) == 0
    assert capsys.readouterr().out == "no epochs recorded yet for app 'shop'\n"


def test_missing_history_is_an_error(home: Path) -> None:
    with pytest.raises(HistoryError) as info:
        checkpoints_cmd.run(_parse("ghost"))
    assert str(info.value) == (
        f"no checkpoint history for app 'ghost' (looked in {home / 'apps' / 'ghost' / 'history'})"
    )


def test_unknown_value_in_an_old_row_renders(capsys: pytest.CaptureFixture[str]) -> None:
    rec = _epochs()[0]
    unknown = EpochRecord.from_json(
        json.dumps(
            {k: v for k, v in json.loads(rec.to_json()).items() if k not in ("query", "records_read")}
            | {"records_in": -1, "start_offsets": {}}
        )
    )
    row = checkpoints_cmd.render_table([unknown]).splitlines()[1].split()
    assert row[0] == "-"  # written before queries were named
    assert row[5] == "?"  # written before read tasks' record counts were kept
    assert row[10] == "?"
