"""The Kafka test kit: a pytest plugin (`kafka_cluster`, `topic_factory`, `spark`, `run_job`) and helpers.

Installed as the `ethereal_kafka` pytest plugin (entry point), so any project that depends on ethereal-kafka gets
the fixtures (`ethereal_kafka.testing.plugin`). What a test of one's own job needs is importable from here: produce
input (`produce`), read what a topic holds as a read_committed consumer sees it (`read_committed`, `ReadRecord`),
and the outcome of a `run_job` run (`JobRun`, `InProcessRunError`). Users' guide: docs/testing-your-job.md.
"""

from ethereal_kafka.connectors.kafka.topics import ReadRecord, create_topic, produce, read_all, read_committed
from ethereal_kafka.testing.cluster import KafkaCluster, start_cluster
from ethereal_kafka.testing.jobs import InProcessRunError, JobRun, run_in_process

__all__ = [
    "InProcessRunError",
    "JobRun",
    "KafkaCluster",
    "ReadRecord",
    "create_topic",
    "produce",
    "read_all",
    "read_committed",
    "run_in_process",
    "start_cluster",
]
