"""The summary row of a sink task (`phase_one.write_task`): exactly-once figures.

A task that finds its epoch committed before (an earlier attempt committed it: the epoch's failed or interrupted
attempt, or a Spark task attempt that died after its commit) writes nothing, and reports the records of the rows
it read through — the ones that attempt committed — so that the epoch's `records_out` matches the per-operator
rows the committing attempt computed over the whole input (the copy query that showed 9,398 rows in and 8,498
written). Driven without Kafka: the transactional task is replaced by one that finds the epoch committed or not.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest

from ethereal_kafka.connectors.kafka.encoding import SINK_INDEX_COLUMN
from ethereal_kafka.eos import phase_one


class FakeTask:
    """A `TransactionalTask` that reads its input through; `committed_before` says what its marker said."""

    committed_before = False

    def __init__(self, _write: Any, _index: int, _attempt: int) -> None:
        self.records = 0
        self.attempts = 0 if self.committed_before else 1
        self.commit_ms = None if self.committed_before else 4.0

    def commit(self, batches: Iterable[pa.RecordBatch]) -> bool:
        for batch in batches:  # a skipped task drains its input too
            if not self.committed_before:
                self.records += batch.num_rows
        return not self.committed_before


def batches() -> Iterator[pa.RecordBatch]:
    yield pa.RecordBatch.from_pydict({"value": [b"a", b"b", b"c"], SINK_INDEX_COLUMN: [0, 1, 0]})
    yield pa.RecordBatch.from_pydict({"value": [b"d", b"e"], SINK_INDEX_COLUMN: [1, 1]})


@pytest.mark.parametrize("committed_before", [False, True])
def test_a_task_reports_the_records_its_epoch_committed_whichever_attempt_committed_them(
    monkeypatch: pytest.MonkeyPatch, committed_before: bool
) -> None:
    monkeypatch.setattr(FakeTask, "committed_before", committed_before)
    monkeypatch.setattr(phase_one, "TransactionalTask", FakeTask)
    write = SimpleNamespace(outputs=("first", "second"))
    (row,) = phase_one.write_task(write, batches()).__next__().to_pylist()  # type: ignore[arg-type]
    assert row["skipped"] == int(committed_before)
    assert (row["records"], row["sink_records"]) == (5, [2, 3]), row
    assert row["commit_ms"] == (None if committed_before else 4.0)
