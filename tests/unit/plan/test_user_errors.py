"""User code that raises (issue 24, item 7): the one-line error names the operator and the user's file:line (not a
framework or library frame), and `on.user.error=skip|dlq` drops the element (dead-lettering it with headers naming
the exception, the operator and the record) in per-element operators and process functions."""

from __future__ import annotations

import datetime
import json
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import Row

from ethereal_kafka.api import MapStateDescriptor, StreamExecutionEnvironment
from ethereal_kafka.api.functions import KeyedContext, KeyedProcessFunction
from ethereal_kafka.api.graph import OperatorRef
from ethereal_kafka.connectors.kafka.dead_letters import DeadLetter
from ethereal_kafka.plan.errors import UserFunctionError, failed_operator, user_error, user_error_line
from ethereal_kafka.plan.operators.base import OutputLayout
from ethereal_kafka.plan.operators.process import KeyedProcessor, ProcessSpec
from ethereal_kafka.plan.pyfuncs import PyStage
from ethereal_kafka.plan.user_errors import OperatorErrors, UserErrors
from tests.unit.plan.fake_spark_state import FakeHandle, FakeStore, run_epoch

HIDDEN = ("__part", "__off")
HIDDEN_TYPES = (pa.int32(), pa.int64())
OPERATOR = OperatorRef("map#1", "parse", "parse-1")


class Kept:
    """A handoff that keeps what it is given (the real ones commit with the epoch or produce at once)."""

    def __init__(self) -> None:
        self.letters: list[tuple[str, DeadLetter]] = []

    def keep(self, group: str, letters: Sequence[DeadLetter]) -> None:
        self.letters += [(group, letter) for letter in letters]


def _batch(lines: list[str]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {
            "line": lines,
            "__part": pa.array([1] * len(lines), pa.int32()),
            "__off": pa.array(range(100, 100 + len(lines)), pa.int64()),
        }
    )


def _parse(e: dict[str, Any]) -> dict[str, Any]:
    return {"n": json.loads(e["line"])["n"]}


def _policy(action: str, handoff: Kept | None = None) -> OperatorErrors:
    return OperatorErrors(action, OPERATOR, "q", "group-a", "orders", "dlq-topic", handoff)


def test_the_location_is_the_users_line_not_the_librarys_or_the_frameworks() -> None:
    stage = PyStage(
        "map#1", "map", _parse, ("line",), pa.struct([pa.field("n", pa.int64())]), HIDDEN, HIDDEN_TYPES
    )
    with pytest.raises(UserFunctionError) as caught:
        list(stage([_batch(['{"n": 1}', "{not json"])]))
    line = _parse.__code__.co_firstlineno + 1  # json.loads raised inside the json package, called from here
    assert caught.value.location is not None
    assert (caught.value.location.path, caught.value.location.line) == (__file__, line)
    assert str(caught.value) == (
        f"operator map#1 at test_user_errors.py:{line}: JSONDecodeError: Expecting property name enclosed in "
        "double quotes: line 1 column 2 (char 1); element from partition 1 offset 101"
    )


def test_skip_and_dlq_drop_the_element_and_keep_its_dead_letter() -> None:
    out = pa.struct([pa.field("n", pa.int64())])
    lines = ['{"n": 1}', "{bad", '{"n": 3}', "[]"]
    skipped = PyStage("map#1", "map", _parse, ("line",), out, HIDDEN, HIDDEN_TYPES, on_error=_policy("skip"))
    (batch,) = list(skipped([_batch(lines)]))
    assert batch.to_pydict() == {"n": [1, 3], "__part": [1, 1], "__off": [100, 102]}
    kept = Kept()
    dead = PyStage(
        "map#1", "map", _parse, ("line",), out, HIDDEN, HIDDEN_TYPES, on_error=_policy("dlq", kept)
    )
    (batch,) = list(dead([_batch(lines)]))
    assert batch.column("n").to_pylist() == [1, 3]
    assert [(g, d.topic, d.partition, d.offset, d.target) for g, d in kept.letters] == [
        ("group-a", "orders", 1, 101, "dlq-topic"),
        ("group-a", "orders", 1, 103, "dlq-topic"),
    ]
    headers = dict(kept.letters[1][1].headers)
    assert headers["ethereal.error.class"] == b"TypeError"
    assert (
        headers["ethereal.error.operator"] == b"parse"
        and headers["ethereal.error.operator.uid"] == b"parse-1"
    )
    assert headers["ethereal.error.location"].endswith(
        f"test_user_errors.py:{_parse.__code__.co_firstlineno + 1}".encode()
    )
    assert headers["ethereal.error.stage"] == b"user-code"
    assert json.loads(kept.letters[1][1].value or b"") == {"line": "[]"}


def test_filters_and_computed_columns_drop_rows_whose_function_raised() -> None:
    same = pa.struct([pa.field("line", pa.string())])
    kept = Kept()
    only_json = PyStage(
        "map#1", "filter", lambda e: _parse(e)["n"] > 1, ("line",), same, HIDDEN, HIDDEN_TYPES,
        on_error=_policy("dlq", kept),
    )  # fmt: skip
    (batch,) = list(only_json([_batch(['{"n": 1}', "x", '{"n": 2}'])]))
    assert batch.to_pydict() == {"line": ['{"n": 2}'], "__part": [1], "__off": [102]}
    assert [d.offset for _, d in kept.letters] == [101]
    key = PyStage(
        "keyby#2", "column", lambda e: str(_parse(e)["n"]), ("line",), same, (*HIDDEN, "__key"),
        (*HIDDEN_TYPES, pa.string()), target="__key", target_type=pa.string(), on_error=_policy("skip"),
    )  # fmt: skip
    (batch,) = list(key([_batch(['{"n": 1}', "x", '{"n": 2}'])]))
    assert batch.to_pydict() == {
        "line": ['{"n": 1}', '{"n": 2}'],
        "__part": [1, 1],
        "__off": [100, 102],
        "__key": ["1", "2"],
    }


def test_several_elements_of_one_record_are_told_apart() -> None:
    kept = Kept()
    stage = PyStage(
        "map#1", "map", lambda e: {"n": 1 // e["n"]}, ("n",), pa.struct([pa.field("n", pa.int64())]),
        HIDDEN, HIDDEN_TYPES, on_error=_policy("dlq", kept),
    )  # fmt: skip
    batch = pa.RecordBatch.from_pydict(
        {"n": [0, 0, 1], "__part": pa.array([0, 0, 0], pa.int32()), "__off": pa.array([7, 7, 8], pa.int64())}
    )
    list(stage([batch]))
    assert [d.identity for _, d in kept.letters] == [
        ("orders", 0, 7, "parse-1#0"),
        ("orders", 0, 7, "parse-1#1"),
    ]


def test_an_operator_whose_elements_cannot_be_placed_fails_under_dlq() -> None:
    unplaced = OperatorErrors("dlq", OPERATOR, "q")
    stage = PyStage(
        "map#1", "map", _parse, ("line",), pa.struct([pa.field("n", pa.int64())]), HIDDEN, HIDDEN_TYPES,
        on_error=unplaced,
    )  # fmt: skip
    with pytest.raises(
        UserFunctionError, match=r"on.user.error=dlq: this operator's elements cannot be dead-lettered"
    ):
        list(stage([_batch(["x"])]))


class Unlucky(KeyedProcessFunction):
    """Emits a row, then raises, on amount 13; emits one row for the others."""

    def process_element(self, value: dict[str, Any], ctx: KeyedContext) -> Any:
        yield {"user": value["user"], "what": "before", "at": value["amount"]}
        if value["amount"] == 13:
            raise ValueError("unlucky")


def test_a_process_function_drops_what_a_failed_element_emitted_and_dead_letters_it() -> None:
    kept = Kept()
    layout = OutputLayout(("user", "what", "at"))
    ref = OperatorRef("process#3", "detect", "detect-1")
    errors = OperatorErrors("dlq", ref, "q", "group-b", "tx", "dlq-topic", kept)
    spec = ProcessSpec(
        "process#3",
        Unlucky(),
        "event",
        True,
        ("user",),
        layout,
        ("user", "what", "at", "__ts", "__key"),
        on_error=errors,
    )
    store = FakeStore()
    processor = KeyedProcessor(spec)
    processor.init(FakeHandle(store))
    stamp = datetime.datetime.fromtimestamp(1, tz=datetime.UTC)
    rows = [
        Row(user="u", amount=a, __part=0, __off=o, __ts=stamp, __key="u")
        for o, a in ((1, 5), (2, 13), (3, 7))
    ]
    out = run_epoch(processor, store, rows, 0, 1)
    assert [r["at"] for r in out] == [5, 7]
    ((group, letter),) = kept.letters
    assert (group, letter.topic, letter.offset) == ("group-b", "tx", 2)
    assert json.loads(letter.value or b"") == {"user": "u", "amount": 13}
    assert dict(letter.headers)["ethereal.error.operator"] == b"detect"


def test_the_operator_is_found_again_in_a_failure_text() -> None:
    try:
        1 / 0  # noqa: B018
    except ZeroDivisionError as exc:
        named = user_error(OperatorRef("process#3", "detect-fraud", "fraud-1"), exc, "key 1")
    text = f"Traceback ...\nethereal_kafka.plan.errors.UserFunctionError: {named}\n\tat org.apache.spark..."
    assert user_error_line(text) == str(named)
    assert failed_operator(text) == {"name": "detect-fraud", "uid": "fraud-1"}
    assert failed_operator("UserFunctionError: operator map#4 at x.py:3: E: m") == {
        "name": "map#4",
        "uid": "map#4",
    }
    assert failed_operator("operator 'a b' (map#2) at x.py:3: E") == {"name": "a b", "uid": "map#2"}
    assert failed_operator("operator map#2 (uid m-2): E") == {"name": "map#2", "uid": "m-2"}
    assert failed_operator("KafkaException: broker down") is None


def test_a_broadcast_operator_places_its_elements_by_its_first_input_only() -> None:
    class Function:
        def process_element(self, value: Any, ctx: Any) -> None: ...

        def process_broadcast_element(self, value: Any, ctx: Any) -> None: ...

    env = StreamExecutionEnvironment()
    events, rules = env.from_source("events"), env.from_source("rules")
    node = events.key_by("user").connect(rules.broadcast(MapStateDescriptor("r"))).process(Function()).node
    sources = {
        name: SimpleNamespace(topics=(topic,), group=f"group-{name}", topic_pattern=None)
        for name, topic in (("events", "tx"), ("rules", "rules-topic"))
    }
    policy = UserErrors("dlq", "dlq-topic", Kept())
    assert policy.for_node(node, "q", sources, True).target is None, "two topics upstream: cannot place"
    placed = policy.for_node(node, "q", sources, True, placed_by=node.inputs[0])
    assert (placed.group, placed.topic, placed.target) == ("group-events", "tx", "dlq-topic")
