"""The totals of one job run, printed by `ethereal-kafka run` when it ends (after the last epoch of an
`--available-now` run, or a stop between epochs):

    summary of orders-enricher: 12.3 s
      in             300 records read from Kafka (per query: enrich 300, totals 300)
      out            enrich -> enriched 300; totals -> counts 12
      dead-lettered  0
      late           0
      epochs         4 committed, 0 failed

`in` counts each record read from Kafka once, however many queries read it (per source partition, the most any
query read in this run); the per-query figures follow in brackets when more than one query reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class RunSummary:
    """A job run's totals (`JobMetrics.summary`), counted by committed epochs since the run started.

    Attributes:
        app_id: The job's app.id.
        seconds: Wall time of the run (from the job's start to its end; Spark's start not included).
        records_in: Records read from Kafka, each counted once whichever queries read it.
        records_in_per_query: `{query: records}` each query read (the same record counts once per query).
        records_out: `{(query, sink): records}` written by committed epochs.
        dead_lettered: Poison records sent to the dead-letter topic (all queries).
        late: Late records: dropped by a watermark or routed to a late-data side output (all queries).
        epochs: `{outcome: count}` of the epochs of all queries (`committed`, `failed`, `interrupted`: ended by a
            stop, replayed at the next start).
        watermarks_s: `{query: watermark}` (Unix seconds) as Spark last reported it, for queries with one.
        state_rows: `{query: rows}` in the state stores of each stateful query, as Spark last reported it.
        user_errors: `{action: elements}` whose user code raised and were skipped or dead-lettered
            (`on.user.error`).
        restarts: Restarts of the queries after failed epochs (`restart.strategy`).
    """

    app_id: str
    seconds: float
    records_in: int
    records_in_per_query: Mapping[str, int] = field(default_factory=dict)
    records_out: Mapping[tuple[str, str], int] = field(default_factory=dict)
    dead_lettered: int = 0
    late: int = 0
    epochs: Mapping[str, int] = field(default_factory=dict)
    watermarks_s: Mapping[str, float] = field(default_factory=dict)
    state_rows: Mapping[str, int] = field(default_factory=dict)
    user_errors: Mapping[str, int] = field(default_factory=dict)
    restarts: int = 0

    def lines(self) -> list[str]:
        """The summary block, one string per line (see the module docstring)."""
        read = f"{self.records_in:,} records read from Kafka"
        if len(self.records_in_per_query) > 1:
            each = ", ".join(f"{q} {n:,}" for q, n in sorted(self.records_in_per_query.items()))
            read += f" (per query: {each})"
        per_query: dict[str, list[str]] = {}
        for (query, sink), n in sorted(self.records_out.items()):
            per_query.setdefault(query, []).append(f"{sink} {n:,}")
        out = "; ".join(f"{q} -> {', '.join(sinks)}" for q, sinks in per_query.items()) or "0"
        rows = [
            ("in", read),
            ("out", out),
            ("dead-lettered", self._dead_lettered()),
            ("late", f"{self.late:,}"),
            (
                "epochs",
                f"{self.epochs.get('committed', 0):,} committed, {self.epochs.get('failed', 0):,} failed"
                + (f", {n:,} interrupted by the stop" if (n := self.epochs.get("interrupted", 0)) else ""),
            ),
        ]
        if self.user_errors:
            shown = ", ".join(
                f"{n:,} {'dead-lettered' if a == 'dlq' else 'skipped'}"
                for a, n in sorted(self.user_errors.items())
            )
            rows.append(("user errors", shown))
        if self.restarts:
            rows.append(("restarts", f"{self.restarts:,}"))
        if self.state_rows:
            rows.append(("state", ", ".join(f"{q} {n:,} rows" for q, n in sorted(self.state_rows.items()))))
        return [f"summary of {self.app_id}: {self.seconds:.1f} s", *(f"  {k:<14} {v}" for k, v in rows)]

    def _dead_lettered(self) -> str:
        """The dead letters of the run: records that failed to decode, and, when there are some, elements whose
        user code raised under `on.user.error=dlq` (so the line never reads 0 while user-code letters were sent)."""
        user = self.user_errors.get("dlq", 0)
        if not user:
            return f"{self.dead_lettered:,}"
        return f"{self.dead_lettered:,} undecodable, {user:,} from user code"
