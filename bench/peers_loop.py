"""The hand-written peer of bench/peers.py: a confluent-kafka consume-transform-produce loop, one process per input
partition.

    .venv/bin/python bench/peers_loop.py --bootstrap HOST:PORT --input IN --output OUT --group G --partitions 2

Run without `--partition`, it starts one worker process per input partition (this same file with `--partition P`)
and waits for them; its exit code is the first failing worker's. Each worker reads its partition from the group's
committed offset (earliest for a new group) up to the end offset it saw at start, maps each JSON record (`--workload
map`: `price * 0.908`; `passthrough`: parse and serialise unchanged) with `json` or `orjson`, and writes it to the
same partition of the output topic with the same key.

- `exactly-once`: a transactional producer per worker (`transactional.id` = `<group>-<partition>`); every
  `--commit-records` records or `--commit-ms`, whichever comes first, the input offset goes into the transaction
  (`send_offsets_to_transaction`) and the transaction commits.
- `at-least-once`: an idempotent producer; at the same points it flushes, then commits the input offset.

With `--follow` (bench/latency.py) a worker does not stop at the end offset it saw at start: it keeps reading what
arrives until SIGTERM (the launcher passes it on to its workers), then commits what it holds and exits 0.

Only confluent-kafka and the JSON library are imported, as a hand-written service would.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from peers_workload import GUARANTEES, map_bid, peer_parser


def codec(library: str) -> tuple[Callable[[bytes], Any], Callable[[Any], bytes]]:
    """`(loads, dumps)` of the chosen JSON library; both work on bytes."""
    if library == "orjson":
        import orjson

        return orjson.loads, orjson.dumps
    import json

    def dumps(value: Any) -> bytes:
        return json.dumps(value, separators=(",", ":")).encode()

    return json.loads, dumps


def transform(workload: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The per-record function of the workload."""
    return map_bid if workload == "map" else lambda bid: bid


class Worker:
    """Drains one input partition to the output topic; `run()` returns when the end offset seen at start is
    committed (in the last transaction, or by the last offset commit)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.partition: int = args.partition
        self.transactional = args.guarantee == "exactly-once"
        self.loads, self.dumps = codec(args.json)
        self.apply = transform(args.workload)
        self.consumer = Consumer(
            {
                "bootstrap.servers": args.bootstrap,
                "group.id": args.group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
            }
        )
        settings: dict[str, Any] = {"bootstrap.servers": args.bootstrap, "linger.ms": 5}
        if self.transactional:
            settings["transactional.id"] = f"{args.group}-{self.partition}"
        else:
            settings["enable.idempotence"] = True
        self.producer = Producer(settings)
        self.stopping = False
        if args.follow:
            signal.signal(signal.SIGTERM, self._stop)

    def _stop(self, *_: object) -> None:
        self.stopping = True

    def run(self) -> None:
        """Consume, transform, produce and commit until the partition's end offset at start (with `--follow`:
        until SIGTERM)."""
        source = TopicPartition(self.args.input, self.partition)
        end = self.consumer.get_watermark_offsets(source, timeout=30)[1]
        if self.args.follow:
            end = 2**62  # no end: `self.stopping` ends the loop
        self.consumer.assign([source])
        if self.transactional:
            self.producer.init_transactions(30)
            self.producer.begin_transaction()
        position = self.consumer.committed([source], timeout=30)[0].offset
        pending, opened, closed = 0, time.monotonic(), False
        while position < end and not self.stopping:
            messages = self.consumer.consume(5000, timeout=0.05)
            for message in messages:
                if message.error():
                    raise KafkaException(message.error())
                self.produce(message.key(), self.dumps(self.apply(self.loads(message.value() or b""))))
            if messages:
                position = (messages[-1].offset() or 0) + 1
                pending += len(messages)
            self.producer.poll(0)
            due = (
                pending >= self.args.commit_records or time.monotonic() - opened >= self.args.commit_ms / 1000
            )
            if pending and (due or position >= end or self.stopping):
                closed = position >= end or self.stopping
                self.commit(position, last=closed)
                pending, opened = 0, time.monotonic()
        if self.transactional and not closed:
            self.producer.abort_transaction(30)  # nothing was left to read: the open transaction is empty
        self.consumer.close()

    def produce(self, key: bytes | None, value: bytes) -> None:
        """Produce one record to the output partition, serving delivery reports while the queue is full."""
        while True:
            try:
                self.producer.produce(self.args.output, value, key, partition=self.partition)
                return
            except BufferError:
                self.producer.poll(0.05)

    def commit(self, position: int, *, last: bool) -> None:
        """Commit the output so far with the input position (in the transaction, or after the flush)."""
        offsets = [TopicPartition(self.args.input, self.partition, position)]
        if self.transactional:
            self.producer.send_offsets_to_transaction(offsets, self.consumer.consumer_group_metadata(), 30)
            self.producer.commit_transaction(60)
            if not last:
                self.producer.begin_transaction()
        else:
            self.producer.flush(60)
            self.consumer.commit(offsets=offsets, asynchronous=False)


def launch(args: argparse.Namespace) -> int:
    """Start one worker process per partition and wait for all; the first non-zero exit code, or 0."""
    workers = [
        subprocess.Popen([sys.executable, __file__, *sys.argv[1:], "--partition", str(p)])
        for p in range(args.partitions)
    ]

    def stop(*_: object) -> None:
        for worker in workers:
            worker.terminate()

    signal.signal(signal.SIGTERM, stop)
    codes = [worker.wait() for worker in workers]
    return next((code for code in codes if code), 0)


def main() -> None:
    parser = peer_parser(__doc__)
    parser.add_argument("--group", required=True)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument(
        "--partition", type=int, help="run the worker of this partition (else: start them all)"
    )
    parser.add_argument("--json", choices=["json", "orjson"], default="json")
    parser.add_argument("--guarantee", choices=GUARANTEES, default="exactly-once")
    parser.add_argument("--commit-records", type=int, default=10_000)
    parser.add_argument("--commit-ms", type=int, default=100)
    parser.add_argument(
        "--follow",
        action="store_true",
        help="keep reading new input until SIGTERM (else: stop at the end offset)",
    )
    args = parser.parse_args()
    if args.partition is None:
        sys.exit(launch(args))
    Worker(args).run()


if __name__ == "__main__":
    main()
