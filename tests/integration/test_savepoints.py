"""Savepoints on the real broker (`checkpoint.savepoints`, `runtime.savepoint`): a stopped app's offsets and operator
state taken into an open format, and restored into a new checkpoint with another output layout, where the running
state goes on exactly as in a run that was never stopped."""

from __future__ import annotations

import argparse
import json
import os
import pickle
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from ethereal_kafka.checkpoint.savepoints import list_savepoints, read_manifest
from ethereal_kafka.checkpoint.shadows import read_record
from ethereal_kafka.cli import main
from ethereal_kafka.cli.app_job import resolve_app
from ethereal_kafka.cli.run_cmd import restore_from
from ethereal_kafka.connectors.kafka.topic_admin import end_offsets
from ethereal_kafka.faults import SAVEPOINT_PAUSE_ENV, SAVEPOINT_TRACE_ENV, TRACE_ENV, TXN_DELAY_ENV
from ethereal_kafka.plan.operators.base import TIMERS_VAR
from ethereal_kafka.runtime.output_diff import diff_shadow
from ethereal_kafka.runtime.shadow import run_shadow
from ethereal_kafka.testing.cluster import KafkaCluster
from ethereal_kafka.testing.plugin import RunJob, TopicFactory
from tests.integration import ref_keyed as ref
from tests.integration.api_helpers import ApiJob, base_ts, feed_events, per_key, read_json, write_api_job
from tests.integration.keyed_jobs import EVENT_DDL
from tests.integration.savepoint_jobs import FAR_MS

SOURCE = f"value.format=json\nvalue.schema={EVENT_DDL}\n"
SINK = "value.format=json\nkey.format=string\n"
#: Records keyed by user, for `diff` (which compares per key).
KEYED_SINK = f"{SINK}key.column=user\n"
#: 120 events on one partition in epochs of 20: the stopped run ends on an epoch boundary of the run that is not
#: stopped, so both order each epoch's elements alike.
EVENTS, EPOCH = 120, 20
#: The event-time job's epochs: four queries, so fewer and larger epochs (the halves still end on a boundary).
TIMED_EPOCH = 30


def _job(
    folder: Path,
    bs: str,
    version: str,
    source: str,
    sinks: dict[str, str],
    extra: str = "",
    sink: str = SINK,
    epoch: int = EPOCH,
) -> ApiJob:
    return write_api_job(
        folder,
        bs,
        f"tests.integration.savepoint_jobs:{version}",
        {"events": (source, SOURCE)},
        {name: (topic, sink) for name, topic in sinks.items()},
        max_records=epoch,
        extra_job=extra,
    )


def test_a_savepoint_restored_with_another_layout_goes_on_like_a_run_never_stopped(
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    run_job: RunJob,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bs = kafka_cluster.bootstrap
    source = topic_factory(partitions=1)
    events = ref.make_events(11, EVENTS, 4, base_ts(), late_every=0)
    feed = [(0, key, value, ts) for _, key, value, ts in ref.feed_list(events)]
    feed_events(bs, source, feed[: EVENTS // 2])
    stopped = {"totals": topic_factory(partitions=2), "kinds": topic_factory(partitions=2)}
    job = _job(tmp_path / "stopped", bs, "slow_v1", source, stopped)
    # The job runs on (no end of input); its `kinds` is slow over the first half's last element (`SlowKinds`). Once
    # `totals` has read the whole first half and `kinds` has not, a live savepoint (the job goes on): the two queries stand at different offsets of
    # the partition, and a restore starts each where it stood (restored into an app of its own below).
    running = ThreadPoolExecutor(1).submit(run_job, job.path, available_now=False)
    written = _wait_for(bs, stopped, lambda n: n["totals"] == EVENTS // 2)
    assert written["kinds"] < EVENTS // 2, f"kinds was not behind totals: {written}"
    capsys.readouterr()
    assert main(["savepoint", "--job", str(job.path)]) == 0
    out = capsys.readouterr().out
    assert "runs on this host: a savepoint of its last committed epochs; it goes on" in out
    assert not running.done(), "a savepoint without --stop stopped the job"
    live = Path(_taken(out))
    behind = {q.name: q.offsets for q in read_manifest(live).queries}
    assert behind["totals"] == [[source, 0, EVENTS // 2]] and behind["kinds"][0][2] < EVENTS // 2, behind
    # Once both read the first half, `savepoint --stop` stops it between epochs and takes the savepoint.
    _wait_for(bs, stopped, lambda n: n["kinds"] == EVENTS // 2)
    assert main(["savepoint", "--stop", "--job", str(job.path)]) == 0
    out = capsys.readouterr().out
    assert "to stop between epochs" in out
    report = running.result(timeout=60).report
    assert report is not None and report.how == "graceful" and "savepoint-" in (report.taken_over_by or ""), (
        report
    )
    folder = Path(_taken(out))
    assert read_manifest(folder).agreed_offsets() == ([(source, 0, EVENTS // 2)], {})
    assert _tables(live)["totals"] == _tables(folder)["totals"], "the live savepoint's totals differ"
    # its output ends come from the history of its epochs, the stopped one's from the topics
    assert (
        read_manifest(live).output_ends[stopped["totals"]]
        == read_manifest(folder).output_ends[stopped["totals"]]
    )
    assert set(read_manifest(live).output_ends) == set(stopped.values())

    # A checkpoint behind Kafka (its last epoch's log files lost): Kafka holds output of an epoch the savepoint would
    # have the restored run write again, so it is refused.
    totals_log = job.checkpoint / "totals"
    last = max(int(p.name) for p in (totals_log / "commits").iterdir() if p.name.isdigit())
    for kind in ("commits", "offsets"):
        (totals_log / kind / str(last)).rename(tmp_path / f"{kind}-{last}")
    assert main(["savepoint", "--job", str(job.path)]) == 1
    assert f"Kafka holds output of epoch {last}" in capsys.readouterr().err
    for kind in ("commits", "offsets"):
        (tmp_path / f"{kind}-{last}").rename(totals_log / kind / str(last))

    # SIGKILLed right after a table is written, or after the manifest is written and before the rename: nothing
    # new is listed, and the next savepoint clears what the killed ones left.
    location = Path(f"{job.checkpoint}.savepoints")
    for step in ("table totals", "manifest"):
        _kill_savepoint_after(job.path, step, tmp_path / f"kill-{step.split()[0]}")
        assert [p for p, _ in list_savepoints(location)] == [live, folder], (
            f"a savepoint killed after {step!r} is listed"
        )
        assert sorted(p.name.startswith(".sp-") for p in location.iterdir()) == [False, False, True]
    assert main(["savepoint", "--job", str(job.path)]) == 0
    again = read_manifest(Path(capsys.readouterr().out.split(": ", 1)[1].splitlines()[0]))
    assert len(list(location.iterdir())) == 3 and len(list_savepoints(location)) == 3
    manifest = read_manifest(folder)
    assert again.agreed_offsets() == manifest.agreed_offsets(), "two savepoints of a stopped app differ"
    # three epochs of data each; the processing-time query `kinds` may have run empty ones after them
    epochs = {q.name: q.epoch for q in manifest.queries}
    assert epochs["totals"] == 2 and epochs["kinds"] >= 2, epochs
    assert manifest.agreed_offsets() == ([(source, 0, EVENTS // 2)], {})
    # The totals as the open format holds them: each user's pickled accumulator after the first half.
    (totals,) = [op for op in manifest.operators if op.uid == "totals"]
    table = pq.read_table(folder / totals.folder).to_pylist()
    sums: dict[str, int] = {}
    for event in events[: EVENTS // 2]:
        sums[event.user] = sums.get(event.user, 0) + event.amount
    assert {r["__key"]: pickle.loads(r["value"])["amount"] for r in table} == sums
    # `kinds` and the reduce after it in its query, matched to Spark's operators from the sink up.
    assert [(op.uid, op.query, op.operator_id) for op in manifest.operators if op.query == "kinds"] == [
        ("kinds", "kinds", 1),
        ("kinds-last", "kinds", 0),
    ]
    (kinds,) = [op for op in manifest.operators if op.uid == "kinds"]
    rows = pq.read_table(folder / kinds.folder).to_pylist()
    timers = sorted((r["__key"], r["ordinal"]) for r in rows if r["var"] == TIMERS_VAR)
    assert timers == sorted((e.user, FAR_MS + e.id) for e in events[: EVENTS // 2])
    assert {r["var"] for r in rows} >= {"u_count", "u_recent", "u_buckets", "u_mean"}

    # What a restore would do, asked before it: the same version restores both; one without `kinds` would drop it.
    smaller = job.path.with_name("job-v2.properties")
    smaller.write_text(
        job.path.read_text().replace("savepoint_jobs:slow_v1", "savepoint_jobs:v2_without_kinds")
    )
    assert main(["validate", "--against", str(folder), str(job.path)]) == 0
    assert "carried totals (rolling in query totals): state restored" in capsys.readouterr().out
    assert main(["validate", "--against", str(folder), str(smaller)]) == 1
    assert "dropped kinds (process in query kinds): not in the new version" in capsys.readouterr().err
    # A state variable of another kind (the savepoint's list of `recent`, now a map) cannot be read.
    remapped = job.path.with_name("job-v3.properties")
    remapped.write_text(
        job.path.read_text().replace("savepoint_jobs:slow_v1", "savepoint_jobs:v3_recent_as_map")
    )
    assert main(["validate", "--against", str(folder), str(remapped)]) == 1
    assert (
        "changed kinds (process in query kinds): state 'recent' ListState -> MapState"
        in capsys.readouterr().err
    )

    feed_events(bs, source, feed[EVENTS // 2 :])
    # A version without `kinds` is refused before it runs: the savepoint holds its state.
    assert main(["replay", "--job", str(job.path), "--from", f"savepoint:{folder}", "--yes"]) == 0
    refused = run_job(smaller, check=False)
    assert (
        f"{folder}: state of operator kinds (process) cannot be restored: the new version has no operator"
        in str(refused.error)
    )
    # The same code, restored into three sink tasks, so three shuffle partitions (a new checkpoint: any layout).
    relaid = job.path.with_name("job-relaid.properties")
    relaid.write_text(
        job.path.read_text()
        .replace("sink.tasks=2", "sink.tasks=3")
        .replace("savepoint_jobs:slow_v1", "savepoint_jobs:v1")
    )
    run_job(relaid)

    never_stopped = {"totals": topic_factory(partitions=2), "kinds": topic_factory(partitions=2)}
    run_job(_job(tmp_path / "never-stopped", bs, "v1", source, never_stopped).path)
    for sink in ("totals", "kinds"):
        got, want = read_json(bs, stopped[sink]), read_json(bs, never_stopped[sink])
        assert len(want) == EVENTS
        assert per_key(got, "user") == per_key(want, "user"), f"{sink}: the restored state did not go on"

    # The live savepoint restored into an app of its own: each query goes on from where it stood, so each user's
    # output is the tail of the never-stopped run's, from that query's offset on.
    apart = {"totals": topic_factory(partitions=2), "kinds": topic_factory(partitions=2)}
    from_live = _job(tmp_path / "from-live", bs, "v1", source, apart)
    restore_from(str(from_live.path), str(live), allow_non_restored=False)
    run_job(from_live.path)
    for sink in ("totals", "kinds"):
        got_by_user, want_by_user = (
            per_key(read_json(bs, apart[sink]), "user"),
            per_key(read_json(bs, never_stopped[sink]), "user"),
        )
        assert sum(map(len, got_by_user.values())) == EVENTS - behind[sink][0][2], sink
        for user, records in got_by_user.items():
            assert records == want_by_user[user][-len(records) :], (
                f"{sink}, {user}: not where the query stood"
            )

    # A changed version, restored with --allow-non-restored-state (`run --from-savepoint`'s reset): `totals` changed
    # (it reports ten times its sum), `counts` added (starts empty), `kinds` removed. The app has read past the
    # savepoint, so `totals` writes its second half again, from the restored sums.
    evolved = job.path.with_name("job-v4.properties")
    counts_topic = topic_factory(partitions=2)
    (evolved.parent / "counts.sink.properties").write_text(
        (evolved.parent / "totals.sink.properties")
        .read_text()
        .replace(stopped["totals"], counts_topic)
        .replace("name=totals", "name=counts")
    )
    evolved.write_text(
        job.path.read_text()
        .replace("savepoint_jobs:slow_v1", "savepoint_jobs:v4_evolved")
        .replace("kinds.sink.properties", "counts.sink.properties")
    )
    capsys.readouterr()
    assert main(["validate", "--against", str(folder), str(evolved)]) == 1
    said = capsys.readouterr()
    assert "dropped kinds" in said.err and "new counts (rolling in query counts): new" in said.out, said
    restore_from(str(evolved), str(folder), allow_non_restored=True)
    assert f"has read {EVENTS // 2} record(s) past this savepoint" in capsys.readouterr().out
    run_job(evolved)
    second = events[EVENTS // 2 :]
    counted: dict[str, int] = {}
    for user, records in per_key(read_json(bs, stopped["totals"]), "user").items():
        again = sum(1 for e in second if e.user == user)
        restored = [json.loads(r)["amount"] for r in records[-2 * again : -again]]
        assert [json.loads(r)["amount"] for r in records[-again:]] == [10 * a for a in restored], (
            f"{user}: the changed totals did not go on from the savepoint's sums"
        )
        counted[user] = again
    counts = per_key(read_json(bs, counts_topic), "user")
    assert {u: [json.loads(r)["amount"] for r in rs] for u, rs in counts.items()} == {
        u: list(range(1, n + 1)) for u, n in counted.items() if n
    }, "the added operator did not start empty"


def _wait_for(bs: str, topics: dict[str, str], done: Callable[[dict[str, int]], bool]) -> dict[str, int]:
    """Poll the records committed to each of `topics` (name -> topic) until `done` holds for their counts (at most
    120 s); returns the counts."""
    deadline = time.monotonic() + 120
    while True:
        counts = {name: len(read_json(bs, topic)) for name, topic in topics.items()}
        if done(counts) or time.monotonic() > deadline:
            return counts
        time.sleep(0.3)


def _taken(out: str) -> str:
    """The folder a `savepoint` command's output names."""
    taken = re.search(r"^savepoint of app \S+: (\S+)$", out, re.M)
    assert taken is not None, out
    return taken.group(1)


def _tables(folder: Path) -> dict[str, list[str]]:
    """Per operator uid of the savepoint at `folder`, its state rows (as text, sorted)."""
    import pyarrow.parquet as pq

    manifest = read_manifest(folder)
    return {
        op.uid: sorted(repr(row) for row in pq.read_table(folder / op.folder).to_pylist())
        for op in manifest.operators
    }


def _cli_process(args: list[str], env: dict[str, str], folder: Path) -> subprocess.Popen[bytes]:
    """`ethereal-kafka ARGS` in a process group of its own, with `env` added, its output in `folder/log`."""
    with (folder / "log").open("w") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "ethereal_kafka.cli", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
            start_new_session=True,
        )


def _kill_savepoint_after(job: Path, step: str, folder: Path) -> None:
    """Run `ethereal-kafka savepoint` in a process of its own until it traces `step`, then SIGKILL its group."""
    folder.mkdir()
    trace = folder / "trace"
    env = {SAVEPOINT_TRACE_ENV: str(trace), SAVEPOINT_PAUSE_ENV: step}
    proc = _cli_process(["savepoint", "--job", str(job)], env, folder)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            if trace.exists() and any(
                line.split(" ", 1)[1] == step for line in trace.read_text().splitlines()
            ):
                break
            time.sleep(0.2)
        assert proc.poll() is None, (folder / "log").read_text()[-3000:]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _kill_run_in_epoch(job: Path, epoch: int, folder: Path) -> None:
    """Run the job in a process of its own, its sink tasks holding each first transaction open, until a task of
    `epoch` opened its transaction; then SIGKILL the process group."""
    folder.mkdir()
    trace = folder / "trace"
    env = {TRACE_ENV: str(trace), TXN_DELAY_ENV: "60000"}
    proc = _cli_process(["run", "--available-now", str(job)], env, folder)
    try:
        deadline = time.monotonic() + 180
        opened = False
        while time.monotonic() < deadline and proc.poll() is None and not opened:
            steps = [line.split() for line in trace.read_text().splitlines()] if trace.exists() else []
            opened = any(int(s[2]) == epoch and s[4] == "open" for s in steps)
            time.sleep(0.2)
        assert opened and proc.poll() is None, (folder / "log").read_text()[-3000:]
        assert not any(s[4] == "done" for s in steps), "an epoch committed before the kill"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_a_savepoint_of_event_time_state_resumes_with_its_watermark(
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    run_job: RunJob,
    spark: SparkSession,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Event-time timers that print the watermark each element saw, a framework window, late events: the restored
    run's first epoch carries the event time read before the savepoint and reads nothing (it runs with watermark 0),
    so every later epoch runs with the watermark the never-stopped run had, and every record matches."""
    bs = kafka_cluster.bootstrap
    source = topic_factory(partitions=1)
    events = ref.make_events(12, EVENTS, 4, base_ts())  # every 17th event 20 s late
    feed = [(0, key, value, ts) for _, key, value, ts in ref.feed_list(events)]
    feed_events(bs, source, feed[: EVENTS // 2])
    names = ("slots", "cancelled", "sums", "lonely")
    stopped = {name: topic_factory(partitions=2) for name in names}
    job = _job(tmp_path / "stopped", bs, "timed", source, stopped, sink=KEYED_SINK, epoch=TIMED_EPOCH)
    run_job(job.path)
    capsys.readouterr()
    assert main(["savepoint", "--job", str(job.path)]) == 0
    folder = Path(capsys.readouterr().out.split(": ", 1)[1].splitlines()[0])
    manifest = read_manifest(folder)
    assert {op.uid for op in manifest.operators} == {"slots", "sums", "lonely"}
    assert all(q.next_watermark_ms for q in manifest.queries)
    at_savepoint = {name: len(read_json(bs, topic)) for name, topic in stopped.items()}

    feed_events(bs, source, feed[EVENTS // 2 :])
    restore_from(str(job.path), str(folder), allow_non_restored=False)
    # SIGKILLed inside the restored run's first epoch (its transactions open, nothing committed): the next start
    # replays that epoch with the savepoint's state and its hold, as the first attempt had them.
    _kill_run_in_epoch(job.path, 0, tmp_path / "kill-restored")
    run_job(job.path)

    never_stopped = {name: topic_factory(partitions=2) for name in names}
    run_job(
        _job(
            tmp_path / "never-stopped", bs, "timed", source, never_stopped, sink=KEYED_SINK, epoch=TIMED_EPOCH
        ).path
    )
    for name in names:
        got, want = read_json(bs, stopped[name]), read_json(bs, never_stopped[name])
        assert want, f"{name}: the reference run wrote nothing"
        assert per_key(got, "user") == per_key(want, "user"), f"{name}: the restored run differs"
    _shadow_and_diff(bs, job.path, folder, source, stopped, at_savepoint, spark, capsys)


def _shadow_and_diff(
    bs: str,
    job: Path,
    folder: Path,
    source: str,
    stopped: dict[str, str],
    at_savepoint: dict[str, int],
    spark: SparkSession,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`shadow` and `diff` over the range the restored run processed (the savepoint up to its last epoch, across the
    restore's new checkpoint): the same version diffs to zero over exactly production's records of the range; a
    version that changes u1's window sums differs in that key alone; production is never written."""
    production_ends = end_offsets(bs, list(stopped.values()))
    loaded = resolve_app(argparse.Namespace(app=None, job=str(job))).loaded
    same = run_shadow(loaded, folder, None, "same", spark=spark)
    assert (same.input_starts, same.input_ends) == ({source: {"0": EVENTS // 2}}, {source: {"0": EVENTS}})
    capsys.readouterr()
    assert main(["diff", "--job", str(job), "--shadow", "same"]) == 0
    out = capsys.readouterr().out
    assert "the same as production, key for key" in out, out
    for name, topic in stopped.items():
        summary = re.search(
            rf"^{topic} vs {topic}\.same: (\d+) production record\(s\), (\d+) shadow record\(s\)", out, re.M
        )
        assert summary is not None, out
        after = len(read_json(bs, topic)) - at_savepoint[name]
        assert int(summary[1]) == int(summary[2]) == after, f"{name}: {summary[0]}, {after} written after"
        assert after > 0 or name == "cancelled", f"{name}: the range holds no output"

    changed = job.with_name("job-changed.properties")
    changed.write_text(job.read_text().replace("savepoint_jobs:timed", "savepoint_jobs:timed_changed"))
    loaded = resolve_app(argparse.Namespace(app=None, job=str(changed))).loaded
    run_shadow(loaded, folder, None, "changed", spark=spark)
    diffs = {d.topic: d for d in diff_shadow(read_record(loaded.job.app_id, "changed"), bs, {})}
    assert not any(diffs[stopped[name]].differences for name in ("slots", "cancelled", "lonely"))
    assert {(d.key, d.how) for d in diffs[stopped["sums"]].differences} == {(b"u1", "changed")}
    assert main(["diff", "--job", str(changed), "--shadow", "changed"]) == 1
    assert "  changed key 'u1': record 1: production " in capsys.readouterr().out

    # A shadow name in use is refused before anything runs; production's topics were never written.
    assert main(["shadow", str(job), "--from-savepoint", str(folder), "--into", "same"]) == 1
    refused = re.search(r"shadow topic (\S+)\.same at \S+ holds records", capsys.readouterr().err)
    assert refused is not None and refused[1] in stopped.values()
    assert end_offsets(bs, list(stopped.values())) == production_ends, (
        "a shadow run wrote production's topics"
    )
