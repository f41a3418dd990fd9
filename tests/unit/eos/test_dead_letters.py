"""The dead letters of user-code errors travel the decode errors' two ways (`eos.dead_letters`): a task-local file
the sink task of the same attempt takes (partition-preserving), and the driver's collector, which phase two of an
epoch empties by offset (shuffling)."""

from __future__ import annotations

from confluent_kafka import TopicPartition

from ethereal_kafka.connectors.kafka.dead_letters import DeadLetter, user_dead_letter
from ethereal_kafka.eos.dead_letters import (
    BY_OFFSET,
    DeadLetterCollector,
    DeadLetterReport,
    EpochHandoff,
    forget_user,
    take_user,
)


def _letter(offset: int, rank: int = 0, partition: int = 0) -> DeadLetter:
    return user_dead_letter(
        {"n": offset}, ("orders", partition, offset), ("parse", "parse-1"), ("E", "m", "x.py:1"), "dlq", rank
    )


def test_phase_two_takes_an_epochs_letters_by_offset_once_each() -> None:
    collector = DeadLetterCollector(["g"])
    report = DeadLetterReport(
        "g", "", -1, BY_OFFSET, BY_OFFSET, (_letter(3), _letter(9), _letter(12), _letter(3))
    )
    collector.add([report, DeadLetterReport("other", "", -1, BY_OFFSET, BY_OFFSET, (_letter(1),))])
    collector.add(
        [DeadLetterReport("g", "", -1, BY_OFFSET, BY_OFFSET, (_letter(9, rank=1), _letter(2, partition=1)))]
    )
    # Epoch ends at offset 10 of partition 0: its letters are those below, a task run twice counted once.
    first = collector.take("g", [TopicPartition("orders", 0, 10)])
    assert [(d.partition, d.offset, d.discriminator) for d in first] == [
        (0, 3, "parse-1#0"),
        (0, 9, "parse-1#0"),
        (0, 9, "parse-1#1"),
    ]
    assert collector.take("g", [TopicPartition("orders", 0, 10)]) == []
    later = collector.take("g", [TopicPartition("orders", 0, 20), TopicPartition("orders", 1, 5)])
    assert [(d.partition, d.offset) for d in later] == [(0, 12), (1, 2)]


def test_the_sink_task_of_the_same_attempt_takes_the_letters_its_operators_left() -> None:
    group = "test-user-handoff-g"
    forget_user(group, -1)
    EpochHandoff().keep(group, [_letter(5), _letter(6)])  # outside a Spark task: attempt -1
    EpochHandoff().keep(group, [_letter(5)])  # a second batch (or stage) of the same attempt
    EpochHandoff().keep(group, [])
    assert [d.offset for d in take_user(group, -1)] == [5, 6]
    assert take_user(group, -1) != [], "kept until forgotten (a redone transaction needs them again)"
    assert take_user(f"{group}-other", -1) == []
    forget_user(group, -1)
    assert take_user(group, -1) == []
