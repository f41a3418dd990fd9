"""The Kafka cluster a plain Kafka command talks to (`topics`, `produce`, `consume`), and reaching it.

Its bootstrap servers come from `--bootstrap`, else `$KAFKA_BOOTSTRAP`, else the local broker that `ethereal-kafka
broker start` started (its state records the address). Settings that reach a secured cluster come from
`--command-config FILE` (a `.properties` file of librdkafka settings, as Kafka's own tools take) and `-X KEY=VALUE`
(as kcat takes; it wins over the file). The cluster is reached first (`connectors.kafka.reach`): one line, within a
second for a refused address, when it is not there.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import ClusterMetadata

from ethereal_kafka.config.properties import load_properties
from ethereal_kafka.connectors.kafka.checks import property_suggestion
from ethereal_kafka.connectors.kafka.clients import new_admin
from ethereal_kafka.connectors.kafka.reach import reach
from ethereal_kafka.errors import ConfigError, KafkaConnectionError

#: The environment variable naming the bootstrap servers (as the README's connector files read it).
BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP"


@dataclass(frozen=True)
class Cluster:
    """Where a command's requests go.

    Attributes:
        settings: librdkafka settings for every client (security); never printed.
        origin: Where `bootstrap` came from, for error lines (`--bootstrap`, `$KAFKA_BOOTSTRAP`, ...).
    """

    bootstrap: str
    origin: str
    settings: Mapping[str, str] = field(default_factory=dict)


def add_cluster_arguments(parser: Any) -> None:
    """Add `--bootstrap`, `--command-config`, `-X` and `--connect-timeout` to a sub-command's parser."""
    group = parser.add_argument_group("cluster")
    group.add_argument(
        "--bootstrap",
        metavar="HOST:PORT",
        help=f"bootstrap servers (default: ${BOOTSTRAP_ENV}, else the local broker of `ethereal-kafka broker start`)",
    )
    group.add_argument(
        "--command-config", metavar="FILE", help="a .properties file of librdkafka settings (security, ...)"
    )
    group.add_argument(
        "-X",
        dest="properties",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a librdkafka setting (repeatable; wins over --command-config)",
    )
    group.add_argument(
        "--connect-timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="how long a cluster that does not answer is waited for (a refused address fails at once)",
    )


def resolve_cluster(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> Cluster:
    """The cluster the arguments name (see the module docstring); nothing is contacted.

    Raises:
        ConfigError: none is named and no local broker runs, or a `-X` / `--command-config` setting is malformed.
    """
    variables = os.environ if env is None else env
    settings: dict[str, str] = {}
    if args.command_config:
        settings.update(load_properties(args.command_config))
    for item in args.properties:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ConfigError(f"-X {item!r}: expected KEY=VALUE")
        settings[key.strip()] = value
    if args.bootstrap:
        return Cluster(args.bootstrap, "--bootstrap", settings)
    if variables.get(BOOTSTRAP_ENV):
        return Cluster(variables[BOOTSTRAP_ENV], f"${BOOTSTRAP_ENV}", settings)
    local = _local_broker()
    if local is not None:
        return Cluster(local, "the local broker (ethereal-kafka broker start)", settings)
    raise ConfigError(
        f"no Kafka cluster named: pass --bootstrap HOST:PORT, set {BOOTSTRAP_ENV}, or start a local broker with "
        "`ethereal-kafka broker start`"
    )


def connect(args: argparse.Namespace) -> tuple[Cluster, ClusterMetadata]:
    """The cluster the arguments name, reached: its metadata answered (within `--connect-timeout`).

    Raises:
        ConfigError: as `resolve_cluster`, or librdkafka refuses a setting (with a did-you-mean).
        KafkaConnectionError: the cluster refused or did not answer; the line names the address and its origin.
    """
    cluster = resolve_cluster(args)
    try:
        new_admin({**cluster.settings, "bootstrap.servers": cluster.bootstrap})
    except KafkaException as exc:
        error = exc.args[0]
        reason = error.str() if hasattr(error, "str") else str(error)
        raise ConfigError(
            f"librdkafka rejects the -X/--command-config settings: {reason}"
            f"{property_suggestion(reason, '-X ')}"
        ) from exc
    try:
        metadata = reach(cluster.bootstrap, cluster.settings, args.connect_timeout)
    except KafkaConnectionError as exc:
        raise KafkaConnectionError(f"{exc} (bootstrap servers from {cluster.origin})") from exc
    return cluster, metadata


def _local_broker() -> str | None:
    """The bootstrap address of this user's default local broker when it runs, else None."""
    from ethereal_kafka.broker import BrokerSettings, LocalBroker

    status = LocalBroker(BrokerSettings()).status()
    return status.bootstrap if status.running else None
