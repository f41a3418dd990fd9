"""Replay: reset an app's committed offsets, epoch markers and Spark checkpoint so its next run reprocesses from a
chosen position (`ethereal-kafka replay APP --from ...`).

A replay is planned (`plan_replay`: one `PartitionReset` per input partition, nothing changed), shown, confirmed,
then applied (`apply_replay`) while the caller holds the app's run lock exclusively (`apps.exclusive_run_lock`)
and has checked the owner claim (`check_stopped`). Applying does, in this order:

0. claim the app for the replay (a `ClaimWriter`: any earlier claimant, a zombie of the last run among them, can no
   longer write the claim) and fence the run's transactional id pool as the run record names it (no zombie task or
   phase two of the last run commits after the reset);
1. move the checkpoint root aside (`<root>` → `<root>.before-replay-<UTC time>`: one atomic rename that takes every
   query's Spark checkpoint and the sources' pinned initial offsets with it; nothing is deleted);
2. write the *replay intent* `<root>/ethereal-replay.json`: the new start positions per source;
3. commit the new positions to each source's consumer group (each query's own group, for a source several queries
   read) with a `ReplayMarker` as metadata, replacing the epoch markers of the old checkpoint on every input
   partition;
4. delete the progress groups of the app's shuffling queries (their markers name the old checkpoint);
5. release the replay's claim, so the next run starts without a takeover.

How the next run learns about it: the runner reads the intent (`take_replay_intent`) while the checkpoint is fresh,
starts each source from its positions, and tells the coordinator it is replaying, so a stateful job starts instead of
refusing for its lost state. Once the new checkpoint has logged an epoch, the runner renames the intent to
`ethereal-replay.applied.json`: a later, unrelated checkpoint loss is then refused as usual. The order above keeps a
replay that dies half-way safe: if the group offsets were not reset yet, the intent still governs the next run; if
the intent was not written, a stateless job resumes from the (old) group offsets and a stateful one refuses.
Markers of the old checkpoint could never make the new one skip output anyway (see `markers`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import socket
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import KafkaError, TopicPartition

from ethereal_kafka.checkpoint.apps import RunRecord, local_path
from ethereal_kafka.checkpoint.errors import AppRunningError, ReplayError
from ethereal_kafka.config.connectors import KafkaSourceConfig
from ethereal_kafka.connectors.kafka.clients import (
    admin_client,
    cluster_metadata,
    group_consumer,
    transactional_producer,
    with_retries,
)
from ethereal_kafka.connectors.kafka.positions import PositionResolver
from ethereal_kafka.eos.committed import CommittedOffset, progress_queries, source_offsets
from ethereal_kafka.eos.errors import RecoveryError
from ethereal_kafka.eos.markers import OwnerClaim, ReplayMarker
from ethereal_kafka.eos.names import progress_group, progress_topic
from ethereal_kafka.eos.ownership import LEASE_S, ClaimWriter

log = logging.getLogger(__name__)

INTENT_FILE = "ethereal-replay.json"
APPLIED_FILE = "ethereal-replay.applied.json"
_ITEM = re.compile(r"^([A-Za-z0-9._-]+):(\d+):(\d+)$")


@dataclass(frozen=True)
class ReplayStart:
    """Where a replay starts: `earliest`, `timestamp:<ms>`, explicit `topic:partition:offset,...`, or
    `savepoint:<folder>` (the savepoint's offsets, and its operators' state restored by the next run:
    `checkpoint.savepoints`). A savepoint whose queries read a partition up to different offsets starts each query's
    own consumer group where that query stood (`by_query`, `given_for`).

    With explicit offsets, partitions not named keep their committed offset.
    """

    kind: str
    timestamp_ms: int | None = None
    offsets: tuple[tuple[str, int, int], ...] = ()
    savepoint: str | None = None
    allow_non_restored: bool = False
    by_query: tuple[tuple[str, tuple[tuple[str, int, int], ...]], ...] = ()

    def query_of(self, group: str) -> str | None:
        """The query of `by_query` whose own consumer group `group` is (`<group>.<query>`, `plan.sink_groups`; the
        longest name that fits), or None."""
        fits = [name for name, _ in self.by_query if group.endswith(f".{name}")]
        return max(fits, key=len) if fits else None

    def given_for(self, group: str) -> dict[tuple[str, int], int]:
        """The offsets given to a source entry committing to consumer group `group`: `offsets`, and with a
        savepoint whose queries read a partition up to different offsets (`by_query`), the offsets of the query
        whose own group `group` is (`query_of`)."""
        given = {(t, p): o for t, p, o in self.offsets}
        query = self.query_of(group)
        if query is not None:
            given.update({(t, p): o for t, p, o in dict(self.by_query)[query]})
        return given

    def disputed(self) -> dict[tuple[str, int], list[str]]:
        """With a savepoint whose queries read a partition up to different offsets: those partitions, each with
        the queries that read it; else empty."""
        agreed = {(t, p) for t, p, _ in self.offsets}
        found: dict[tuple[str, int], list[str]] = {}
        for name, own in self.by_query:
            for t, p, _ in own:
                if (t, p) not in agreed:
                    found.setdefault((t, p), []).append(name)
        return found

    @classmethod
    def parse(cls, text: str) -> ReplayStart:
        """Parse a `--from` value.

        Raises:
            ReplayError: not one of the three forms, or an explicit list names a partition twice.
        """
        value = text.strip()
        if value == "earliest":
            return cls("earliest")
        if value.startswith("timestamp:"):
            stamp = value.removeprefix("timestamp:")
            if not stamp.isdigit():
                raise ReplayError(
                    f"--from {text!r}: timestamp:<ms> needs epoch milliseconds, e.g. timestamp:1700000000000"
                )
            return cls("timestamp", timestamp_ms=int(stamp))
        if value.startswith("savepoint:"):
            from ethereal_kafka.checkpoint.savepoints import SavepointError, read_manifest

            folder = Path(value.removeprefix("savepoint:")).absolute()
            try:
                agreed, own = read_manifest(folder).agreed_offsets()
            except SavepointError as exc:
                raise ReplayError(f"--from {text!r}: {exc}") from exc
            by_query = tuple((name, tuple(items)) for name, items in sorted(own.items()))
            return cls("savepoint", offsets=tuple(agreed), savepoint=str(folder), by_query=by_query)
        items = []
        for part in value.split(","):
            match = _ITEM.match(part.strip())
            if match is None:
                raise ReplayError(
                    f"--from {text!r}: expected earliest, timestamp:<ms> or topic:partition:offset[,...] "
                    f"(bad item {part.strip()!r})"
                )
            items.append((match[1], int(match[2]), int(match[3])))
        named = [(t, p) for t, p, _ in items]
        twice = sorted({f"{t}:{p}" for t, p in named if named.count((t, p)) > 1})
        if twice:
            raise ReplayError(f"--from {text!r}: partition(s) named twice: {', '.join(twice)}")
        return cls("offsets", offsets=tuple(items))

    def render(self) -> str:
        """The `--from` text this start was parsed from (normalised)."""
        if self.kind == "timestamp":
            return f"timestamp:{self.timestamp_ms}"
        if self.kind == "offsets":
            return ",".join(f"{t}:{p}:{o}" for t, p, o in self.offsets)
        if self.kind == "savepoint":
            return f"savepoint:{self.savepoint}"
        return self.kind


@dataclass(frozen=True)
class PartitionReset:
    """One input partition of a replay plan.

    Attributes:
        committed: The group's committed offset now (None: never committed).
        new: Where the next run starts reading this partition.
        end: The partition's end offset now (read_committed): the next run reads `end - new` records from here.
    """

    source: str
    group: str
    topic: str
    partition: int
    committed: int | None
    new: int
    end: int


@dataclass(frozen=True)
class ReplayPlan:
    """What a replay changes: per input partition of each source, the committed offset and the new start."""

    app_id: str
    start: ReplayStart
    resets: tuple[PartitionReset, ...]

    def starts(self) -> dict[str, str]:
        """Per source name, its new positions as a `starting.offsets` value (`topic:partition:offset,...`). A
        partition whose groups start at different offsets is left out (`group_starts` has them, and governs each
        group; a source left with none says `group-offsets`, which no group of it then reads)."""
        return {
            name: ",".join(f"{t}:{p}:{next(iter(o))}" for (t, p), o in by_tp.items() if len(o) == 1)
            or "group-offsets"
            for name, by_tp in self._news().items()
        }

    def group_starts(self) -> dict[str, dict[str, str]]:
        """Per source whose consumer groups start a partition at different offsets (a savepoint of queries that
        stood apart), each group's positions as a `starting.offsets` value; empty otherwise."""
        split = {name for name, by_tp in self._news().items() if any(len(o) > 1 for o in by_tp.values())}
        specs: dict[str, dict[str, list[str]]] = {}
        for r in self.resets:
            if r.source in split:
                specs.setdefault(r.source, {}).setdefault(r.group, []).append(
                    f"{r.topic}:{r.partition}:{r.new}"
                )
        return {
            name: {g: ",".join(items) for g, items in groups.items()}
            for name, groups in sorted(specs.items())
        }

    def _news(self) -> dict[str, dict[tuple[str, int], set[int]]]:
        """Per source, per partition, the new offsets its entries (one per consumer group) start at."""
        news: dict[str, dict[tuple[str, int], set[int]]] = {}
        for r in self.resets:
            news.setdefault(r.source, {}).setdefault((r.topic, r.partition), set()).add(r.new)
        return news


def _savepoint_entries(
    sources: Mapping[str, KafkaSourceConfig],
    start: ReplayStart,
    disputed: Mapping[tuple[str, int], Sequence[str]],
) -> dict[str, KafkaSourceConfig]:
    """`sources` (entries keyed `name` or `name@group`) with, for a source the savepoint's queries read up to
    different offsets and that commits to its own group alone (an app that never ran this version: no run record
    names its queries' groups), one entry per such query instead, with the group that query reads it with
    (`<group>.<query>`, `plan.sink_groups`)."""
    by_source: dict[str, list[tuple[str, KafkaSourceConfig]]] = {}
    for key, config in sources.items():
        by_source.setdefault(config.name, []).append((key, config))
    out: dict[str, KafkaSourceConfig] = {}
    for name, entries in by_source.items():
        base = entries[0][1]
        queries = sorted({q for (topic, _), qs in disputed.items() if base.reads(topic) for q in qs})
        own = any(start.query_of(config.group) is not None for _, config in entries)
        if len(queries) < 2 or own:
            out.update(entries)
            continue
        for query in queries:
            group = f"{base.group}.{query}"
            out[f"{name}@{group}"] = dataclasses.replace(base, group_id=group)
    return out


def plan_replay(
    app_id: str, sources: Mapping[str, KafkaSourceConfig], start: ReplayStart, stable: bool = True
) -> ReplayPlan:
    """Compute the new start of every input partition of `sources` (configured as the job runs them); read-only.

    `stable` False plans on the last committed offsets (before the last run's ids are fenced: a stable read would
    wait out a crashed run's open transaction); `apply_replay` plans again stably after its fence.

    `timestamp:<ms>` takes each partition's first offset with a timestamp >= ms (`offsets_for_times`), or its end
    when there is none. Explicit offsets must lie within the partition's retained range `[earliest, end]`;
    partitions they do not name keep their committed offset (or, without one, start per `group.offsets.reset`).

    Raises:
        ReplayError: an explicit offset names a partition no source reads, or lies outside its retained range.
        KafkaConnectionError: the cluster did not answer after bounded retries.
    """
    given = {(t, p): o for t, p, o in start.offsets}
    disputed = start.disputed()
    resets: list[PartitionReset] = []
    for source in (_savepoint_entries(sources, start, disputed) if disputed else sources).values():
        mine = start.given_for(source.group) if disputed else given
        rows = source_offsets(source, stable=stable)
        tps = [(r.topic, r.partition) for r in rows]
        at: dict[tuple[str, int], int] = {}
        if start.kind == "timestamp" and tps:
            resolver = PositionResolver(dataclasses.replace(source, isolation_level="read_committed"))
            try:
                at = resolver.at_timestamp(tps, start.timestamp_ms or 0)
            finally:
                resolver.close()
        for r in rows:
            tp = (r.topic, r.partition)
            if start.kind == "earliest":
                new = r.earliest
            elif start.kind == "timestamp":
                new = at[tp]
            elif tp in mine:
                new = mine[tp]
                if not r.earliest <= new <= r.end:
                    raise ReplayError(
                        f"offset {new} of {r.topic}:{r.partition} is outside the partition's retained range "
                        f"[{r.earliest}, {r.end}]"
                    )
            elif tp in disputed:
                raise ReplayError(
                    f"the savepoint's queries {', '.join(disputed[tp])} read {r.topic}:{r.partition} up to different "
                    f"offsets, and source {r.source}'s consumer group {r.group} is none of theirs; take the savepoint "
                    "once the queries have read the same input (`savepoint --stop` after the input paused)"
                )
            elif r.committed.offset is not None:
                new = r.committed.offset
            else:
                new = r.earliest if source.group_offsets_reset == "earliest" else r.end
            resets.append(
                PartitionReset(r.source, r.group, r.topic, r.partition, r.committed.offset, new, r.end)
            )
    known = {(r.topic, r.partition) for r in resets}
    unknown = sorted(f"{t}:{p}" for t, p in set(given) - known)
    if unknown:
        raise ReplayError(
            f"app {app_id} does not read partition(s) {', '.join(unknown)}; its sources read "
            f"{', '.join(sorted({r.topic for r in resets})) or 'nothing'}"
        )
    return ReplayPlan(app_id, start, tuple(resets))


def checkpoint_dir(checkpoint_root: str) -> Path:
    """The checkpoint root as a local folder.

    Raises:
        ReplayError: the root is a URI of another file system (a replay renames it, which only works locally).
    """
    path = local_path(checkpoint_root)
    if path is None:
        raise ReplayError(
            f"checkpoint.location={checkpoint_root} is not a local folder; replay moves the checkpoint aside and "
            "supports local folders only (move it yourself and set `replay.from` in the job file instead)"
        )
    return path


def check_stopped(app_id: str, record: RunRecord | None, claim: CommittedOffset | None, force: bool) -> None:
    """Refuse when the app may be running on another host. Call while holding `exclusive_run_lock`.

    The lock proves that no instance runs on this host. The owner claim (group `{app}.ethereal-owner`) names the
    last instance that started anywhere, its host and its last heartbeat (`eos.ownership`): a claim that
    was released, that comes from this host (whose lock proves it stopped), or whose heartbeat lapsed is no
    obstacle.

    Raises:
        AppRunningError: the claim belongs to a live instance on another host, and not `force`.
    """
    if force or claim is None:
        return
    owner = OwnerClaim.parse(claim.metadata)
    if owner is None or owner.released:
        return
    here = socket.gethostname()
    if (
        record is not None and record.instance_id == owner.instance_id and record.host == here
    ) or owner.host == here:
        return
    if time.time() * 1000 - (claim.offset or 0) > LEASE_S * 1000:
        return  # its heartbeat lapsed: it is gone
    when = _utc(claim.offset or 0)
    raise AppRunningError(
        f"app {app_id} is claimed by instance {owner.instance_id} on host {owner.host or '?'}, whose last "
        f"heartbeat was at {when}: it may still run there; stop it (or make sure it stopped) and pass --force"
    )


@dataclass(frozen=True)
class ReplayOutcome:
    """What `apply_replay` changed.

    Attributes:
        moved_to: Where the old checkpoint root went (None when there was none to move).
        intent: The replay intent the next run reads.
        deleted_groups: Progress groups deleted.
        warnings: Steps that did not fully succeed but leave the replay safe (one line each).
        fenced: The last run's transactional ids fenced.
    """

    moved_to: Path | None
    intent: Path
    deleted_groups: tuple[str, ...]
    warnings: tuple[str, ...]
    fenced: int = 0


def has_checkpoint(root: Path) -> bool:
    """True when the checkpoint root holds anything but a replay intent: a replay then moves it aside."""
    return root.is_dir() and any(child.name != INTENT_FILE for child in root.iterdir())


def moved_aside_path(root: Path, now_ms: int) -> Path:
    """`<root>.before-replay-<UTC yyyymmddThhmmssZ>`, beside the root (never inside it: the runner would take a
    folder inside the root for a query's checkpoint)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now_ms / 1000))
    candidate = root.with_name(f"{root.name}.before-replay-{stamp}")
    n = 1
    while candidate.exists():
        n += 1
        candidate = root.with_name(f"{root.name}.before-replay-{stamp}-{n}")
    return candidate


def apply_replay(
    plan: ReplayPlan,
    sources: Mapping[str, KafkaSourceConfig],
    checkpoint_root: str,
    bootstrap: str,
    passthrough: Mapping[str, str],
    now_ms: int | None = None,
    pool: Mapping[str, Sequence[str]] | None = None,
) -> ReplayOutcome:
    """Apply `plan` (see the module docstring for the steps and their order). The caller holds the app's run lock
    exclusively and has called `check_stopped`.

    Args:
        sources: The job's sources as it runs them (groups defaulted to the app id).
        bootstrap, passthrough: The cluster holding the app's progress topic and groups (the sinks' cluster).
        pool: The last run's transactional ids per cluster (its run record's); None: unknown, a warning says so.

    Raises:
        ReplayError: the checkpoint root is not a local folder, or is a file.
        KafkaConnectionError: committing the new offsets failed after bounded retries (the checkpoint is already
            moved and the intent written: the next run still starts from the replay positions).
    """
    now = int(time.time() * 1000) if now_ms is None else now_ms
    root = checkpoint_dir(checkpoint_root)
    if root.exists() and not root.is_dir():
        raise ReplayError(f"checkpoint.location {root} is a file, not a folder")
    claimant = OwnerClaim(f"replay-{uuid.uuid4().hex[:8]}", socket.gethostname(), os.getpid(), now)
    claims = ClaimWriter(plan.app_id, bootstrap, passthrough, claimant)
    # Without the progress topic the app was never claimed (the claim lives there): nothing to take over.
    claimed = (
        progress_topic(plan.app_id)
        in cluster_metadata(admin_client(bootstrap, passthrough), bootstrap).topics
    )
    try:
        if claimed:
            claims.commit()
        fenced = _fence(pool or {}, passthrough)
        # The plan shown was read before the fence; a crashed run's commit that the fence let finish moved the
        # committed offsets it keeps for partitions a replay does not name.
        settled = plan_replay(plan.app_id, sources, plan.start)
        if committed_positions(settled) != committed_positions(plan):
            if claimed:
                claims.release()
            raise ReplayError(
                f"app {plan.app_id}: its committed offsets moved since the plan was shown (the last run's "
                "transactions, fenced now, had a commit in flight); no offset or checkpoint was changed: run it again"
            )
        outcome = _apply(plan, sources, root, bootstrap, passthrough, now)
        if claimed:
            claims.release()
    finally:
        claims.close()
    warnings = (
        () if pool else ("the last run's transactional ids are not known here (no run record): not fenced",)
    )
    return dataclasses.replace(outcome, fenced=fenced, warnings=outcome.warnings + warnings)


def committed_positions(plan: ReplayPlan) -> list[tuple[str, int, int | None]]:
    """The committed offset `plan` found for each partition (what must not move between a plan and its apply)."""
    return [(r.topic, r.partition, r.committed) for r in plan.resets]


def _fence(pool: Mapping[str, Sequence[str]], passthrough: Mapping[str, str]) -> int:
    """`init_transactions` over every id of `pool` (per cluster), in parallel: a zombie holder is fenced and its
    open transaction aborted. Returns the number of ids fenced."""
    from concurrent.futures import ThreadPoolExecutor

    entries = [(cluster, txn_id) for cluster, ids in pool.items() for txn_id in ids]

    def fence(entry: tuple[str, str]) -> None:
        cluster, txn_id = entry
        producer = with_retries(
            f"fencing {txn_id}",
            cluster,
            lambda: transactional_producer(txn_id, cluster, REPLAY_TRANSACTION_TIMEOUT_MS, passthrough),
        )
        producer.flush(0)

    with ThreadPoolExecutor(max_workers=min(8, max(1, len(entries)))) as workers:
        list(workers.map(fence, entries))
    return len(entries)


#: The transaction timeout of the producers a replay fences the pool with (they open no transaction).
REPLAY_TRANSACTION_TIMEOUT_MS = 60_000


def _apply(
    plan: ReplayPlan,
    sources: Mapping[str, KafkaSourceConfig],
    root: Path,
    bootstrap: str,
    passthrough: Mapping[str, str],
    now: int,
) -> ReplayOutcome:
    """Steps 1-4 of the module docstring."""
    queries = progress_queries(plan.app_id, bootstrap, passthrough, str(root))
    moved = None
    if has_checkpoint(root):
        moved = moved_aside_path(root, now)
        os.rename(root, moved)
    root.mkdir(parents=True, exist_ok=True)
    intent = root / INTENT_FILE
    body = {
        "app_id": plan.app_id,
        "from": plan.start.render(),
        "created_ms": now,
        "starts": plan.starts(),
        "moved_checkpoint": str(moved) if moved else None,
        "savepoint": plan.start.savepoint,
        "allow_non_restored": plan.start.allow_non_restored,
        "group_starts": plan.group_starts(),
    }
    partial = root / f"{INTENT_FILE}.partial"
    partial.write_text(json.dumps(body, indent=2, sort_keys=True), encoding="utf-8")
    os.replace(partial, intent)
    marker = ReplayMarker(plan.app_id, now).render()
    by_name = {config.name: config for config in sources.values()}
    for name, group in dict.fromkeys((r.source, r.group) for r in plan.resets):
        source = by_name[name]
        mine = [
            TopicPartition(r.topic, r.partition, r.new, marker)
            for r in plan.resets
            if (r.source, r.group) == (name, group)
        ]
        consumer = group_consumer(source.bootstrap_servers, group, source.passthrough)
        with_retries(
            f"offset reset of group {group}",
            source.bootstrap_servers,
            lambda c=consumer, o=mine: c.commit(offsets=o, asynchronous=False),  # type: ignore[misc]
        )
    deleted, warnings = _delete_groups(
        [progress_group(plan.app_id, q) for q in queries], bootstrap, passthrough
    )
    return ReplayOutcome(moved, intent, deleted, warnings)


def _delete_groups(
    groups: list[str], bootstrap: str, passthrough: Mapping[str, str]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    if not groups:
        return (), ()
    admin = admin_client(bootstrap, passthrough)
    deleted, warnings = [], []
    for group, future in admin.delete_consumer_groups(groups, request_timeout=30).items():
        try:
            future.result()
            deleted.append(group)
        except Exception as exc:  # the future raises KafkaException; anything else is reported the same way
            error = exc.args[0] if exc.args else None
            if isinstance(error, KafkaError) and error.code() == KafkaError.GROUP_ID_NOT_FOUND:
                continue
            warnings.append(
                f"progress group {group} was not deleted ({exc}); its markers name the old checkpoint and "
                "never make the new one skip output"
            )
    return tuple(deleted), tuple(warnings)


@dataclass(frozen=True)
class ReplayIntent:
    """The start positions a replay left: per source name a `starting.offsets` value (`starts`), and per source
    whose queries start a partition at different offsets, per consumer group (`group_starts`,
    `ReplayPlan.group_starts`)."""

    starts: Mapping[str, str]
    group_starts: Mapping[str, Mapping[str, str]]


def take_replay_intent(checkpoint_root: str, app_id: str, fresh: bool) -> ReplayIntent | None:
    """Called by the runner at start: the start positions a replay left for `app_id`, or None.

    With a fresh checkpoint (no query has logged an epoch) the intent applies and stays in place, so a run that
    crashes before its first epoch applies it again. Once the checkpoint has progress the intent is retired (renamed
    to `ethereal-replay.applied.json`) and None is returned.

    Raises:
        RecoveryError: the intent file exists but cannot be read (a replay that did not finish writing it cannot
            have happened: the file is written atomically), so the run stops rather than guess.
    """
    root = local_path(checkpoint_root)
    path = root / INTENT_FILE if root is not None else None
    if path is None or not path.is_file():
        return None
    if not fresh:
        os.replace(path, path.with_name(APPLIED_FILE))
        return None
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        starts = {str(name): str(spec) for name, spec in raw["starts"].items()}
        group_starts = {
            str(name): {str(group): str(spec) for group, spec in groups.items()}
            for name, groups in raw.get("group_starts", {}).items()
        }
        owner = raw["app_id"]
    except (OSError, ValueError, KeyError, AttributeError, TypeError) as exc:
        raise RecoveryError(
            f"the replay intent {path} is unreadable ({exc}); run `ethereal-kafka replay` again"
        ) from exc
    if owner != app_id:
        log.warning("ignoring replay intent %s: it was written for app %s, not %s", path, owner, app_id)
        return None
    log.info("app %s: replaying from %s (intent %s)", app_id, raw.get("from"), path)
    return ReplayIntent(starts, group_starts)


def intent_savepoint(checkpoint_root: str, app_id: str) -> tuple[str, bool] | None:
    """The savepoint whose state the replay intent of `app_id` restores (`--from savepoint:...`) and whether state
    the new version lacks may be dropped, or None (no intent, another kind, or an intent of another app). The
    intent or, once an epoch was logged, the retired one: the caller reads it until a query committed an epoch, as
    an epoch 0 a crash cut short replays with the restored state too."""
    root = local_path(checkpoint_root)
    if root is None:
        return None
    path = next((p for p in (root / INTENT_FILE, root / APPLIED_FILE) if p.is_file()), None)
    if path is None:
        return None
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # `take_replay_intent` refuses it in one line
    if not isinstance(raw, dict) or raw.get("app_id") != app_id or not raw.get("savepoint"):
        return None
    return str(raw["savepoint"]), bool(raw.get("allow_non_restored"))


def _utc(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))
