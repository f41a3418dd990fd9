"""Start positions from the job group's committed offsets fail closed (`connectors.kafka.positions`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import KafkaError

from ethereal_kafka.config.connectors import KafkaSourceConfig
from ethereal_kafka.connectors.kafka.positions import PositionResolver


@dataclass
class _Found:
    topic: str
    partition: int
    offset: int
    error: KafkaError | None = None


class _Consumer:
    """Answers `committed()` with a per-partition error first (a coordinator still loading), then the offsets."""

    def __init__(self, answers: list[list[_Found]]) -> None:
        self.answers = answers
        self.calls = 0

    def committed(self, query: list[Any], timeout: float) -> list[_Found]:
        self.calls += 1
        return self.answers.pop(0)


def _resolver(consumer: _Consumer, monkeypatch: pytest.MonkeyPatch) -> PositionResolver:
    config = KafkaSourceConfig.from_properties(
        {"name": "events", "bootstrap.servers": "127.0.0.1:1", "topics": "t", "group.id": "g"}, source="test"
    )
    resolver = PositionResolver.__new__(PositionResolver)
    resolver.config = config
    resolver._consumer = consumer  # type: ignore[assignment]

    def no_reset(tps: object) -> dict[tuple[str, int], int]:
        raise AssertionError(f"partitions {tps} were reset to group.offsets.reset")

    monkeypatch.setattr(resolver, "earliest", no_reset)
    monkeypatch.setattr(resolver, "latest", no_reset)
    return resolver


def test_a_partition_whose_committed_offset_failed_to_read_is_read_again_not_reset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before, a per-partition error came back as "nothing committed" and the partition restarted from
    `group.offsets.reset` (earliest: everything reprocessed)."""
    loading = KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS)
    consumer = _Consumer(
        [[_Found("t", 0, -1001, loading), _Found("t", 1, 7)], [_Found("t", 0, 42), _Found("t", 1, 7)]]
    )
    resolver = _resolver(consumer, monkeypatch)
    assert resolver.committed([("t", 0), ("t", 1)]) == {("t", 0): 42, ("t", 1): 7}
    assert consumer.calls == 2
