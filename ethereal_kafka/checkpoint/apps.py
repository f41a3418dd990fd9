"""What this host knows about an app: its run record (which job, which checkpoint) and its run lock (is it running).

`ethereal-kafka run` takes the app's run lock (`eos.ownership.InstanceGuard`) and writes its run record
before the coordinator starts. `ethereal-kafka offsets APP` and `replay APP` read the record to find the job file
and the checkpoint; `replay` takes the lock to prove that no instance of the app runs on this host.

Both live beside the app's checkpoint history, in `<cache>/apps/<app.id>/`:

* `job.json` — the run record: the job file and checkpoint root as absolute paths, the instance id that claims the
  app in Kafka, host, pid and start time, the environment variables the job's files read (so `offsets` and
  `replay` load the job as it ran, whatever their own shell has set) and each connector's bootstrap servers.
  No secret is written: a variable any secret key reads (`config.model.is_secret`) is left out, and comes from
  the environment of the command that reads the record.
* `run.lock` — an advisory `flock`, held *exclusively* by the one running instance for the life of its run, and by
  `replay` for as long as it changes anything. The kernel releases a lock when its process ends, SIGKILL
  included, so a crashed job never leaves a stale lock; a pid or a heartbeat file could not promise that.
* `replay.lock` — held by `replay` too, so that a starting instance that finds `run.lock` taken can tell a replay
  (wait for it) from a running instance (refuse, or take over); and alone by a live savepoint (`replay_lock`) while
  it reads the running instance's checkpoint, so that no replay moves the checkpoint away under it.

The locks only see processes on this host (and hosts sharing this cache directory over a file system with working
`flock`). Other hosts are covered by the owner claim in Kafka and its heartbeat (`eos.ownership`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import IO, TypeVar

from ethereal_kafka.checkpoint.errors import AppRunningError
from ethereal_kafka.config.job import LoadedJob
from ethereal_kafka.config.variables import job_variables
from ethereal_kafka.paths import cache_home

log = logging.getLogger(__name__)

RECORD_FILE = "job.json"
LOCK_FILE = "run.lock"
REPLAY_LOCK_FILE = "replay.lock"

#: How long a starting job waits for a replay holding the lock exclusively (a replay takes seconds).
LOCK_WAIT_S = 120.0

_HELD: dict[str, IO[bytes]] = {}
_HELD_LOCK = threading.Lock()


def app_dir(app_id: str) -> Path:
    """`<cache>/apps/<app.id>`: the app's local state (history, run record, run lock)."""
    return cache_home() / "apps" / app_id


def local_path(location: str) -> Path | None:
    """The local folder a checkpoint location names, or None for a URI of another file system (`hdfs://...`)."""
    if location.startswith("file://"):
        return Path(location.removeprefix("file://"))
    if location.startswith("file:"):
        return Path(location.removeprefix("file:"))
    if "://" in location:
        return None
    return Path(location)


T = TypeVar("T")


def from_json_object(cls: type[T], text: str, what: str) -> T:
    """Build dataclass `cls` from a JSON object, ignoring keys it does not know (an older reader of a newer file).

    Raises:
        ValueError: the text is not a JSON object with every required field (`what` names it in the message).
    """
    raw = json.loads(text)
    if not isinstance(raw, dict):
        raise ValueError(f"{what} is not a JSON object")
    known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    try:
        return cls(**{k: v for k, v in raw.items() if k in known})
    except TypeError as exc:
        raise ValueError(f"{what} is incomplete: {exc}") from exc


@dataclass(frozen=True)
class RunRecord:
    """The last start of an app on this host, written by the runner.

    Attributes:
        job_file: Absolute path of the job `.properties` file.
        checkpoint_location: The job's checkpoint root, absolute when it is a local path.
        instance_id: The id the instance commits as its owner claim (`CheckpointCoordinator.instance_id`).
        host: `socket.gethostname()` of the process.
        pid: The process id (informational: liveness comes from the lock, never from the pid).
        started_ms: Wall-clock start, epoch milliseconds.
        groups: Per source name, the consumer groups the job's queries commit its offsets to (a source read by
            several queries has one group per query: `<group>.<query>`); empty = each source's own group.
        pool: Per cluster (bootstrap servers), the transactional ids the run may use (recorded once the coordinator
            knows them): `replay` fences them, so no zombie of the run commits after the reset.
        env: The environment variables the job's files read, as the run saw them (None: unset, the file's default
            applied), secrets left out (`config.variables.job_variables`); empty in records of older versions.
        clusters: Per source, sink and table name, the `bootstrap.servers` the run used.
    """

    app_id: str
    job_file: str
    checkpoint_location: str
    instance_id: str
    host: str
    pid: int
    started_ms: int
    groups: dict[str, list[str]] = field(default_factory=dict)
    pool: dict[str, list[str]] = field(default_factory=dict)
    env: dict[str, str | None] = field(default_factory=dict)
    clusters: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> str:
        """One JSON object; `from_json` reads it back equal."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RunRecord:
        """Parse `to_json` output, ignoring keys this version does not know.

        Raises:
            ValueError: the text is not such an object.
        """
        return from_json_object(cls, text, "run record")


def record_run(
    loaded: LoadedJob,
    instance_id: str,
    groups: dict[str, list[str]] | None = None,
    pool: dict[str, list[str]] | None = None,
) -> RunRecord:
    """Write the run record of `loaded`'s app (atomically: a reader sees the old or the new record, whole).

    Called by the runner at start, before the coordinator claims the app, so the claim it commits is always one
    this host can recognise.
    """
    location = loaded.job.checkpoint_location
    path = local_path(location)
    record = RunRecord(
        app_id=loaded.job.app_id,
        job_file=str(Path(loaded.path).absolute()),
        checkpoint_location=str(path.absolute()) if path is not None else location,
        instance_id=instance_id,
        host=socket.gethostname(),
        pid=os.getpid(),
        started_ms=int(time.time() * 1000),
        groups={name: sorted(set(found)) for name, found in (groups or {}).items()},
        pool={cluster: sorted(set(ids)) for cluster, ids in (pool or {}).items()},
        env=job_variables(loaded),
        clusters={
            name: config.bootstrap_servers
            for configs in (loaded.sources, loaded.sinks, loaded.tables)
            for name, config in configs.items()
        },
    )
    folder = app_dir(record.app_id)
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f"{RECORD_FILE}.{os.getpid()}.partial"
    partial.write_text(record.to_json(), encoding="utf-8")
    os.replace(partial, folder / RECORD_FILE)
    return record


def read_run_record(app_id: str) -> RunRecord | None:
    """The app's run record on this host, or None when it never started here (or the record is unreadable)."""
    path = app_dir(app_id) / RECORD_FILE
    try:
        return RunRecord.from_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("ignoring the unreadable run record %s: %s", path, exc)
        return None


def _open_lock(app_id: str, name: str = LOCK_FILE) -> IO[bytes]:
    folder = app_dir(app_id)
    folder.mkdir(parents=True, exist_ok=True)
    return (folder / name).open("ab")


def try_run_lock(app_id: str) -> bool:
    """Take the app's run lock exclusively, without waiting, and hold it until `release_run_lock` or the end of this
    process; True when it is held (idempotent within a process), False when another process holds it."""
    with _HELD_LOCK:
        if app_id in _HELD:
            return True
        handle = _open_lock(app_id)
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            return False
        _HELD[app_id] = handle
        return True


def replay_in_progress(app_id: str) -> bool:
    """True while `ethereal-kafka replay` changes the app on this host (it holds `replay.lock`)."""
    handle = _open_lock(app_id, REPLAY_LOCK_FILE)
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        handle.close()
    return False


def release_run_lock(app_id: str) -> None:
    """Release the lock `try_run_lock` took in this process (no-op when it holds none)."""
    with _HELD_LOCK:
        handle = _HELD.pop(app_id, None)
    if handle is not None:
        handle.close()  # closing the last descriptor of the open file releases the flock


@contextlib.contextmanager
def exclusive_run_lock(app_id: str) -> Iterator[None]:
    """Hold the app's run and replay locks for the `with` block; fail at once when an instance holds the run lock.

    While they are held no instance of the app can start on this host (starting ones see the replay and wait).

    Raises:
        AppRunningError: an instance of the app holds the lock (the message names its pid and start time).
    """
    with _exclusive(
        app_id,
        (REPLAY_LOCK_FILE, LOCK_FILE),
        lambda: f"app {app_id} is running on this host{_who(app_id)}; stop it first",
    ):
        yield


@contextlib.contextmanager
def replay_lock(app_id: str) -> Iterator[None]:
    """Hold the app's replay lock for the `with` block (no replay or savepoint restore changes the app meanwhile;
    instances starting wait), while an instance may hold the run lock; fail at once when a replay holds it.

    Raises:
        AppRunningError: a replay of the app holds the lock.
    """
    with _exclusive(
        app_id,
        (REPLAY_LOCK_FILE,),
        lambda: f"app {app_id}: a replay changes it on this host; try again after it",
    ):
        yield


@contextlib.contextmanager
def _exclusive(app_id: str, names: tuple[str, ...], refusal: Callable[[], str]) -> Iterator[None]:
    """Hold the app's lock files `names` exclusively, in that order, for the `with` block.

    Raises:
        AppRunningError: another process holds one of them (`refusal()` says so).
    """
    handles = [_open_lock(app_id, name) for name in names]
    try:
        try:
            for handle in handles:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise AppRunningError(refusal()) from None
        yield
    finally:
        for handle in reversed(handles):
            handle.close()


def _who(app_id: str) -> str:
    record = read_run_record(app_id)
    if record is None:
        return ""
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record.started_ms / 1000))
    return f" (last started as pid {record.pid} at {started})"
