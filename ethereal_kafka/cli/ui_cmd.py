"""`ethereal-kafka ui APP`: serve the web UI of an app from what its runs left on this host (stopped or running)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from typing import Any

from ethereal_kafka.checkpoint.apps import read_run_record
from ethereal_kafka.checkpoint.history import history_dir
from ethereal_kafka.cli.app_job import add_app_arguments, add_history_argument
from ethereal_kafka.config.job import load_job
from ethereal_kafka.errors import ConfigError

log = logging.getLogger(__name__)


def register(sub: Any) -> None:
    """Add the `ui` sub-command."""
    parser = sub.add_parser(
        "ui", help="serve the web UI of an app from its checkpoint history (graph, checkpoints, latency, job)"
    )
    add_app_arguments(parser)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port (default: any free port, printed at start)")
    add_history_argument(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM or SIGINT, then exit 0. The first line on stdout is `ui at http://HOST:PORT/`.

    Raises:
        ConfigError: neither APP nor --job is given, they disagree, or the port cannot be bound.
        AppNotFoundError: nothing is known about APP on this host.
        HistoryError: the app has no checkpoint history.
    """
    from ethereal_kafka.checkpoint.errors import AppNotFoundError
    from ethereal_kafka.checkpoint.history import CheckpointHistory
    from ethereal_kafka.runtime.description import read_description
    from ethereal_kafka.ui.offline import HistoryUi, describe_job_file
    from ethereal_kafka.ui.server import UiServer

    app_id = args.app
    description = None
    if args.job:
        loaded = load_job(args.job)
        if app_id and app_id != loaded.job.app_id:
            raise ConfigError(f"--job {args.job} is app {loaded.job.app_id!r}, not {app_id!r}")
        app_id = loaded.job.app_id
        description = read_description(app_id) or describe_job_file(loaded)
    elif app_id:
        description = read_description(app_id)
        if description is None:
            record = read_run_record(app_id)
            if record is None and not (args.state_dir or history_dir(app_id)).exists():
                raise AppNotFoundError(
                    f"no app {app_id!r} ran on this host (no run record, no checkpoint history); pass --job FILE"
                )
            if record is not None:
                description = describe_job_file(load_job(record.job_file), record.started_ms)
    else:
        raise ConfigError("name the app: APP or --job FILE")
    # Fail now, with the CLI's one-line error, when there is no history to show.
    CheckpointHistory(app_id, args.state_dir, read_only=True).close()
    if description is None:
        raise AppNotFoundError(
            f"app {app_id!r}: no run description or run record on this host; pass --job FILE"
        )
    data = HistoryUi(description, args.state_dir)
    server = UiServer(data, args.host, args.port, key="--port")
    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        print(f"ui at {server.url} (app {app_id}; Ctrl-C stops)", flush=True)
        while not stop.wait(0.5):
            pass
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        server.close()
        data.close()
    print("ui stopped", file=sys.stderr)
    return 0
