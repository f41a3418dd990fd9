"""Classify a streaming query for the exactly-once protocol: partition-preserving or shuffling, stateful or not.

Partition-preserving (no exchange, no state, one source): Spark partition i of every epoch is input partition i,
so each sink task commits its input offsets and its output in one transaction. Anything else shuffles: sink tasks
commit progress markers, and the coordinator commits the input offsets once every task has committed.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ethereal_kafka.plan.query import Layout

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: Logical operators that keep state between epochs.
_STATEFUL = re.compile(
    r"\b(Aggregate|Deduplicate\w*|Join|FlatMapGroupsWithState|TransformWithState\w*|Window|"
    r"FlatMapGroupsInPandasWithState|SessionWindow\w*|EventTimeWatermark)\b"
)
#: Logical operators that move rows between partitions.
_SHUFFLE = re.compile(r"\b(Repartition\w*|Sort|Distinct|Union|Expand|Aggregate|Join|Window)\b")
_SOURCE = re.compile(
    r"^(StreamingRelationV2|StreamingRelation|StreamingDataSourceV2\w*|StreamingExecutionRelation)$"
)


#: Logical operators whose state only their own code bounds (the framework's operators run on transformWithState,
#: which Spark runs only on the RocksDB state store).
_OWN_STATE = re.compile(r"\b(TransformWithState\w*|FlatMapGroups\w*WithState)\b")
#: An attribute carrying an event-time watermark in an analyzed plan (`window#7-T1000ms`).
_WATERMARKED = re.compile(r"#\d+-T\d+ms")


def _bounded_by_watermark(operator: str) -> bool:
    """Whether a Spark-native stateful operator of an analyzed plan (one line, tree marks stripped) evicts its
    state as the watermark passes: an aggregate grouped by a watermarked column (a window, a session window, the
    event time), a deduplication keyed by one (or within the watermark), a join whose condition names one (a time
    range, a window). Other operators keep no state or are checked elsewhere."""
    if operator.startswith("Aggregate ["):
        grouping = operator[len("Aggregate [") :].split("], [", 1)[0]
        return bool(_WATERMARKED.search(grouping))
    if operator.startswith(("Deduplicate [", "Join ")):
        return bool(_WATERMARKED.search(operator))
    return True


def _state_store(plan: str, operators: list[str]) -> str:
    """The state store `state.backend=auto` gives a stateful query with this analyzed plan (a `state.backend`
    choice): `memory` when every stateful operator is Spark's own and the watermark bounds its state (windows and
    session windows, joins with a time condition, deduplication within the watermark), `rocksdb` otherwise (the
    framework's operators, running aggregates, joins and deduplication on keys alone, any query without a
    watermark)."""
    if _OWN_STATE.search(plan) or "EventTimeWatermark" not in plan:
        return "rocksdb"
    return "memory" if all(_bounded_by_watermark(op) for op in operators) else "rocksdb"


def output_mode(stateful: bool, watermarked: bool, requested: str = "auto") -> str:
    """Spark output mode: `auto` → append for stateless or event-time (watermarked) queries, whose results are final
    when emitted; update for other stateful queries (running aggregates)."""
    if requested != "auto":
        return requested
    return "update" if stateful and not watermarked else "append"


def classify(frame: DataFrame) -> tuple[Layout, bool, bool, str]:
    """Inspect the streaming DataFrame's analyzed logical plan (no data is read): its layout, whether it keeps state
    between epochs, whether it declares an event-time watermark, and the state store `state.backend=auto` gives it
    (`rocksdb` or `memory`, see `_state_store`)."""
    plan = str(frame._jdf.queryExecution().analyzed().toString())
    operators = [line.strip(" :+-~") for line in plan.splitlines()]
    names = [op.split(" ", 1)[0].lstrip("~") for op in operators if op]
    joined = " ".join(n for n in names if n != "EventTimeWatermark")
    stateful = bool(_STATEFUL.search(joined))
    shuffles = bool(_SHUFFLE.search(joined))
    sources = max(1, sum(1 for n in names if _SOURCE.match(n)))
    single = not stateful and not shuffles and sources == 1
    layout = Layout.PARTITION_PRESERVING if single else Layout.SHUFFLING
    return layout, stateful, "EventTimeWatermark" in names, _state_store(plan, operators)


def sources_read(frame: DataFrame) -> set[str]:
    """The names of the ethereal-kafka sources a streaming DataFrame reads (the `name` option of each source
    relation in its analyzed plan); no data is read."""
    leaves = frame._jdf.queryExecution().analyzed().collectLeaves()
    names = set()
    for i in range(leaves.size()):
        leaf = leaves.apply(i)
        try:
            options = leaf.extraOptions()
        except Exception:  # a leaf that is not a streaming source relation (a static table, a local relation)
            continue
        name = options.get("name")
        if name is not None:
            names.add(str(name))
    return names
