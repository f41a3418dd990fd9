"""Kafka connectors: a Spark Python DataSource stream reader and a sink, both over confluent-kafka."""
