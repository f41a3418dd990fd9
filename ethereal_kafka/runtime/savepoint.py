"""Taking a savepoint of a stopped or running app, and checking what a new version restores from one
(`checkpoint.savepoints` holds the format).

Taking (`take_savepoint`): for each query of the version the checkpoint holds (`runtime.description.RESUMABLE_FILE`),
the last epoch Spark committed, the end offsets and watermark that epoch ran with, and each stateful operator's
state as of that epoch, read with Spark's state data source (`statestore`, `state-metadata`) over every partition,
so the table does not depend on the shuffle partition count.

* Of a stopped app (the caller holds the app's run lock and has checked that no instance runs anywhere): the
  savepoint is refused when Kafka is ahead of that epoch: an epoch marker of the query's checkpoint on its sources'
  groups or its progress group names a later epoch (an epoch a crash cut in the middle of its commit, or a
  checkpoint that lost or never synced files). An epoch Spark logged and did not commit whose output Kafka does not
  hold (a stop ended it) is left out. The output ends are the sink topics' high watermarks.
* Of a running app (`live`: the instance on this host holds the run lock and goes on): Kafka is ahead by design (the
  instance commits later epochs meanwhile). Spark writes a batch's commit only after its sink committed the epoch's
  transactions, and the state and logs of a committed epoch are never rewritten (Spark keeps the last
  `spark.sql.streaming.minBatchesToRetain` of them), so the epoch read is whole. The output ends are the ones the
  history recorded right after that epoch committed (`EpochRecord.output_ends`).

What this version covers, refused in one line otherwise: framework operators on Spark's transformWithState (keyed
process functions, connected keyed process functions, rolling aggregates, windows, the framework's joins, broadcast
process functions with their broadcast state), any number per query when each feeds the next (Spark numbers them
from the sink up: `downstream_first`). Spark-native windows and joins keep state Spark cannot be seeded with.

Restoring (`initial_states`, `check_restore`): `replay APP --from savepoint:PATH` (or `run --from-savepoint`) resets
the app to the savepoint's offsets (each query's where queries that read one source stood apart:
`eos.replay.ReplayStart.by_query`) and leaves the folder in the replay intent; the next start seeds each operator
whose uid the savepoint holds (`plan.operators.base.Sequenced.handleInitialState`) in the new checkpoint's first
epoch, with any `sink.tasks` or shuffle partition count. A uid the new version lacks is refused unless the run allows
non-restored state. A query with event time gets its watermark back before it reads a record
(`hold_for_event_time`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ethereal_kafka.checkpoint.apps import local_path
from ethereal_kafka.checkpoint.history import EpochRecord
from ethereal_kafka.checkpoint.savepoints import (
    Manifest,
    OperatorState,
    QueryPosition,
    SavepointError,
    begin,
    file_digests,
    new_id,
    operator_folder,
    seal,
)
from ethereal_kafka.checkpoint.spark_log import (
    checkpoint_id,
    epoch_end_offsets,
    epoch_watermark_ms,
    next_watermark_ms,
)
from ethereal_kafka.config.connectors import KafkaSourceConfig
from ethereal_kafka.config.job import JobConfig, LoadedJob
from ethereal_kafka.connectors.event_time import last_committed, maxima_path, read_maxima
from ethereal_kafka.faults import savepoint_step
from ethereal_kafka.plan.describe import FRAMEWORK
from ethereal_kafka.plan.evolution import RESTORABLE
from ethereal_kafka.plan.operators.base import TIMERS_VAR
from ethereal_kafka.plan.operators.keyed_state import USER_PREFIX
from ethereal_kafka.plan.schema import KEY
from ethereal_kafka.plan.state_inventory import state_changes

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from ethereal_kafka.plan.query import Query

#: Spark's kinds of state variables (as `state-metadata` names them) a savepoint takes.
VARIABLE_KINDS = ("ValueState", "ListState", "MapState", "TimerState")


def take_savepoint(
    spark: SparkSession,
    loaded: LoadedJob,
    plan: Mapping[str, Any],
    location: Path,
    sources: Mapping[str, KafkaSourceConfig],
    now_ms: int | None = None,
    live: bool = False,
) -> Path:
    """Take a savepoint of the app `loaded` whose checkpoint holds the version described by `plan`, into a new
    folder under `location`; returns it. `sources`: the job's sources with the groups its queries commit to.
    `live`: an instance of the app runs on this host (see the module docstring), else it is stopped.

    Raises:
        SavepointError: Kafka holds output of an epoch Spark did not commit, a query never committed one, or keeps
            state this version cannot take; the message names the query or operator and the way out.
    """
    import pyarrow.parquet as pq  # here, not at import: the runner imports this module at every start

    now = int(time.time() * 1000) if now_ms is None else now_ms
    job = loaded.job
    positions: list[QueryPosition] = []
    exports: list[tuple[str, str, str, int, dict[str, str], DataFrame]] = []
    for query in plan.get("queries", ()):
        name = str(query["name"])
        folder = local_path(job.query_checkpoint(name))
        if folder is None:
            raise SavepointError(
                f"query {name}: its checkpoint is not a local folder; savepoints read local ones"
            )
        epoch = last_committed(folder)
        if epoch is None:
            raise SavepointError(f"query {name}: no epoch committed yet; nothing to take a savepoint of")
        ahead = None if live else _kafka_epoch(job.app_id, name, folder, sources, loaded)
        if ahead is not None and ahead[0] > epoch:
            raise SavepointError(
                f"query {name}: Kafka holds output of epoch {ahead[0]} ({ahead[1]}), which Spark's checkpoint "
                f"{folder} did not commit (its last commit is epoch {epoch}); a savepoint there would have the "
                "restored run write that output again. If a stop cut the epoch, start the job once more unchanged "
                "and stop it gracefully; if the checkpoint lost files, restore them first"
            )
        offsets = [
            [topic, partition, offset]
            for source in epoch_end_offsets(folder, epoch)
            for (topic, partition), offset in source.items()
        ]
        positions.append(
            QueryPosition(
                name,
                checkpoint_id(folder),
                epoch,
                epoch_watermark_ms(folder, epoch),
                offsets,
                next_watermark_ms(folder, epoch),
                read_maxima(maxima_path(folder), epoch),
            )
        )
        stateful = [n for n in plan.get("nodes", ()) if n.get("query") == name and n.get("stateful")]
        if stateful:
            exports += _export(spark, folder, name, epoch, stateful, plan.get("edges", ()))
    savepoint_id = new_id(now)
    scratch = begin(location, savepoint_id)
    savepoint_step("scratch")
    operators = []
    for uid, kind, query_name, operator_id, variables, frame in exports:
        relative = operator_folder(uid)
        frame.coalesce(1).write.parquet(str(scratch / relative))
        files = file_digests(scratch, relative)
        rows = sum(pq.ParquetFile(scratch / name).metadata.num_rows for name in files)  # the footers only
        savepoint_step(f"table {uid}")
        operators.append(OperatorState(uid, kind, query_name, operator_id, variables, relative, rows, files))
    manifest = Manifest(
        savepoint_id,
        job.app_id,
        now,
        str(loaded.path),
        tuple(positions),
        tuple(operators),
        _history_output_ends(job.app_id, positions) if live else _output_ends(loaded),
    )
    return seal(scratch, manifest)


def _history_output_ends(app_id: str, positions: Sequence[QueryPosition]) -> dict[str, dict[str, int]]:
    """The output ends the history recorded when each query's epoch of `positions` committed, merged over the
    queries; a topic two queries write is left out (it has no cut between their epochs), as is a query's topic
    whose epoch has no record (the shadow of such a savepoint is refused, naming the query)."""
    from ethereal_kafka.checkpoint.history import HistoryLog

    wanted = {(p.name, p.checkpoint_id, p.epoch) for p in positions}
    found: dict[str, dict[str, int]] = {}
    writers: dict[str, int] = {}
    for record in HistoryLog(app_id).records():
        if record.outcome != "committed" or (record.query, record.checkpoint_id, record.epoch) not in wanted:
            continue
        wanted.discard((record.query, record.checkpoint_id, record.epoch))
        for topic, parts in record.output_ends.items():
            writers[topic] = writers.get(topic, 0) + 1
            found[topic] = {str(p): int(o) for p, o in parts.items()}
    return {topic: parts for topic, parts in found.items() if writers[topic] == 1}


def _output_ends(loaded: LoadedJob) -> dict[str, dict[str, int]]:
    """The high watermark of every partition of the stopped app's sink topics (`Manifest.output_ends`)."""
    from ethereal_kafka.connectors.kafka.topic_admin import end_offsets

    sink = next(iter(loaded.sinks.values()))
    topics = [s.topic for s in loaded.sinks.values() if s.topic]
    found = end_offsets(sink.bootstrap_servers, topics, sink.passthrough) if topics else {}
    return {topic: {str(p): o for p, o in parts.items()} for topic, parts in found.items()}


def _kafka_epoch(
    app_id: str, query: str, folder: Path, sources: Mapping[str, KafkaSourceConfig], loaded: LoadedJob
) -> tuple[int, str] | None:
    """The last epoch of the query's checkpoint that Kafka holds a marker of (`eos.startup.read_markers`: its
    sources' groups, its progress group), with where; None when it holds none."""
    from ethereal_kafka.eos.layout import read_layout
    from ethereal_kafka.eos.startup import read_markers

    incarnation = checkpoint_id(folder)
    layout = read_layout(folder)
    progress = layout.sink_tasks if layout is not None and layout.layout == "shuffling" else 0
    sink = next(iter(loaded.sinks.values()))
    found = [
        (marker.epoch, where)
        for where, marker in read_markers(
            app_id, query, sources.values(), progress, sink.bootstrap_servers, sink.passthrough
        )
        if marker.of(app_id, incarnation)
    ]
    return max(found) if found else None


def _export(
    spark: SparkSession,
    folder: Path,
    query: str,
    epoch: int,
    stateful: list[Mapping[str, Any]],
    edges: Sequence[Mapping[str, Any]],
) -> list[tuple[str, str, str, int, dict[str, str], DataFrame]]:
    """The stateful operators of `query`: `(uid, kind, query, Spark's operator id, variables, its table)` each.

    Spark numbers a query's stateful operators from the sink up (the one nearest the sink is 0), so operators that
    follow one another are matched to Spark's in that order, and each process function's declared state
    (`detail.state_vars`) must be the state Spark's operator keeps.

    Raises:
        SavepointError: the query keeps state this version cannot take, or stateful operators on separate
            branches (which of Spark's operators holds which could not be told).
    """
    for node in stateful:
        uid, kind = str(node.get("uid")), str(node.get("kind"))
        if kind not in RESTORABLE or node.get("runs") != FRAMEWORK:
            raise SavepointError(
                f"operator {uid} ({kind}, {node.get('runs')}) of query {query}: savepoints take the state of keyed "
                "process functions, rolling aggregates, broadcast processes and the framework's windows and joins; "
                "replay the job into a new checkpoint instead"
            )
    ordered = downstream_first(stateful, edges)
    if ordered is None:
        uids = ", ".join(str(n.get("uid")) for n in stateful)
        raise SavepointError(
            f"query {query} keeps stateful operators on separate branches ({uids}); savepoints take a query's "
            "operators when each feeds the next"
        )
    operators = sorted(
        spark.read.format("state-metadata").load(str(folder)).collect(), key=lambda r: int(r["operatorId"])
    )
    if len(operators) != len(ordered) or any(
        "transformWithState" not in str(op["operatorName"]) for op in operators
    ):
        raise SavepointError(
            f"query {query}: its checkpoint keeps {len(operators)} stateful operator(s), not the {len(ordered)} "
            "transformWithState ones of this version; is it the checkpoint of this version?"
        )
    exported = [
        _export_one(spark, folder, query, epoch, node, operator)
        for node, operator in zip(ordered, operators, strict=True)
    ]
    return exported[::-1]  # in the pipeline's order


def downstream_first(
    stateful: Sequence[Mapping[str, Any]], edges: Sequence[Mapping[str, Any]]
) -> list[Mapping[str, Any]] | None:
    """`stateful` (description nodes of one query) from the one nearest the sink to the first, when each feeds the
    next through `edges`; None when two of them lie on separate branches."""
    children: dict[str, list[str]] = {}
    for edge in edges:
        children.setdefault(str(edge.get("source")), []).append(str(edge.get("target")))

    def below(start: str) -> set[str]:
        seen: set[str] = set()
        todo = list(children.get(start, ()))
        while todo:
            nid = todo.pop()
            if nid not in seen:
                seen.add(nid)
                todo += children.get(nid, ())
        return seen

    ids = [str(n.get("id")) for n in stateful]
    reach = {nid: below(nid) & set(ids) for nid in ids}
    for a in ids:
        for b in ids:
            if a != b and b not in reach[a] and a not in reach[b]:
                return None
    return sorted(stateful, key=lambda n: len(reach[str(n.get("id"))]))


def _export_one(
    spark: SparkSession, folder: Path, query: str, epoch: int, node: Mapping[str, Any], operator: Any
) -> tuple[str, str, str, int, dict[str, str], DataFrame]:
    uid, kind = str(node.get("uid")), str(node.get("kind"))
    operator_id = int(operator["operatorId"])
    properties = json.loads(operator["operatorProperties"] or "{}")
    variables: dict[str, str] = {}
    for variable in properties.get("stateVariables", ()):
        name, spark_kind = str(variable["stateName"]), str(variable["stateVariableType"])
        if spark_kind not in VARIABLE_KINDS or variable.get("ttlEnabled"):
            raise SavepointError(f"operator {uid}: state {name} is a {spark_kind} this version cannot take")
        variables[name] = spark_kind
    declared = (node.get("detail") or {}).get("state_vars")
    if declared is not None and {v for v in variables if v.startswith(USER_PREFIX)} != set(declared):
        raise SavepointError(
            f"operator {uid} of query {query}: Spark's operator {operator_id} keeps state "
            f"{', '.join(sorted(variables)) or 'none'}, not what {uid} declares ({', '.join(sorted(declared))}); "
            "is the checkpoint of this version?"
        )
    frames = [
        _variable(spark, folder, epoch, operator_id, name, k)
        for name, k in sorted(variables.items())
        if k != "TimerState"
    ]
    if "TimerState" in variables.values():  # Spark keeps each timer twice (by key, by time): read them once
        frames.append(_variable(spark, folder, epoch, operator_id, TIMERS_VAR, "TimerState"))
    if not frames:
        raise SavepointError(f"operator {uid} of query {query}: its checkpoint declares no state variable")
    table = frames[0]
    for frame in frames[1:]:
        table = table.unionByName(frame)
    return uid, kind, query, operator_id, variables, table


def _variable(
    spark: SparkSession, folder: Path, epoch: int, operator_id: int, name: str, kind: str
) -> DataFrame:
    """One state variable's rows in the savepoint's shape: `__key`, `var`, `map_key`, `ordinal`, `value`."""
    from pyspark.sql import functions as F

    reader = spark.read.format("statestore").option("operatorId", operator_id).option("batchId", epoch)
    key = F.col("key").getField(KEY).alias(KEY)
    none_bytes, none_long = F.lit(None).cast("binary"), F.lit(None).cast("long")
    if kind == "TimerState":
        rows = reader.option("readRegisteredTimers", "true").load(str(folder))
        return rows.select(
            key,
            F.lit(TIMERS_VAR).alias("var"),
            none_bytes.alias("map_key"),
            F.col("expiration_timestamp_ms").cast("long").alias("ordinal"),
            none_bytes.alias("value"),
        )
    named = reader.option("stateVarName", name)
    if kind == "ListState":
        listed = named.option("flattenCollectionTypes", "false").load(str(folder))
        exploded = listed.select(key, F.posexplode(F.col("list_value")).alias("pos", "element"))
        return exploded.select(
            F.col(KEY),
            F.lit(name).alias("var"),
            none_bytes.alias("map_key"),
            F.col("pos").cast("long").alias("ordinal"),
            _only_field(
                F.col("element"), getattr(listed.schema["list_value"].dataType, "elementType", None)
            ).alias("value"),
        )
    loaded = named.load(str(folder))
    if kind == "MapState":
        return loaded.select(
            key,
            F.lit(name).alias("var"),
            _map_key(F.col("user_map_key"), loaded.schema["user_map_key"].dataType).alias("map_key"),
            none_long.alias("ordinal"),
            _only_field(F.col("user_map_value"), loaded.schema["user_map_value"].dataType).alias("value"),
        )
    return loaded.select(
        key,
        F.lit(name).alias("var"),
        none_bytes.alias("map_key"),
        none_long.alias("ordinal"),
        _only_field(F.col("value"), loaded.schema["value"].dataType).alias("value"),
    )


def _map_key(column: Any, struct: Any) -> Any:
    """A map entry's key as one binary value: the key's one binary field, or a key of several binary fields (a
    namespaced map's `n, k`: `plan.operators.namespaced`) packed by the rule (each field as a 4-byte
    big-endian length, then its bytes), which `plan.operators.base.unpack_key` reads back.

    Raises:
        SavepointError: the key is not made of binary fields (not state the framework wrote).
    """
    from pyspark.sql import functions as F

    fields: list[Any] = list(getattr(struct, "fields", ()))
    if len(fields) == 1:
        return _only_field(column, struct)
    if not fields or any(f.dataType.typeName() != "binary" for f in fields):
        raise SavepointError(
            f"map key of type {struct.simpleString()} is not the framework's; cannot take it"
        )
    parts = []
    for f in fields:
        value = F.coalesce(column.getField(f.name), F.lit(b"").cast("binary"))
        parts += [F.unhex(F.lpad(F.hex(F.length(value)), 8, "0")), value]
    return F.concat(*parts)


def _only_field(column: Any, struct: Any) -> Any:
    """The one binary field of a framework state struct (`v binary`, `k binary`).

    Raises:
        SavepointError: the struct is not that (not state the framework wrote).
    """
    fields: list[Any] = list(getattr(struct, "fields", ()))
    if len(fields) != 1 or fields[0].dataType.typeName() != "binary":
        raise SavepointError(f"state of type {struct.simpleString()} is not the framework's; cannot take it")
    return column.getField(fields[0].name)


def initial_states(path: Path, manifest: Manifest) -> dict[str, str]:
    """Per operator uid, the folder of its state in the savepoint at `path` (for `plan.context.CompileContext`)."""
    return {op.uid: str(path / op.folder) for op in manifest.operators}


def check_restore(
    path: Path, manifest: Manifest, restored: set[str], plan: Mapping[str, Any], allow_non_restored: bool
) -> None:
    """Refuse a restore that would lose state: a savepoint operator the new version (`plan`) lacks or cannot seed
    (unless `allow_non_restored` and the version lacks it), a state variable whose kind changed, or one the new
    version no longer declares (unless `allow_non_restored`: `plan.context.CompileContext.initial_state` then leaves
    its rows out). The variables come from `detail.state_vars` (`plan.state_inventory`).

    Raises:
        SavepointError: one line naming the savepoint, the operator and the way out.
    """
    nodes = {str(n.get("uid")): n for n in plan.get("nodes", ()) if n.get("stateful")}
    for op in manifest.operators:
        node = nodes.get(op.uid)
        if op.uid not in restored:
            if node is None and allow_non_restored:
                continue
            why = (
                "the new version has no operator with that uid (pass --allow-non-restored-state to drop its state)"
                if node is None
                else f"the new version's {node.get('kind')} operator with that uid cannot take it"
            )
            raise SavepointError(f"{path}: state of operator {op.uid} ({op.kind}) cannot be restored: {why}")
        declared = ((node or {}).get("detail") or {}).get("state_vars")
        if declared is None:
            continue
        unreadable, notes = state_changes(op.variables, declared)
        gone = [] if allow_non_restored else [n for n in notes if n.endswith("no longer declared")]
        if unreadable or gone:
            why = "; ".join(unreadable + gone)
            way = "declare it as before" if unreadable else "declare it, or pass --allow-non-restored-state"
            raise SavepointError(
                f"{path}: state of operator {op.uid} ({op.kind}) cannot be restored: {why}; {way}"
            )


def hold_for_event_time(manifest: Manifest, builds: Sequence[Query], job: JobConfig) -> None:
    """Before the first start of a restore: give each query with event time what its first epoch needs to run as
    the epoch after the savepoint would have. Per query the savepoint holds, each watermark's carried event time
    is seeded (`connectors.event_time.seed_maxima`: the largest event time its input read, as the savepoint kept
    it, else the watermark Spark computed after the savepoint's epoch plus the watermark's bound), and its sources
    are held (`connectors.kafka.source.hold_path`) so that the new checkpoint's epoch 0, which runs with watermark
    0, reads no record: it carries the event time alone, and epoch 1 runs with the savepoint's watermark. The
    holds go once the query commits an epoch (`held_sources`, `HoldRelease`).
    """
    from ethereal_kafka.connectors.event_time import seed_maxima
    from ethereal_kafka.connectors.kafka.source import hold_path

    positions = {q.name: q for q in manifest.queries}
    for build in builds:
        position = positions.get(build.name)
        if not build.carried_event_time or position is None or not build.sources:
            continue
        seed: dict[str, int] = {}
        for _, key, bound_ms in build.carried_event_time:
            if key in position.event_time_max:
                seed[key] = int(position.event_time_max[key])
            elif position.next_watermark_ms:
                seed[key] = (int(position.next_watermark_ms) + bound_ms) * 1000
        if not seed:
            continue  # no event time read before the savepoint: epoch 0's watermark 0 is the one it had
        seed_maxima(job.query_checkpoint(build.name), seed)
        for path in (p for p in (hold_path(s) for s in build.sources) if p is not None):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()


def held_sources(builds: Sequence[Query], job: JobConfig) -> dict[str, list[Path]]:
    """At every start: the hold files (`hold_for_event_time`) of each query's sources that must stay until the
    query commits an epoch, by query; those of a query that has committed one are removed now. A restore whose
    first epoch a crash cut short is replayed held, and the next epoch is never held for good."""
    from ethereal_kafka.connectors.kafka.source import hold_path

    held: dict[str, list[Path]] = {}
    for build in builds:
        files = [p for p in (hold_path(s) for s in build.sources) if p is not None and p.exists()]
        if files and last_committed(job.query_checkpoint(build.name)) is not None:
            for path in files:
                path.unlink(missing_ok=True)
        elif files:
            held[build.name] = files
    return held


class HoldRelease:
    """Epoch listener: once a held query commits an epoch, its sources' hold files go (`hold_for_event_time`)."""

    def __init__(self, holds: Mapping[str, Sequence[Path]]) -> None:
        self.holds = {query: list(files) for query, files in holds.items()}

    def __call__(self, query: str, record: EpochRecord, tasks: object) -> None:
        if record.outcome == "committed" and query in self.holds:
            for path in self.holds.pop(query):
                path.unlink(missing_ok=True)
