"""Checks of connector configurations before anything runs (`ethereal-kafka validate`, `run` before Spark).

Offline: serde settings, schemas, columns (`check_connector`) and the `kafka.*` pass-through settings, judged by
librdkafka (`check_client_settings`). A schema registry is not contacted, so avro settings that read their schema
from a registry are only checked for completeness. Online, only when asked (`validate --connect`): the cluster
answers and the topics exist (`check_topics`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ethereal_kafka.config.connectors import KafkaSinkConfig, KafkaSourceConfig, KafkaTableConfig
from ethereal_kafka.config.model import close_matches, did_you_mean
from ethereal_kafka.connectors.kafka.clients import new_consumer, new_producer
from ethereal_kafka.connectors.kafka.decoding import SourceLayout
from ethereal_kafka.connectors.kafka.librdkafka_properties import known_properties
from ethereal_kafka.connectors.kafka.reach import reach
from ethereal_kafka.errors import KafkaConnectionError
from ethereal_kafka.serde import SerdeSpec, build_codec

_NO_SUCH_PROPERTY = re.compile(r'No such configuration property: "([^"]+)"')


def check_connector(config: KafkaSourceConfig | KafkaSinkConfig | KafkaTableConfig) -> None:
    """Parse every schema the connector names and, for a source, fix its output columns.

    Raises:
        ConfigError: a missing schema, an unreadable or malformed `.avsc`, a malformed Spark DDL, or a decoded
            column that would shadow another.
    """
    offline = True
    for field in ("key", "value"):
        sink_json = isinstance(config, KafkaSinkConfig) and getattr(config, f"{field}_format") == "json"
        if sink_json and getattr(config, f"{field}_schema") is None:
            continue  # a sink takes a json record's schema from its columns
        spec = SerdeSpec.from_settings(config, field)
        if spec.format == "avro" and spec.schema_text is None:
            offline = False  # the reader schema comes from the registry at start
            continue
        build_codec(spec).arrow_type()
    if isinstance(config, KafkaSourceConfig) and offline:
        SourceLayout.from_config(config)


def check_client_settings(
    config: KafkaSourceConfig | KafkaSinkConfig | KafkaTableConfig, file: str | Path
) -> str | None:
    """Let librdkafka judge the connector's `kafka.*` pass-through settings; returns the problem, or None.

    A client of the connector's kind (a consumer for sources and tables, a producer for sinks) is constructed with
    the settings and closed at once, before any request is sent: librdkafka refuses an unknown property
    (`kafka.linger.mss`) or a bad value while it parses the configuration, long before a run would meet it. An
    unknown property gets a did-you-mean naming the closest properties librdkafka knows (at most three).
    Called by `ethereal-kafka validate` and by `run` before Spark starts (`runtime.preflight`). Never raises.
    """
    from confluent_kafka import KafkaException

    settings: dict[str, Any] = {"bootstrap.servers": config.bootstrap_servers, **config.passthrough}
    try:
        if isinstance(config, KafkaSinkConfig):
            new_producer(settings).flush(0)
        else:
            new_consumer({**settings, "group.id": "ethereal-kafka-validate"}).close()
    except KafkaException as exc:
        error = exc.args[0]
        reason = error.str() if hasattr(error, "str") else str(error)
        return f"{file}: librdkafka rejects the kafka.* settings: {reason}{property_suggestion(reason)}"
    return None


def property_suggestion(reason: str, prefix: str = "kafka.") -> str:
    """` (did you mean kafka.X?)` for librdkafka's `No such configuration property: "X"`, naming the closest
    properties it knows (`librdkafka_properties`), each after `prefix`; empty for any other refusal."""
    unknown = _NO_SUCH_PROPERTY.search(reason)
    if unknown is None:
        return ""
    matches = close_matches(unknown.group(1), known_properties())
    return did_you_mean([f"{prefix}{name}" for name in matches])


def check_topics(
    bootstrap: str,
    topics: Mapping[str, Sequence[str]],
    passthrough: Mapping[str, str] | None = None,
    timeout_s: float = 10.0,
) -> list[str]:
    """Ask the cluster at `bootstrap` whether it answers and has every topic; returns one line per problem.

    Args:
        bootstrap: The connectors' `bootstrap.servers`.
        topics: Per connector file, the topics it reads or writes.
        passthrough: `kafka.*` settings of one of those connectors (security settings reach the cluster).
        timeout_s: How long the cluster may take to answer the one metadata request (a refused connection fails
            in about a second: `reach.reach`).

    Called by `ethereal-kafka validate --connect` and by `run` before Spark starts. Bounded by `timeout_s`; never
    raises. librdkafka's own log lines go to `clients.librdkafka_logger()`, not the terminal: the returned lines name
    the file, the topic and the address.
    """
    try:
        existing = set(reach(bootstrap, passthrough, timeout_s).topics)
    except KafkaConnectionError as exc:
        files = ", ".join(str(f) for f in topics)
        return [f"{files}: {exc}"]
    return [
        f"{file}: topic {topic!r} does not exist at {bootstrap}"
        for file, names in topics.items()
        for topic in names
        if topic not in existing
    ]
