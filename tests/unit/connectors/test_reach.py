"""Reaching a cluster fails fast when nothing listens: a refused port or an unknown host name end in about a second,
whatever the timeout (issue 24, item 4). Real clients against addresses nobody answers on: no broker needed."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ethereal_kafka.connectors.kafka.checks import check_topics
from ethereal_kafka.connectors.kafka.reach import DOWN_GRACE_S, reach
from ethereal_kafka.errors import KafkaConnectionError
from tests.ports import refused_address

#: Well under every timeout used below: a refusal must not wait for the timeout.
FAST_S = DOWN_GRACE_S + 2.0


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_refused_connection_fails_in_about_a_second(host: str) -> None:
    with refused_address(host) as address, pytest.raises(KafkaConnectionError) as caught:
        began = time.monotonic()
        reach(address, timeout_s=15)
    elapsed = time.monotonic() - began
    assert elapsed < FAST_S, f"{elapsed:.1f}s to give up on a refused port"
    assert str(caught.value).startswith(f"Kafka at {address} is not reachable: Connect to ")
    assert "Connection refused" in str(caught.value)


def test_a_host_name_that_does_not_resolve_fails_fast() -> None:
    began = time.monotonic()
    with pytest.raises(
        KafkaConnectionError, match=r"Kafka at no-such-host\.invalid:9092 is not reachable: .*resolve"
    ):
        reach("no-such-host.invalid:9092", timeout_s=15)
    assert time.monotonic() - began < FAST_S


def test_validate_connect_names_the_files_and_fails_fast(tmp_path: Path, refused_address: str) -> None:
    """`validate --connect` and `run` check topics with `check_topics`: before, a refused port cost the whole
    timeout (10 s for validate, 15 s for run)."""
    address = refused_address
    files = {str(tmp_path / "in.properties"): ["orders"], str(tmp_path / "out.properties"): ["out"]}
    began = time.monotonic()
    [line] = check_topics(address, files, {}, timeout_s=15)
    assert time.monotonic() - began < FAST_S
    assert line.startswith(
        f"{tmp_path / 'in.properties'}, {tmp_path / 'out.properties'}: Kafka at {address} "
    )
    assert "Connection refused" in line
