"""A chained query's read task (`eos.chained`) writes nothing unless its epoch was handed over and its range is its
slot's: both refusals come before any Kafka client is made."""

from __future__ import annotations

import base64
import json
import os
import pickle
from typing import Any

import pyspark
import pytest

from ethereal_kafka.connectors.kafka.source import KafkaInputPartition
from ethereal_kafka.eos import chained
from ethereal_kafka.eos.errors import TransactionError
from ethereal_kafka.eos.task_plan import EpochWrite, TaskSlot


class FakeTaskContext:
    """What a read task sees of Spark: local properties, its partition and attempt."""

    def __init__(self, properties: dict[str, str | None], partition: int = 0) -> None:
        self.properties = properties
        self.partition = partition

    def getLocalProperty(self, key: str) -> str | None:
        return self.properties.get(key)

    def partitionId(self) -> int:
        return self.partition

    def taskAttemptId(self) -> int:
        return 7


def _write(slot: TaskSlot) -> EpochWrite:
    return EpochWrite(
        app_id="app",
        instance_id="i-1",
        checkpoint_id="cp",
        epoch=3,
        ranges="r",
        query="words",
        outputs=(),
        slots=(slot,),
        transaction_timeout_ms=60_000,
    )


def _handed(write: EpochWrite | None, env: dict[str, str] | None = None) -> dict[str, str | None]:
    keys = chained.property_keys("words")
    if write is None:
        return {}
    return {
        keys[0]: base64.b64encode(pickle.dumps(write)).decode("ascii"),
        keys[1]: chained.pickled_chain(lambda batches, counts: iter(batches)),
        keys[2]: json.dumps(env or {}),
    }


def _partition(until: int = 100) -> KafkaInputPartition:
    return KafkaInputPartition("lines", 0, 40, until)


def test_a_read_task_without_its_epoch_writes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pyspark.TaskContext, "get", staticmethod(lambda: FakeTaskContext({})))
    with pytest.raises(TransactionError, match="outside its epoch's write"):
        list(chained.chained_task("words", _partition(), iter([])))
    monkeypatch.setattr(pyspark.TaskContext, "get", staticmethod(lambda: None))
    with pytest.raises(TransactionError, match="outside its epoch's write"):
        list(chained.chained_task("words", _partition(), iter([])))


def test_a_read_task_whose_range_is_not_its_slots_writes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    write = _write(TaskSlot("lines-0", "group", "lines", 0, 100, 40))
    context = FakeTaskContext(_handed(write, {"EK_CHAINED_TEST": "1"}))
    monkeypatch.setattr(pyspark.TaskContext, "get", staticmethod(lambda: context))

    def no_client(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("a Kafka client was made")

    monkeypatch.setattr(chained, "TransactionalTask", no_client)
    with pytest.raises(TransactionError, match="planned over lines\\[0\\] up to 90"):
        list(chained.chained_task("words", _partition(until=90), iter([])))
    # The handed-over environment is the task's only while it runs.
    assert "EK_CHAINED_TEST" not in os.environ
    # The slot's own range gets as far as the task's transaction.
    with pytest.raises(AssertionError, match="a Kafka client was made"):
        list(chained.chained_task("words", _partition(until=100), iter([])))
