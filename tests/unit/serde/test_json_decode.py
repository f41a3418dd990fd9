"""Record-by-record decoding parses with orjson where it reads JSON as `json.loads` does: same values, same errors."""

from __future__ import annotations

import json
import random
from typing import Any

import orjson
import pytest

from ethereal_kafka.serde import DecodeResult, SerdeSpec, build_codec, json_decode
from tests.unit.serde.conftest import decode

# `day date` keeps every record off Arrow's bulk reader, so each one goes through RowDecoder.
DDL = (
    "id bigint, small tinyint, x double, name string, price decimal(30,2), ts timestamp, day date, blob binary, "
    "tags array<int>, attrs map<string,double>, inner struct<a:int, b:string>"
)

EDGE_RECORDS = [
    b'{"id": 1, "id": 2}',  # a duplicate key: the last wins
    b'{"id": 18446744073709551616}',  # beyond 64 bits: orjson would read a float
    b'{"price": 123456789012345678901234}',  # a long integer as a decimal: exact
    b'{"price": -9223372036854775809}',
    b'{"x": 1e400}',  # json.loads reads infinity; orjson refuses
    b'{"x": NaN}',
    b'{"x": -Infinity}',
    b'\xef\xbb\xbf{"id": 3}',  # a UTF-8 byte order mark
    b'{"name": "\\ud800"}',  # a lone surrogate escape
    b'{"name": "a\\u0000b\\n"}',
    b'"just a string"',
    b"[]",
    b"",
    b"{",
    b'{"id": 1} trailing',
    b'{"id": 1.0}',
    b'{"small": 128}',
    b'{"tags": [1, "2"]}',
    b'{"attrs": {"k": true}}',
    b'{"inner": {"a": 2147483648}}',
    b'{"day": "2024-02-30"}',
    b'{"blob": "AAH/"}',
    b'{"ts": "2024-01-02T03:04:05+01:00", "day": "2024-01-02"}',
    '{"name": "é\u2028😀"}'.encode(),
    "{}".encode("utf-16"),
]


def random_record(r: random.Random) -> bytes:
    pick: dict[str, list[Any]] = {
        "id": [r.randint(-(2**64), 2**64), r.random(), True, "7", None],
        "small": [r.randint(-200, 200), None],
        "x": [
            r.uniform(-1e20, 1e20),
            r.randint(-(10**25), 10**25),
            float(f"{r.random()}e{r.randint(-330, 330)}"),
            None,
        ],
        "name": ["".join(r.choice('ab"\\\n\u00e9\U0001f600') for _ in range(r.randint(0, 6))), 5],
        "price": [
            f"{r.randint(-(10**6), 10**6) / 100:.2f}",
            r.randint(-(10**30), 10**30),
            r.random(),
            "1.234",
        ],
        "ts": ["2024-03-01T10:00:00Z", "2024-03-01 09:30:00.25", "bad", 17],
        "day": ["2024-01-02", "20240102", "x", None],
        "blob": ["AAH/", "***", ""],
        "tags": [[r.randint(-5, 5) for _ in range(3)], [1, None, 2.5], "no"],
        "attrs": [{"k": r.random()}, {"k": "v"}, []],
        "inner": [{"a": r.randint(-5, 5), "b": "s"}, {"a": "s"}, 3],
    }
    # Each list starts with a good value, taken most of the time; the rest are edge or bad values.
    record = {
        name: values[0] if r.random() < 0.85 else r.choice(values)
        for name, values in pick.items()
        if r.random() < 0.7
    }
    text = json.dumps(record, separators=(",", r.choice([":", ": "])), ensure_ascii=r.random() < 0.5)
    return text.encode()


def outcome(result: DecodeResult) -> tuple[Any, dict[int, tuple[str, str]]]:
    return result.values.to_pylist(), {i: (e.message, e.cause_class) for i, e in result.errors.items()}


def json_loads_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every record go through `json.loads`: the parse the codec used before orjson."""

    def refuse(data: bytes) -> Any:
        raise orjson.JSONDecodeError("refused", "", 0)

    monkeypatch.setattr(json_decode.orjson, "loads", refuse)


@pytest.mark.parametrize("seed", range(4))
def test_orjson_and_json_loads_decode_alike(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    r = random.Random(seed)
    records: list[bytes | None] = [*EDGE_RECORDS, *(random_record(r) for _ in range(400)), None]
    spec = SerdeSpec("value", "json", spark_ddl=DDL)
    fast = outcome(decode(spec, records))
    with monkeypatch.context() as patch:
        json_loads_only(patch)
        reference = outcome(decode(spec, records))
    assert fast == reference
    assert len(fast[1]) > 50 and sum(v is not None for v in fast[0]) > 50  # both good and bad records met


def test_long_integers_keep_their_digits() -> None:
    result = decode(SerdeSpec("value", "json", spark_ddl=DDL), EDGE_RECORDS[1:3])
    assert "18446744073709551616 is out of range for int64" in result.errors[0].message
    assert str(result.values.to_pylist()[1]["price"]) == "123456789012345678901234.00"


def test_a_lone_surrogate_escape_is_a_bad_record_not_a_failed_batch() -> None:
    # Before: json.loads took it and building the batch's Arrow strings raised UnicodeEncodeError for all records.
    result = decode(SerdeSpec("value", "json", spark_ddl=DDL), [b'{"name": "\\ud800"}', b'{"id": 5}'])
    assert list(result.errors) == [0] and "lone surrogate" in result.errors[0].message
    assert result.values.to_pylist()[1]["id"] == 5


@pytest.mark.parametrize("seed", range(3))
def test_a_batch_decodes_as_its_records_one_at_a_time(seed: int) -> None:
    # Column by column, a record's error is still its first failing field in declared order, and a column that
    # cannot go to Arrow in one call (a bad value, a range) costs no other record its value.
    r = random.Random(seed)
    records = [*EDGE_RECORDS, *(random_record(r) for _ in range(300))]
    decoder = json_decode.RowDecoder(build_codec(SerdeSpec("value", "json", spark_ddl=DDL)).arrow_type())
    batch, errors = decoder.decode_many(records)
    alone = [decoder.decode_many([record]) for record in records]
    assert batch.to_pylist() == [values.to_pylist()[0] for values, _ in alone]
    assert {i: str(e) for i, e in errors.items()} == {i: str(e[0]) for i, (_, e) in enumerate(alone) if e}


def test_the_first_failing_field_names_the_error() -> None:
    decoder = json_decode.RowDecoder(build_codec(SerdeSpec("value", "json", spark_ddl=DDL)).arrow_type())
    _, errors = decoder.decode_many([b'{"id": 1}', b'{"small": 999, "id": "x", "name": 3}'])
    assert list(errors) == [1] and str(errors[1]).startswith("id: expected int64")
