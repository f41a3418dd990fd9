"""Durations in the DataStream API: `Duration.of_seconds(10)`, `Time.minutes(5)`.

Every time in the API is a whole number of milliseconds; event time is milliseconds since the Unix epoch (UTC).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Duration:
    """A non-negative span of time in milliseconds."""

    millis: int

    def __post_init__(self) -> None:
        if not isinstance(self.millis, int) or self.millis < 0:
            raise ValueError(
                f"a duration is a non-negative whole number of milliseconds, got {self.millis!r}"
            )

    @classmethod
    def of_millis(cls, ms: int) -> Duration:
        """`ms` milliseconds."""
        return cls(int(ms))

    @classmethod
    def of_seconds(cls, seconds: float) -> Duration:
        """`seconds` seconds (fractions allowed, rounded to the millisecond)."""
        return cls(round(seconds * 1000))

    @classmethod
    def of_minutes(cls, minutes: float) -> Duration:
        """`minutes` minutes."""
        return cls(round(minutes * 60_000))

    @classmethod
    def of_hours(cls, hours: float) -> Duration:
        """`hours` hours."""
        return cls(round(hours * 3_600_000))

    def spark_interval(self) -> str:
        """The duration as a Spark interval string (`"1500 milliseconds"`)."""
        return f"{self.millis} milliseconds"


#: The zero duration (a shared default).
ZERO = Duration(0)


class Time:
    """Flink-style shorthands: `Time.seconds(10)` is `Duration.of_seconds(10)`."""

    @staticmethod
    def milliseconds(ms: int) -> Duration:
        """`ms` milliseconds."""
        return Duration.of_millis(ms)

    @staticmethod
    def seconds(seconds: float) -> Duration:
        """`seconds` seconds."""
        return Duration.of_seconds(seconds)

    @staticmethod
    def minutes(minutes: float) -> Duration:
        """`minutes` minutes."""
        return Duration.of_minutes(minutes)

    @staticmethod
    def hours(hours: float) -> Duration:
        """`hours` hours."""
        return Duration.of_hours(hours)


def as_duration(value: Duration | int) -> Duration:
    """Accept a `Duration` or a number of milliseconds."""
    return value if isinstance(value, Duration) else Duration.of_millis(int(value))
