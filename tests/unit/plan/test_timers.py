"""Timer bookkeeping of process functions (`plan.operators.timers`)."""

from __future__ import annotations

from ethereal_kafka.plan.operators.timers import EVENT, PROCESSING, TimerBook


def test_event_time_timers_fire_before_processing_time_ones_each_in_time_order() -> None:
    book = TimerBook()
    for ts in (30, 10, 50):
        book.add(EVENT, ts)
    book.add(PROCESSING, 5)
    book.add(PROCESSING, 500)
    assert book.next_due(watermark=29, now=100) == (EVENT, 10)
    book.pop(EVENT, 10)
    assert book.next_due(29, 100) == (PROCESSING, 5)
    book.pop(PROCESSING, 5)
    assert book.next_due(29, 100) is None
    assert book.next_due(30, 100) == (EVENT, 30), "a timer fires when the watermark reaches it"


def test_spark_timers_follow_the_mode_and_sync_registers_only_the_difference() -> None:
    book = TimerBook()
    book.add(EVENT, 10)
    book.add(PROCESSING, 20)
    calls: list[tuple[str, int]] = []
    book.sync(EVENT, lambda t: calls.append(("reg", t)), lambda t: calls.append(("del", t)))
    assert calls == [("reg", 10)]
    book.pop(EVENT, 10)
    book.add(EVENT, 15)
    calls.clear()
    book.sync(EVENT, lambda t: calls.append(("reg", t)), lambda t: calls.append(("del", t)))
    assert calls == [("del", 10), ("reg", 15)]
    assert book.needed(PROCESSING) == {20}


def test_processing_mode_polls_next_epoch_while_event_timers_are_pending() -> None:
    book = TimerBook()
    book.add(EVENT, 1_000)
    book.plan_poll(PROCESSING, now=500)
    assert book.poll == 501 and book.needed(PROCESSING) == {501}
    book.plan_poll(EVENT, now=500)
    assert book.poll is None, "event mode waits for the watermark itself"
    book.pop(EVENT, 1_000)
    book.plan_poll(PROCESSING, now=600)
    assert book.poll is None and book.is_empty()


def test_cleanup_timer_in_processing_time_sits_at_the_earliest_expiry() -> None:
    book = TimerBook()
    book.arm_cleanup(200, PROCESSING, watermark=0, now=100)
    book.arm_cleanup(300, PROCESSING, 0, 150)
    assert (book.cleanup, book.cleanup_target) == (200, 200), "a later expiry does not move it"
    book.arm_cleanup(180, PROCESSING, 0, 150)
    assert book.cleanup == 180
    assert not book.cleanup_due(179) and book.cleanup_due(180)
    book.disarm_cleanup()
    assert book.cleanup is None and book.is_empty()


def test_cleanup_timer_in_event_time_waits_for_the_watermark_to_move_by_the_time_left() -> None:
    book = TimerBook()
    book.arm_cleanup(expiry=10_500, mode=EVENT, watermark=7_000, now=10_000)
    assert book.cleanup == 7_500
    book.disarm_cleanup()
    book.arm_cleanup(expiry=10_000, mode=EVENT, watermark=0, now=10_000)
    assert book.cleanup == 1, "at least 1 ms after the watermark (0 before the first one)"


def test_a_book_survives_packing() -> None:
    book = TimerBook({"a": 1}, {3, 1}, {7}, 9, 90, 11, {1, 3, 9})
    assert TimerBook.unpack(book.pack()) == book
