"""Output tags name side outputs (late records of a window, extra outputs of a process function)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OutputTag:
    """A named side output.

    Attributes:
        name: Unique within the job (letters, digits, `_`).
        output_type: Spark DDL of the side output's elements (`"id long, reason string"`); None for a window's late
            data, whose elements have the windowed stream's type.
    """

    name: str
    output_type: str | None = None

    def __post_init__(self) -> None:
        if not self.name.replace("_", "").isalnum():
            raise ValueError(f"an output tag name uses letters, digits and '_' only, got {self.name!r}")
