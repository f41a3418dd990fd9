"""Loopback ports for local brokers: free ones chosen outside the system's ephemeral port range.

A local broker keeps its ports across restarts (its state file), and its clients reconnect to them while it is
down. A port of the ephemeral range, the range `bind(("127.0.0.1", 0))` draws from, is handed to the next process
that binds port 0 as soon as nobody holds it: a restarting broker would find it busy, and the clients' reconnects
would reach whatever took it. Spark JVMs take such ports all the time (every transformWithState task serves its
state on one), and a state server that reads a Kafka request instead of its own protocol's version dies on an
assertion, leaving its task waiting forever. The kernel never hands out a port outside the range that way.
"""

from __future__ import annotations

import contextlib
import random
import socket
from collections.abc import Iterator
from pathlib import Path

__all__ = ["ephemeral_range", "free_port", "held_ports", "pick_ports"]

#: Linux's own default, for systems that do not say (`/proc/sys/net/ipv4/ip_local_port_range`).
DEFAULT_EPHEMERAL = (32768, 60999)
#: The lowest port chosen: above the registered ports most local services use (Kafka's 9092, 8080-8089, ...).
LOWEST = 20000
#: Tries of random ports before falling back to a port from the ephemeral range.
TRIES = 200


def ephemeral_range(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> tuple[int, int]:
    """The first and last port the system hands out for `bind` to port 0 (Linux's default where it does not say)."""
    try:
        low, high = (int(part) for part in path.read_text().split())
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL
    return low, high


def _candidates(ephemeral: tuple[int, int]) -> range:
    """The ports outside `ephemeral` to choose from: below it when there is room, else above it."""
    low, high = ephemeral
    if low - LOWEST >= 1000:
        return range(LOWEST, low)
    return range(high + 1, 65536)


def _bound(sock: socket.socket, port: int) -> bool:
    try:
        sock.bind(("127.0.0.1", port))
    except OSError:
        return False
    return True


@contextlib.contextmanager
def held_ports(count: int, avoid: frozenset[int] = frozenset()) -> Iterator[list[int]]:
    """`count` distinct free ports on 127.0.0.1 outside the ephemeral range, none of `avoid`, bound (never
    listening: a connect to one is refused, and no other process can bind it) until the block ends; from the
    ephemeral range only when no other port binds."""
    candidates = _candidates(ephemeral_range())
    with contextlib.ExitStack() as held:
        ports: list[int] = []
        for _ in range(count):
            sock = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            for _ in range(TRIES if len(candidates) else 0):
                port = random.choice(candidates)
                if port not in avoid and port not in ports and _bound(sock, port):
                    break
            else:
                sock.bind(("127.0.0.1", 0))
            ports.append(int(sock.getsockname()[1]))
        yield ports


def pick_ports(count: int, avoid: frozenset[int] = frozenset()) -> list[int]:
    """`count` distinct free ports (`held_ports`), let go again for their user to bind."""
    with held_ports(count, avoid) as ports:
        return ports


def free_port(avoid: int = 0) -> int:
    """One free port on 127.0.0.1 outside the ephemeral range, not `avoid` (see `pick_ports`)."""
    return pick_ports(1, frozenset({avoid}))[0]
