"""The console progress line: what it says, how often, and in place on a terminal."""

from __future__ import annotations

import io
import logging
import re
import time
from dataclasses import replace

from ethereal_kafka.config.job import JobConfig
from ethereal_kafka.runtime.logs import ConsoleHandler
from ethereal_kafka.runtime.progress import HEARTBEAT_S, ProgressLine, Snapshot, render

START = Snapshot(
    at=100.0,
    records_in=1000,
    records_out=900,
    dead_lettered=0,
    lag=None,
    last_epoch=None,
    last_epoch_ms=None,
    failed_epochs=0,
)


def job(**settings: str) -> JobConfig:
    base = {
        "app.id": "orders",
        "sources": "s",
        "sinks": "k",
        "pipeline": "m:f",
        "checkpoint.location": "/tmp/x",
    }
    return JobConfig.from_properties({**base, **settings})


def test_render_rates_lag_epoch_and_dead_letters() -> None:
    later = replace(
        START, at=110.0, records_in=11_200, records_out=10_900, lag=1204, last_epoch=57, last_epoch_ms=312
    )
    assert render("orders", later, START) == (
        "orders | in 1,020 rec/s | out 1,000 rec/s | lag 1,204 | epoch 57 in 312 ms"
    )
    worse = replace(later, dead_lettered=3, failed_epochs=1)
    assert render("orders", worse, START).endswith("| 3 dead-lettered | 1 failed epochs")


def test_render_before_any_epoch_or_rate() -> None:
    assert render("orders", START, None) == (
        "orders | in 1,000 total | out 900 total | lag ? | no epoch committed yet"
    )


class Snapshots:
    """Snapshots 1 s apart, 100 records more each time."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> Snapshot:
        self.count += 1
        return replace(START, at=100.0 + self.count, records_in=100 * self.count)


def test_rates_are_over_the_window() -> None:
    line = ProgressLine("orders", Snapshots(), io.StringIO(), in_place=True, interval_s=30)
    texts = [line.line() for _ in range(15)]
    assert texts[0].startswith("orders | in 100 total")
    assert all(" | in 100 rec/s" in t for t in texts[1:])
    assert len(line._history) <= 12  # a 10 s window of 1 s snapshots, plus its starting point


def test_log_mode_prints_from_its_thread_every_interval_while_the_line_changes() -> None:
    out = io.StringIO()
    line = ProgressLine("orders", Growing(), out, in_place=False, interval_s=0.05)
    line.start()
    time.sleep(0.3)
    line.stop()
    lines = out.getvalue().splitlines()
    assert 2 <= len(lines) <= 8
    assert all(text.startswith("orders | in ") for text in lines)
    assert "\r" not in out.getvalue()


class Clock:
    """A fake `time.monotonic` the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Growing:
    """Snapshots whose input rate grows by 10 rec/s a second: every line differs."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock
        self.count = 0

    def __call__(self) -> Snapshot:
        self.count += 1
        at = self.clock() if self.clock is not None else 100.0 + self.count
        return replace(START, at=at, records_in=5 * self.count * (self.count + 1))


class Idle:
    """A job that committed epoch 7 and then read nothing more: every snapshot has the same totals."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.records_in = 5000

    def __call__(self) -> Snapshot:
        return replace(
            START,
            at=self.clock(),
            records_in=self.records_in,
            records_out=5000,
            lag=0,
            last_epoch=7,
            last_epoch_ms=90,
        )


def started(line: ProgressLine) -> None:
    """What `start()` does before its thread's first interval: the first snapshot (the rates' starting point)."""
    line.line()


def run_log_mode(line: ProgressLine, clock: Clock, seconds: float) -> None:
    """What the printing thread does for `seconds`: one tick per interval, on the fake clock."""
    for _ in range(round(seconds / line.interval_s)):
        clock.now += line.interval_s
        line.tick()


def test_an_idle_job_prints_a_heartbeat_a_minute_not_a_line_every_interval() -> None:
    """Issue 24: with stderr not a terminal, an idle job printed the same line every 10 s forever."""
    clock, out = Clock(), io.StringIO()
    line = ProgressLine("orders", Idle(clock), out, in_place=False, interval_s=10.0, clock=clock)
    started(line)
    run_log_mode(line, clock, 300)
    lines = out.getvalue().splitlines()
    assert lines[0] == "orders | in 0 rec/s | out 0 rec/s | lag 0 | epoch 7 in 90 ms"
    assert set(lines) == {lines[0]}
    assert HEARTBEAT_S == 60
    assert len(lines) == 5, lines  # at 10 s, then a heartbeat at 70, 130, 190 and 250 s


def test_a_line_that_changes_is_printed_at_once_after_quiet_minutes() -> None:
    clock, out = Clock(), io.StringIO()
    idle = Idle(clock)
    line = ProgressLine("orders", idle, out, in_place=False, interval_s=10.0, clock=clock)
    started(line)
    run_log_mode(line, clock, 30)
    idle.records_in += 500  # input arrives: the next line says so at once
    run_log_mode(line, clock, 10)
    run_log_mode(line, clock, 10)  # idle again: the rate goes back to 0, which is news too
    run_log_mode(line, clock, 30)
    assert [text.split(" | ")[1] for text in out.getvalue().splitlines()] == [
        "in 0 rec/s",
        "in 50 rec/s",
        "in 0 rec/s",
    ]


def test_a_trickle_is_not_shown_as_zero() -> None:
    """A low but non-zero rate printed `in 0 rec/s` (3 records in 10 s); it reads `<1 rec/s`, and only no
    record at all is 0."""
    later = replace(START, at=110.0, records_in=START.records_in + 3, records_out=START.records_out + 10)
    assert render("orders", later, START).startswith("orders | in <1 rec/s | out 1 rec/s |")
    almost = replace(later, records_in=START.records_in + 9)  # 0.9 rec/s
    assert render("orders", almost, START).startswith("orders | in <1 rec/s |")
    idle = replace(START, at=110.0)
    assert render("orders", idle, START).startswith("orders | in 0 rec/s | out 0 rec/s |")


def test_a_trickle_in_log_mode_is_printed_on_change_and_stays_quiet_between() -> None:
    """Issue 24 item 8 with a trickle: one record every 25 s. An interval that read one says `<1 rec/s` (news),
    the next that read none says 0 (news); a minute with nothing stays quiet but for the heartbeat."""
    clock, out = Clock(), io.StringIO()
    idle = Idle(clock)
    line = ProgressLine("orders", idle, out, in_place=False, interval_s=10.0, clock=clock)
    started(line)
    run_log_mode(line, clock, 10)
    idle.records_in += 1
    run_log_mode(line, clock, 10)
    run_log_mode(line, clock, 10)
    run_log_mode(line, clock, 150)
    rates = [text.split(" | ")[1] for text in out.getvalue().splitlines()]
    assert rates == ["in 0 rec/s", "in <1 rec/s", "in 0 rec/s", "in 0 rec/s", "in 0 rec/s"], rates


def test_a_busy_job_prints_every_interval() -> None:
    clock, out = Clock(), io.StringIO()
    line = ProgressLine("orders", Growing(clock), out, in_place=False, interval_s=10.0, clock=clock)
    started(line)
    run_log_mode(line, clock, 60)
    assert len(out.getvalue().splitlines()) == 6


def test_tty_mode_rewrites_one_line_and_ends_it_on_stop() -> None:
    out = io.StringIO()
    line = ProgressLine("orders", Snapshots(), out, in_place=True, interval_s=30)
    line.interval_s = 0.05
    line.start()
    time.sleep(0.3)
    line.stop()
    text = out.getvalue()
    assert text.startswith("\rorders | in ") and text.endswith("\x1b[K\n")
    assert text.count("\n") == 1


def test_for_job_follows_the_settings() -> None:
    assert ProgressLine.for_job(job(progress="off"), Snapshots()) is None
    auto = ProgressLine.for_job(job(), Snapshots(), io.StringIO())  # not a terminal
    assert auto is not None and not auto.in_place and auto.interval_s == 10.0
    tty = ProgressLine.for_job(job(progress="tty"), Snapshots(), io.StringIO())
    assert tty is not None and tty.in_place and tty.interval_s == 1.0
    logged = ProgressLine.for_job(
        job(progress="log", **{"progress.interval.ms": "2500"}), Snapshots(), io.StringIO()
    )
    assert logged is not None and logged.interval_s == 2.5


def screen(text: str) -> list[str]:
    """The lines a terminal shows for `text`, honouring `\\r` (back to column 0) and `ESC[K` (erase to the end)."""
    lines, row, col = [""], 0, 0
    for token in re.split(r"(\r|\n|\x1b\[K)", text):
        if token == "\r":
            col = 0
        elif token == "\n":
            row, col = row + 1, 0
            if row == len(lines):
                lines.append("")
        elif token == "\x1b[K":
            lines[row] = lines[row][:col]
        elif token:
            current = lines[row]
            lines[row] = current[:col] + token + current[col + len(token) :]
            col += len(token)
    return lines


def test_a_log_line_is_never_glued_onto_the_live_line() -> None:
    """The run's console handler erases the live line before it writes, then the line is drawn again below."""
    out = io.StringIO()
    logger = logging.getLogger("test.progress.glued")
    logger.propagate = False
    handler = ConsoleHandler(out)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger.addHandler(handler)
    line = ProgressLine("orders", Snapshots(), out, in_place=True, interval_s=30)
    line.interval_s = 0.05
    try:
        line.start()
        deadline = time.monotonic() + 5
        while "orders | in " not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
        logger.warning("a warning while the line is live")
        time.sleep(0.15)
        line.stop()
    finally:
        logger.removeHandler(handler)
    shown = screen(out.getvalue())
    assert shown[0] == "WARNING a warning while the line is live", shown
    assert shown[1].startswith("orders | in ") and shown[2] == "", shown
    assert len(shown) == 3
