"""What an operator does when user code raises on an element: the job's `on.user.error` (`fail` | `skip` | `dlq`).

The runner hands the compiler one `UserErrors` for the job (the policy, the dead-letter topic and where dead letters
go: `DeadLetterHandoff`, given by the layer that commits them, so the plan never imports the protocol); the compiler
gives each operator that calls user code per element its own `OperatorErrors` (`for_node`), which knows the
operator's name and uid, the query, and where the operator's elements come from. On executors the operator asks it
to `handle` each failure and, once per batch (or key), to `flush` what it kept: the dead letters go to the handoff,
and a `UserErrorReport` per operator and action goes to the driver's metrics.

Only elements that still carry their source record's position (topic, partition, offset) can be dead-lettered:
per-element functions before any window, rolling aggregate, process function or join, and a process function's
`process_element`. Elsewhere (a map after a window, a timer, a window or join function) `dlq` fails the epoch as
`fail` does, and the error line says why; `skip` drops the element anywhere an element is at hand.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ethereal_kafka.api import graph as g
from ethereal_kafka.connectors.kafka.dead_letters import DeadLetter, user_dead_letter
from ethereal_kafka.connectors.kafka.read_stats import REPORTS_ACCUMULATOR_ID, publish
from ethereal_kafka.plan.errors import UserFunctionError, user_error

log = logging.getLogger(__name__)

FAIL = "fail"
SKIP = "skip"
DLQ = "dlq"


class DeadLetterHandoff(Protocol):
    """Takes the dead letters of user-code errors from an operator (in the Spark task that found them): under
    exactly-once `eos.dead_letters.EpochHandoff` (committed with the epoch), else
    `connectors.kafka.dead_letters.ProduceNow`. Must be picklable."""

    def keep(self, group: str, letters: Sequence[DeadLetter]) -> None:
        """Take `letters` of source records read under consumer group `group`."""
        ...


@dataclass(frozen=True)
class UserErrors:
    """The job's `on.user.error` as the compiler gets it.

    Attributes:
        action: `fail`, `skip` or `dlq`.
        topic: The dead-letter topic (`dlq`).
        handoff: Where dead letters go (`dlq`).
    """

    action: str = FAIL
    topic: str | None = None
    handoff: DeadLetterHandoff | None = None

    def for_node(
        self,
        node: g.Node,
        query: str,
        sources: Mapping[str, Any],
        positioned: bool,
        placed_by: g.Node | None = None,
    ) -> OperatorErrors:
        """The policy of one operator (`positioned`: its elements carry their source record's position;
        `placed_by`: the node whose source topic they come from, default `node`).

        With `dlq`, an operator whose elements cannot be placed (no position, or fed by several topics or a topic
        pattern: the position does not name the topic) keeps `dlq` for the error line only and fails; a warning
        says so when the job starts.
        """
        place = _placement(placed_by or node, sources) if positioned else None
        if self.action == DLQ and place is None:
            log.warning(
                "on.user.error=dlq: operator %s cannot dead-letter its elements (%s); an error there fails the "
                "epoch",
                node.label,
                "they have no source record after a window, process function, rolling aggregate or join"
                if not positioned
                else "they come from several topics or a topic pattern",
            )
        group, topic = place if place is not None else (None, None)
        return OperatorErrors(
            self.action, node.ref, query, group, topic, self.topic if place else None, self.handoff
        )


def _placement(node: g.Node, sources: Mapping[str, Any]) -> tuple[str, str] | None:
    """`(consumer group, topic)` of the one source topic `node`'s elements come from, or None."""
    found: set[str] = set()
    seen: set[int] = set()
    pending = [node]
    while pending:
        current = pending.pop()
        if current.id in seen:
            continue
        seen.add(current.id)
        if isinstance(current, g.SourceNode):
            found.add(current.source)
        pending.extend(current.inputs)
    if len(found) != 1:
        return None
    config = sources.get(next(iter(found)))
    topics = tuple(getattr(config, "topics", ()) or ())
    if config is None or getattr(config, "topic_pattern", None) or len(topics) != 1:
        return None
    return str(config.group), topics[0]


@dataclass(frozen=True)
class UserErrorReport:
    """User-code errors one task handled for one operator, reported to the driver's metrics (picklable).

    Attributes:
        query: The query.
        operator: The operator's display name.
        uid: Its stable id.
        action: `skip` or `dlq`.
        count: How many elements.
    """

    query: str
    operator: str
    uid: str
    action: str
    count: int


@dataclass(frozen=True)
class OperatorErrors:
    """One operator's `on.user.error` (built on the driver, pickled to executors with the operator).

    Attributes:
        action: `fail`, `skip` or `dlq`.
        operator: The operator's name and ids.
        query: Its query.
        group, topic: Where its elements come from (`dlq` only; None when they cannot be placed).
        target: The dead-letter topic when its elements can be dead-lettered, else None.
        handoff: Where its dead letters go.
    """

    action: str
    operator: g.OperatorRef
    query: str = ""
    group: str | None = None
    topic: str | None = None
    target: str | None = None
    handoff: DeadLetterHandoff | None = None
    _letters: list[DeadLetter] = field(default_factory=list, compare=False, repr=False)
    _ranks: Counter[tuple[int, int]] = field(default_factory=Counter, compare=False, repr=False)
    _skipped: list[int] = field(default_factory=lambda: [0], compare=False, repr=False)

    @property
    def fails(self) -> bool:
        """True when every error fails the epoch (`fail`)."""
        return self.action == FAIL

    def handle(
        self, exc: BaseException, element: Mapping[str, Any], part: Any, offset: Any, where: str
    ) -> None:
        """Deal with user code that raised `exc` on `element` (from source partition `part`, offset `offset`;
        `where` says so for people): keep its dead letter (`dlq`), count it (`skip`), or raise.

        Raises:
            UserFunctionError: under `fail`, or under `dlq` when the element cannot be placed (no position).
        """
        error = user_error(self.operator, exc, where)
        if self.action == SKIP:
            self._skipped[0] += 1
            return
        if self.action == DLQ and self.target is not None and part is not None and offset is not None:
            rank = self._ranks[(int(part), int(offset))]
            self._ranks[(int(part), int(offset))] += 1
            location = str(error.location) if error.location is not None else ""
            self._letters.append(
                user_dead_letter(
                    element,
                    (str(self.topic), int(part), int(offset)),
                    (self.operator.display, self.operator.uid),
                    (error.cause_class, error.cause_message, location),
                    self.target,
                    rank,
                )
            )
            return
        if self.action == DLQ:
            raise UserFunctionError(
                f"{error} (on.user.error=dlq: this operator's elements cannot be dead-lettered, see the job's "
                "start-up warning)"
            ) from exc
        raise error from exc

    def flush(self) -> None:
        """Hand the kept dead letters to the handoff and report the counts to the driver; called by the operator
        before it hands on the batch (or key) they came from. Never called under `fail`.

        Raises:
            KafkaConnectionError: (immediate delivery) a dead letter was not acknowledged.
        """
        letters, self._letters[:] = list(self._letters), []
        skipped, self._skipped[0] = self._skipped[0], 0
        if letters and self.handoff is not None and self.group is not None:
            self.handoff.keep(self.group, letters)
        for action, count in ((DLQ, len(letters)), (SKIP, skipped)):
            if count:
                report = UserErrorReport(self.query, self.operator.display, self.operator.uid, action, count)
                try:
                    publish(report, REPORTS_ACCUMULATOR_ID)
                except Exception:  # for people only: the counts are lost, the letters are not
                    log.debug("user-error counts of %s not reported", self.operator, exc_info=True)


def fail_only(node: g.Node) -> OperatorErrors:
    """The policy of an operator that never skips or dead-letters (timers, window and join functions)."""
    return OperatorErrors(FAIL, node.ref)
