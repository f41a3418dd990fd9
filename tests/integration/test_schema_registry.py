"""The Avro codec against a real Confluent-compatible registry (Apicurio Registry, started locally; no broker)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from ethereal_kafka.serde import RegistryError, SerdeSpec, build_codec, pin_schema
from ethereal_kafka.serde.avro_codec import is_unknown_schema
from ethereal_kafka.serde.registry import registry_client
from ethereal_kafka.testing.registry import LocalSchemaRegistry, schema_registry  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
ORDER_V1 = str(ROOT / "serde" / "order.avsc")
ORDER_V2 = str(ROOT / "serde" / "order_v2.avsc")

V1_ROWS = [{"order_id": i, "customer": f"c{i}", "amount": i * 2.5} for i in range(4)]
V2_ROWS = [{"order_id": 100 + i, "customer": f"n{i}", "amount": 1.0 + i, "currency": "CHF"} for i in range(3)]


def _decode(spec: SerdeSpec, raw: list[bytes | None], topic: str):  # type: ignore[no-untyped-def]
    n = len(raw)
    return build_codec(spec).decode(pa.array(raw, pa.binary()), [topic] * n, [0] * n, list(range(n)))


def test_evolve_a_subject_and_read_with_either_schema(schema_registry: LocalSchemaRegistry) -> None:  # noqa: F811
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    subject = f"{topic}-value"
    v1 = SerdeSpec("value", "avro", schema_file=ORDER_V1, registry_url=schema_registry.url)
    v2 = SerdeSpec("value", "avro", schema_file=ORDER_V2, registry_url=schema_registry.url)
    client = registry_client(v1)
    v1_id = client.register(subject, pin_schema(v1).schema_text or "")
    client.set_compatibility(subject, "BACKWARD")

    old = build_codec(v1).encode(pa.array(V1_ROWS), topic)
    assert all(r is not None and int.from_bytes(r[1:5], "big") == v1_id for r in old)
    new = build_codec(v2).encode(
        pa.array(V2_ROWS), topic
    )  # registers v2: compatible (new field has a default)
    v2_id, latest_text = client.latest(subject)
    assert v2_id != v1_id and '"currency"' in latest_text
    assert all(r is not None and int.from_bytes(r[1:5], "big") == v2_id for r in new)

    with_v2 = _decode(v2, old + new, topic)
    assert not with_v2.errors
    assert with_v2.values.to_pylist() == [{**r, "currency": "EUR"} for r in V1_ROWS] + V2_ROWS
    with_v1 = _decode(v1, old + new, topic)
    assert not with_v1.errors
    assert with_v1.values.to_pylist() == V1_ROWS + [{k: r[k] for k in V1_ROWS[0]} for r in V2_ROWS]

    # No .avsc: the reader schema is the subject's latest (v2), pinned on the driver by resolve().
    pinned = pin_schema(SerdeSpec("value", "avro", registry_url=schema_registry.url, subject=subject))
    assert _decode(pinned, old, topic).values.to_pylist() == with_v2.values.to_pylist()[: len(old)]


def test_an_incompatible_schema_is_refused(schema_registry: LocalSchemaRegistry, tmp_path: Path) -> None:  # noqa: F811
    topic = f"strict-{uuid.uuid4().hex[:8]}"
    v1 = SerdeSpec("value", "avro", schema_file=ORDER_V1, registry_url=schema_registry.url)
    build_codec(v1).encode(pa.array(V1_ROWS[:1]), topic)
    registry_client(v1).set_compatibility(f"{topic}-value", "BACKWARD")
    broken = tmp_path / "broken.avsc"
    broken.write_text(Path(ORDER_V1).read_text().replace('"type": "double"', '"type": "string"'))
    spec = SerdeSpec("value", "avro", schema_file=str(broken), registry_url=schema_registry.url)
    with pytest.raises(RegistryError, match="refused registering") as info:
        build_codec(spec).encode(pa.array([{"order_id": 1, "customer": "x", "amount": "1"}]), topic)
    assert info.value.status == 409 and info.value.url == schema_registry.url


def test_unknown_schema_id_is_an_error_of_its_row(schema_registry: LocalSchemaRegistry) -> None:  # noqa: F811
    topic = f"unknown-{uuid.uuid4().hex[:8]}"
    spec = SerdeSpec("value", "avro", schema_file=ORDER_V1, registry_url=schema_registry.url)
    good = build_codec(spec).encode(pa.array(V1_ROWS[:1]), topic)[0]
    assert good is not None
    stray = b"\x00" + (987_654).to_bytes(4, "big") + good[5:]
    result = _decode(spec, [good, stray, None], topic)
    assert list(result.errors) == [1]
    assert result.values.to_pylist() == [V1_ROWS[0], None, None]
    error = result.errors[1]
    assert is_unknown_schema(error) and "schema id 987654 is not registered" in error.message
    assert (error.topic, error.offset, error.raw) == (topic, 1, stray)


def test_unreachable_registry_fails_clearly_after_bounded_retries(refused_address: str) -> None:
    url = f"http://{refused_address}/apis/ccompat/v7"  # bound for the test, never listening
    for spec in (
        SerdeSpec(
            "value", "avro", registry_url=url, subject="s-value", registry_attempts=2, registry_backoff_s=0.05
        ),
        SerdeSpec(
            "value",
            "avro",
            schema_file=ORDER_V1,
            registry_url=url,
            registry_attempts=2,
            registry_backoff_s=0.05,
        ),
    ):
        started = time.monotonic()
        with pytest.raises(
            RegistryError, match=rf"schema registry {url} unreachable .*2 attempt\(s\) failed"
        ) as info:
            build_codec(spec).encode(pa.array(V1_ROWS[:1]), "t")
        assert time.monotonic() - started < 10
        assert info.value.url == url and info.value.status is None
