"""The epoch gate: epochs in flight are counted, a closed gate refuses new ones, waits are bounded."""

from __future__ import annotations

import threading
import time

import pytest

from ethereal_kafka.eos.errors import EpochRefusedError
from ethereal_kafka.eos.gate import EpochGate


def test_epochs_pass_while_open_and_their_outcome_is_kept() -> None:
    gate = EpochGate()
    with gate.epoch("out", 3):
        assert gate.in_flight() == {"out": 3}
    assert gate.in_flight() == {}
    assert gate.last()["out"].epoch == 3 and gate.last()["out"].committed
    with pytest.raises(ValueError), gate.epoch("out", 4):
        raise ValueError("task failed")
    outcome = gate.last()["out"]
    assert (outcome.epoch, outcome.committed, type(outcome.error)) == (4, False, ValueError)


def test_a_closed_gate_refuses_new_epochs_and_remembers_them() -> None:
    gate = EpochGate()
    gate.close()
    with pytest.raises(EpochRefusedError, match="epoch 7 of query out not started"), gate.epoch("out", 7):
        pytest.fail("a refused epoch must not run")
    assert gate.refused() == [("out", 7)] and gate.in_flight() == {}


def test_wait_idle_waits_for_the_epoch_in_flight() -> None:
    gate = EpochGate()
    entered, release = threading.Event(), threading.Event()

    def epoch() -> None:
        with gate.epoch("out", 1):
            entered.set()
            release.wait(5)

    worker = threading.Thread(target=epoch)
    worker.start()
    entered.wait(5)
    gate.close()
    assert gate.wait_idle(0.2) is False  # still writing: bounded wait gives up
    threading.Timer(0.2, release.set).start()
    began = time.monotonic()
    assert gate.wait_idle(5) is True
    assert time.monotonic() - began < 2
    worker.join(5)
    assert gate.last()["out"].committed


def test_wait_idle_stops_early_when_interrupted() -> None:
    gate = EpochGate()
    interrupted = threading.Event()
    with gate.epoch("out", 1):
        threading.Timer(0.1, interrupted.set).start()
        began = time.monotonic()
        assert gate.wait_idle(10, interrupted=interrupted) is False
        assert time.monotonic() - began < 2


def test_pause_wakes_when_the_gate_closes() -> None:
    gate = EpochGate()
    threading.Timer(0.1, gate.close).start()
    began = time.monotonic()
    gate.pause(10)
    assert time.monotonic() - began < 2


def test_between_epochs_waits_for_the_epoch_in_flight_and_holds_the_next_back() -> None:
    gate = EpochGate()
    entered, release = threading.Event(), threading.Event()
    order: list[str] = []

    def epoch(n: int) -> None:
        with gate.epoch("out", n):
            order.append(f"epoch {n}")
            entered.set()
            release.wait(5)

    first = threading.Thread(target=epoch, args=(1,))
    first.start()
    entered.wait(5)
    with gate.between_epochs(0.1) as idle:
        assert not idle, "an epoch is in flight: nothing is held"
    release.set()
    first.join()
    release.clear()
    with gate.between_epochs(5) as idle:
        assert idle
        second = threading.Thread(target=epoch, args=(2,))
        second.start()
        time.sleep(0.3)
        order.append("between epochs")
    release.set()
    second.join(5)
    assert order == ["epoch 1", "between epochs", "epoch 2"]


def test_closing_the_gate_refuses_an_epoch_held_back() -> None:
    gate = EpochGate()
    refused: list[BaseException] = []

    def epoch() -> None:
        try:
            with gate.epoch("out", 9):
                pass
        except EpochRefusedError as exc:
            refused.append(exc)

    with gate.between_epochs(1) as idle:
        assert idle
        waiting = threading.Thread(target=epoch)
        waiting.start()
        time.sleep(0.2)
        gate.close()
        waiting.join(5)
    assert len(refused) == 1 and gate.refused() == [("out", 9)]
