"""Epoch markers: the metadata string carried by a consumer-group offset committed inside a sink transaction.

Form: `{app.id}:{checkpoint-id}:{epoch}`. A marker tells a sink task whether its output for an epoch was committed
before: only a marker of the same app and the same Spark checkpoint (incarnation) with an epoch at or beyond the
current one makes a task skip. A marker of another checkpoint never does, so a reset checkpoint, whose batch ids
start again at 0, cannot silently drop output.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EpochMarker:
    """A parsed marker."""

    app_id: str
    checkpoint_id: str
    epoch: int

    def render(self) -> str:
        """The metadata string stored with the offset."""
        return f"{self.app_id}:{self.checkpoint_id}:{self.epoch}"

    @classmethod
    def parse(cls, text: str | None) -> EpochMarker | None:
        """Parse a metadata string; None for an absent or foreign one (another writer's metadata)."""
        if not text:
            return None
        app_id, sep, rest = text.rpartition(":")
        if not sep:
            return None
        app, sep2, checkpoint = app_id.rpartition(":")
        if not sep2 or not rest.isdigit():
            return None
        return cls(app, checkpoint, int(rest))

    def covers(self, app_id: str, checkpoint_id: str, epoch: int) -> bool:
        """True when this marker proves that `epoch` of that app and checkpoint was already committed."""
        return self.app_id == app_id and self.checkpoint_id == checkpoint_id and self.epoch >= epoch


@dataclass(frozen=True)
class ReplayMarker:
    """The metadata `ethereal-kafka replay` commits with the offsets it resets: `{app.id}:replay@{epoch ms}`.

    It never parses as an `EpochMarker` (its last part is not a number), so it makes no sink task skip and gives the
    recovery check no marker of this app to refuse on: the next run starts from the replayed offsets.
    """

    app_id: str
    replayed_ms: int

    def render(self) -> str:
        """The metadata string stored with the offset."""
        return f"{self.app_id}:replay@{self.replayed_ms}"

    @classmethod
    def parse(cls, text: str | None) -> ReplayMarker | None:
        """Parse a metadata string; None for anything else (epoch markers included)."""
        app_id, sep, tag = (text or "").rpartition(":")
        stamp = tag.removeprefix("replay@")
        if not sep or not app_id or stamp == tag or not stamp.isdigit():
            return None
        return cls(app_id, int(stamp))
