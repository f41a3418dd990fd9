"""Helpers shared by the serde unit tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from ethereal_kafka.serde import DecodeResult, SerdeSpec, build_codec

ROOT = Path(__file__).resolve().parents[3]
ORDER_V1 = str(ROOT / "serde" / "order.avsc")
ORDER_V2 = str(ROOT / "serde" / "order_v2.avsc")

Decode = Callable[..., DecodeResult]


def decode(spec: SerdeSpec, raw: list[bytes | None], topic: str = "t", partition: int = 3) -> DecodeResult:
    """Decode `raw` with offsets 100, 101, ... on `topic[partition]`."""
    codec = build_codec(spec)
    n = len(raw)
    return codec.decode(pa.array(raw, pa.binary()), [topic] * n, [partition] * n, [100 + i for i in range(n)])


@pytest.fixture(params=["key", "value"])
def field(request: pytest.FixtureRequest) -> str:
    """Each test using it runs for the key and for the value."""
    return str(request.param)
