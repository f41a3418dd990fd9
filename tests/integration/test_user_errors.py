"""Issue 24, item 7, on the real broker: an exception in user code.

- With `on.user.error=dlq` the elements user code raised on go to the dead-letter topic, each once, with headers
  naming the exception, the operator (its `.name()` and `.uid()`), the user's file:line and the source record; the
  output is the plain-Python reference's without them. Under exactly-once they commit with their epoch: a
  partition-preserving query's sink task commits them, a shuffling query's phase two does (the map before the
  shuffle and the process function after it both raise), and an epoch replayed after its Kafka commit writes them
  no second time.
- With `on.user.error=fail` (the default) the run ends with one line naming the operator, the user's file and line,
  the exception and the record; the failed epoch's history entry names the operator; Spark's `ERROR
  TaskSetManager` lines do not reach the test's output (item 6).
- With `restart.strategy=fixed-delay` a failed epoch restarts the queries from the checkpoint in the same process:
  a transient failure is ridden out (output exact, one restart counted), a deterministic one ends the run after
  the attempts allowed, saying so.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ethereal_kafka.checkpoint.history import CheckpointHistory
from ethereal_kafka.examples import eos
from ethereal_kafka.testing.cluster import KafkaCluster
from ethereal_kafka.testing.plugin import RunJob, TopicFactory
from tests.integration import user_error_jobs as jobs
from tests.integration.eos_helpers import drop_last_commit, feed, output, write_job

EVENTS = 600


def _job(tmp: Path, bs: str, src: str, dst: str, pipeline: str, extra: str, records: int = 150) -> Any:
    files = write_job(tmp, bs, src, dst, f"tests.integration.user_error_jobs:{pipeline}", max_records=records)
    with (tmp / "source.properties").open("a") as source:  # the record key is the event's `key`
        source.write(f"key.format=string\nvalue.format=json\nvalue.schema={jobs.VALUE_DDL}\n")
    with (tmp / "sink.properties").open("a") as sink:
        sink.write("value.format=json\nkey.format=string\n")
    with files.job.open("a") as job:
        job.write(extra)
    return files


def _letters(bs: str, dlq: str) -> list[tuple[dict[str, str], dict[str, Any]]]:
    return [
        ({k: (v or b"").decode() for k, v in r.headers}, json.loads(r.value or b"{}"))
        for r in output(bs, dlq)
    ]


def _line_of(text: str) -> int:
    source = Path(jobs.__file__).read_text().splitlines()
    return next(i for i, line in enumerate(source, 1) if text in line)


@pytest.mark.parametrize("pipeline", ["partition_preserving", "shuffling"])
def test_user_errors_go_to_the_dead_letter_topic_once_with_their_epoch(
    pipeline: str, kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path, run_job: RunJob
) -> None:
    bs = kafka_cluster.bootstrap
    src, dst, dlq = topic_factory(partitions=2), topic_factory(partitions=2), topic_factory(partitions=1)
    inputs = eos.events(EVENTS)
    feed(bs, src, inputs, 2)
    files = _job(tmp_path, bs, src, dst, pipeline, f"on.user.error=dlq\nuser.error.dlq.topic={dlq}\n")
    run_job(files.job)
    replayed = drop_last_commit(files.checkpoint / "out")
    run_job(files.job)

    events = jobs.events_of(inputs)
    positions = {json.loads(r.value or b"{}")["id"]: (r.partition, r.offset) for r in output(bs, src)}
    got = [json.loads(r.value or b"{}") for r in output(bs, dst)]
    letters = _letters(bs, dlq)
    if pipeline == "partition_preserving":
        want, unlucky = jobs.shares_reference(events), []
        assert sorted(got, key=lambda e: e["id"]) == want
    else:
        want, unlucky = jobs.totals_reference(events)
        key = lambda e: (e["key"], e["seq"])  # noqa: E731
        assert sorted(got, key=key) == sorted(want, key=key)
    # Every element user code raised on is on the dead-letter topic exactly once, as the operator's input.
    bad = [e for e in events if jobs.bad_share(e)]
    seen = Counter(
        (h["ethereal.error.operator.uid"], int(h["ethereal.source.offset"]), v["id"]) for h, v in letters
    )
    duplicates = sum(n - 1 for n in seen.values() if n > 1)
    expected = {("share-1", positions[e["id"]][1], e["id"]) for e in bad} | {
        ("running-share-1", positions[s["id"]][1], s["id"]) for s in unlucky
    }
    print(
        f"pipeline={pipeline} out={len(got)} dead letters={len(letters)} (share {len(bad)}, "
        f"running share {len(unlucky)}) duplicates={duplicates} replayed epoch {replayed}"
    )
    assert bad and (pipeline == "partition_preserving" or unlucky)
    assert duplicates == 0 and set(seen) == expected
    for headers, value in letters:
        origin = positions[value["id"]]
        assert headers["ethereal.error.stage"] == "user-code"
        assert headers["ethereal.source.topic"] == src
        assert (int(headers["ethereal.source.partition"]), int(headers["ethereal.source.offset"])) == origin
        if headers["ethereal.error.operator.uid"] == "share-1":
            assert headers["ethereal.error.operator"] == "share"
            assert headers["ethereal.error.class"] == "ZeroDivisionError"
            assert headers["ethereal.error.location"].endswith(f"user_error_jobs.py:{_line_of('100 //')}")
            assert value == next(e for e in events if e["id"] == value["id"])
        else:
            assert headers["ethereal.error.operator"] == "running share"
            assert headers["ethereal.error.class"] == "ValueError"
            assert headers["ethereal.error.message"] == f"seq {value['seq']} is unlucky"
            assert headers["ethereal.error.location"].endswith(f"user_error_jobs.py:{_line_of('is unlucky')}")
            assert value == jobs.share(next(e for e in events if e["id"] == value["id"]))


def test_a_user_error_fails_the_run_naming_operator_and_line_and_restarts_give_up(
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    run_job: RunJob,
    capfd: pytest.CaptureFixture[str],
) -> None:
    bs = kafka_cluster.bootstrap
    src, dst = topic_factory(partitions=2), topic_factory(partitions=2)
    feed(bs, src, eos.events(200), 2)
    files = _job(
        tmp_path,
        bs,
        src,
        dst,
        "partition_preserving",
        "restart.strategy=fixed-delay\nrestart.attempts=1\nrestart.delay.ms=0\n",
        records=1000,
    )
    capfd.readouterr()
    result = run_job(files.job, check=False)
    captured = capfd.readouterr()
    message = str(result.error)
    print(message)
    assert not result.ok and "\n" not in message
    line = _line_of("100 //")
    assert (
        f"query out failed at epoch 0: operator 'share' (uid share-1) at user_error_jobs.py:{line}: "
        "ZeroDivisionError: integer division or modulo by zero; element from topic "
    ) in message, message
    assert (
        "[gave up after 1 restart(s): 1 restart(s) used (restart.strategy=fixed-delay, restart.attempts=1)]"
        in (message)
    )
    assert output(bs, dst) == [], "nothing of the failed epoch is committed"
    with CheckpointHistory(files.app_id, read_only=True) as history:
        failed = [r for r in history.records() if r.outcome == "failed"]
    assert failed and all(r.operator == {"name": "share", "uid": "share-1"} for r in failed), failed
    assert failed[0].error is not None and failed[0].error.startswith("operator 'share' (uid share-1) at ")
    # Item 6: Spark's own lines of the failed task stay in the run's log folder.
    for noise in ("TaskSetManager", "ERROR Executor", "WARN TaskSetManager"):
        assert noise not in captured.err + captured.out, (captured.err + captured.out)[-3000:]


def test_a_transient_failure_is_restarted_from_the_checkpoint_in_the_same_process(
    kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path, run_job: RunJob
) -> None:
    bs = kafka_cluster.bootstrap
    src, dst = topic_factory(partitions=2), topic_factory(partitions=2)
    inputs = eos.events(300)
    feed(bs, src, inputs, 2)
    files = _job(
        tmp_path,
        bs,
        src,
        dst,
        "flaky_once",
        "restart.strategy=fixed-delay\nrestart.attempts=2\nrestart.delay.ms=100\n",
        records=1000,
    )
    marker = tmp_path / "flaky-marker"
    run = run_job(files.job, env={jobs.FLAKY_MARKER_ENV: str(marker)})
    assert marker.exists(), "the failure happened"
    got = sorted(json.loads(r.value or b"{}")["id"] for r in output(bs, dst))
    assert got == [e["id"] for e in jobs.events_of(inputs)], "every record once, after the restart"
    assert run.report is not None and run.report.summary is not None
    print(run.report.summary.lines())
    assert run.report.summary.restarts == 1
    assert "  restarts       1" in run.report.summary.lines()
    # The epochs' figures are exactly-once figures: the map's rows in and out and the records written, summed over
    # the committed epochs, are the records the output holds, whichever task of the failed attempt committed.
    with CheckpointHistory(files.app_id, read_only=True) as history:
        records = history.records()
    committed = [r for r in records if r.outcome == "committed"]
    rows = [figures for r in committed for figures in (r.operators or {}).values()]
    print([(r.epoch, r.outcome_detail, r.records_out, r.skipped_tasks, r.operators) for r in records])
    assert len(rows) == len(committed), "one operator (the map) per committed epoch"
    seen = (sum(f[0] for f in rows), sum(f[1] for f in rows), sum(r.records_out for r in committed))
    assert seen == (len(got), len(got), len(got)), seen
