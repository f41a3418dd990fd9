"""`tests.ports.refused_address`: the port stays refused and reserved for the whole block, and is free after it."""

from __future__ import annotations

import socket

import pytest

from tests.ports import refused_address


def _port(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def test_the_port_is_refused_and_nobody_else_can_bind_it_while_the_block_runs() -> None:
    with refused_address("localhost") as address:
        assert address.startswith("localhost:")
        port = _port(address)
        with socket.socket() as client, pytest.raises(ConnectionRefusedError):
            client.connect(("127.0.0.1", port))
        with socket.socket() as other, pytest.raises(OSError, match="in use"):
            other.bind(
                ("127.0.0.1", port)
            )  # what a JVM's state server would do with a port picked and closed
    with socket.socket() as other:
        other.bind(("127.0.0.1", port))  # let go once the block ends
