"""The Kafka test kit: a pytest plugin (`kafka_cluster`, `topic_factory`, `spark`) and helpers.

Installed as the `ethereal_kafka` pytest plugin (entry point), so any project that depends on ethereal-kafka gets
the fixtures. See `ethereal_kafka.testing.plugin`.
"""

from ethereal_kafka.testing.cluster import KafkaCluster, start_cluster
from ethereal_kafka.testing.kafka_io import create_topic, produce, read_all, read_committed

__all__ = ["KafkaCluster", "create_topic", "produce", "read_all", "read_committed", "start_cluster"]
