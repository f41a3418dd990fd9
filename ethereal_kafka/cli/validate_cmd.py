"""`ethereal-kafka validate FILE...`: check job and connector files without running anything.

Runs the checks `run` runs before Spark starts (`runtime.preflight`): keys and values, schemas, the `kafka.*`
settings (judged by librdkafka), the pipeline module and function, and the connector names the pipeline uses.
Then, for a job whose files pass, it plans the job as `run` would (`preflight.planned`: the pipeline called
and its graph compiled into Spark queries, none started, no broker contacted), on one local SparkSession for all
the files (started only when a job gets that far; `--no-plan` skips the step and Spark). With `--connect` it also
asks each cluster whether it answers and has every topic. Every problem is one `error:` line naming the file it
comes from. With `--against APP` it also compares each job's stateful operators with APP's last run on this host
(`plan.evolution`): whether the new version can resume APP's state, one line per operator.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ethereal_kafka.checkpoint.savepoints import MANIFEST
from ethereal_kafka.config import load_connector, load_job, validate_file
from ethereal_kafka.config.properties import load_properties
from ethereal_kafka.errors import ConfigError, EtherealKafkaError
from ethereal_kafka.runtime.preflight import connector_problems, planned, preflight, topic_problems

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(sub: Any) -> None:
    """Add the `validate` sub-command."""
    parser = sub.add_parser("validate", help="validate job and connector .properties files")
    parser.add_argument("files", nargs="+", help="job or connector .properties files")
    parser.add_argument(
        "--connect",
        action="store_true",
        help="also check that the brokers answer and that every source and sink topic exists",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        help="with --connect: seconds a cluster may take to answer (default 10)",
    )
    parser.add_argument(
        "--against",
        metavar="APP|SAVEPOINT",
        help="also say whether each job can resume APP's state (its stateful operators matched by uid against "
        "APP's last run on this host: carried, new, dropped, changed, and its sink.tasks) or restore a savepoint "
        "folder's; exit 1 when not",
    )
    parser.add_argument(
        "--no-plan",
        action="store_true",
        help="skip planning the job's graph on a local Spark session (the checks that need no Spark still run)",
    )
    parser.set_defaults(handler=run)


def problems_of(path: str, connect: bool, timeout_s: float) -> list[str]:
    """Every problem of one job or connector file (and of the connectors a job names), one line each.

    Raises:
        ConfigError: the file (or a connector file it names) does not load: one line naming that file.
    """
    if "connector.class" in load_properties(path):
        config = load_connector(Path(path))
        found = connector_problems(config, path)
        if connect and not found:
            found = topic_problems({Path(path): config}, timeout_s)
        return found
    return preflight(load_job(path), connect=connect, timeout_s=timeout_s)


class _Planner:
    """Plans job files on one SparkSession: the process's active one (a test, a notebook), else a local one started
    at the first job that needs it, quiet (Spark's log and the JVM's output go to `VALIDATE_LOGS` in the cache)."""

    def __init__(self) -> None:
        self._spark: SparkSession | None = None

    def planned(self, path: str) -> tuple[list[str], dict[str, Any] | None]:
        """The planner's problems with job file `path` (`preflight.planned`), and the job's description when it
        plans; `([], None)` for a connector file.

        Raises:
            ConfigError: the job file does not load (it did for the offline checks, so this is unexpected).
        """
        if "connector.class" in load_properties(path):
            return [], None
        if self._spark is None:
            self._spark = planning_session()
        return planned(load_job(path), self._spark)


def against(app_id: str, path: str, plan: dict[str, Any]) -> tuple[list[str], list[str]]:
    """`(lines, problems)` of resuming app `app_id` with job file `path` planned as `plan` (`plan.evolution`): a
    line per stateful operator and change, each problem (what blocks the resume) one line naming the file. The
    app's version is the last start that committed an epoch (`runtime.description.RESUMABLE_FILE`), never a start
    that failed."""
    from ethereal_kafka.plan.evolution import compare
    from ethereal_kafka.runtime.description import RESUMABLE_FILE, description_path, read_description

    if (Path(app_id) / MANIFEST).exists():
        return against_savepoint(Path(app_id), path, plan)
    last = read_description(app_id, RESUMABLE_FILE)
    if last is None:
        where = description_path(app_id, RESUMABLE_FILE)
        return [], [
            f"{path}: no run of app {app_id!r} that committed an epoch recorded on this host ({where})"
        ]
    old_tasks = last.config.get("job", {}).get("sink.tasks")
    new_tasks = load_job(path).job.sink_tasks
    findings = compare(last.plan, plan, None if old_tasks is None else int(old_tasks), new_tasks)
    lines = [f"{path}: against {app_id}: {f.verdict} {f.line}" for f in findings if not f.blocking]
    problems = [f"{path}: against {app_id}: {f.verdict} {f.line}" for f in findings if f.blocking]
    if not findings:
        lines.append(f"{path}: against {app_id}: no stateful operator in either version")
    return lines, problems


def against_savepoint(folder: Path, path: str, plan: dict[str, Any]) -> tuple[list[str], list[str]]:
    """`against` for a savepoint folder: what `run --from-savepoint` would restore (`plan.evolution.compare_savepoint`;
    a savepoint that is not whole is one problem)."""
    from ethereal_kafka.checkpoint.savepoints import SavepointError, read_manifest
    from ethereal_kafka.plan.evolution import compare_savepoint

    try:
        manifest = read_manifest(folder)
    except SavepointError as exc:
        return [], [f"{path}: {exc}"]
    held = [(op.uid, op.kind, op.query, op.variables) for op in manifest.operators]
    findings = compare_savepoint(held, plan)
    lines = [f"{path}: against {folder}: {f.verdict} {f.line}" for f in findings if not f.blocking]
    problems = [f"{path}: against {folder}: {f.verdict} {f.line}" for f in findings if f.blocking]
    if not findings:
        lines.append(f"{path}: against {folder}: no stateful operator in either")
    return lines, problems


#: Where `validate` leaves the log of the Spark session it plans jobs on (under the cache folder).
VALIDATE_LOGS = "validate-logs"


def planning_session() -> SparkSession:
    """The active SparkSession, or a local one started quietly for planning (one core, no web UI)."""
    from pyspark.sql import SparkSession

    from ethereal_kafka.paths import cache_home
    from ethereal_kafka.runtime.jvm import OPTIONS_KEY
    from ethereal_kafka.runtime.logs import JVM_OUTPUT_FILE, child_output_to, spark_log_options
    from ethereal_kafka.runtime.spark import local_session

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    logs = cache_home() / VALIDATE_LOGS
    with child_output_to(logs / JVM_OUTPUT_FILE):
        return local_session(
            "ethereal-kafka-validate",
            "local[1]",
            {"spark.ui.enabled": "false", OPTIONS_KEY: spark_log_options(logs)},
        )


def run(args: argparse.Namespace) -> int:
    """Validate every file; print `FILE: ok (...)` per good file and one `error:` line per problem; exit 1 if any
    file has a problem."""
    failed = 0
    if args.against and args.no_plan:
        print("error: --against compares the planned jobs: it cannot go with --no-plan", file=sys.stderr)
        return 2
    planner = None if args.no_plan else _Planner()
    for path in args.files:
        lines: list[str] = []
        try:
            summary = validate_file(path)
            problems = problems_of(path, args.connect, args.timeout)
            if not problems and planner is not None:
                problems, plan = planner.planned(path)
                if not problems and plan is not None and args.against:
                    lines, problems = against(args.against, path, plan)
        except ConfigError as exc:
            problems = [str(exc)]
        except EtherealKafkaError as exc:  # Spark did not start (`SparkSetupError`): the job is not judged
            problems = [f"{path}: the job could not be planned: {exc} (--no-plan skips planning)"]
        for line in lines:
            print(line)
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
        if problems:
            failed += 1
        else:
            print(summary)
    return 1 if failed else 0
