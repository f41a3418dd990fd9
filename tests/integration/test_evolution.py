"""`ethereal-kafka validate --against APP JOB`: whether a new version of a job can resume the state of an app that
ran on the real broker, from the app's recorded last run (`plan.evolution`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ethereal_kafka.cli import main
from ethereal_kafka.testing.cluster import KafkaCluster
from ethereal_kafka.testing.plugin import RunJob, TopicFactory
from tests.integration import ref_keyed as ref
from tests.integration.api_helpers import base_ts, feed_events, read_json, write_api_job
from tests.integration.keyed_jobs import EVENT_DDL

SOURCE = f"value.format=json\nvalue.schema={EVENT_DDL}\n"
SINK = "value.format=json\nkey.format=string\n"


def _job(folder: Path, bootstrap: str, version: str, source: str, out: str, extra: str = "") -> Path:
    job = write_api_job(
        folder,
        bootstrap,
        f"tests.integration.evolution_jobs:{version}",
        {"events": (source, SOURCE)},
        {"out": (out, SINK)},
        max_records=100,
        extra_job=extra,
    )
    return job.path


def _validate(app: str, job: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str], list[str]]:
    code = main(["validate", "--against", app, str(job)])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err.splitlines()


def test_validate_against_an_app_says_which_state_carries_over(
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    run_job: RunJob,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bs = kafka_cluster.bootstrap
    source, out = topic_factory(partitions=2), topic_factory(partitions=2)
    start = base_ts()
    first = ref.make_events(5, 120, 4, start, late_every=0)
    feed_events(bs, source, ref.feed_list(first))
    running = _job(tmp_path / "v1", bs, "v1", source, out)
    run_job(running)
    assert read_json(bs, out), "the app ran no epoch"
    app = re.search(r"^app\.id=(.+)$", running.read_text(), re.M).group(1)  # type: ignore[union-attr]
    capsys.readouterr()

    code, lines, errors = _validate(app, _job(tmp_path / "v2", bs, "v2_more_logic", source, out), capsys)
    assert code == 0, errors
    assert [line.split(": ", 2)[2] for line in lines[:1]] == [
        "carried totals (rolling in query out): state carried"
    ]
    # And it does: v2 run on v1's app and checkpoint goes on from each user's total.
    later = ref.make_events(6, 80, 4, start + 120 * 400 + 20_000, late_every=0)
    feed_events(bs, source, ref.feed_list(later))
    upgraded = running.with_name("job-v2.properties")
    upgraded.write_text(running.read_text().replace("evolution_jobs:v1", "evolution_jobs:v2_more_logic"))
    run_job(upgraded)
    totals: dict[str, int] = {}
    for event in first + later:
        totals[event.user] = totals.get(event.user, 0) + event.amount
    records = read_json(bs, out)
    assert len(records) == len(first) + len(later), "one running total per input record, each once"
    reached: dict[str, int] = {}
    for record in records:
        reached[record["user"]] = max(reached.get(record["user"], 0), record["amount"])
    assert reached == totals, "v2 did not carry v1's totals"

    job = _job(tmp_path / "v3", bs, "v3_total_dropped", source, out)
    code, _, errors = _validate(app, job, capsys)
    assert code == 1
    assert errors == [
        f"error: {job}: against {app}: dropped totals (rolling in query out): not in the new version, its state "
        "would be lost"
    ]

    code, _, errors = _validate(app, _job(tmp_path / "v4", bs, "v4_total_changed", source, out), capsys)
    assert code == 1 and len(errors) == 1
    assert (
        "changed totals (rolling in query out): kind sum -> reduce: its state cannot be carried" in errors[0]
    )

    job = _job(tmp_path / "v5", bs, "v1", source, out, extra="sink.tasks=3\n")
    code, _, errors = _validate(app, job, capsys)
    assert code == 1 and len(errors) == 1 and "sink.tasks 2 -> 3" in errors[0]

    # A stateful operator added to the query of `totals` is refused, as Spark refuses it when that version runs.
    code, _, errors = _validate(app, _job(tmp_path / "v6", bs, "v6_second_state", source, out), capsys)
    assert code == 1 and len(errors) == 1 and "new largest (rolling in query out)" in errors[0]
    added = running.with_name("job-v6.properties")
    added.write_text(running.read_text().replace("evolution_jobs:v1", "evolution_jobs:v6_second_state"))
    feed_events(
        bs, source, ref.feed_list(ref.make_events(7, 20, 4, start + 200 * 400 + 40_000, late_every=0))
    )
    failed = run_job(added, check=False)
    assert "STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA" in str(failed.error)
    # The failed start is not the app's version: the checkpoint still holds v2's state, which v2 resumes.
    code, lines, errors = _validate(app, upgraded, capsys)
    assert (code, errors) == (0, []) and "carried totals" in lines[0]

    code, _, errors = _validate("never-ran", running, capsys)
    assert code == 1 and errors[0].startswith(
        f"error: {running}: no run of app 'never-ran' that committed an epoch recorded on this host"
    )
