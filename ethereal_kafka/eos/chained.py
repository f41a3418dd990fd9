"""A chained query's epoch: each source read task reads its range, runs the query's chained function and commits
the output with its marker, in one Python worker (`plan.chaining`).

Spark sees a chained query as its source alone, whose rows are the sink tasks' summary rows (`RESULT_SCHEMA`):
the query is `source -> foreachBatch`, with nothing between. The epoch writer hands the epoch's write
(`EpochWrite`, the same one an unchained sink task gets) and the query's chained function to the read tasks through
a Spark local property of the thread that runs the epoch (`hand_over`), set only while the epoch's job runs; a
read task of a chained query without it fails instead of reading. Read task i is sink task i: Spark plans one input
partition per Kafka partition of the epoch, in the order of the epoch's slots, and the task checks that its range
is its slot's before it writes anything. Everything after the read is phase one as an unchained task does it
(`TransactionalTask`: fence, owner, marker, write; dead letters of the read and of user functions committed in
the same transaction), so the protocol, its markers and its kill tests are the same; only the rows never leave
the worker.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import pickle
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa

from ethereal_kafka.connectors.kafka.source import KafkaInputPartition
from ethereal_kafka.eos.errors import TransactionError
from ethereal_kafka.eos.phase_one import TransactionalTask, count_rows, summary_batch
from ethereal_kafka.eos.task_plan import EpochWrite

#: The source option that makes a source read a chained query (its value: the query's name).
CHAINED_OPTION = "ethereal.chained.query"

#: A chained function (`plan.chaining.ChainedPipeline`): the read's batches in, the sink's rows out, each step's
#: rows out added to the list it is given.
Chain = Callable[[Iterable[pa.RecordBatch], list[int]], Iterator[pa.RecordBatch]]

_loaded: dict[str, Chain] = {}  # per worker: the last chained function unpickled, by its property's digest


def property_keys(query: str) -> tuple[str, str, str]:
    """The local properties that carry a chained query's epoch write, its chained function and the environment of
    the Python functions Spark makes on the driver (`SparkContext.environment`)."""
    prefix = f"ethereal_kafka.chained.{query}"
    return f"{prefix}.write", f"{prefix}.chain", f"{prefix}.environment"


def pickled_chain(chain: Any) -> str:
    """A chained function as a local property's text (pickled once per run by the epoch writer)."""
    from pyspark import cloudpickle

    return base64.b64encode(cloudpickle.dumps(chain)).decode("ascii")


def hand_over(context: Any, query: str, write: EpochWrite | None, chain: str | None) -> None:
    """Set (or, with None, clear) the epoch's write and chained function for the read tasks of the jobs this
    thread runs next (`context`: the SparkContext). The context's `environment`, which Spark gives the workers of
    the Python functions it makes (each set of variables its own workers), goes with them: the source's read
    workers do not get it, so the chained task sets it for its run (`_environment`)."""
    write_key, chain_key, env_key = property_keys(query)
    text = None if write is None else base64.b64encode(pickle.dumps(write)).decode("ascii")
    env = None if write is None else json.dumps(dict(context.environment or {}))
    context.setLocalProperty(write_key, text)
    context.setLocalProperty(chain_key, chain)
    context.setLocalProperty(env_key, env)


@contextlib.contextmanager
def _environment(query: str) -> Iterator[None]:
    """The handed-over environment (see `hand_over`) for the `with` block: variables set, `PYTHONPATH`'s folders
    first on `sys.path`; all as before afterwards (a worker serves other queries' tasks too)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    text = context.getLocalProperty(property_keys(query)[2]) if context is not None else None
    env: dict[str, str] = json.loads(text) if text else {}
    saved = {key: os.environ.get(key) for key in env}
    added = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
    os.environ.update(env)
    sys.path[:0] = added
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old
        for folder in added:
            with contextlib.suppress(ValueError):
                sys.path.remove(folder)


def _received(query: str) -> tuple[EpochWrite, Chain, int, int]:
    """The epoch's write and chained function this read task was handed, its partition and its attempt id.

    Raises:
        TransactionError: the task runs outside an epoch's write (nothing was handed over).
    """
    from pyspark import TaskContext

    context = TaskContext.get()
    write_key, chain_key, _ = property_keys(query)
    written = context.getLocalProperty(write_key) if context is not None else None
    chained = context.getLocalProperty(chain_key) if context is not None else None
    if context is None or not written or not chained:
        raise TransactionError(
            f"query {query}: a chained read task ran outside its epoch's write (no epoch was handed over); it "
            "writes nothing"
        )
    write = pickle.loads(base64.b64decode(written))
    digest = hashlib.sha256(chained.encode("ascii")).hexdigest()
    chain = _loaded.get(digest)
    if chain is None:
        chain = pickle.loads(base64.b64decode(chained))
        _loaded.clear()
        _loaded[digest] = chain
    return write, chain, context.partitionId(), context.taskAttemptId()


def chained_task(
    query: str, partition: KafkaInputPartition, read: Iterable[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """The read task of a chained query: `read` (the range's batches, as the source decodes them) through the
    chained function, committed exactly once as sink task i (see the module docstring); yields its summary row.

    Raises:
        TransactionError: nothing was handed over, or the range is not its slot's (Spark planned the epoch
            otherwise than its offset log says): nothing is written.
    """
    with _environment(query):
        yield from _task(query, partition, read)


def _task(
    query: str, partition: KafkaInputPartition, read: Iterable[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    write, chain, index, attempt = _received(query)
    if 0 <= index < len(write.slots):
        slot = write.slots[index]
        planned = (slot.marker_topic, slot.marker_partition, slot.marker_offset)
        if planned != (partition.topic, partition.partition, partition.until):
            raise TransactionError(
                f"query {query}, epoch {write.epoch}: read task {index} was planned over "
                f"{partition.topic}[{partition.partition}] up to {partition.until}, but the epoch's slot {index} "
                f"is {slot.marker_topic}[{slot.marker_partition}] up to {slot.marker_offset}; it writes nothing"
            )
    per_sink = [0] * len(write.outputs)
    steps: list[int] = []
    task = TransactionalTask(write, index, attempt)
    committed = task.commit(count_rows(chain(read, steps), per_sink))
    yield summary_batch(index, task, committed, per_sink, steps)
