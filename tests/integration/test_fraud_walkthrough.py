"""Issue 24 on the real broker: what a Flink engineer porting Flink's fraud-detection walkthrough runs into.

Item 1: a process function or a map without `output_type` whose elements have other fields than its input fails
the epoch with one line naming the operator, the field and the record's topic, partition and offset; nothing of the
epoch is committed (exit 0 with nulls before).

Item 2: Flink's walkthrough `FraudDetector` ported verbatim with event-time timers (`examples.fraud_walkthrough`)
gives Flink's alerts (`ref_walkthrough.flink`) on a backlog read in few large epochs and live in many small ones,
and both runs write the same records: a key's timers fire between its transactions as a watermark advancing with
the stream would, a pure function of the epoch's input. The input topic has one partition, so "Flink's answer" is
one well-defined stream order (with several partitions Flink's source watermark is the least advanced partition's,
Spark's the most advanced one's: see docs/operators-keyed.md).
"""

from __future__ import annotations

import random
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ethereal_kafka.examples import fraud_walkthrough as walkthrough
from ethereal_kafka.testing.cluster import KafkaCluster
from ethereal_kafka.testing.epochs import Epoch, split_by_epochs
from ethereal_kafka.testing.jobs import JobRun
from ethereal_kafka.testing.plugin import RunJob, TopicFactory
from tests.integration import ref_keyed
from tests.integration import ref_walkthrough as ref
from tests.integration.api_helpers import ApiJob, base_ts, feed_events, read_json, read_records, write_api_job
from tests.integration.walkthrough_jobs import LARGE, TRANSACTION_DDL

SINK = "value.format=json\nkey.format=string\n"


def _plain_transactions(count: int, seed: int, start: int) -> list[tuple[int, int, dict[str, Any]]]:
    """`(partition, offset, value)` of `count` transactions over 5 accounts and 2 partitions, ~1 s apart."""
    rng = random.Random(seed)
    offsets = [0, 0]
    out = []
    for i in range(count):
        partition = rng.randint(0, 1)
        amount = round(rng.choice([rng.uniform(0.01, 0.99), rng.uniform(2, 400), rng.uniform(501, 900)]), 2)
        value = {"account_id": rng.randint(1, 5), "amount": amount, "ts": start + i * 1_000}
        out.append((partition, offsets[partition], value))
        offsets[partition] += 1
    return out


@pytest.mark.parametrize(
    ("pipeline", "operator", "field"),
    [("process_without_output_type", "process#", "alert_ts"), ("map_without_output_type", "map#", "cents")],
)
def test_a_forgotten_output_type_fails_the_epoch_naming_operator_field_and_record(
    pipeline: str,
    operator: str,
    field: str,
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    run_job: RunJob,
) -> None:
    bs = kafka_cluster.bootstrap
    source, alerts = topic_factory(partitions=2), topic_factory(partitions=2)
    txs = _plain_transactions(60, seed=24, start=base_ts())
    feed_events(bs, source, [(p, str(v["account_id"]), v, v["ts"]) for p, _, v in txs])
    job = write_api_job(
        tmp_path,
        bs,
        f"tests.integration.walkthrough_jobs:{pipeline}",
        {"transactions": (source, f"value.format=json\nvalue.schema={TRANSACTION_DDL}\n")},
        {"alerts": (alerts, SINK)},
        max_records=1_000,
    )
    result = run_job(job.path, check=False)
    written = read_json(bs, alerts)
    assert not result.ok, f"exit 0; {len(written)} records written, e.g. {written[:3]}"
    message = str(result.error)
    print(message)
    assert "\n" not in message
    assert operator in message and f"'{field}'" in message, message
    found = re.search(rf"topic {re.escape(source)} partition (\d+) offset (\d+)", message)
    assert found is not None, message
    # The named record is one whose element the operator could not store (the reference: every large transaction
    # for the process function, every transaction for the map).
    wrong = {(p, o) for p, o, v in txs if pipeline.startswith("map") or v["amount"] > LARGE}
    assert (int(found.group(1)), int(found.group(2))) in wrong, message
    assert written == [], "nothing of the failed epoch is committed"


# -- item 2 --------------------------------------------------------------------------------------------------------
WALKTHROUGH_RECORDS = 400


def _walkthrough_job(folder: Path, bootstrap: str, source: str, alerts: str, max_records: int) -> ApiJob:
    return write_api_job(
        folder,
        bootstrap,
        "ethereal_kafka.examples.fraud_walkthrough:build",
        {"transactions": (source, f"value.format=json\nvalue.schema={walkthrough.TRANSACTION_DDL}\n")},
        {"alerts": (alerts, SINK)},
        max_records=max_records,
    )


def _feed_tx(bootstrap: str, topic: str, txs: list[ref_keyed.Tx]) -> None:
    feed_events(
        bootstrap, topic, [(t.partition, str(t.value["account_id"]), t.value, t.value["ts"]) for t in txs]
    )


def _run_live(run_job: RunJob, job: ApiJob, bootstrap: str, source: str, txs: list[ref_keyed.Tx]) -> None:
    """Run `job` while `txs` arrive in small chunks, until it has committed an epoch that read them all."""
    stop = threading.Event()
    runs: list[JobRun] = []
    thread = threading.Thread(
        target=lambda: runs.append(
            run_job(job.path, available_now=False, stop=stop, check=False, timeout_s=300)
        )
    )
    thread.start()
    try:
        for start in range(0, len(txs), 25):
            _feed_tx(bootstrap, source, txs[start : start + 25])
            time.sleep(0.3)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and thread.is_alive():
            if _read_all(job, source, len(txs)):
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"the live run did not read its input: {runs}")
    finally:
        stop.set()
        thread.join(timeout=120)
    assert runs and runs[0].ok, runs


def _read_all(job: ApiJob, source: str, count: int) -> bool:
    try:
        epochs = ref_keyed.committed_epochs(job.checkpoint / "alerts")
    except FileNotFoundError:
        return False
    return bool(epochs) and epochs[-1].ends[0].get((source, 0), 0) >= count


def _epochs(
    job: ApiJob, source: str, txs: list[ref_keyed.Tx]
) -> tuple[list[list[ref_keyed.Tx]], list[Epoch]]:
    epochs = ref_keyed.committed_epochs(job.checkpoint / "alerts")
    split = split_by_epochs(txs, lambda t: (source, t.partition, t.offset), epochs)
    assert sum(len(s) for s in split) == len(txs)
    return split, epochs


def _alerts(bootstrap: str, topic: str) -> dict[int, list[dict[str, Any]]]:
    return ref_keyed.group(read_json(bootstrap, topic), lambda r: r["id"])


def test_the_walkthrough_gives_flinks_answer_on_a_backlog_and_live(
    kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path, run_job: RunJob
) -> None:
    bs = kafka_cluster.bootstrap
    source = topic_factory(partitions=1)
    live_out, backlog_out = topic_factory(partitions=2), topic_factory(partitions=2)
    values = walkthrough.transactions(WALKTHROUGH_RECORDS, seed=24, start_ms=base_ts())
    txs = [ref_keyed.Tx(0, offset, value) for offset, value in enumerate(values)]
    flink = ref.flink(txs, walkthrough.OUT_OF_ORDER_MS)

    # Live: the transactions arrive while the job runs, in many small epochs.
    live = _walkthrough_job(tmp_path / "live", bs, source, live_out, max_records=40)
    _run_live(run_job, live, bs, source, txs)
    live_split, live_epochs = _epochs(live, source, txs)
    # Backlog: the same offsets, all there before the job starts, in two epochs, into a fresh checkpoint.
    backlog = _walkthrough_job(
        tmp_path / "backlog", bs, source, backlog_out, max_records=WALKTHROUGH_RECORDS // 2
    )
    run_job(backlog.path)
    backlog_split, backlog_epochs = _epochs(backlog, source, txs)

    got_live, got_backlog = _alerts(bs, live_out), _alerts(bs, backlog_out)
    print(
        f"flink={ref.count(flink)} live={ref.count(got_live)} ({sum(1 for s in live_split if s)} epochs) "
        f"backlog={ref.count(got_backlog)} ({sum(1 for s in backlog_split if s)} epochs); "
        f"timers only at epoch boundaries would give live={ref.count(ref.epoch_only(live_split, live_epochs))} "
        f"backlog={ref.count(ref.epoch_only(backlog_split, backlog_epochs))}"
    )
    # The documented rule, fed with the logged epochs, is Flink's answer on this input for both splits...
    assert ref.interleaved(live_split, live_epochs, walkthrough.OUT_OF_ORDER_MS) == flink
    assert ref.interleaved(backlog_split, backlog_epochs, walkthrough.OUT_OF_ORDER_MS) == flink
    assert ref.epoch_only(backlog_split, backlog_epochs) != flink, (
        "the input exercises timers inside an epoch"
    )
    assert sum(1 for s in live_split if s) >= 5 and sum(1 for s in backlog_split if s) <= 2
    # ... and the job gives it, in both runs.
    assert got_backlog == flink, (ref.count(got_backlog), ref.count(flink))
    assert got_live == flink, (ref.count(got_live), ref.count(flink))
    # Replay determinism: the same offsets gave the same records, per key in the same order, whatever the epochs.
    live_records, backlog_records = (
        {
            key: [r.value for r in rs]
            for key, rs in ref_keyed.group(read_records(bs, t), lambda r: r.key).items()
        }
        for t in (live_out, backlog_out)
    )
    assert live_records == backlog_records
