"""A Spark checkpoint that disagrees with Kafka (a restored backup, a deleted offset log file, files a host crash lost)
is refused in one line, never re-planned silently: epoch markers carry a digest of their epoch's input ranges, and
the coordinator compares Kafka's markers with Spark's offset log at start (`eos.startup.check_log_against_kafka`).

Every run here is in-process on the session's Spark (`run_job`)."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from ethereal_kafka.eos.errors import CheckpointMismatchError
from ethereal_kafka.eos.names import progress_group, progress_topic, transactional_id
from ethereal_kafka.errors import ConfigError
from ethereal_kafka.examples import eos
from ethereal_kafka.testing.cluster import KafkaCluster
from ethereal_kafka.testing.crash import compare
from ethereal_kafka.testing.plugin import RunJob, TopicFactory
from tests.integration.eos_helpers import (
    EPOCH_RECORDS_ENV,
    drop_last_commit,
    feed,
    leave_open_transaction,
    output,
    pairs,
    write_job,
)

SHUFFLED = "tests.integration.pipelines_dataframe:stateless_shuffled"


def _forget_epochs(query_checkpoint: Path, first: int) -> list[int]:
    """Remove Spark's offset- and commit-log entries of epochs >= `first` (what a checkpoint restored from an
    older backup, or a crash that lost unsynced files, looks like); returns the epochs removed."""
    gone = []
    for log in ("offsets", "commits"):
        for path in (query_checkpoint / log).iterdir():
            name = path.name.lstrip(".").split(".")[0]
            if name.isdigit() and int(name) >= first:
                path.unlink()
                gone.append(int(name))
    return sorted(set(gone))


@pytest.mark.parametrize(
    "pipeline", ["ethereal_kafka.examples.eos:stateless", "ethereal_kafka.examples.eos:running_total"]
)
def test_a_checkpoint_behind_kafka_is_refused_and_loses_nothing(
    pipeline: str, kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path, run_job: RunJob
) -> None:
    """The issue's reproduction: 100-record epochs for 10 epochs, offsets/5..9 and commits/5..9 deleted, 1,000 more
    records, a restart with 400-record epochs. Spark re-plans epochs 5.. from epoch 4's end with new bounds; every
    task's marker says "epoch 9" and (before markers carried their ranges) the tasks skipped them: exit 0, the 1,000
    new records missing. Now the start is refused in one line naming the gap, and nothing is written."""
    bs = kafka_cluster.bootstrap
    src, dst = topic_factory(partitions=2), topic_factory(partitions=2)
    inputs = eos.events(2000)
    feed(bs, src, inputs[:1000], 2)
    files = write_job(tmp_path, bs, src, dst, pipeline, max_records=100, starting="group-offsets")
    run_job(files.job)
    assert _forget_epochs(files.checkpoint / "out", 5) == [5, 6, 7, 8, 9]
    feed(bs, src, inputs[1000:], 2)
    before = pairs(output(bs, dst))
    refused = run_job(files.job, env={EPOCH_RECORDS_ENV: "400"}, check=False)
    error = str(refused.error)
    print(error)
    assert isinstance(refused.error, CheckpointMismatchError), refused.error
    assert "\n" not in error
    assert "is behind Kafka: its offset log ends at epoch 4" in error and "holds epoch 9" in error
    assert pairs(output(bs, dst)) == before, "the refused start wrote nothing"
    assert _check(pipeline, inputs[:1000], before) == (0, 0, 0)


def test_an_epoch_re_planned_over_other_ranges_is_refused(
    kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path, run_job: RunJob
) -> None:
    """The last epoch's log entry rewritten with other bounds (a re-planned epoch whose tasks never ran before the
    crash, or a backup of another moment): Kafka's marker of that epoch names other input ranges than the log, so
    the start is refused. Before, the tasks skipped the epoch (the marker said "epoch 9") and lost its new range."""
    bs = kafka_cluster.bootstrap
    src, dst = topic_factory(partitions=2), topic_factory(partitions=2)
    feed(bs, src, eos.events(1000), 2)
    files = write_job(tmp_path, bs, src, dst, "ethereal_kafka.examples.eos:stateless", max_records=100)
    run_job(files.job)
    query = files.checkpoint / "out"
    last = max(int(p.name) for p in (query / "offsets").iterdir() if p.name.isdigit())
    _forget_epochs(query, last)
    shutil.copy(query / "offsets" / str(last - 1), query / "offsets" / str(last))
    lines = (query / "offsets" / str(last)).read_text().splitlines()
    ends = json.loads(lines[2])
    lines[2] = json.dumps({t: {p: o + 50 for p, o in parts.items()} for t, parts in ends.items()})
    (query / "offsets" / str(last)).write_text("\n".join(lines))
    feed(bs, src, eos.events(1200)[1000:], 2)
    refused = run_job(files.job, check=False)
    error = str(refused.error)
    print(error)
    assert isinstance(refused.error, CheckpointMismatchError), refused.error
    assert f"holds epoch {last} of the same checkpoint committed over other input ranges" in error


def test_offset_log_entries_are_flushed_before_an_epoch_commits(
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    run_job: RunJob,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Spark's local checkpoint file manager renames `offsets/N` into place without fsync; a host crash could lose
    it after epoch N committed in Kafka. The epoch writer flushes it (and the folder) before the epoch's sink tasks
    run: every epoch's entry was synced."""
    import ethereal_kafka.paths as paths

    synced: list[str] = []
    real = paths.fsync_path

    def recording(path: Path) -> None:
        synced.append(str(path))
        real(path)

    monkeypatch.setattr(paths, "fsync_path", recording)
    monkeypatch.setattr("ethereal_kafka.checkpoint.spark_log.fsync_path", recording)
    bs = kafka_cluster.bootstrap
    src, dst = topic_factory(partitions=2), topic_factory(partitions=2)
    feed(bs, src, eos.events(300), 2)
    files = write_job(tmp_path, bs, src, dst, "ethereal_kafka.examples.eos:stateless", max_records=100)
    run_job(files.job)
    offsets = files.checkpoint / "out" / "offsets"
    epochs = sorted(int(p.name) for p in offsets.iterdir() if p.name.isdigit())
    assert epochs and all(str(offsets / str(n)) in synced for n in epochs), synced
    assert str(offsets) in synced


def _check(
    pipeline: str, inputs: list[tuple[bytes, bytes]], got: list[tuple[bytes, bytes]]
) -> tuple[int, int, int]:
    """(duplicates, lost, wrong) of the output against the plain-Python reference: the stateless job's records; the
    running total's updates (one per key and epoch: each must be the reference's total at its count, none twice,
    and each key's last one the reference's final total)."""
    if pipeline.endswith(":stateless"):
        cmp = compare(eos.stateless_reference(inputs), got)
        return cmp.duplicates, cmp.lost, cmp.unexpected
    reference = eos.running_total_reference(inputs)
    updates = [json.loads(value) for _, value in got]
    seen = Counter((u["key"], u["count"]) for u in updates)
    wrong = sum(1 for u in updates if reference[u["key"]][u["count"] - 1] != u["total"])
    finals = {key: max(count for k, count in seen if k == key) for key, _ in seen}
    lost = sum(1 for key, totals in reference.items() if finals.get(key) != len(totals))
    return sum(n - 1 for n in seen.values()), lost, wrong


def test_a_layout_switch_while_an_epoch_is_half_committed_is_refused(
    kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path, run_job: RunJob
) -> None:
    """A partition-preserving query commits each task's output with its input partition's offset; a shuffling one
    commits progress markers and then, in phase two, the offsets. A new version that switches between the two while
    an epoch is half committed (here: committed in Kafka, not in Spark's commit log) would look for the epoch's
    markers where the old layout never wrote them and write the epoch a second time. The start is refused; once the
    old version has finished the epoch, the switch goes through and the output stays exact."""
    bs = kafka_cluster.bootstrap
    src, dst = topic_factory(partitions=2), topic_factory(partitions=2)
    inputs = eos.events(600)
    feed(bs, src, inputs[:400], 2)
    files = write_job(tmp_path, bs, src, dst, "ethereal_kafka.examples.eos:stateless", max_records=100)
    run_job(files.job)
    drop_last_commit(files.checkpoint / "out")
    old = files.job.read_text()
    files.job.write_text(old.replace("ethereal_kafka.examples.eos:stateless", SHUFFLED))
    refused = run_job(files.job, check=False)
    error = str(refused.error)
    print(error)
    assert isinstance(refused.error, ConfigError), refused.error
    assert "layout changed partition-preserving -> shuffling while epoch" in error and "\n" not in error
    files.job.write_text(old)
    run_job(files.job)  # the old version replays the epoch: its tasks find their markers and skip
    feed(bs, src, inputs[400:], 2)
    files.job.write_text(old.replace("ethereal_kafka.examples.eos:stateless", SHUFFLED))
    run_job(files.job)
    cmp = compare(eos.stateless_reference(inputs), pairs(output(bs, dst)))
    assert (cmp.duplicates, cmp.lost, cmp.unexpected) == (0, 0, 0)


@pytest.mark.parametrize(
    "pipeline", ["ethereal_kafka.examples.eos:stateless", "ethereal_kafka.examples.eos:running_total"]
)
def test_a_predecessors_open_transaction_does_not_hold_up_the_start(
    pipeline: str, kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path, run_job: RunJob
) -> None:
    """A run that died inside a commit leaves its sink task's transaction open, with the epoch's marker pending on
    the group that keeps the markers. The start-up checks read markers before the start fences the id pool (the
    fence is what aborts that transaction), and a stable read of a group with a pending offset waits for it: the
    restart used to wait out the dead run's transaction timeout and then fail with "committed offsets of group ...
    did not answer" (seen in CI after a broker restart; here the open transaction lives 5 minutes, so the old start
    failed after its 45 s of retries). Now the checks read the last committed markers before the fence and again,
    stably, after it, and the restart finishes exactly."""
    bs = kafka_cluster.bootstrap
    src, dst = topic_factory(partitions=2), topic_factory(partitions=2)
    inputs = eos.events(600)
    feed(bs, src, inputs[:300], 2)
    files = write_job(tmp_path, bs, src, dst, pipeline, max_records=100)
    run_job(files.job)
    feed(bs, src, inputs[300:], 2)
    if pipeline.endswith(":stateless"):  # partition-preserving: its markers live on the source's group
        txn_id, group, tp = transactional_id(files.app_id, "out", f"{src}-0"), files.app_id, (src, 0)
    else:  # shuffling: on its progress group
        txn_id = transactional_id(files.app_id, "out", "0")
        group, tp = progress_group(files.app_id, "out"), (progress_topic(files.app_id), 0)
    dead_run = leave_open_transaction(bs, txn_id, group, tp, dst)
    restarted = run_job(files.job, check=False)
    del dead_run
    assert restarted.error is None, restarted.error
    got = pairs(output(bs, dst))
    assert (b"never", b"aborted") not in got, "the fence aborted the dead run's transaction"
    assert _check(pipeline, inputs, got) == (0, 0, 0)
