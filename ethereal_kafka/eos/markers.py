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


#: Prefix of an owner claim's metadata (older claims were a bare instance id).
CLAIM_PREFIX = "ek-owner:"


@dataclass(frozen=True)
class OwnerClaim:
    """Who runs an app: the metadata of the offset the owning instance commits (and refreshes) in the app's owner
    group (`{app.id}.ethereal-owner`, progress partition 0), whose offset value is the time of its last heartbeat.

    Attributes:
        instance_id: The owning instance (its sink tasks and epochs check that it is still theirs).
        host, pid, since_ms: Where and since when it runs (for the one-line refusal of a second start).
        takeover: The instance asking the owner to stop and hand over (`run --takeover`), if any.
        released: The owner stopped and let the app go; the next start needs no takeover.
    """

    instance_id: str
    host: str = ""
    pid: int = 0
    since_ms: int = 0
    takeover: str | None = None
    released: bool = False

    def render(self) -> str:
        """The metadata string stored with the offset."""
        import json

        body = {"id": self.instance_id, "host": self.host, "pid": self.pid, "since": self.since_ms}
        if self.takeover:
            body["takeover"] = self.takeover
        if self.released:
            body["released"] = True
        return CLAIM_PREFIX + json.dumps(body, separators=(",", ":"), sort_keys=True)

    @classmethod
    def parse(cls, text: str | None) -> OwnerClaim | None:
        """Parse a claim's metadata; an older claim (a bare instance id) parses with its id only."""
        import json

        if not text:
            return None
        if not text.startswith(CLAIM_PREFIX):
            return cls(text)
        try:
            body = json.loads(text[len(CLAIM_PREFIX) :])
            return cls(
                str(body["id"]),
                str(body.get("host", "")),
                int(body.get("pid", 0)),
                int(body.get("since", 0)),
                body.get("takeover") or None,
                bool(body.get("released", False)),
            )
        except (ValueError, KeyError, TypeError):
            return None
