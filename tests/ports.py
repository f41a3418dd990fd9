"""A loopback address nobody listens on, kept that way for as long as a test points a client at it.

A test that wants a refused connection keeps its port bound (a bound socket that never listens: a connect is
refused, and no other process can bind the port) and takes it outside the ephemeral range (`broker.ports`). A port
only picked and closed again is free for the next `bind(("127.0.0.1", 0))` on the machine, and the Spark JVMs of
the other test workers bind ephemeral loopback ports all the time: every transformWithState task serves its state
on one. A client retrying against such a port can reach a state server, whose thread dies on
`assert(version == 0)` when a request's first int is not its protocol's version; the Python task it served then
waits for an answer that never comes. That is the likely cause of the seven-query kill run's one hang
(docs/dev/testing.md): the server died on that assertion, and tests released such ports while librdkafka retried.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ethereal_kafka.broker.ports import held_ports


@contextlib.contextmanager
def refused_address(host: str = "127.0.0.1") -> Iterator[str]:
    """`host:port` of a loopback port bound and never listening while the block runs: connects to it are refused.

    Args:
        host: How the address names the loopback host (`127.0.0.1` or `localhost`); the port is bound on
            127.0.0.1 either way.
    """
    with held_ports(1) as [port]:
        yield f"{host}:{port}"
