"""The metrics that name operators and count restarts: user-code errors per operator, the operators' names and
uids, and the runner's restarts after failed epochs (docs/operations.md, "Metrics").

Part of a run's bookkeeping (`runtime.metrics.JobMetrics` holds one `OperatorTally`); fed by the operators'
`UserErrorReport`s (on the read reports' accumulator), by the run's description (`plan.describe`: each operator's
query, name and uid) and by the runner (`count_restart`). Thread-safe.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterator, Mapping
from typing import Any

from ethereal_kafka.plan.user_errors import UserErrorReport

Labels = tuple[str, ...]


class OperatorTally:
    """User-code errors, operator identities and restarts of one job run."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.user_errors: dict[Labels, int] = defaultdict(int)  # (query, operator, uid, action)
        self.operators: dict[Labels, int] = {}  # (query, operator, uid, kind): 1
        self._stateful: dict[str, str] = {}  # query: the name of its one stateful operator
        self.restarts: dict[Labels, int] = defaultdict(int)  # (strategy,)

    def describe(self, plan: Mapping[str, Any]) -> None:
        """Learn the operators of a run's description (`plan.describe`): their names and uids, and which query
        has exactly one stateful operator (whose state-store figures then carry its name)."""
        stateful: dict[str, list[str]] = defaultdict(list)
        with self._lock:
            for node in plan.get("nodes") or ():
                query, uid = node.get("query"), node.get("uid")
                if query is None or uid is None:
                    continue
                name = str(node.get("name") or node.get("label"))
                self.operators[(str(query), name, str(uid), str(node.get("kind")))] = 1
                if node.get("stateful"):
                    stateful[str(query)].append(name)
            self._stateful = {q: names[0] for q, names in stateful.items() if len(names) == 1}

    def state_operator(self, query: str, spark_name: str) -> str:
        """How state-store figures name a stateful operator of `query` that Spark calls `spark_name`: the
        operator's name when the query has one stateful operator, else Spark's name."""
        with self._lock:
            return self._stateful.get(query, spark_name)

    def add(self, report: UserErrorReport) -> None:
        """Count one operator's skipped or dead-lettered elements (a task's report)."""
        with self._lock:
            self.user_errors[(report.query, report.operator, report.uid, report.action)] += report.count

    def count_restart(self, strategy: str) -> None:
        """Count one restart of the queries after a failed epoch (called by the runner)."""
        with self._lock:
            self.restarts[(strategy,)] += 1

    def totals(self) -> tuple[dict[str, int], int]:
        """`({action: elements}, restarts)` for the run's summary."""
        with self._lock:
            by_action: dict[str, int] = defaultdict(int)
            for (_q, _op, _uid, action), n in self.user_errors.items():
                by_action[action] += n
            return dict(by_action), sum(self.restarts.values())

    def families(self, family: Any) -> Iterator[Any]:
        """The Prometheus families (`family(kind, name, doc, labels, values)` makes one, as `JobMetrics.collect`)."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        with self._lock:
            errors, operators, restarts = dict(self.user_errors), dict(self.operators), dict(self.restarts)
        yield family(
            CounterMetricFamily,
            "user_error_records",
            "Elements whose user code raised, by operator and action (skip, dlq: sent to user.error.dlq.topic)",
            ("query", "operator", "uid", "action"),
            errors,
        )
        yield family(
            GaugeMetricFamily,
            "operator_info",
            "The job's operators: query, name (`.name()`), uid (`.uid()`) and kind; always 1",
            ("query", "operator", "uid", "kind"),
            operators,
        )
        yield family(
            CounterMetricFamily,
            "restarts",
            "Restarts of the queries from the checkpoint after a failed epoch (restart.strategy)",
            ("strategy",),
            restarts,
        )
