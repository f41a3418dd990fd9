"""The consumer lag Spark's progress reports leave out, filled in from Kafka.

The metrics and the progress line take each input partition's lag from Spark's progress reports (`latestOffset -
endOffset`). Spark leaves `latestOffset` out of the report of a batch it recovered from its offset log (the epoch a
restart runs again: Spark plans nothing for it, so it asks the source nothing), and an idle query sends no report at
all. A job restarted after a crash that ran its last epoch again and then had no new input showed `lag ?` after
that epoch committed, for as long as no input came (issue 24).

`LagFill` hears every committed epoch (a coordinator epoch listener, called on the coordinator's thread: it only
notes the epoch). On its own thread, `WAIT_S` later, it looks whether Spark's report gave the lag of the epoch's
partitions by then (it normally does); for those it did not, it asks the source's cluster for their
end offsets, one request per source (the last stable offsets for a read_committed source, as the source plans
with), and records `end offset - epoch end offset`. A report that comes later replaces the figure.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from ethereal_kafka.config.connectors import KafkaSourceConfig
from ethereal_kafka.connectors.kafka.offsets import TopicPartitionKey

log = logging.getLogger(__name__)

#: How long after an epoch commits Spark's progress report is given to bring the lag (it comes within a second
#: of the commit; asking Kafka when it is late costs one request).
WAIT_S = 1.0
#: How often the filler's thread looks for epochs whose wait is over.
POLL_S = 0.5

EndOffsets = Callable[[KafkaSourceConfig, list[TopicPartitionKey]], dict[TopicPartitionKey, int]]


class LagBook(Protocol):
    """What `LagFill` needs of the metrics (`runtime.metrics.JobMetrics`)."""

    def missing_lag(self, query: str, partitions: Iterable[TopicPartitionKey]) -> list[TopicPartitionKey]: ...

    def fill_lag(self, query: str, lags: Mapping[TopicPartitionKey, int]) -> None: ...


class LagFill:
    """Fills in the lag of committed epochs that Spark did not report (see the module docstring).

    Args:
        book: The metrics that keep the lag.
        end_offsets: Returns a source's end offsets for some of its partitions (default: one ListOffsets request
            through `connectors.kafka.positions.PositionResolver`, bounded retries).
        clock: `time.monotonic` or a test's.
    """

    def __init__(
        self,
        book: LagBook,
        end_offsets: EndOffsets | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._book = book
        self._end_offsets = end_offsets if end_offsets is not None else self._resolve
        self._clock = clock
        self._sources: dict[str, list[KafkaSourceConfig]] = {}
        self._pending: list[tuple[float, str, dict[TopicPartitionKey, int]]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._resolvers: dict[str, Any] = {}

    def watch(self, query: str, sources: Sequence[KafkaSourceConfig]) -> None:
        """Declare the sources `query` reads (before its epochs run)."""
        self._sources[query] = list(sources)

    def on_epoch(self, query: str, record: Any, _rows: Any = None) -> None:
        """Note a committed epoch of `query` (a coordinator epoch listener: `(query, EpochRecord, rows)`); returns
        at once."""
        if record.outcome != "committed" or not record.end_offsets:
            return
        ends = {
            (str(topic), int(partition)): int(offset)
            for topic, parts in record.end_offsets.items()
            for partition, offset in parts.items()
        }
        with self._lock:
            self._pending.append((self._clock() + WAIT_S, query, ends))

    def fill_due(self) -> None:
        """Fill in the lag of every noted epoch whose wait is over (the thread's step; tests call it directly).
        Never raises: the lag is for people, and a cluster that does not answer leaves it unknown."""
        now = self._clock()
        with self._lock:
            due = [item for item in self._pending if item[0] <= now]
            self._pending = [item for item in self._pending if item[0] > now]
        for _at, query, ends in due:
            missing = self._book.missing_lag(query, ends)
            if not missing:
                continue
            for source, partitions in self._by_source(query, missing):
                try:
                    latest = self._end_offsets(source, partitions)
                except Exception:
                    log.debug("lag of %s not filled in", source.name, exc_info=True)
                    continue
                self._book.fill_lag(query, {tp: latest[tp] - ends[tp] for tp in partitions if tp in latest})

    def start(self) -> None:
        """Start the filler's daemon thread (idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="ethereal-kafka-lag-fill", daemon=True)
            self._thread.start()

    def close(self) -> None:
        """Stop the thread and release the clients; nothing is filled in afterwards."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        for resolver in self._resolvers.values():
            resolver.close()
        self._resolvers.clear()

    def _run(self) -> None:
        while not self._stop.wait(POLL_S):
            self.fill_due()

    def _by_source(
        self, query: str, partitions: list[TopicPartitionKey]
    ) -> list[tuple[KafkaSourceConfig, list[TopicPartitionKey]]]:
        """`partitions` grouped by the source of `query` that reads them (a partition no source reads is left out)."""
        out: dict[str, tuple[KafkaSourceConfig, list[TopicPartitionKey]]] = {}
        for tp in partitions:
            for source in self._sources.get(query, ()):
                pattern = source.topic_pattern
                if tp[0] in source.topics or (pattern and re.fullmatch(pattern, tp[0])):
                    out.setdefault(source.name, (source, []))[1].append(tp)
                    break
        return list(out.values())

    def _resolve(
        self, source: KafkaSourceConfig, partitions: list[TopicPartitionKey]
    ) -> dict[TopicPartitionKey, int]:
        from ethereal_kafka.connectors.kafka.positions import PositionResolver

        resolver = self._resolvers.get(source.name)
        if resolver is None:
            resolver = self._resolvers[source.name] = PositionResolver(source)
        latest: dict[TopicPartitionKey, int] = resolver.latest(partitions)
        return latest
