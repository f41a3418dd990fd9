"""`ethereal-kafka run JOB.properties`: run a job as a long-running topic-to-topic processor."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    """Add the `run` sub-command."""
    parser = sub.add_parser("run", help="run a job (until SIGTERM/SIGINT, or until its input is consumed)")
    parser.add_argument("job", help="job .properties file")
    parser.add_argument(
        "--available-now", action="store_true", help="process what the input topics hold now, then exit"
    )
    parser.add_argument(
        "--takeover",
        action="store_true",
        help="if the app runs elsewhere, ask that instance to stop between epochs and take over (else: refused)",
    )
    parser.add_argument(
        "--log-dir",
        default=None,
        help="folder for the full logs (Spark's and the framework's); default $ETHEREAL_KAFKA_LOG_DIR/<app.id>, "
        "else <cache>/apps/<app.id>/logs (~/.cache/ethereal-kafka, $XDG_CACHE_HOME or $ETHEREAL_KAFKA_HOME)",
    )
    parser.add_argument(
        "--from-savepoint",
        metavar="PATH",
        help="reset the app to a savepoint's offsets first (a new checkpoint; the old one is moved aside) and start "
        "each operator with the state of its uid in the savepoint",
    )
    parser.add_argument(
        "--allow-non-restored-state",
        action="store_true",
        help="with --from-savepoint: drop the state of operators this version lacks (else refused)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run the job; a fatal error becomes a one-line `error: ...` through the CLI's error handling."""
    from ethereal_kafka.runtime.runner import run as run_job

    if args.from_savepoint:
        restore_from(args.job, args.from_savepoint, args.allow_non_restored_state)
    return run_job(args.job, available_now=args.available_now, log_dir=args.log_dir, takeover=args.takeover)


def restore_from(job: str, savepoint: str, allow_non_restored: bool) -> None:
    """Reset the app of `job` to the savepoint at `savepoint` (`replay --from savepoint:PATH --yes`): its next start
    restores the savepoint's state.

    Raises:
        ReplayError, SavepointError: the savepoint is not whole, or names partitions the job does not read.
        AppRunningError: an instance of the app is (or may be) running.
    """
    import dataclasses

    from ethereal_kafka.cli.app_job import resolve_app
    from ethereal_kafka.cli.replay_cmd import apply_start, render_outcome, rewind_warning
    from ethereal_kafka.eos.replay import ReplayStart, plan_replay

    app = resolve_app(argparse.Namespace(app=None, job=job))
    start = dataclasses.replace(
        ReplayStart.parse(f"savepoint:{savepoint}"), allow_non_restored=allow_non_restored
    )
    plan = plan_replay(app.app_id, app.sources, start, stable=False)
    warning = rewind_warning(plan)
    if warning is not None:
        print(warning)
    print(render_outcome(app.app_id, apply_start(app, plan, force=False)))
