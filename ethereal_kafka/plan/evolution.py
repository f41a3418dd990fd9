"""Whether a new version of a job can resume an app's state: its stateful operators matched by uid against the
app's last run.

`compare` reads two job descriptions (`plan.describe`: the app's last run as `runtime.description` recorded it, and
the new job file's as it plans) and says, per stateful operator (window, rolling aggregate, process function, join,
broadcast process): *carried* (same uid, same kind of state), *new* (starts empty), *dropped* (its state would be
lost), or *changed* (its state cannot be read by the new operator: another kind, another engine, another query,
another window assigner, aggregate, join or time mode). Spark keeps each query's state in the query's checkpoint in
the order of its stateful operators, so a stateful operator added to a query that already keeps state is refused
too, as is a changed `sink.tasks` (the output layout is fixed for a job's life, `eos.layout`) and a query that
carries its inputs' event time and no longer has one of those inputs' watermarks (`plan.event_time.carry_key`). An operator whose
uid is its graph position (`kind#id`, no `.uid()`) is named: inserting an operator before it would change its uid.

The state variables a process function declares in `open()` are compared too (`plan.state_inventory`, recorded in
the description as `detail.state_vars`): a variable whose kind changed (value, list, map) cannot be read and blocks;
a new one starts empty and one no longer declared is left unread, both named on the operator's line. Values are
pickled Python values with no declared type, so what a value holds is the version's own to keep readable. Not
compared: the key's type.

Pure: no Spark, no files; `validate --against APP` (`cli.validate_cmd`) prints the findings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ethereal_kafka.plan.describe import FRAMEWORK, SPARK, Description
from ethereal_kafka.plan.state_inventory import state_changes

#: Verdicts of `Finding`.
CARRIED, NEW, DROPPED, CHANGED, NO_UID, LAYOUT = "carried", "new", "dropped", "changed", "no-uid", "layout"
WATERMARKS = "watermarks"

#: Per kind of stateful operator, the `detail` fields whose change makes the old state unreadable.
STATE_FIELDS: Mapping[str, tuple[str, ...]] = {
    "window": ("assigner", "function"),
    "join": ("how", "left_key", "right_key", "on"),
    "rolling": ("kind",),
    "process": ("time_mode",),
    "coprocess": ("time_mode",),
    "broadcast_process": ("keyed",),
}


@dataclass(frozen=True)
class Finding:
    """One line of the comparison.

    Attributes:
        verdict: One of `CARRIED`, `NEW`, `DROPPED`, `CHANGED`, `NO_UID`, `LAYOUT`.
        uid: The operator's uid ("" for a job-wide finding).
        line: What it means, for people (one line, no file name).
        blocking: The new version cannot resume the app's checkpoint as it is.
    """

    verdict: str
    uid: str
    line: str
    blocking: bool


def compare(
    old: Description, new: Description, old_sink_tasks: int | None = None, new_sink_tasks: int | None = None
) -> list[Finding]:
    """The findings of resuming `old`'s state with `new` (see the module docstring): the old operators in their
    order, then the new ones, then the layout; `*_sink_tasks` None leaves the layout out."""
    before, after = _stateful(old), _stateful(new)
    kept_queries = {n["query"] for n in before.values()}
    findings: list[Finding] = []
    for uid, was in before.items():
        now = after.get(uid)
        what = _what(was)
        if now is None:
            findings.append(
                Finding(DROPPED, uid, f"{what}: not in the new version, its state would be lost", True)
            )
            continue
        changes = _changes(was, now)
        if changes:
            text = "; ".join(changes)
            findings.append(Finding(CHANGED, uid, f"{what}: {text}: its state cannot be carried", True))
        else:
            notes = "".join(f"; {note}" for note in _state_vars(was, now)[1])
            findings.append(Finding(CARRIED, uid, f"{what}: state carried{notes}", False))
    for uid, node in after.items():
        if uid in before:
            continue
        if node["query"] in kept_queries:
            line = (
                f"{_what(node)}: new, in query {node['query']} which already keeps state: Spark's checkpoint "
                "of that query cannot take another stateful operator"
            )
            findings.append(Finding(NEW, uid, line, True))
        else:
            findings.append(Finding(NEW, uid, f"{_what(node)}: new, starts with empty state", False))
    for uid, node in after.items():
        if node.get("auto"):
            line = (
                f"{_what(node)} has no uid of its own ({uid} is its position in the graph): an operator added "
                "before it changes that uid; give it .uid(...)"
            )
            findings.append(Finding(NO_UID, uid, line, False))
    findings += _moved_watermarks(old, new)
    if old_sink_tasks is not None and new_sink_tasks is not None and old_sink_tasks != new_sink_tasks:
        line = (
            f"sink.tasks {old_sink_tasks} -> {new_sink_tasks}: the output layout is fixed for a job's life "
            "(replay into a new checkpoint to change it)"
        )
        findings.append(Finding(LAYOUT, "", line, True))
    return findings


#: Operators a savepoint takes the state of and a restore seeds (`plan.describe` kinds, run by the framework;
#: `runtime.savepoint`).
RESTORABLE = ("process", "coprocess", "rolling", "window", "join", "broadcast_process")


def compare_savepoint(
    operators: Sequence[tuple[str, str, str, Mapping[str, str]]],
    new: Description,
    allow_non_restored: bool = False,
) -> list[Finding]:
    """The findings of restoring a savepoint's `operators` (`(uid, kind, query, {state variable: kind})` each) into
    `new`: per operator *carried* (the new version has a restorable operator of that uid and kind), *changed*
    (another kind, an operator a restore cannot seed, or a state variable of another kind: blocks), *dropped*
    (blocks unless `allow_non_restored`; so does a state variable the new version no longer declares); then each new
    stateful operator the savepoint lacks: *new*, empty state. A restore starts a new checkpoint, so other queries
    and another layout never block."""
    after = _stateful(new)
    held = {op[0] for op in operators}
    findings: list[Finding] = []
    for uid, kind, query, variables in operators:
        now = after.get(uid)
        what = f"{uid} ({kind} in query {query})"
        if now is None:
            why = "not in the new version, its state would be dropped"
            if allow_non_restored:
                findings.append(Finding(DROPPED, uid, f"{what}: {why} (allowed)", False))
            else:
                findings.append(Finding(DROPPED, uid, f"{what}: {why} (--allow-non-restored-state)", True))
        elif now.get("kind") != kind:
            findings.append(Finding(CHANGED, uid, f"{what}: kind {kind} -> {now.get('kind')}", True))
        elif now.get("kind") not in RESTORABLE or now.get("runs") != FRAMEWORK:
            findings.append(
                Finding(CHANGED, uid, f"{what}: a restore cannot seed a {now.get('kind')} yet", True)
            )
        else:
            findings.append(_restored_vars(uid, what, variables, now, allow_non_restored))
    for uid, node in after.items():
        if uid not in held:
            findings.append(Finding(NEW, uid, f"{_what(node)}: new, starts with empty state", False))
    return findings


def _restored_vars(
    uid: str, what: str, variables: Mapping[str, str], now: Mapping[str, Any], allow_non_restored: bool
) -> Finding:
    """The finding of restoring an operator's state `variables` into `now`, which takes its kind."""
    declared = (now.get("detail") or {}).get("state_vars")
    if declared is None:
        return Finding(CARRIED, uid, f"{what}: state restored", False)
    unreadable, notes = state_changes(variables, declared)
    if unreadable:
        return Finding(CHANGED, uid, f"{what}: {'; '.join(unreadable)}: its state cannot be read", True)
    gone = [n for n in notes if n.endswith("no longer declared")]
    if gone and not allow_non_restored:
        line = f"{what}: {'; '.join(gone)}: its state would be dropped (--allow-non-restored-state)"
        return Finding(DROPPED, uid, line, True)
    return Finding(CARRIED, uid, f"{what}: state restored{''.join(f'; {n}' for n in notes)}", False)


def _state_vars(was: Mapping[str, Any], now: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """`plan.state_inventory.state_changes` of two versions of an operator (nothing when either is unknown)."""
    before = (was.get("detail") or {}).get("state_vars")
    after = (now.get("detail") or {}).get("state_vars")
    if before is None or after is None:
        return [], []
    return state_changes(before, after)


def _moved_watermarks(old: Description, new: Description) -> list[Finding]:
    """A query that carries its inputs' event time across restarts (`plan.event_time`: two or more watermarks, none
    with idleness) keeps each input's largest event time in its checkpoint by the watermark's carry key (its uid, or
    its sources and timestamp). A new version of that query without one of those keys would resume that input
    without its event time (the start refuses it, `connectors.event_time.prepare_carry`), so it blocks. A
    description recorded before carry keys were has none to compare."""
    before, after = _carry_keys(old), _carry_keys(new)
    findings = []
    for query, keys in before.items():
        if query not in after:
            continue
        gone = sorted(keys - after[query])
        if not gone:
            continue
        now = ", ".join(sorted(after[query])) or "none"
        line = (
            f"query {query} carries its inputs' event time by watermark, and {', '.join(gone)} is gone (now "
            f"{now}): a restart would resume without its event time; keep that watermark's sources and "
            "timestamp, or its uid, or replay into a fresh checkpoint"
        )
        findings.append(Finding(WATERMARKS, "", line, True))
    return findings


def _carry_keys(description: Description) -> dict[str, set[str]]:
    """Per query, the carry keys of its watermarks (`plan.event_time.carry_key`, recorded by `plan.describe`)."""
    keys: dict[str, set[str]] = {}
    for node in description.get("nodes", ()):
        query = node.get("query")
        if node.get("kind") == "watermark" and query:
            keys.setdefault(query, set())
            key = (node.get("detail") or {}).get("carry_key")
            if key:
                keys[query].add(key)
    return keys


def _stateful(description: Description) -> dict[str, Mapping[str, Any]]:
    """The stateful operators of a description by uid, in their order."""
    return {str(n["uid"]): n for n in description.get("nodes", ()) if n.get("stateful") and n.get("uid")}


def _what(node: Mapping[str, Any]) -> str:
    return f"{node['uid']} ({node['kind']} in query {node['query']})"


def _changes(was: Mapping[str, Any], now: Mapping[str, Any]) -> Sequence[str]:
    """What changed between two versions of one operator that its state depends on."""
    out = []
    for field in ("kind", "runs", "query"):
        if was.get(field) != now.get(field):
            out.append(f"{field} {was.get(field)} -> {now.get(field)}")
    if was.get("kind") == now.get("kind"):
        before, after = was.get("detail") or {}, now.get("detail") or {}
        for field in STATE_FIELDS.get(str(now.get("kind")), ()):
            old_value, new_value = before.get(field), after.get(field)
            if field == "function" and now.get("runs") != SPARK:
                # A framework window keeps what its kind of function accumulates (a reduced element, an
                # AggregateFunction's accumulator, the elements): another function of the same kind may read it.
                old_value, new_value = _first_word(old_value), _first_word(new_value)
            if old_value != new_value:
                out.append(f"{field} {before.get(field)} -> {after.get(field)}")
        out += _state_vars(was, now)[0]
    return out


def _first_word(value: object) -> object:
    return value.split(" ", 1)[0] if isinstance(value, str) else value
