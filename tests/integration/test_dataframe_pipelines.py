"""DataFrame pipelines (`function(sources) -> {sink: DataFrame}`) with several queries, exactly once."""

from __future__ import annotations

from pathlib import Path

from ethereal_kafka.examples import eos
from ethereal_kafka.testing.cluster import KafkaCluster
from ethereal_kafka.testing.crash import compare
from ethereal_kafka.testing.plugin import RunJob, TopicFactory
from tests.integration.api_helpers import write_api_job
from tests.integration.eos_helpers import drop_last_commit, feed, output, pairs


def test_two_queries_reading_one_source_keep_their_own_markers(
    kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path, run_job: RunJob
) -> None:
    """Both queries are partition-preserving over one source: each commits its input offsets and marker with its
    output. Sharing one group, each overwrote the other's marker, so a query replaying its last epoch (its Spark
    commit log entry lost in a crash after the Kafka commit) found the other's marker and wrote the epoch again."""
    bs = kafka_cluster.bootstrap
    src, out_a, out_b = topic_factory(partitions=2), topic_factory(partitions=2), topic_factory(partitions=2)
    inputs = eos.events(600)
    feed(bs, src, inputs, 2)
    job = write_api_job(
        tmp_path,
        bs,
        "tests.integration.pipelines_dataframe:two_copies",
        {"events": (src, "")},
        {"a": (out_a, ""), "b": (out_b, "")},
        max_records=150,
    )
    run_job(job.path)
    for query in ("a", "b"):  # a crash after both queries' last Kafka commits, before Spark logged them
        drop_last_commit(job.checkpoint / query)
    run_job(job.path)
    for topic in (out_a, out_b):
        cmp = compare(inputs, pairs(output(bs, topic)))
        assert (cmp.duplicates, cmp.lost, cmp.unexpected) == (0, 0, 0), topic


def test_queries_reading_different_sources_of_one_job_start_and_stay_exact(
    kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path, run_job: RunJob
) -> None:
    """A partition-preserving query reads one of the job's two sources (it used to crash at start: the coordinator
    took every source of the job for the query's)."""
    bs = kafka_cluster.bootstrap
    orders, customers = topic_factory(partitions=2), topic_factory(partitions=2)
    out_a, out_b = topic_factory(partitions=2), topic_factory(partitions=2)
    first, second = eos.events(300), eos.events(200, keys=5)
    feed(bs, orders, first, 2)
    feed(bs, customers, second, 2)
    job = write_api_job(
        tmp_path,
        bs,
        "tests.integration.pipelines_dataframe:one_sink_per_source",
        {"orders": (orders, ""), "customers": (customers, "")},
        {"a": (out_a, ""), "b": (out_b, "")},
        max_records=100,
    )
    run_job(job.path)
    for expected, topic in ((first, out_a), (second, out_b)):
        cmp = compare(expected, pairs(output(bs, topic)))
        assert (cmp.duplicates, cmp.lost, cmp.unexpected) == (0, 0, 0), topic
