"""What user functions yield must fit the operator's output type (issue 24, item 1): a missing field, a field the
type does not declare, or a value that cannot be stored without loss fails the epoch with one line naming the
operator, the field and the element's origin — never a silent null or a silently dropped field. An explicit None is
a null, not an error."""

from __future__ import annotations

import datetime
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import Row

from ethereal_kafka.api.functions import KeyedContext, KeyedProcessFunction
from ethereal_kafka.api.tags import OutputTag
from ethereal_kafka.api.windows import TimeWindow, TumblingEventTimeWindows
from ethereal_kafka.plan.conform import ElementType
from ethereal_kafka.plan.join_shapes import JoinFunctionStage
from ethereal_kafka.plan.operators.base import OutputLayout
from ethereal_kafka.plan.operators.process import KeyedProcessor, ProcessSpec
from ethereal_kafka.plan.operators.rolling import RollingProcessor, RollingSpec
from ethereal_kafka.plan.operators.window import WindowPlan, WindowProcessor
from ethereal_kafka.plan.operators.window_functions import WindowFunctionSpec
from ethereal_kafka.plan.operators.window_logic import WindowSpec
from ethereal_kafka.plan.outputs import FanOut
from ethereal_kafka.plan.pyfuncs import PyStage, UserFunctionError
from tests.unit.plan.fake_spark_state import FakeHandle, FakeStore, run_epoch

UTC = datetime.UTC
HIDDEN = ("__part", "__off")
HIDDEN_TYPES = (pa.int32(), pa.int64())
OUT = pa.struct([pa.field("id", pa.int64()), pa.field("name", pa.string())])


def _batch() -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {
            "id": pa.array([1, 2], pa.int64()),
            "name": ["a", "b"],
            "__part": pa.array([1, 1], pa.int32()),
            "__off": pa.array([40, 41], pa.int64()),
        }
    )


def _map(function: Any, out: pa.StructType = OUT, kind: str = "map") -> list[dict[str, Any]]:
    stage = PyStage(f"{kind}#2", kind, function, ("id", "name"), out, HIDDEN, HIDDEN_TYPES)
    return [row for batch in stage([_batch()]) for row in batch.to_pylist()]


def _fails(function: Any, *needles: str, out: pa.StructType = OUT, kind: str = "map") -> str:
    with pytest.raises(UserFunctionError) as caught:
        _map(function, out, kind)
    message = str(caught.value)
    assert caught.typename == "OutputTypeError", message
    assert "\n" not in message
    for needle in needles:
        assert needle in message, message
    return message


# -- map / flat_map ----------------------------------------------------------------------------------------------
def test_map_with_a_field_its_type_does_not_declare_fails_naming_the_field_and_the_record() -> None:
    _fails(lambda e: {**e, "extra": 1}, "map#2", "'extra'", "partition 1 offset 40")


def test_map_missing_a_declared_field_fails_but_an_explicit_none_is_a_null() -> None:
    _fails(lambda e: {"id": e["id"]}, "map#2", "'name'", "missing", "partition 1 offset 40")
    assert _map(lambda e: {"id": e["id"], "name": None})[0] == {
        "id": 1,
        "name": None,
        "__part": 1,
        "__off": 40,
    }


def test_map_values_of_the_wrong_type_fail_instead_of_becoming_null_or_truncated() -> None:
    _fails(lambda e: {"id": "one", "name": "x"}, "'id'", "'one'", "bigint", "partition 1 offset 40")
    _fails(lambda e: {"id": e["id"] + 0.5, "name": "x"}, "'id'", "1.5", "partition 1 offset 40")
    _fails(lambda e: {"id": True, "name": "x"}, "'id'", "partition 1 offset 40")
    stamp = pa.struct([pa.field("at", pa.timestamp("us", tz="UTC"))])
    _fails(lambda e: {"at": 1_700_000_000_000}, "'at'", "timestamp", out=stamp)
    listed = pa.struct([pa.field("tags", pa.list_(pa.string()))])
    _fails(lambda e: {"tags": "not-a-list"}, "'tags'", out=listed)
    # Lossless fits stay accepted: an int where a double is declared, a datetime for a timestamp.
    wide = pa.struct([pa.field("x", pa.float64()), pa.field("at", pa.timestamp("us", tz="UTC"))])
    when = datetime.datetime(2026, 1, 1, tzinfo=UTC)
    assert _map(lambda e: {"x": e["id"], "at": when}, wide)[1]["x"] == 2.0


def test_nested_struct_fields_are_checked_too() -> None:
    nested = pa.struct([pa.field("s", pa.struct([pa.field("a", pa.int64())]))])
    _fails(lambda e: {"s": {"a": 1, "b": 2}}, "'s.b'", out=nested)
    _fails(lambda e: {"s": {}}, "'s.a'", out=nested)
    assert _map(lambda e: {"s": {"a": e["id"]}}, nested)[0]["s"] == {"a": 1}


def test_flat_map_elements_are_checked_each() -> None:
    _fails(lambda e: [{"id": 1, "name": "x"}, {"id": 2}], "flat_map#2", "'name'", kind="flat_map")


def test_a_map_after_a_fork_is_checked_too() -> None:
    stage = PyStage("map#5", "map", lambda e: {"id": e["id"]}, ("id", "name"), OUT, (), ())
    fan_out = FanOut(((None, (stage,), OUT),), ("id", "name"), None)
    with pytest.raises(UserFunctionError) as caught:
        list(fan_out([_batch()]))
    assert caught.typename == "OutputTypeError"
    assert "map#5" in str(caught.value) and "'name'" in str(caught.value)


# -- process functions -------------------------------------------------------------------------------------------
REJECTED = OutputTag("rejected", "id long, reason string")
COLUMNS = ("account_id", "amount", "ts", "__ts", "__key", "__tag", "__side_rejected")


class Yields(KeyedProcessFunction):
    """Yields `main` for every element and sends `side` to the side output."""

    def __init__(self, main: dict[str, Any] | None, side: dict[str, Any] | None = None) -> None:
        self.main, self.side = main, side

    def process_element(self, value: dict[str, Any], ctx: KeyedContext) -> Any:
        if self.side is not None:
            ctx.output(REJECTED, self.side)
        if self.main is not None:
            yield self.main


def _process(function: KeyedProcessFunction) -> list[dict[str, Any]]:
    # The layout `plan.keyed` builds for a process function without output_type: the input's fields and types.
    main = pa.struct([("account_id", pa.int64()), ("amount", pa.float64()), ("ts", pa.int64())])
    side = pa.struct([("id", pa.int64()), ("reason", pa.string())])
    layout = OutputLayout(
        ("account_id", "amount", "ts"),
        ("rejected",),
        (("id", "reason"),),
        ElementType.of(main, "process#4", "output", defaulted=True),
        (ElementType.of(side, "process#4", "side output 'rejected'"),),
    )
    spec = ProcessSpec("process#4", function, "event", True, ("account_id",), layout, COLUMNS)
    store = FakeStore()
    processor = KeyedProcessor(spec)
    processor.init(FakeHandle(store))
    stamp = datetime.datetime.fromtimestamp(1, tz=UTC)
    rows = [Row(account_id=7, amount=600.0, ts=1_000, __part=0, __off=17, __ts=stamp, __key=7)]
    return run_epoch(processor, store, rows, watermark=0, now=1)


def _process_fails(function: KeyedProcessFunction, *needles: str) -> None:
    with pytest.raises(UserFunctionError) as caught:
        _process(function)
    message = str(caught.value)
    assert caught.typename == "OutputTypeError", message
    for needle in ("process#4", "partition 0 offset 17", *needles):
        assert needle in message, message


def test_a_process_function_without_output_type_yielding_other_fields_fails() -> None:
    # The case: the yielded fields were dropped and the declared ones became null, with exit 0.
    _process_fails(Yields({"account_id": 7, "alert": "large after small"}), "'alert'", "output_type")
    _process_fails(Yields({"account_id": 7}), "'amount'", "'ts'")


def test_a_process_function_value_of_the_wrong_type_fails() -> None:
    _process_fails(Yields({"account_id": "seven", "amount": 1.0, "ts": 1}), "'account_id'", "'seven'")


def test_a_side_output_element_must_fit_its_tag_type() -> None:
    _process_fails(Yields(None, {"id": 1, "why": "no"}), "rejected", "'why'", "'reason'")
    assert _process(Yields(None, {"id": 1, "reason": None}))[0]["__side_rejected"] == (1, None)


# -- rolling, windows, joins --------------------------------------------------------------------------------------
def test_a_rolling_reduce_must_return_elements_of_its_type() -> None:
    layout = OutputLayout(("user", "amount"))
    spec = RollingSpec(
        "reduce#6",
        "reduce",
        lambda a, b: {"user": a["user"], "total": a["amount"] + b["amount"]},
        None,
        (),
        layout,
        ("user", "amount", "__ts", "__key"),
    )
    processor = RollingProcessor(spec)
    store = FakeStore()
    processor.init(FakeHandle(store))
    stamp = datetime.datetime.fromtimestamp(1, tz=UTC)
    rows = [Row(user="u", amount=i, __part=0, __off=i, __ts=stamp, __key="u") for i in range(2)]
    with pytest.raises(UserFunctionError) as caught:
        run_epoch(processor, store, rows, watermark=0, now=1)
    message = str(caught.value)
    assert caught.typename == "OutputTypeError", message
    assert "reduce#6" in message and "'total'" in message and "partition 0 offset 1" in message, message


def test_a_process_window_function_must_yield_its_result_fields() -> None:
    columns = ("window_start", "window_end", "n", "__ts", "__key")
    spec = WindowSpec.build(TumblingEventTimeWindows.of(10_000), None, 0, False, "window#3")

    def process(key: Any, context: Any, elements: list[dict[str, Any]]) -> Any:
        yield {"n": len(elements), "count": len(elements)}

    function = WindowFunctionSpec("window#3", "process", process, buffer=True, key_names=("user",))
    plan = WindowPlan(spec, function, ("user", "amount"), ("n",), columns, None, True)
    processor = WindowProcessor(plan)
    store = FakeStore()
    processor.init(FakeHandle(store))  # type: ignore[arg-type]
    stamp = datetime.datetime.fromtimestamp(1, tz=UTC)
    run_epoch(processor, store, [Row(user="u", amount=1, __ts=stamp, __part=0, __off=3, __key="u")], 0, 0)
    with pytest.raises(UserFunctionError) as caught:
        run_epoch(processor, store, [], 20_000, 0)
    message = str(caught.value)
    assert caught.typename == "OutputTypeError", message
    assert "window#3" in message and "'count'" in message, message
    assert str(TimeWindow(0, 10_000).start) in message and "'u'" in message, message


def test_a_key_field_in_a_window_result_is_allowed() -> None:
    columns = ("window_start", "window_end", "n", "__ts", "__key")
    spec = WindowSpec.build(TumblingEventTimeWindows.of(10_000), None, 0, False, "window#3")

    def process(key: Any, context: Any, elements: list[dict[str, Any]]) -> Any:
        yield {"user": key, "n": len(elements)}

    function = WindowFunctionSpec("window#3", "process", process, buffer=True, key_names=("user",))
    plan = WindowPlan(spec, function, ("user", "amount"), ("n",), columns, None, True)
    processor = WindowProcessor(plan)
    store = FakeStore()
    processor.init(FakeHandle(store))  # type: ignore[arg-type]
    stamp = datetime.datetime.fromtimestamp(1, tz=UTC)
    run_epoch(processor, store, [Row(user="u", amount=1, __ts=stamp, __part=0, __off=3, __key="u")], 0, 0)
    (fired,) = run_epoch(processor, store, [], 20_000, 0)
    assert fired["n"] == 1


def test_a_join_function_must_return_its_output_fields() -> None:
    out = pa.struct([pa.field("id", pa.int64()), pa.field("total", pa.int64())])
    stage = JoinFunctionStage(
        "join#7", lambda a, b: {"id": a["id"]}, out, ("__ts", "__key"), (pa.int64(), pa.string())
    )
    side = pa.struct([pa.field("id", pa.int64())])
    batch = pa.RecordBatch.from_pydict(
        {
            "__l": pa.array([{"id": 1}], side),
            "__r": pa.array([{"id": 1}], side),
            "__ts": pa.array([5], pa.int64()),
            "__key": ["k"],
        }
    )
    with pytest.raises(UserFunctionError) as caught:
        list(stage([batch]))
    message = str(caught.value)
    assert caught.typename == "OutputTypeError", message
    assert "join#7" in message and "'total'" in message and "'k'" in message, message


def test_a_key_selector_value_must_fit_the_key_type() -> None:
    def stage(selector: Any) -> PyStage:
        return PyStage(
            "key_by#8",
            "column",
            selector,
            ("id", "name"),
            OUT,
            (*HIDDEN, "__key"),
            (*HIDDEN_TYPES, pa.int64()),
            target="__key",
            target_type=pa.int64(),
        )

    (batch,) = list(stage(lambda e: e["id"] * 10)([_batch()]))
    assert batch.column("__key").to_pylist() == [10, 20]
    with pytest.raises(UserFunctionError) as caught:
        list(stage(lambda e: e["id"] / 2)([_batch()]))
    assert caught.typename == "OutputTypeError"
    assert "key_by#8" in str(caught.value) and "0.5" in str(caught.value), caught.value
    assert "partition 1 offset 40" in str(caught.value)
