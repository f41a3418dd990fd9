"""`ethereal-kafka savepoint APP [--stop] [--into DIR]` and `ethereal-kafka savepoints APP`: take a savepoint of an
app (its position and operator state, in an open format: `checkpoint.savepoints`, `runtime.savepoint`), and list
them. Of an app running on this host, the savepoint is taken of each query's last committed epoch while the
instance goes on (a live savepoint). `--stop` first stops the running instance (Flink's stop-with-savepoint): it is
asked to hand over, as `run --takeover` asks, and stops between epochs, every epoch that started writing committed;
the savepoint is then taken of the position it stopped at.

A savepoint is restored with `ethereal-kafka run JOB --from-savepoint PATH` (or `replay APP --from
savepoint:PATH`, then `run`): the app is reset to the savepoint's offsets and the new version's operators start
with the state of the same uid.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from pathlib import Path
from typing import Any

from ethereal_kafka.checkpoint.apps import exclusive_run_lock, replay_lock
from ethereal_kafka.checkpoint.errors import AppRunningError
from ethereal_kafka.checkpoint.savepoints import (
    Manifest,
    SavepointError,
    default_location,
    list_savepoints,
    read_manifest,
)
from ethereal_kafka.cli.app_job import AppJob, add_app_arguments, format_table, resolve_app

LIST_COLUMNS = ("SAVEPOINT", "CREATED", "EPOCHS", "OPERATORS", "ROWS")


def register(sub: Any) -> None:
    """Add the `savepoint` and `savepoints` sub-commands."""
    take = sub.add_parser(
        "savepoint",
        help="take a savepoint of an app (running on this host or stopped): its offsets and operator state",
    )
    add_app_arguments(take)
    take.add_argument(
        "--into",
        metavar="DIR",
        help="the savepoints' folder (default: the job's savepoint.location, else <checkpoint.location>.savepoints)",
    )
    take.add_argument(
        "--stop",
        action="store_true",
        help="stop the running instance between epochs first (it hands over, as to `run --takeover`), then take it",
    )
    take.add_argument(
        "--stop-timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="with --stop: how long the instance may take to stop (default 120)",
    )
    take.add_argument(
        "--force",
        action="store_true",
        help="take it even though the app was last claimed by an instance that did not start on this host",
    )
    take.set_defaults(handler=run_take)
    listing = sub.add_parser("savepoints", help="list an app's savepoints")
    add_app_arguments(listing)
    listing.add_argument(
        "--into",
        metavar="DIR",
        help="the savepoints' folder (default: the job's savepoint.location, else <checkpoint.location>.savepoints)",
    )
    listing.set_defaults(handler=run_list)


def location(app: AppJob, into: str | None) -> Path:
    """The folder an app's savepoints go to: `--into`, else the job's `savepoint.location`, else beside the
    checkpoint.

    Raises:
        SavepointError: the folder is inside the checkpoint folder (a replay or restore moves that aside, with the
            savepoint it restores from).
    """
    found = Path(
        into or app.loaded.job.savepoint_location or default_location(app.checkpoint_root)
    ).absolute()
    root = Path(app.checkpoint_root).absolute()
    if found == root or root in found.parents:
        raise SavepointError(
            f"savepoints at {found} would be inside the checkpoint folder {root}, which a restore moves aside; "
            "choose a folder outside it (savepoint.location or --into)"
        )
    return found


def run_take(args: argparse.Namespace) -> int:
    """Take the savepoint of a stopped app while holding its run lock (no instance starts meanwhile), or of the
    instance running on this host (it holds the run lock) while holding the replay lock (no replay moves the
    checkpoint away meanwhile).

    Raises:
        SavepointError: see `runtime.savepoint.take_savepoint`, or no version of the app committed an epoch.
        AppRunningError: an instance of the app is (or may be) running on another host, or a replay runs.
    """
    from ethereal_kafka.cli.replay_cmd import check_claim
    from ethereal_kafka.cli.validate_cmd import planning_session
    from ethereal_kafka.runtime.description import RESUMABLE_FILE, description_path, read_description
    from ethereal_kafka.runtime.savepoint import take_savepoint

    app = resolve_app(args)
    if args.stop:
        stop_running(app, args.stop_timeout)
    described = read_description(app.app_id, RESUMABLE_FILE)
    if described is None:
        where = description_path(app.app_id, RESUMABLE_FILE)
        raise SavepointError(
            f"app {app.app_id}: no run that committed an epoch is recorded on this host ({where})"
        )
    with contextlib.ExitStack() as held:
        live = False
        try:
            held.enter_context(exclusive_run_lock(app.app_id))
        except AppRunningError:
            if args.stop:
                raise
            held.enter_context(replay_lock(app.app_id))
            live = True
            print(f"app {app.app_id} runs on this host: a savepoint of its last committed epochs; it goes on")
        if not live:
            check_claim(app, args.force)
        path = take_savepoint(
            planning_session(),
            app.loaded,
            described.plan,
            location(app, args.into),
            app.sources,
            live=live,
        )
    print(f"savepoint of app {app.app_id}: {path}")
    print(_summary(read_manifest(path)))
    return 0


def stop_running(app: AppJob, timeout_s: float) -> None:
    """Ask the app's running instance to stop between epochs (a takeover request), and wait until it released its
    claim and its run lock on this host; nothing to do when no instance holds the claim.

    Raises:
        AppRunningError: it did not stop within `timeout_s`.
    """
    import uuid

    from ethereal_kafka.eos.ownership import describe, read_claim, request_takeover

    sink = app.sink
    found = read_claim(app.app_id, sink.bootstrap_servers, sink.passthrough)
    if found is None or found[0].released:
        return
    running = describe(*found)
    request_takeover(
        app.app_id, sink.bootstrap_servers, sink.passthrough, f"savepoint-{uuid.uuid4().hex[:8]}"
    )
    print(f"asked {running} to stop between epochs")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = read_claim(app.app_id, sink.bootstrap_servers, sink.passthrough)
        if found is None or found[0].released:
            try:
                with exclusive_run_lock(app.app_id):
                    return
            except AppRunningError:
                pass  # released its claim, still ending on this host
        time.sleep(0.5)
    raise AppRunningError(
        f"app {app.app_id}: {running} did not stop within {timeout_s:.0f}s; nothing was taken"
    )


def run_list(args: argparse.Namespace) -> int:
    """List the app's savepoints, oldest first; one that cannot be used says why."""
    app = resolve_app(args)
    found = list_savepoints(location(app, args.into))
    if not found:
        print(f"no savepoint of app {app.app_id} in {location(app, args.into)}")
        return 0
    rows: list[tuple[str, str, str, str, object]] = []
    for path, manifest in found:
        if isinstance(manifest, SavepointError):
            rows.append((str(path), f"unusable: {manifest}", "", "", ""))
            continue
        epochs = ", ".join(f"{q.name}@{q.epoch}" for q in manifest.queries)
        operators = ", ".join(op.uid for op in manifest.operators) or "-"
        rows.append(
            (
                str(path),
                _utc(manifest.created_ms),
                epochs,
                operators,
                sum(op.rows for op in manifest.operators),
            )
        )
    print(format_table(LIST_COLUMNS, rows, ("ROWS",)))
    return 0


def _summary(manifest: Manifest) -> str:
    lines = [
        f"  query {q.name}: epoch {q.epoch}, {len(q.offsets)} input partition(s)" for q in manifest.queries
    ]
    lines += [f"  operator {op.uid} ({op.kind}): {op.rows} state row(s)" for op in manifest.operators]
    return "\n".join(lines)


def _utc(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))
