"""Epoch markers: the metadata string carried by a consumer-group offset committed inside a sink transaction.

Form: `{app.id}:{checkpoint-id}:{epoch}:r{ranges}`, where `ranges` is a digest of the epoch's input ranges (every
input partition's start and end offset, `ranges_digest`; the `r` tells it from an epoch number). A marker tells a sink task (and phase two) whether its
output for an epoch was committed before: only a marker of the same app, the same Spark checkpoint (incarnation),
the same epoch and the same ranges makes it skip. A marker of another checkpoint never does, so a reset checkpoint,
whose batch ids start again at 0, cannot silently drop output. A marker of the same checkpoint that records a later
epoch, or the same epoch over other ranges, means Spark's checkpoint is behind Kafka (a restored backup, a deleted
or unsynced offset log file): Spark would re-plan epochs that were committed with other bounds, so that is an error
(`CheckpointMismatchError`), never a skip. Markers written before the digest (three parts) skip on the epoch alone.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

from ethereal_kafka.eos.errors import CheckpointMismatchError


def ranges_digest(starts: Mapping[tuple[str, int], int], ends: Mapping[tuple[str, int], int]) -> str:
    """A digest of an epoch's input ranges: for every partition in `ends`, its start (from `starts`, 0 when absent:
    the source reads a new partition from its earliest offset) and its end. A pure function of the two offsets, so
    a replayed epoch (the same logged offsets) gives the same digest and a re-planned one (other bounds) another."""
    text = ";".join(f"{t}:{p}:{starts.get((t, p), 0)}-{o}" for (t, p), o in sorted(ends.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class EpochMarker:
    """A parsed marker (`ranges` None: a marker written before markers carried their ranges)."""

    app_id: str
    checkpoint_id: str
    epoch: int
    ranges: str | None = None

    def render(self) -> str:
        """The metadata string stored with the offset."""
        tail = f":r{self.ranges}" if self.ranges else ""
        return f"{self.app_id}:{self.checkpoint_id}:{self.epoch}{tail}"

    @classmethod
    def parse(cls, text: str | None) -> EpochMarker | None:
        """Parse a metadata string; None for an absent or foreign one (another writer's metadata). Parsed from the
        right: the app id is whatever precedes the checkpoint id."""
        if not text:
            return None
        head, sep, last = text.rpartition(":")
        ranges = None
        if sep and last.startswith("r") and len(last) > 1 and all(c in "0123456789abcdef" for c in last[1:]):
            ranges = last[1:]
            head, sep, last = head.rpartition(":")
        app, sep2, checkpoint = head.rpartition(":")
        if not sep or not sep2 or not app or not last.isdigit():
            return None
        return cls(app, checkpoint, int(last), ranges)

    def of(self, app_id: str, checkpoint_id: str) -> bool:
        """True when this marker was written by that app under that Spark checkpoint."""
        return self.app_id == app_id and self.checkpoint_id == checkpoint_id

    def committed(self, app_id: str, checkpoint_id: str, epoch: int, ranges: str | None, where: str) -> bool:
        """Whether this marker proves that `epoch` of that app and checkpoint, over input ranges `ranges`, was
        committed: True (skip it), or False (it still has to be written: no marker of this checkpoint, or one of an
        earlier epoch).

        Args:
            where: Names the offset the marker was read from, for the error (`group g, topic t[p]`).

        Raises:
            CheckpointMismatchError: the marker is of this checkpoint but of a later epoch, or of this epoch over
                other input ranges: Spark's checkpoint is behind Kafka, and writing or skipping would lose or repeat
                output.
        """
        if not self.of(app_id, checkpoint_id) or self.epoch < epoch:
            return False
        if self.epoch > epoch:
            raise CheckpointMismatchError(
                f"{where} holds epoch {self.epoch} of checkpoint {checkpoint_id}, but Spark's offset log now runs "
                f"epoch {epoch}: the checkpoint is behind Kafka (restored from a backup, or offset log files lost); "
                "its epochs would be re-planned over other offsets. Restore the checkpoint's newer files, or replay "
                f"from an explicit position (`ethereal-kafka replay {app_id} --from ...`)"
            )
        if self.ranges and ranges and self.ranges != ranges:
            raise CheckpointMismatchError(
                f"{where} holds epoch {epoch} of checkpoint {checkpoint_id} committed over other input ranges than "
                "Spark's offset log now gives that epoch: the checkpoint is behind Kafka (restored from a backup, or "
                "offset log files lost and re-planned). Restore the checkpoint's newer files, or replay from an "
                f"explicit position (`ethereal-kafka replay {app_id} --from ...`)"
            )
        return True


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
        takeover: The instance the owner handed over to (`run --takeover`), in its released claim.
        released: The owner stopped and let the app go; the next start needs no takeover.
        generation: Grows by one with every instance that claims the app (0: a claim written before claims had
            one). Only a newer claimant can write the claim: each fences the writers before it (`ClaimWriter`).
    """

    instance_id: str
    host: str = ""
    pid: int = 0
    since_ms: int = 0
    takeover: str | None = None
    released: bool = False
    generation: int = 0

    def render(self) -> str:
        """The metadata string stored with the offset."""
        import json

        body: dict[str, object] = {
            "id": self.instance_id,
            "host": self.host,
            "pid": self.pid,
            "since": self.since_ms,
        }
        if self.takeover:
            body["takeover"] = self.takeover
        if self.released:
            body["released"] = True
        if self.generation:
            body["gen"] = self.generation
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
                int(body.get("gen", 0)),
            )
        except (ValueError, KeyError, TypeError):
            return None
