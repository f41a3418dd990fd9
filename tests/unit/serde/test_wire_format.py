"""Confluent wire format against confluent-kafka's in-process `mock://` registry (no server)."""

import time
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from ethereal_kafka.errors import ConfigError
from ethereal_kafka.serde import RegistryError, SerdeSpec, build_codec, pin_schema
from ethereal_kafka.serde.avro_codec import is_unknown_schema
from ethereal_kafka.serde.registry import RegistryClient, registry_client
from tests.unit.serde.conftest import ORDER_V1, ORDER_V2, decode

V1_ROWS = [{"order_id": i, "customer": f"c{i}", "amount": i + 0.5} for i in range(3)]
V2_ROWS = [{**row, "order_id": 10 + i, "currency": "USD"} for i, row in enumerate(V1_ROWS)]


@pytest.fixture
def url() -> str:
    """A fresh mock registry per test (clients are shared per URL within the process)."""
    return f"mock://unit-{uuid.uuid4().hex[:8]}"


def test_wire_round_trip(url: str, field: str) -> None:
    spec = SerdeSpec(field, "avro", schema_file=ORDER_V1, registry_url=url)
    encoded = build_codec(spec).encode(pa.array([*V1_ROWS, None]), "orders")
    schema_id = registry_client(spec).latest(f"orders-{field}")[0]
    assert all(
        e is not None and e[0] == 0 and int.from_bytes(e[1:5], "big") == schema_id for e in encoded[:3]
    )
    assert encoded[3] is None
    result = decode(spec, encoded, topic="orders")
    assert not result.errors and result.values.to_pylist() == [*V1_ROWS, None]


def test_evolution_through_the_registry(url: str) -> None:
    v1 = SerdeSpec("value", "avro", schema_file=ORDER_V1, registry_url=url)
    v2 = SerdeSpec("value", "avro", schema_file=ORDER_V2, registry_url=url)
    old = build_codec(v1).encode(pa.array(V1_ROWS), "orders")
    new = build_codec(v2).encode(pa.array(V2_ROWS), "orders")
    assert old[0][1:5] != new[0][1:5]  # type: ignore[index]
    with_v2 = decode(v2, old + new)
    assert not with_v2.errors
    assert with_v2.values.to_pylist() == [{**r, "currency": "EUR"} for r in V1_ROWS] + V2_ROWS
    with_v1 = decode(v1, old + new)
    assert not with_v1.errors
    assert with_v1.values.to_pylist() == V1_ROWS + [{k: r[k] for k in V1_ROWS[0]} for r in V2_ROWS]
    # Without a schema file the reader is the subject's latest schema, pinned by resolve().
    latest = pin_schema(SerdeSpec("value", "avro", registry_url=url, subject="orders-value"))
    assert '"currency"' in (latest.schema_text or "")
    assert decode(latest, old).values.to_pylist() == with_v2.values.to_pylist()[:3]


def test_writer_schemas_are_fetched_once_per_id(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = SerdeSpec("value", "avro", schema_file=ORDER_V1, registry_url=url)
    codec = build_codec(spec)
    encoded = codec.encode(pa.array(V1_ROWS), "orders")
    calls: list[int] = []
    original = RegistryClient.schema_by_id

    def counting(self: RegistryClient, schema_id: int) -> str:
        calls.append(schema_id)
        return original(self, schema_id)

    monkeypatch.setattr(RegistryClient, "schema_by_id", counting)
    for _ in range(3):
        codec.decode(pa.array(encoded, pa.binary()), ["orders"] * 3, [0] * 3, [0, 1, 2])
    assert len(calls) == 1


def test_bad_records_are_errors_of_their_rows(url: str) -> None:
    spec = SerdeSpec("value", "avro", schema_file=ORDER_V1, registry_url=url)
    good = build_codec(spec).encode(pa.array(V1_ROWS[:1]), "orders")[0]
    assert good is not None
    raw = [
        good,
        b"\x01" + good[1:],  # bad magic byte
        good[:3],  # shorter than the header
        b"\x00" + (999_999).to_bytes(4, "big") + good[5:],  # unknown schema id
        good[:-2],  # truncated payload
        None,
    ]
    result = decode(spec, raw, topic="orders", partition=4)
    assert sorted(result.errors) == [1, 2, 3, 4]
    assert result.values.to_pylist() == [V1_ROWS[0], None, None, None, None, None]
    assert "magic byte 1" in result.errors[1].message
    assert "shorter than the 5-byte" in result.errors[2].message
    assert "schema id 999999 is not registered" in result.errors[3].message
    assert is_unknown_schema(result.errors[3]) and not is_unknown_schema(result.errors[1])
    assert (result.errors[3].partition, result.errors[3].offset) == (4, 103)
    assert "truncated" in result.errors[4].message


def test_subject_defaults_and_registry_reader_needs_a_subject(url: str) -> None:
    spec = SerdeSpec("key", "avro", schema_file=ORDER_V1, registry_url=url, subject="custom")
    build_codec(spec).encode(pa.array(V1_ROWS[:1]), "orders")
    assert registry_client(spec).latest("custom")[0] > 0
    with pytest.raises(ConfigError, match="name exactly one topic"):
        build_codec(SerdeSpec("key", "avro", registry_url=url))
    with pytest.raises(RegistryError, match="refused fetching the latest schema of subject 'nope'"):
        build_codec(SerdeSpec("key", "avro", registry_url=url, subject="nope"))


def test_unreachable_registry_fails_after_bounded_retries(tmp_path: Path) -> None:
    dead = "http://127.0.0.1:9"  # discard port: connection refused
    spec = SerdeSpec(
        "value", "avro", schema_file=ORDER_V1, registry_url=dead, registry_attempts=3, registry_backoff_s=0.01
    )
    codec = build_codec(spec)  # the reader schema is local: building needs no registry
    started = time.monotonic()
    with pytest.raises(
        RegistryError, match=r"schema registry http://127.0.0.1:9 unreachable .* 3 attempt"
    ) as info:
        codec.encode(pa.array(V1_ROWS[:1]), "orders")
    assert time.monotonic() - started < 5
    assert info.value.url == dead and info.value.__cause__ is not None
    header = b"\x00" + (1).to_bytes(4, "big")
    with pytest.raises(RegistryError, match="fetching schema id 1"):
        codec.decode(pa.array([header + b"\x02"], pa.binary()), ["orders"], [0], [0])
