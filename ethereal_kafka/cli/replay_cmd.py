"""`ethereal-kafka replay APP --from earliest|timestamp:<ms>|topic:partition:offset,...|savepoint:PATH`: make an app
reprocess (from a savepoint: with its operators' state restored by the next run).

Without `--into`: resets the app's committed offsets, epoch markers and Spark checkpoint (moved aside, never
deleted) so the next `ethereal-kafka run` reprocesses from the given position (see `eos.replay`). It shows
the plan (per partition: committed offset → new start), asks for confirmation unless `--yes`, and refuses while
an instance of the app is running. `--dry-run` shows the plan and changes nothing.

With `--into TOPIC`: runs the job's pipeline once over the range, into TOPIC, under a throwaway app id; the app's
own state is untouched (see `runtime.replay_into`).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from typing import Any

from ethereal_kafka.checkpoint.apps import exclusive_run_lock, read_run_record
from ethereal_kafka.checkpoint.errors import AppRunningError, ReplayError
from ethereal_kafka.cli.app_job import AppJob, add_app_arguments, format_table, reach_clusters, resolve_app
from ethereal_kafka.eos.committed import owner_claim
from ethereal_kafka.eos.replay import (
    ReplayOutcome,
    ReplayPlan,
    ReplayStart,
    apply_replay,
    check_stopped,
    checkpoint_dir,
    committed_positions,
    has_checkpoint,
    moved_aside_path,
    plan_replay,
)

PLAN_COLUMNS = ("SOURCE", "GROUP", "TOPIC", "PARTITION", "COMMITTED", "NEW", "END", "TO READ")
_NUMERIC = ("PARTITION", "COMMITTED", "NEW", "END", "TO READ")


def register(sub: Any) -> None:
    """Add the `replay` sub-command."""
    parser = sub.add_parser(
        "replay", help="reset an app to reprocess from a position, or replay a range into another topic"
    )
    add_app_arguments(parser)
    parser.add_argument(
        "--from",
        dest="start",
        required=True,
        metavar="POSITION",
        help="earliest | timestamp:<epoch ms> | topic:partition:offset,... (partitions not named keep their offset)",
    )
    parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    parser.add_argument(
        "--allow-non-restored-state",
        action="store_true",
        help="with --from savepoint:PATH: drop the state of operators the new version lacks (else refused)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print what would change and change nothing")
    parser.add_argument(
        "--into",
        metavar="TOPIC",
        help="replay the range once into TOPIC (the app's offsets, markers and checkpoint stay untouched)",
    )
    parser.add_argument(
        "--dlq-into",
        metavar="TOPIC",
        help="with --into, for a job with a dead-letter topic: the topic the replay's dead letters go to",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="reset even though the app was last claimed by an instance that did not start on this host",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Plan, show, confirm and apply a replay (or run it into `--into`); see the module docstring.

    Raises:
        ReplayError: a bad `--from`, an offset out of range, no confirmation, a bad `--into` or `--dlq-into` topic.
        AppRunningError: an instance of the app is (or may be) running.
        AppNotFoundError, ConfigError, KafkaConnectionError: as the message says.
    """
    if args.dlq_into and not args.into:
        raise ReplayError("--dlq-into names where a replay --into TOPIC sends its dead letters; add --into")
    start = dataclasses.replace(
        ReplayStart.parse(args.start), allow_non_restored=args.allow_non_restored_state
    )
    app = resolve_app(args)
    reach_clusters(app)  # a cluster that is not there fails in about a second
    plan = plan_replay(app.app_id, app.sources, start, stable=False)
    print(render_plan(plan))
    warning = rewind_warning(plan)
    if warning is not None:
        print(warning)
    if args.into:
        return _into(app, plan, args.into, args.dlq_into, args.dry_run)
    root = checkpoint_dir(app.checkpoint_root)
    if args.dry_run:
        if has_checkpoint(root):
            print(f"the Spark checkpoint {root} would be moved aside to {moved_aside_path(root, _now_ms())}")
        else:
            print(f"no Spark checkpoint at {root} to move aside")
        running = _running(app, args.force)
        if running:
            print(f"note: a replay now would be refused: {running}")
        print("dry run: nothing changed")
        return 0
    with exclusive_run_lock(app.app_id):
        check_claim(app, args.force)
    _confirm(app.app_id, args.yes)
    outcome = apply_start(app, plan, args.force)
    print(render_outcome(app.app_id, outcome))
    return 0


def apply_start(app: AppJob, plan: ReplayPlan, force: bool) -> ReplayOutcome:
    """Apply a replay `plan` that was shown (or not asked about: `run --from-savepoint`), under the app's run lock.

    Raises:
        AppRunningError: an instance of the app is (or may be) running.
        ReplayError: the committed offsets moved since `plan` was made.
    """
    with exclusive_run_lock(app.app_id):  # held while anything changes: no instance can start meanwhile
        check_claim(app, force)
        # Planned again under the lock; only the committed offsets must not have moved since the plan was shown
        # (end offsets grow with new input, and that changes nothing the user confirmed).
        current = plan_replay(app.app_id, app.sources, plan.start, stable=False)
        if committed_positions(current) != committed_positions(plan):
            raise ReplayError(
                f"app {app.app_id}: its committed offsets moved since the plan was shown; run it again"
            )
        sink = app.sink
        record = read_run_record(app.app_id)
        return apply_replay(
            current,
            app.sources,
            app.checkpoint_root,
            sink.bootstrap_servers,
            sink.passthrough,
            pool=record.pool if record is not None and record.pool else None,
        )


def rewind_warning(plan: ReplayPlan) -> str | None:
    """For a restore from a savepoint the app has read past: one line saying its output from there on will be
    written again (as with any replay into the same topics); None otherwise."""
    # Per input partition: a source read by several queries has a group per query, counted once.
    ahead: dict[tuple[str, int], int] = {}
    for r in plan.resets:
        if r.committed is not None and r.committed > r.new:
            tp = (r.topic, r.partition)
            ahead[tp] = max(ahead.get(tp, 0), r.committed - r.new)
    if plan.start.kind != "savepoint" or not ahead:
        return None
    return (
        f"warning: app {plan.app_id} has read {sum(ahead.values())} record(s) past this savepoint on {len(ahead)} "
        "partition(s): their output is written again (point the sinks at new topics to keep one copy)"
    )


def render_plan(plan: ReplayPlan) -> str:
    """The plan as a table: per partition, the committed offset, the new start, the end, and how many to read."""
    rows = [
        (r.source, r.group, r.topic, r.partition, r.committed, r.new, r.end, max(0, r.end - r.new))
        for r in plan.resets
    ]
    return f"replay of app {plan.app_id} from {plan.start.render()}:\n" + format_table(
        PLAN_COLUMNS, rows, _NUMERIC
    )


def render_outcome(app_id: str, outcome: ReplayOutcome) -> str:
    """What was changed, one line each."""
    lines = ["committed the new offsets (with a replay marker) to the app's consumer group(s)"]
    if outcome.fenced:
        lines.insert(0, f"claimed the app and fenced the last run's {outcome.fenced} transactional id(s)")
    if outcome.moved_to is not None:
        lines.append(
            f"moved the old Spark checkpoint aside to {outcome.moved_to} (delete it when no longer needed)"
        )
    if outcome.deleted_groups:
        lines.append(f"deleted progress group(s) {', '.join(outcome.deleted_groups)}")
    lines += [f"warning: {w}" for w in outcome.warnings]
    lines.append(
        f"the next `ethereal-kafka run` of {app_id} starts from these positions (intent {outcome.intent})"
    )
    return "\n".join(lines)


def _running(app: AppJob, force: bool) -> str | None:
    """Why a replay would be refused now (None: it would not be); holds the lock only for the look."""
    try:
        with exclusive_run_lock(app.app_id):
            check_claim(app, force)
    except AppRunningError as exc:
        return str(exc)
    return None


def check_claim(app: AppJob, force: bool) -> None:
    """`check_stopped` against the app's owner claim; the caller holds the run lock exclusively."""
    sink = app.sink
    claim = owner_claim(app.app_id, sink.bootstrap_servers, sink.passthrough)
    check_stopped(app.app_id, read_run_record(app.app_id), claim, force)


def _confirm(app_id: str, yes: bool) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        raise ReplayError(
            "replay resets the app's offsets and checkpoint: pass --yes to confirm (no terminal to ask)"
        )
    answer = input(f"Reset app {app_id} to these positions? [y/N] ").strip().lower()
    if answer not in ("y", "yes"):
        raise ReplayError("replay cancelled; nothing changed")


def _into(app: AppJob, plan: ReplayPlan, topic: str, dlq_topic: str | None, dry_run: bool) -> int:
    from ethereal_kafka.runtime.replay_into import check_targets, replay_into

    if dry_run:
        check_targets(app.loaded, topic, dlq_topic)
        print(f"dry run: would replay these ranges into {topic}; nothing changed")
        return 0

    outcome = replay_into(app.loaded, plan.starts(), topic, dlq_topic)
    records = "?" if outcome.records < 0 else str(outcome.records)
    print(
        f"replayed into {topic}: {records} record(s) in {outcome.epochs} epoch(s) under app id "
        f"{outcome.replay_app_id}; app {app.app_id}'s offsets, markers and checkpoint are untouched"
    )
    for leftover in outcome.leftovers:
        print(f"warning: {leftover}")
    return 0


def _now_ms() -> int:
    return int(time.time() * 1000)
