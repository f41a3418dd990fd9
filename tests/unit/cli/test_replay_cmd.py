"""`ethereal-kafka replay`: arguments, plan rendering, confirmation, `--into` job rewriting (no broker)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from ethereal_kafka.checkpoint.errors import ReplayError
from ethereal_kafka.cli import build_parser, main
from ethereal_kafka.cli.replay_cmd import _confirm, render_plan
from ethereal_kafka.config.job import load_job
from ethereal_kafka.eos.replay import PartitionReset, ReplayPlan, ReplayStart
from ethereal_kafka.runtime.replay_into import into_job


def test_arguments() -> None:
    args = build_parser().parse_args(["replay", "shop", "--from", "earliest", "--yes", "--dry-run"])
    assert (args.app, args.start, args.yes, args.dry_run, args.into, args.force) == (
        "shop",
        "earliest",
        True,
        True,
        None,
        False,
    )
    args = build_parser().parse_args(["replay", "--job", "j.properties", "--from", "t:0:1", "--into", "copy"])
    assert (args.app, args.job, args.into) == (None, "j.properties", "copy")


def test_from_is_required_and_a_bad_from_fails_before_any_lookup(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["replay", "shop"])
    assert main(["replay", "nobody-knows-me", "--from", "latest"]) == 1
    assert "expected earliest, timestamp:<ms> or topic:partition:offset" in capsys.readouterr().err


def test_plan_table_shows_old_and_new_offsets_and_what_will_be_read() -> None:
    plan = ReplayPlan(
        "shop",
        ReplayStart("timestamp", timestamp_ms=5),
        (
            PartitionReset("events", "shop", "orders", 0, 120, 100, 150),
            PartitionReset("events", "shop", "orders", 1, None, 0, 7),
        ),
    )
    lines = render_plan(plan).splitlines()
    assert lines[0] == "replay of app shop from timestamp:5:"
    assert lines[1].split() == [
        "SOURCE",
        "GROUP",
        "TOPIC",
        "PARTITION",
        "COMMITTED",
        "NEW",
        "END",
        "TO",
        "READ",
    ]
    assert lines[2].split() == ["events", "shop", "orders", "0", "120", "100", "150", "50"]
    assert lines[3].split() == ["events", "shop", "orders", "1", "-", "0", "7", "7"]


def test_without_yes_a_terminal_is_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
    with pytest.raises(ReplayError, match="pass --yes"):
        _confirm("shop", yes=False)
    _confirm("shop", yes=True)


def test_a_no_at_the_prompt_cancels(monkeypatch: pytest.MonkeyPatch) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stdin", Tty("n\n"))
    with pytest.raises(ReplayError, match="cancelled; nothing changed"):
        _confirm("shop", yes=False)
    monkeypatch.setattr("sys.stdin", Tty("yes\n"))
    _confirm("shop", yes=False)


def _job(folder: Path) -> Path:
    (folder / "src.properties").write_text(
        "connector.class=kafka-source\nname=events\nbootstrap.servers=localhost:1\ntopics=orders\n"
        "group.id=custom\nstarting.offsets=latest\n"
    )
    (folder / "sink.properties").write_text(
        "connector.class=kafka-sink\nname=out\nbootstrap.servers=localhost:1\ntopic=totals\n"
    )
    job = folder / "job.properties"
    job.write_text(
        "app.id=shop\nsources=src.properties\nsinks=sink.properties\npipeline=m:f\ncheckpoint.location=ckpt\n"
        "replay.from=earliest\n"
    )
    return job


def test_into_job_runs_under_its_own_identity_into_the_topic(tmp_path: Path) -> None:
    loaded = load_job(_job(tmp_path))
    out = into_job(loaded, {"events": "orders:0:5"}, "copy", "shop.replay-x", tmp_path / "tmp")
    assert out.job.app_id == "shop.replay-x" and out.job.checkpoint_location == str(tmp_path / "tmp")
    assert out.job.replay_from is None
    source = out.sources["events"]
    assert source.group == "shop.replay-x", "never the app's own group, even when the source names one"
    assert source.starting_offsets == "orders:0:5"
    assert out.sinks["out"].topic == "copy"
    assert loaded.sources["events"].group == "custom", "the loaded job itself is unchanged"


@pytest.mark.parametrize(("topic", "role"), [("orders", "input"), ("totals", "output")])
def test_into_the_jobs_own_topics_is_refused(tmp_path: Path, topic: str, role: str) -> None:
    loaded = load_job(_job(tmp_path))
    with pytest.raises(ReplayError, match=f"that is an {role} topic of app shop"):
        into_job(loaded, {"events": "orders:0:5"}, topic, "shop.replay-x", tmp_path / "tmp")


def _dead_letter_job(folder: Path, user_errors: bool) -> Path:
    job = _job(folder)
    with (folder / "src.properties").open("a") as source:
        source.write("value.format=json\nvalue.schema=id bigint\non.error=dlq\ndlq.topic=orders.dead\n")
    if user_errors:
        with job.open("a") as lines:
            lines.write("on.user.error=dlq\nuser.error.dlq.topic=shop.errors\n")
    return job


@pytest.mark.parametrize("user_errors", [False, True])
def test_a_replays_dead_letters_go_to_its_own_topic_never_productions(
    tmp_path: Path, user_errors: bool
) -> None:
    loaded = load_job(_dead_letter_job(tmp_path, user_errors))
    out = into_job(loaded, {"events": "orders:0:5"}, "copy", "shop.replay-x", tmp_path / "tmp", "copy.dead")
    assert out.sources["events"].dlq_topic == "copy.dead"
    assert out.job.user_error_dlq_topic == ("copy.dead" if user_errors else None)
    assert loaded.sources["events"].dlq_topic == "orders.dead", "the loaded job itself is unchanged"


def test_a_replay_of_a_job_with_dead_letters_needs_a_topic_for_them(tmp_path: Path) -> None:
    loaded = load_job(_dead_letter_job(tmp_path, user_errors=True))
    with pytest.raises(
        ReplayError, match=r"sends dead letters to orders\.dead, shop\.errors; .* --dlq-into TOPIC"
    ):
        into_job(loaded, {"events": "orders:0:5"}, "copy", "shop.replay-x", tmp_path / "tmp")


@pytest.mark.parametrize(
    ("dlq", "message"),
    [
        ("orders.dead", "that is a dead-letter topic of app shop"),
        ("shop.errors", "that is a dead-letter topic of app shop"),
        ("totals", "that is an output topic of app shop"),
        ("orders", "that is an input topic of app shop"),
        ("copy", "the same topic as --into"),
    ],
)
def test_a_replays_dead_letter_topic_is_none_of_the_jobs_own(tmp_path: Path, dlq: str, message: str) -> None:
    loaded = load_job(_dead_letter_job(tmp_path, user_errors=True))
    with pytest.raises(ReplayError, match=rf"--dlq-into {dlq}: .*{message}"):
        into_job(loaded, {"events": "orders:0:5"}, "copy", "shop.replay-x", tmp_path / "tmp", dlq)


def test_dlq_into_without_dead_letters_or_into_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ReplayError, match="has no dead-letter topic; leave --dlq-into out"):
        into_job(load_job(_job(tmp_path)), {"events": "orders:0:5"}, "copy", "shop.replay-x", tmp_path, "d")
    args = build_parser().parse_args(["replay", "shop", "--from", "earliest", "--dlq-into", "d"])
    with pytest.raises(ReplayError, match="add --into"):
        args.handler(args)
