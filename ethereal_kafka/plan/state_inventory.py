"""The keyed state a process function declares, found without Spark: what `validate --against` and a restore compare
across versions.

A process function declares its state in `open(runtime_context)` (`api.functions`); the operator stores each
declaration as one state variable named `u_<name>` (`plan.operators.keyed_state`): a ValueState for value and
aggregating state, a ListState for list state, a MapState for map state, as Spark names them. `declared_state` calls
`open()` on a shallow copy of the function with a context that only records those declarations (Spark calls `open()`
on the driver as well, when it collects the state schemas, so the function is used to that). The values are pickled
Python values with no declared type: a variable's kind is its schema. A new variable starts empty; a variable whose
kind changed cannot be read (`state_changes`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from ethereal_kafka.api.functions import RuntimeContext
from ethereal_kafka.plan.operators.keyed_state import USER_PREFIX

#: The Spark state kind of each `RuntimeContext` declaration.
VALUE, LIST, MAP = "ValueState", "ListState", "MapState"


class _Inert:
    """A state object `open()` may keep; any use of it does nothing."""

    def __getattr__(self, _name: str) -> Any:
        return lambda *_args, **_kwargs: None


class _Recording(RuntimeContext):
    def __init__(self) -> None:
        self.found: dict[str, str] = {}

    def _note(self, descriptor: Any, kind: str) -> Any:
        self.found[USER_PREFIX + str(descriptor.name)] = kind
        return _Inert()

    def get_state(self, descriptor: Any) -> Any:
        return self._note(descriptor, VALUE)

    def get_list_state(self, descriptor: Any) -> Any:
        return self._note(descriptor, LIST)

    def get_map_state(self, descriptor: Any) -> Any:
        return self._note(descriptor, MAP)

    def get_aggregating_state(self, descriptor: Any) -> Any:
        return self._note(descriptor, VALUE)


def declared_state(function: Any) -> dict[str, str] | None:
    """`{state variable: Spark kind}` of what `function.open()` declares; None when it has no `open` or its `open`
    raised outside a task (the inventory is then unknown, and nothing is compared)."""
    opener = getattr(function, "open", None)
    if not callable(opener):
        return None
    context = _Recording()
    try:
        copy.copy(function).open(context)
    except Exception:  # user code, outside the task it was written for: unknown, never a failure here
        return None
    return context.found


def state_changes(before: Mapping[str, str], after: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """Compare an operator's state variables (`{name: kind}`, user variables only) across versions: `(unreadable,
    notes)`. Unreadable: a variable whose kind changed. Notes: a new variable (starts empty) and a variable the new
    version no longer declares (its state is not read)."""
    unreadable, notes = [], []
    for name, kind in sorted(before.items()):
        if not name.startswith(USER_PREFIX):
            continue
        now = after.get(name)
        if now is None:
            notes.append(f"state {name.removeprefix(USER_PREFIX)!r} ({kind}) no longer declared")
        elif now != kind:
            unreadable.append(f"state {name.removeprefix(USER_PREFIX)!r} {kind} -> {now}")
    for name, kind in sorted(after.items()):
        if name not in before:
            notes.append(f"new state {name.removeprefix(USER_PREFIX)!r} ({kind}) starts empty")
    return unreadable, notes
