"""The metrics endpoint of a running job, scraped over HTTP and checked against the input produced and a plain-Python
reference of the job's output."""

from __future__ import annotations

import logging
import socket
import threading
import time
import urllib.request
from collections import defaultdict
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ethereal_kafka.connectors.kafka.topics import produce
from ethereal_kafka.examples import eos
from ethereal_kafka.testing.cluster import KafkaCluster
from ethereal_kafka.testing.jobs import JobRun
from ethereal_kafka.testing.plugin import RunJob, TopicFactory
from tests.integration.eos_helpers import feed, output, pairs, write_job

GOOD = 1500
POISON = 23
PARTITIONS = 2
Samples = dict[str, list[tuple[dict[str, str], float]]]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape(port: int) -> Samples:
    """Every sample of the endpoint: `{sample name: [(labels, value)]}`."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    samples: Samples = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[sample.name].append((dict(sample.labels), sample.value))
    return samples


def _total(samples: Samples, name: str, **labels: str) -> float:
    return sum(v for found, v in samples.get(name, []) if all(found.get(k) == x for k, x in labels.items()))


@pytest.mark.timeout(420)
def test_endpoint_counts_records_dead_letters_latency_and_epochs(
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    run_job: RunJob,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bs = kafka_cluster.bootstrap
    src, dst = topic_factory(partitions=PARTITIONS), topic_factory(partitions=PARTITIONS)
    dlq = topic_factory(partitions=1)
    good = eos.events(GOOD)
    poison = [(f"k{i % 13}".encode(), b"{not json " + str(i).encode()) for i in range(POISON)]
    feed(bs, src, good, PARTITIONS)
    for i, record in enumerate(poison):
        produce(bs, src, [record], partition=i % PARTITIONS)
    expected_out = len(eos.stateless_reference(good))
    port = _free_port()
    files = write_job(
        tmp_path,
        bs,
        src,
        dst,
        "ethereal_kafka.examples.eos:stateless",
        max_records=400,
        extra_job=f"metrics.port={port}\nprogress=log\nprogress.interval.ms=2000\n",
    )
    with (tmp_path / "source.properties").open("a") as source:
        # Decoding the value finds the poison records; the pipeline still parses `value` itself.
        source.write(
            f"value.format=json\nvalue.schema=id bigint, seq bigint, amount bigint\non.error=dlq\ndlq.topic={dlq}\n"
        )
    began = time.monotonic()
    # The job runs in-process, in a thread, until the test has scraped what it needs and sets `stop`.
    stop = threading.Event()
    runs: list[JobRun] = []
    job = threading.Thread(
        target=lambda: runs.append(
            run_job(files.job, available_now=False, stop=stop, check=False, timeout_s=300)
        )
    )
    caplog.set_level(logging.INFO, logger="ethereal_kafka")
    job.start()
    samples: Samples = {}
    try:
        deadline = time.monotonic() + 240  # ~45 s on an idle 2-core machine
        while time.monotonic() < deadline:
            assert job.is_alive(), runs
            try:
                samples = _scrape(port)
            except OSError:
                time.sleep(0.5)
                continue
            caught_up = _total(samples, "ethereal_kafka_records_in_total") >= GOOD + POISON
            lags = samples.get("ethereal_kafka_consumer_lag_records", [])
            if caught_up and len(lags) == PARTITIONS and all(v == 0 for _, v in lags):
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"the job did not catch up: {dict(samples)}\n{caplog.text[-3000:]}")
        time.sleep(1.0)  # nothing more may arrive: the counters must not move past the input
        samples = _scrape(port)
        scraped_s = time.monotonic() - began
    finally:
        stop.set()
        job.join(timeout=60)
    assert runs and runs[0].ok, runs
    labels = {"app_id": files.app_id, "query": "out"}
    assert _total(samples, "ethereal_kafka_records_in_total", **labels, source="events") == GOOD + POISON
    assert _total(samples, "ethereal_kafka_dead_lettered_records_total", **labels, source="events") == POISON
    assert _total(samples, "ethereal_kafka_skipped_records_total") == 0
    assert _total(samples, "ethereal_kafka_records_out_total", **labels, sink="out") == expected_out
    # Every input record (poison ones too) has one end-to-end latency observation; all are positive and recent.
    count = _total(samples, "ethereal_kafka_end_to_end_latency_seconds_count", **labels, source="events")
    total = _total(samples, "ethereal_kafka_end_to_end_latency_seconds_sum", **labels, source="events")
    assert count == GOOD + POISON
    assert 0 < total / count < scraped_s + 60
    buckets = [
        v for found, v in samples["ethereal_kafka_end_to_end_latency_seconds_bucket"] if found["le"] == "+Inf"
    ]
    assert buckets == [count]
    # Epochs, their duration and the commit latency of their transactions are there and positive.
    committed = _total(samples, "ethereal_kafka_epochs_total", **labels, outcome="committed")
    assert committed >= (GOOD + POISON) / 400
    assert _total(samples, "ethereal_kafka_epochs_total", outcome="failed") == 0
    assert _total(samples, "ethereal_kafka_epoch_duration_seconds_count", **labels) == committed
    assert _total(samples, "ethereal_kafka_epoch_duration_seconds_sum", **labels) > 0
    assert _total(samples, "ethereal_kafka_transaction_commit_seconds_count", **labels) >= committed
    assert _total(samples, "ethereal_kafka_transaction_commit_seconds_sum", **labels) > 0
    assert _total(samples, "ethereal_kafka_last_epoch", **labels) >= committed - 1
    assert _total(samples, "ethereal_kafka_last_commit_timestamp_seconds", **labels) > time.time() - 600
    assert {f["partition"] for f, _ in samples["ethereal_kafka_consumer_lag_records"]} == {"0", "1"}
    assert samples["process_resident_memory_bytes"][0][1] > 0
    # What the metrics claim is what Kafka holds.
    assert len(pairs(output(bs, dst))) == expected_out
    from ethereal_kafka.connectors.kafka.topics import read_committed

    assert len(read_committed(bs, dlq)) == POISON
    log = caplog.text + capsys.readouterr().err  # the log lines, then the progress lines (stderr)
    print(f"caught up and scraped after {scraped_s:.1f} s; job log:\n{log[-2500:]}")
    assert f"metrics at http://127.0.0.1:{port}/metrics" in log
    assert " | in " in log and " | lag " in log, log[-2000:]
