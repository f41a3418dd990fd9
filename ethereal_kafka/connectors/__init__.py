"""Connectors: the Kafka source and sink on Spark, and their Kafka clients."""
