"""Metrics of a running job: bookkeeping on the driver, a Prometheus endpoint, and the hooks that feed them.

Every figure is computed on the driver, from three feeds (docs/operations.md, "Metrics", lists each metric):

- **The coordinator's epoch outcomes** (`CheckpointCoordinator.epoch_listeners`: the `EpochRecord` and the sink
  tasks' summary rows): epochs, epoch duration, records out per sink, transaction commit latency, and the late
  records routed to a side-output sink.
- **The source's read reports** (`connectors.kafka.read_stats`; they reach the driver through a PySpark accumulator
  as read tasks finish, before the epoch's write returns): records in, dead-lettered and skipped records, and the
  end-to-end latency. The commit of epoch N claims the reports of exactly N's offset ranges `[start, until)`, so a
  read is counted once, with the epoch that made its records' effects visible; each of its records has the
  end-to-end latency `commit time of N - record timestamp`.
- **Spark's progress reports** (a `StreamingQueryListener`): consumer lag per partition (`latestOffset - endOffset`
  as of the last planned epoch), rows dropped by a watermark (`numRowsDroppedByWatermark` per stateful operator),
  each query's event-time watermark (`eventTime.watermark`) and its state stores' size (`numRowsTotal`,
  `memoryUsedBytes` per stateful operator). The lag a report leaves out (a batch Spark recovered from its offset
  log after a restart) is filled in from Kafka (`runtime.lag_fill`).

Records in are kept per query (`records_in`) and, for the progress line and the run summary, per source partition
once however many queries read it (the most any query read: `source_records_in`). Every query's families are
registered with zeros when it is declared (`add_query`), so the endpoint shows them before the first epoch commits.

`JobMetrics` is the bookkeeping (plain Python, no Spark, thread-safe); `runtime.run_metrics` wires it to a running
job (the endpoint, the listener, the report channel, the progress line).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import defaultdict, deque
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ethereal_kafka.connectors.kafka.offsets import ranges
from ethereal_kafka.connectors.kafka.read_stats import ReadReport, bucket_age
from ethereal_kafka.plan.user_errors import UserErrorReport
from ethereal_kafka.runtime.histogram import Histogram
from ethereal_kafka.runtime.operator_metrics import OperatorTally
from ethereal_kafka.runtime.progress import Snapshot
from ethereal_kafka.runtime.spark_progress import offsets_of, unix_seconds
from ethereal_kafka.runtime.summary import RunSummary

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from ethereal_kafka.checkpoint.history import EpochRecord
    from ethereal_kafka.config.connectors import KafkaSourceConfig

log = logging.getLogger(__name__)

#: Bucket bounds (seconds) of the histograms.
LATENCY_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    1800.0,
    3600.0,
)
EPOCH_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0, 300.0)
COMMIT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

#: A read report no epoch claimed within this long is dropped (its epoch failed, or it was a duplicate attempt).
PENDING_TTL_S = 600.0

#: The `sink` label of records out that cannot be split per sink (a multi-sink query written at-least-once).
ALL_SINKS = "*"

Labels = tuple[str, ...]


#: Auto-scaling decisions kept for the web UI.
MAX_DECISIONS = 1000


@dataclass(frozen=True)
class ScalingDecision:
    """One decision of an auto-scaler, as the web UI's decisions panel shows it (`JobMetrics.record_decision`).

    Attributes:
        time_ms: When it was taken, epoch milliseconds.
        action: What it did, e.g. `scale-up`, `scale-down`, `hold`.
        executors_before: Executors before the decision.
        executors_after: Executors asked for by it.
        reason: One line saying why (the figures it acted on).
        applied: False when the decision was only logged (local mode: there are no executors to change).
    """

    time_ms: int
    action: str
    executors_before: int
    executors_after: int
    reason: str
    applied: bool = True

    def to_dict(self) -> dict[str, Any]:
        """The decision as a JSON-friendly dict (the fields by name)."""
        return {
            "time_ms": self.time_ms,
            "action": self.action,
            "executors_before": self.executors_before,
            "executors_after": self.executors_after,
            "reason": self.reason,
            "applied": self.applied,
        }


@dataclass(frozen=True)
class LoadReading:
    """Cumulative figures the autoscaler differences between two evaluations (`JobMetrics.load_reading`).

    Attributes:
        at: `clock()` when taken (seconds).
        lag: Sum of every partition's lag, or None before Spark reported any.
        epoch_seconds: Per query, the total time its committed epochs took so far.
        latency_buckets: The end-to-end latency histogram of every query and source merged (non-cumulative
            counts per `LATENCY_BUCKETS` bound, `+Inf` last).
    """

    at: float
    lag: int | None
    epoch_seconds: Mapping[str, float]
    latency_buckets: tuple[int, ...]


@dataclass
class _QueryTally:
    """What the metrics keep about one query: the sinks it writes (late-data side outputs among them) and its last
    committed epoch."""

    sinks: tuple[str, ...]
    side_outputs: frozenset[str]
    last_epoch: int | None = None
    last_epoch_ms: int | None = None
    last_commit_s: float | None = None


class JobMetrics:
    """The metric bookkeeping of one job run (driver side; every method is thread-safe).

    Fed by `observe_epoch` (coordinator thread), `add_reports` (PySpark's accumulator server thread) and
    `observe_progress` (Spark's listener thread); read by `collect` (the HTTP endpoint) and `snapshot` (the
    progress line). With `state_rows_counted` False (RocksDB without its row count, `runtime.spark.
    state_rows_counted`) the state stores' rows are not kept: Spark reports 0 for them, which is not their number.
    """

    def __init__(
        self,
        app_id: str,
        sources: Mapping[str, KafkaSourceConfig],
        clock: Any = time.monotonic,
        state_rows_counted: bool = True,
    ) -> None:
        self.app_id = app_id
        self._state_rows_counted = state_rows_counted
        self._sources = dict(sources)
        self._clock = clock
        self._lock = threading.Lock()
        self._queries: dict[str, _QueryTally] = {}
        self._pending: dict[tuple[str, int, int], deque[tuple[float, ReadReport]]] = defaultdict(deque)
        self._topic_sources: dict[str, str] = {}
        self.records_in: dict[Labels, int] = defaultdict(int)  # (query, source)
        self.partition_in: dict[Labels, int] = defaultdict(int)  # (query, source, topic, partition)
        self.watermarks: dict[Labels, float] = {}  # (query,): Unix seconds
        self.state_rows: dict[Labels, int] = {}  # (query, operator)
        self.state_bytes: dict[Labels, int] = {}  # (query, operator)
        self._began = clock()
        self._batches: dict[str, int] = {}  # query: the newest batch id whose progress was counted
        self.records_out: dict[Labels, int] = defaultdict(int)  # (query, sink)
        self.dead_lettered: dict[Labels, int] = defaultdict(int)  # (query, source)
        self.skipped: dict[Labels, int] = defaultdict(int)  # (query, source)
        self.late: dict[Labels, int] = defaultdict(int)  # (query, reason, origin)
        self.lag: dict[Labels, int] = {}  # (query, source, topic, partition)
        self.epochs: dict[Labels, int] = defaultdict(int)  # (query, outcome)
        self.tasks: dict[Labels, int] = defaultdict(int)  # (query, outcome)
        self.retries: dict[Labels, int] = defaultdict(int)  # (query,)
        self.epoch_seconds: dict[Labels, Histogram] = {}  # (query,)
        self.commit_seconds: dict[Labels, Histogram] = {}  # (query,)
        self.latency_seconds: dict[Labels, Histogram] = {}  # (query, source)
        self.unclaimed_reports = 0
        self.epoch_budgets: dict[Labels, int] = {}  # (query, source): adaptive records per epoch
        self.scaling: dict[Labels, int] = defaultdict(int)  # (action, applied)
        self.executors: dict[Labels, int] = {}  # (state,): registered | target
        self._decisions: deque[ScalingDecision] = deque(maxlen=MAX_DECISIONS)
        self.operator_rows: dict[Labels, list[int | None]] = {}  # (query, node id): [rows in, rows out]
        #: User-code errors per operator, the operators' names and uids, restarts (`runtime.operator_metrics`).
        self.operators = OperatorTally()

    # -- feeds ---------------------------------------------------------------------------------------------------
    def add_query(
        self,
        name: str,
        sinks: Sequence[str],
        side_outputs: Collection[str] = (),
        sources: Sequence[str] = (),
    ) -> None:
        """Declare a query: its sinks in `__sink` index order, which of them are late-data side outputs, and the
        sources it reads. Its counters and histograms start at zero here, so the endpoint lists them at once."""
        with self._lock:
            self._queries[name] = _QueryTally(tuple(sinks), frozenset(side_outputs) & frozenset(sinks))
            for sink in sinks:
                self.records_out[(name, sink)] += 0
            for outcome in ("committed", "failed", "interrupted"):
                self.epochs[(name, outcome)] += 0
            self.retries[(name,)] += 0
            self._histogram(self.epoch_seconds, (name,), EPOCH_BUCKETS)
            for source in sources:
                for table in (self.records_in, self.dead_lettered, self.skipped):
                    table[(name, source)] += 0
                self._histogram(self.latency_seconds, (name, source), LATENCY_BUCKETS)

    def add_reports(self, reports: Iterable[ReadReport | UserErrorReport]) -> None:
        """Keep read reports until the epoch covering their range commits (called as read tasks finish); count
        the operators' user-code error reports at once."""
        now = self._clock()
        with self._lock:
            for report in reports:
                if isinstance(report, UserErrorReport):
                    self.operators.add(report)
                    continue
                self._pending[(report.topic, report.partition, report.until)].append((now, report))

    def observe_epoch(
        self, query: str, record: EpochRecord, tasks: Sequence[Any] = ()
    ) -> dict[str, Any] | None:
        """Count one epoch outcome of `query` (`tasks`: the sink tasks' summary rows, `txn_task.RESULT_SCHEMA`).

        Called by the coordinator before it records the epoch (an epoch annotator). Returns, for a committed
        epoch, the figures the checkpoint history keeps with it: `latency` (the end-to-end latency histogram of
        exactly this epoch's input records, on the endpoint's buckets) and `lag` (`{topic: {partition: lag}}` of
        the query's inputs, as last reported) and `records_read` (the records its read tasks reported, None when
        a range of the epoch had no report); None for other outcomes.
        """
        with self._lock:
            self.epochs[(query, record.outcome)] += 1
            if record.outcome != "committed":
                return None
            shape = self._queries.setdefault(query, _QueryTally((), frozenset()))
            commit_ms = record.started_ms + record.duration_ms
            if shape.last_epoch is None or record.epoch >= shape.last_epoch:
                shape.last_epoch, shape.last_epoch_ms = record.epoch, record.duration_ms
                shape.last_commit_s = commit_ms / 1000
            self._histogram(self.epoch_seconds, (query,), EPOCH_BUCKETS).observe(record.duration_ms / 1000)
            self._count_outputs(query, shape, record, tasks)
            latency = Histogram(LATENCY_BUCKETS)
            read = self._claim_reads(query, record, commit_ms, latency)
            self._prune()
            lag: dict[str, dict[str, int]] = {}
            for (q, _source, topic, partition), value in self.lag.items():
                if q == query:
                    lag.setdefault(topic, {})[partition] = value
            return {"latency": latency.to_dict() if latency.count else None, "lag": lag, "records_read": read}

    def record_decision(self, decision: ScalingDecision) -> None:
        """Keep one auto-scaling decision for the web UI's decisions panel (the newest `MAX_DECISIONS`).

        The hook for an auto-scaler running in the driver: call it once per decision, from any thread.
        """
        with self._lock:
            self._decisions.append(decision)

    def observe_progress(self, progress: Mapping[str, Any]) -> None:
        """Take lag, watermark drops, the watermark and the state stores' size from one Spark progress report (its
        JSON form, parsed). Called by the progress listener for every report, and by the runner with each query's
        `lastProgress` when the run ends (the listener's last reports may still be on their way): a report of a
        batch already seen updates the gauges only, so no drop is counted twice."""
        name = str(progress.get("name") or "")
        prefix = f"{self.app_id}-"
        if not name.startswith(prefix):
            return
        query = name[len(prefix) :]
        batch = int(progress.get("batchId", -1))
        with self._lock:
            counted = batch < 0 or batch > self._batches.get(query, -1)
            if counted and batch >= 0:
                self._batches[query] = batch
            for source in progress.get("sources") or ():
                end = offsets_of(source.get("endOffset"))
                latest = offsets_of(source.get("latestOffset"))
                for (topic, partition), until in end.items():
                    if (topic, partition) in latest:
                        labels = (query, self._source_of(topic), topic, str(partition))
                        self.lag[labels] = max(0, latest[(topic, partition)] - until)
            watermark = unix_seconds((progress.get("eventTime") or {}).get("watermark"))
            if watermark is not None:
                self.watermarks[(query,)] = watermark
            rows: dict[Labels, int] = defaultdict(int)
            size: dict[Labels, int] = defaultdict(int)
            for operator in progress.get("stateOperators") or ():
                spark_name = str(operator.get("operatorName") or "stateful operator")
                origin = self.operators.state_operator(query, spark_name)
                dropped = int(operator.get("numRowsDroppedByWatermark") or 0)
                if dropped and counted:
                    self.late[(query, "watermark", origin)] += dropped
                rows[(query, origin)] += int(operator.get("numRowsTotal") or 0)
                size[(query, origin)] += int(operator.get("memoryUsedBytes") or 0)
            if self._state_rows_counted:
                self.state_rows.update(rows)
            self.state_bytes.update(size)

    def missing_lag(self, query: str, partitions: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
        """The `(topic, partition)`s among `partitions` whose lag in `query` no progress report has given (Spark
        leaves it out of a batch recovered from its offset log; `runtime.lag_fill` fills it in)."""
        with self._lock:
            known = {(topic, int(partition)) for (q, _source, topic, partition) in self.lag if q == query}
        return [tp for tp in partitions if tp not in known]

    def fill_lag(self, query: str, lags: Mapping[tuple[str, int], int]) -> None:
        """Set the lag of `query`'s partitions that no progress report has given yet (`runtime.lag_fill`); a
        partition that has one keeps it, and a later report replaces a filled figure."""
        with self._lock:
            known = {(topic, int(partition)) for (q, _source, topic, partition) in self.lag if q == query}
            for (topic, partition), value in lags.items():
                if (topic, partition) not in known:
                    self.lag[(query, self._source_of(topic), topic, str(partition))] = max(0, value)

    def add_operator_rows(self, query: str, rows: Mapping[str, tuple[int | None, int | None]]) -> None:
        """Add one committed epoch's rows in and out per operator of `query` (`runtime.operator_counter`); a
        figure an epoch could not attribute (None) makes the run's total None from then on."""
        with self._lock:
            for node, figures in rows.items():
                total = self.operator_rows.setdefault((query, node), [0, 0])
                for i, value in enumerate(figures):
                    current = total[i]
                    total[i] = None if value is None or current is None else current + value

    def set_epoch_budget(self, query: str, source: str, records: int) -> None:
        """The adaptive epoch sizer posted a new budget for `source` in `query` (`runtime.admission`)."""
        with self._lock:
            self.epoch_budgets[(query, source)] = records

    def observe_scaling(
        self,
        at_ms: int,
        action: str,
        before: int,
        after: int,
        reason: str,
        applied: bool,
        registered: int | None,
    ) -> None:
        """Count one evaluation of the scaling policy (`runtime.autoscaler`); scale-ups and scale-downs are also
        kept as `ScalingDecision`s (the web UI's decisions panel). `registered`: executors registered with the
        driver now (None in local mode)."""
        with self._lock:
            self.scaling[(action, "true" if applied else "false")] += 1
            self.executors[("target",)] = after
            if registered is not None:
                self.executors[("registered",)] = registered
            if action != "hold":
                self._decisions.append(ScalingDecision(at_ms, action, before, after, reason, applied))

    # -- outputs -------------------------------------------------------------------------------------------------
    def scaling_decisions(self) -> list[dict[str, Any]]:
        """The scaling decisions of this run, oldest first (at most `MAX_DECISIONS`), as `ScalingDecision.to_dict`
        gives them (also under `figures()["decisions"]`, which the web UI shows)."""
        with self._lock:
            return [d.to_dict() for d in self._decisions]

    def load_reading(self) -> LoadReading:
        """The cumulative figures the scaling policy's load is derived from."""
        with self._lock:
            merged = [0] * (len(LATENCY_BUCKETS) + 1)
            for hist in self.latency_seconds.values():
                merged = [a + b for a, b in zip(merged, hist.buckets, strict=True)]
            return LoadReading(
                at=self._clock(),
                lag=sum(self.lag.values()) if self.lag else None,
                epoch_seconds={q: h.sum for (q,), h in self.epoch_seconds.items()},
                latency_buckets=tuple(merged),
            )

    def snapshot(self) -> Snapshot:
        """Job-wide totals now."""
        with self._lock:
            latest = max(
                (q for q in self._queries.values() if q.last_epoch is not None),
                key=lambda q: q.last_commit_s or 0.0,
                default=None,
            )
            return Snapshot(
                at=self._clock(),
                records_in=self._distinct_in(),
                records_out=sum(self.records_out.values()),
                dead_lettered=sum(self.dead_lettered.values()),
                lag=sum(self.lag.values()) if self.lag else None,
                last_epoch=latest.last_epoch if latest else None,
                last_epoch_ms=latest.last_epoch_ms if latest else None,
                failed_epochs=sum(n for (_, outcome), n in self.epochs.items() if outcome == "failed"),
            )

    def summary(self) -> RunSummary:
        """The run's totals so far (`runtime.summary`; `seconds` since this bookkeeping was made)."""
        with self._lock:
            per_query: dict[str, int] = defaultdict(int)
            for (query, _source), n in self.records_in.items():
                per_query[query] += n
            state: dict[str, int] = defaultdict(int)
            for (query, _operator), n in self.state_rows.items():
                state[query] += n
            epochs: dict[str, int] = defaultdict(int)
            for (_query, outcome), n in self.epochs.items():
                epochs[outcome] += n
            user_errors, restarts = self.operators.totals()
            return RunSummary(
                app_id=self.app_id,
                seconds=self._clock() - self._began,
                records_in=self._distinct_in(),
                records_in_per_query=dict(per_query),
                records_out={(q, s): n for (q, s), n in self.records_out.items()},
                dead_lettered=sum(self.dead_lettered.values()),
                late=sum(self.late.values()),
                epochs=dict(epochs),
                watermarks_s={q: w for (q,), w in self.watermarks.items()},
                state_rows=dict(state),
                user_errors=user_errors,
                restarts=restarts,
            )

    def figures(self) -> dict[str, Any]:
        """Every figure now, per query, as plain JSON-friendly values (the web UI's live view).

        Returns `{"queries": {query: {...}}, "decisions": [...]}`; each query has its `sinks`, `last_epoch`,
        `last_epoch_ms`, `last_commit_s`, per-source `records_in`, `dead_lettered`, `skipped` and `lag`
        (`{source: {topic: {partition: lag}}}`), per-sink `records_out`, `late` (`[{reason, origin, records}]`),
        `epochs` by outcome, `epoch_budgets` (per source, the adaptive sizer's budget for the next epoch; empty
        with fixed sizing), `watermark_s` (the query's event-time watermark, Unix seconds, None before one),
        `operators` (`{node id: {"in", "out"}}`: rows per graph operator over the run's committed epochs, None
        where not available; `runtime.operator_rows`), and `latency`: the end-to-end latency histogram over all its sources (`Histogram.
        to_dict()`, the endpoint's buckets summed over `source`), or None.
        """
        with self._lock:
            names = set(self._queries) | {k[0] for k in self.records_in} | {k[0] for k in self.epochs}
            queries: dict[str, dict[str, Any]] = {}
            for name in sorted(names):
                shape = self._queries.get(name, _QueryTally((), frozenset()))
                latency: Histogram | None = None
                for (q, _source), hist in self.latency_seconds.items():
                    if q == name:
                        if latency is None:
                            latency = Histogram(hist.bounds)
                        latency.add(hist)
                lag: dict[str, dict[str, dict[str, int]]] = {}
                for (q, source, topic, partition), value in self.lag.items():
                    if q == name:
                        lag.setdefault(source, {}).setdefault(topic, {})[partition] = value
                queries[name] = {
                    "sinks": list(shape.sinks),
                    "last_epoch": shape.last_epoch,
                    "last_epoch_ms": shape.last_epoch_ms,
                    "last_commit_s": shape.last_commit_s,
                    "records_in": _by_second(self.records_in, name),
                    "records_out": _by_second(self.records_out, name),
                    "dead_lettered": _by_second(self.dead_lettered, name),
                    "skipped": _by_second(self.skipped, name),
                    "lag": lag,
                    "late": [
                        {"reason": reason, "origin": origin, "records": n}
                        for (q, reason, origin), n in sorted(self.late.items())
                        if q == name
                    ],
                    "epochs": _by_second(self.epochs, name),
                    "epoch_budgets": _by_second(self.epoch_budgets, name),
                    "watermark_s": self.watermarks.get((name,)),
                    "operators": {
                        node: {"in": figures[0], "out": figures[1]}
                        for (q, node), figures in sorted(self.operator_rows.items())
                        if q == name
                    },
                    "latency": latency.to_dict() if latency is not None else None,
                }
            decisions = [d.to_dict() for d in self._decisions]
        return {"queries": queries, "decisions": decisions}

    def collect(self) -> Iterator[Metric]:
        """Every metric as Prometheus metric families (the `prometheus_client` Collector protocol)."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        def family(
            kind: Any, name: str, doc: str, labels: Sequence[str], values: Mapping[Labels, float]
        ) -> Metric:
            metric = kind(f"ethereal_kafka_{name}", doc, labels=["app_id", *labels])
            for key, value in sorted(values.items()):
                metric.add_metric([self.app_id, *key], value)
            return metric

        def histograms(
            name: str, doc: str, labels: Sequence[str], values: Mapping[Labels, Histogram]
        ) -> Metric:
            metric = HistogramMetricFamily(f"ethereal_kafka_{name}", doc, labels=["app_id", *labels])
            for key, hist in sorted(values.items()):
                metric.add_metric([self.app_id, *key], hist.cumulative(), hist.sum)
            return metric

        with self._lock:
            last: dict[Labels, float] = {
                (q,): float(s.last_epoch) for q, s in self._queries.items() if s.last_epoch is not None
            }
            stamps: dict[Labels, float] = {
                (q,): s.last_commit_s for q, s in self._queries.items() if s.last_commit_s is not None
            }
            once: dict[Labels, int] = defaultdict(int)
            for (source, _topic, _partition), n in self._partition_maxima().items():
                once[(source,)] += n
            for _query, source in self.records_in:
                once[(source,)] += 0
            families = [
                family(CounterMetricFamily, "records_in", "Records read from Kafka by committed epochs (poison records included)", ("query", "source"), self.records_in),
                family(CounterMetricFamily, "source_records_in", "Records read from Kafka, each counted once however many queries read it", ("source",), once),
                family(CounterMetricFamily, "records_out", "Records written to a sink by committed epochs", ("query", "sink"), self.records_out),
                family(CounterMetricFamily, "dead_lettered_records", "Poison records sent to the dead-letter topic", ("query", "source"), self.dead_lettered),
                family(CounterMetricFamily, "skipped_records", "Poison records dropped (on.error=skip)", ("query", "source"), self.skipped),
                family(CounterMetricFamily, "late_records", "Late records: dropped by a watermark, or routed to a late-data side output", ("query", "reason", "origin"), self.late),
                family(GaugeMetricFamily, "consumer_lag_records", "Offsets between the last planned epoch's end and the latest stable offset", ("query", "source", "topic", "partition"), self.lag),
                family(CounterMetricFamily, "epochs", "Epochs by outcome (committed, failed; interrupted: ended by a stop, replayed at the next start)", ("query", "outcome"), self.epochs),
                family(CounterMetricFamily, "sink_tasks", "Sink tasks by outcome (committed; skipped: the epoch was committed before)", ("query", "outcome"), self.tasks),
                family(CounterMetricFamily, "transaction_retries", "Transaction attempts beyond the first, in committed sink tasks", ("query",), self.retries),
                family(GaugeMetricFamily, "last_epoch", "The last committed epoch (Spark batch id)", ("query",), last),
                family(GaugeMetricFamily, "last_commit_timestamp_seconds", "When the last epoch committed (Unix time)", ("query",), stamps),
                histograms("epoch_duration_seconds", "Epoch write time: from the epoch's foreachBatch call to its commit", ("query",), self.epoch_seconds),
                histograms("transaction_commit_seconds", "Per sink task: send_offsets_to_transaction + commit_transaction", ("query",), self.commit_seconds),
                histograms("end_to_end_latency_seconds", "Per input record: commit time of its epoch - record timestamp", ("query", "source"), self.latency_seconds),
                family(GaugeMetricFamily, "watermark_timestamp_seconds", "The query's event-time watermark (Unix time; 0 before the first)", ("query",), self.watermarks),
                family(GaugeMetricFamily, "state_rows", "Rows in a stateful operator's state store", ("query", "operator"), self.state_rows),
                family(GaugeMetricFamily, "state_memory_bytes", "Memory a stateful operator's state store uses", ("query", "operator"), self.state_bytes),
                family(GaugeMetricFamily, "epoch_budget_records", "Adaptive sizing: records the next epoch may admit per source", ("query", "source"), self.epoch_budgets),
                family(CounterMetricFamily, "autoscale_decisions", "Scaling policy evaluations by action (scale-up, scale-down, hold); applied=false in local mode", ("action", "applied"), self.scaling),
                family(GaugeMetricFamily, "executors", "Executors: registered with the driver, and the target the autoscaler set", ("state",), self.executors),
            ]  # fmt: skip
        yield from families
        yield from self.operators.families(family)

    # -- internals (called with the lock held) -------------------------------------------------------------------
    @staticmethod
    def _histogram(table: dict[Labels, Histogram], key: Labels, bounds: Sequence[float]) -> Histogram:
        if key not in table:
            table[key] = Histogram(bounds)
        return table[key]

    def _count_outputs(
        self, query: str, shape: _QueryTally, record: EpochRecord, tasks: Sequence[Any]
    ) -> None:
        per_sink = [0] * len(shape.sinks)
        split = bool(tasks) and bool(shape.sinks)
        for row in tasks:
            skipped = bool(_field(row, "skipped", 0))
            self.tasks[(query, "skipped" if skipped else "committed")] += 1
            if not skipped:
                self.retries[(query,)] += max(0, int(_field(row, "attempts", 1) or 1) - 1)
                commit_ms = _field(row, "commit_ms", None)
                if commit_ms is not None:
                    self._histogram(self.commit_seconds, (query,), COMMIT_BUCKETS).observe(
                        float(commit_ms) / 1000
                    )
            # A skipped task's records are the ones an earlier attempt of the epoch committed (`RESULT_SCHEMA`): the
            # epoch's output counts once here, the earlier attempt being recorded failed or interrupted with none.
            counts = _field(row, "sink_records", None)
            if counts is None or len(counts) != len(per_sink):
                split = False
            else:
                per_sink = [a + int(b) for a, b in zip(per_sink, counts, strict=True)]
        if not split:
            sink = shape.sinks[0] if len(shape.sinks) == 1 else ALL_SINKS
            self.records_out[(query, sink)] += record.records_out
            return
        for sink, count in zip(shape.sinks, per_sink, strict=True):
            self.records_out[(query, sink)] += count
            if sink in shape.side_outputs and count:
                self.late[(query, "side-output", sink)] += count

    def _claim_reads(self, query: str, record: EpochRecord, commit_ms: int, epoch: Histogram) -> int | None:
        """Count the read reports of exactly this epoch's offset ranges (their latencies also into `epoch`);
        returns their records, or None when a range that advanced had no report."""
        known_starts = bool(record.start_offsets)
        total: int | None = 0
        for topic, partition, start, until in ranges(record.start_offsets, record.end_offsets):
            queue = self._pending.get((topic, partition, until)) or deque()
            found = next((r for _, r in queue if r.start == start or not known_starts), None)
            if found is not None:
                queue.remove(next(item for item in queue if item[1] is found))
                self._count_read(query, found, commit_ms, epoch)
                if not queue:
                    del self._pending[(topic, partition, until)]
            if found is not None and total is not None:
                total += found.records
            elif found is None and until != start:
                total = None
        return total

    def _count_read(self, query: str, report: ReadReport, commit_ms: int, epoch: Histogram) -> None:
        key = (query, report.source)
        self.records_in[key] += report.records
        self.partition_in[(query, report.source, report.topic, str(report.partition))] += report.records
        self.dead_lettered[key] += report.dead_lettered
        self.skipped[key] += report.skipped
        if not report.timestamped:
            return
        hist = self._histogram(self.latency_seconds, key, LATENCY_BUCKETS)
        waited = commit_ms - report.read_ms
        for bucket, count in report.ages.items():
            seconds = (waited + bucket_age(bucket)) / 1000
            hist.place(seconds, count)
            epoch.place(seconds, count)
        total = (report.timestamped * commit_ms - report.timestamp_sum_ms) / 1000
        hist.sum += total
        epoch.sum += total
        newest, oldest = report.timestamp_max_ms, report.timestamp_min_ms
        low = (commit_ms - newest) / 1000 if newest is not None else None
        high = (commit_ms - oldest) / 1000 if oldest is not None else None
        hist.extend(low, high)
        epoch.extend(low, high)

    def _prune(self) -> None:
        horizon = self._clock() - PENDING_TTL_S
        for key in [k for k, q in self._pending.items() if q and q[0][0] < horizon]:
            queue = self._pending[key]
            while queue and queue[0][0] < horizon:
                queue.popleft()
                self.unclaimed_reports += 1
            if not queue:
                del self._pending[key]

    def _partition_maxima(self) -> dict[Labels, int]:
        """`{(source, topic, partition): records}`: the most any query read of each source partition."""
        out: dict[Labels, int] = {}
        for (_query, *where), n in self.partition_in.items():
            key = tuple(where)
            out[key] = max(out.get(key, 0), n)
        return out

    def _distinct_in(self) -> int:
        """Records read from Kafka, each once however many queries read it (see `_partition_maxima`)."""
        return sum(self._partition_maxima().values())

    def _source_of(self, topic: str) -> str:
        if topic not in self._topic_sources:
            found = ""
            for name, config in self._sources.items():
                pattern = config.topic_pattern
                if (pattern and re.fullmatch(pattern, topic)) or topic in config.topics:
                    found = name
                    break
            self._topic_sources[topic] = found
        return self._topic_sources[topic]


def _by_second(table: Mapping[Labels, int], query: str) -> dict[str, int]:
    """`{second label: value}` of the entries of `table` (keyed `(query, x)`) that belong to `query`."""
    return {key[1]: value for key, value in sorted(table.items()) if key[0] == query}


def _field(row: Any, name: str, default: Any) -> Any:
    """A summary row's field (a pyspark Row or a mapping), or `default` when an older schema lacks it."""
    try:
        return row[name]
    except (KeyError, ValueError, IndexError, TypeError):
        return default
