"""Records as text both ways (`ethereal-kafka produce` input lines, `consume` output lines): pure, no broker."""

from __future__ import annotations

import json

import pytest

from ethereal_kafka.connectors.kafka.console import (
    ConsoleRecord,
    Start,
    parse_header,
    parse_start,
    read_records,
    render,
)
from ethereal_kafka.connectors.kafka.errors import RecordInputError
from ethereal_kafka.connectors.kafka.topics import ReadRecord


def test_text_lines_are_values_and_blank_lines_are_skipped() -> None:
    records = list(read_records(["a\n", "\n", "  \n", "b c\r\n"], "in.txt"))
    assert records == [ConsoleRecord(None, b"a"), ConsoleRecord(None, b"b c")]


def test_a_key_before_the_first_separator_headers_and_partition() -> None:
    headers = (("source", b"cli"),)
    [record] = read_records(
        ['alice:{"a": "x:y"}'], "<stdin>", key_separator=":", headers=headers, partition=2
    )
    assert record == ConsoleRecord(b"alice", b'{"a": "x:y"}', headers, 2)


def test_a_line_without_the_separator_names_its_line() -> None:
    lines = iter(["k:v", "", "no separator here"])
    with pytest.raises(RecordInputError, match=r"^orders\.txt:3: no key separator ':' in the line$"):
        list(read_records(lines, "orders.txt", key_separator=":"))


def test_records_are_read_lazily() -> None:
    """An interactive stdin: each record is sent when its line arrives, not at the end of the input."""

    def lines() -> object:
        yield "first"
        raise AssertionError("read too far")

    records = read_records(lines(), "<stdin>")  # type: ignore[arg-type]
    assert next(records) == ConsoleRecord(None, b"first")


def test_json_lines_key_value_headers_partition_timestamp() -> None:
    line = json.dumps(
        {"key": "alice", "value": {"amount": 80}, "headers": {"trace": "t1"}, "partition": 1, "timestamp": 17}
    )
    [record] = read_records([line], "in.jsonl", json_lines=True, headers=(("source", b"cli"),))
    assert record == ConsoleRecord(b"alice", b'{"amount":80}', (("source", b"cli"), ("trace", b"t1")), 1, 17)


def test_json_values_nulls_numbers_and_base64() -> None:
    lines = [
        '{"value": null}',
        '{"key": 7, "value": "text"}',
        '{"value_base64": "/w==", "headers": [["h", null], ["h", "2"]]}',
    ]
    assert list(read_records(lines, "x", json_lines=True)) == [
        ConsoleRecord(None, None),
        ConsoleRecord(b"7", b"text"),
        ConsoleRecord(None, b"\xff", (("h", None), ("h", b"2"))),
    ]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "x:1: not JSON"),
        ("[1, 2]", "x:1: expected a JSON object"),
        ('{"valeu": 1}', "x:1: unknown field(s) valeu"),
        ('{"partition": -1}', "x:1: partition must be a non-negative integer"),
        ('{"headers": {"h": 1}}', "x:1: headers must be"),
        ('{"value_base64": "***"}', "x:1: value_base64 is not base64"),
    ],
)
def test_bad_json_lines_name_their_line(line: str, message: str) -> None:
    with pytest.raises(RecordInputError) as caught:
        list(read_records([line], "x", json_lines=True))
    assert str(caught.value).startswith(message)


def test_headers_from_the_command_line() -> None:
    assert parse_header("trace=a=b") == ("trace", b"a=b")
    for bad in ("novalue", "=x"):
        with pytest.raises(RecordInputError, match="expected NAME=VALUE"):
            parse_header(bad)


@pytest.mark.parametrize(
    ("text", "start"),
    [
        ("earliest", Start("earliest")),
        ("latest", Start("latest")),
        ("42", Start("offset", 42)),
        ("-5", Start("back", 5)),
        ("timestamp:1767225600000", Start("timestamp", 1767225600000)),
    ],
)
def test_start_positions(text: str, start: Start) -> None:
    assert parse_start(text) == start


@pytest.mark.parametrize("text", ["yesterday", "timestamp:x", "timestamp:-1", ""])
def test_bad_start_positions(text: str) -> None:
    with pytest.raises(RecordInputError, match="--from"):
        parse_start(text)


RECORD = ReadRecord("orders", 1, 7, b"alice", b'{"amount": 80}', 1767225600000, (("source", b"cli"),))


def test_text_output_value_then_keys_and_headers() -> None:
    assert render(RECORD) == '{"amount": 80}'
    assert render(RECORD, keys=True) == 'alice\t{"amount": 80}'
    assert render(RECORD, keys=True, headers=True, separator=" | ") == 'source=cli | alice | {"amount": 80}'
    tombstone = ReadRecord("orders", 0, 1, None, None, 0, ())
    assert render(tombstone, keys=True) == "null\tnull"
    assert render(ReadRecord("t", 0, 0, None, b"\xffok", 0, ())) == "\\xffok"


def test_json_output_round_trips_through_produce_json() -> None:
    binary = ReadRecord("orders", 0, 3, b"\xff\x00", b"plain", 5, (("h", None), ("h", b"2")))
    for record in (RECORD, binary):
        line = render(record, "json")
        assert "\n" not in line
        [again] = read_records([line], "x", json_lines=True)
        assert (again.key, again.value, again.headers, again.partition, again.timestamp_ms) == (
            record.key,
            record.value,
            record.headers,
            record.partition,
            record.timestamp_ms,
        )


def test_pretty_output_shows_json_as_json() -> None:
    shown = json.loads(render(RECORD, "pretty"))
    assert shown == {
        "topic": "orders",
        "partition": 1,
        "offset": 7,
        "timestamp": 1767225600000,
        "key": "alice",
        "value": {"amount": 80},
        "headers": {"source": "cli"},
    }
    assert render(RECORD, "pretty").count("\n") > 5
