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
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run the job; a fatal error becomes a one-line `error: ...` through the CLI's error handling."""
    from ethereal_kafka.runtime.runner import run as run_job

    return run_job(args.job, available_now=args.available_now, log_dir=args.log_dir, takeover=args.takeover)
