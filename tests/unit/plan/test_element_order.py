"""`plan.operators.base.sorted_rows`: a key's rows of an epoch in `element_order`, the content rendered only for rows
that share a position."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest
from pyspark.sql import Row

from ethereal_kafka.plan.operators.base import element_order, sorted_rows
from ethereal_kafka.plan.schema import OFFSET, PART, TS


def _rows(seed: int, count: int) -> list[Row]:
    """Rows with few distinct positions (so many ties, as a flat_map's elements of one record have), some without
    a position, nested values and equal contents."""
    rnd = random.Random(seed)
    shape = Row("word", "n", "inner", TS, PART, OFFSET, "__input")
    rows = []
    for index in range(count):
        ts = rnd.choice([None, datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)])
        part = rnd.choice([None, 0, 1])
        offset = None if part is None else rnd.randrange(4)
        inner = Row(a=rnd.randrange(3), b=[rnd.randrange(2)])
        rows.append(shape(rnd.choice(["a", "b", "c"]), rnd.randrange(3), inner, ts, part, offset, index))
    return rows


@pytest.mark.parametrize("seed", range(20))
def test_the_order_is_element_orders_and_ties_keep_their_input_order(seed: int) -> None:
    rows = _rows(seed, 60)
    expected = sorted((row.asDict(recursive=True) for row in rows), key=element_order)
    got = sorted_rows(rows)
    # `__input` (hidden: not part of the content) tells equal rows apart: they keep their input order
    assert [r["__input"] for r in got] == [r["__input"] for r in expected]
    assert len({element_order(r)[:3] for r in got}) < len(got), "the rows had no ties to break"


def test_no_rows_and_one_row() -> None:
    assert sorted_rows([]) == []
    (row,) = _rows(1, 1)
    assert sorted_rows([row]) == [row.asDict(recursive=True)]
