"""`broker.ports`: free loopback ports outside the ephemeral range, the range `bind` to port 0 draws from."""

from __future__ import annotations

import socket
from pathlib import Path

from ethereal_kafka.broker.ports import DEFAULT_EPHEMERAL, LOWEST, ephemeral_range, free_port, pick_ports


def test_the_range_is_read_from_the_system_or_linuxs_default(tmp_path: Path) -> None:
    given = tmp_path / "range"
    given.write_text("40000\t50000\n")
    assert ephemeral_range(given) == (40000, 50000)
    assert ephemeral_range(tmp_path / "missing") == DEFAULT_EPHEMERAL
    given.write_text("garbage")
    assert ephemeral_range(given) == DEFAULT_EPHEMERAL


def test_picked_ports_are_distinct_free_and_outside_the_ephemeral_range() -> None:
    low, high = ephemeral_range()
    ports = pick_ports(6)
    assert len(set(ports)) == 6
    for port in ports:
        assert LOWEST <= port < low or port > high, port
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))  # free once chosen


def test_a_busy_or_avoided_port_is_never_chosen() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", free_port()))
        taken = busy.getsockname()[1]
        assert all(free_port(avoid=taken) != taken for _ in range(50))
