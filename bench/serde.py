"""CPU of the JSON codec and the sink's record path, single-threaded, old against new in one run.

    nice -n 19 .venv/bin/python bench/serde.py --records 1000000

Builds N bids of the issue-12 shape (~145 B of JSON: auction, bidder, price, channel, url, date_time, extra) in
Arrow batches of 10,000 rows (Spark's `maxRecordsPerBatch`), then measures CPU-seconds per million records
(`time.process_time`) of:
  - encode: `JsonCodec.encode` column-wise (new) and row by row (the encoder before the plan), checking equal bytes;
    plus plain `json.dumps` and `orjson.dumps` loops over ready dicts, the floor a hand-written job pays;
  - decode: `JsonCodec.decode` of the encoded records;
  - sink: `encode_outputs` + `send_records` into a producer that drops records (serialization and the produce
    loop without librdkafka), with its batches and with one `OutRecord` per record as before.
Writes bench/results/serde.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import write_result

from ethereal_kafka.config import KafkaSinkConfig
from ethereal_kafka.connectors.kafka.encoding import (
    EncodedBatch,
    OutRecord,
    SinkOutput,
    encode_outputs,
    sink_specs,
)
from ethereal_kafka.connectors.kafka.sink import send_records
from ethereal_kafka.serde import SerdeSpec
from ethereal_kafka.serde.json_codec import JsonCodec

DDL = "auction bigint, bidder bigint, price double, channel string, url string, date_time timestamp, extra string"
BATCH = 10_000
CHANNELS = ["Google", "Facebook", "Baidu", "Apple"]


def bids(records: int) -> list[pa.StructArray]:
    """`records` bids in batches of BATCH rows, deterministic."""
    codec = SerdeSpec("value", "json", spark_ddl=DDL).build()
    start = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    batches = []
    for first in range(0, records, BATCH):
        rows = range(first, min(records, first + BATCH))
        batches.append(
            pa.StructArray.from_arrays(
                [
                    pa.array([1000 + i % 9973 for i in rows], pa.int64()),
                    pa.array([2000 + i % 7919 for i in rows], pa.int64()),
                    pa.array([round(10 + (i * 37 % 100000) / 100, 2) for i in rows], pa.float64()),
                    pa.array([CHANNELS[i % 4] for i in rows]),
                    pa.array([f"https://nexmark.io/{i % 613:x}/i.htm" for i in rows]),
                    pa.array(
                        [start + dt.timedelta(milliseconds=i) for i in rows], pa.timestamp("us", tz="UTC")
                    ),
                    pa.array([f"x{i % 1000:04d}" for i in rows]),
                ],
                fields=list(codec.arrow_type()),
            )
        )
    return batches


class RowByRowJsonCodec(JsonCodec):
    """The codec with the column-wise plan switched off: every struct batch is encoded row by row."""

    def _encode_planned(self, values: pa.StructArray) -> None:
        return None


class DroppingProducer:
    """Accepts every record and keeps nothing: the produce loop's cost without librdkafka."""

    def produce(
        self, topic: str, value: bytes | None = None, key: bytes | None = None, **kwargs: Any
    ) -> None:
        pass

    def poll(self, timeout: float) -> int:
        return 0


def per_record(batches: Iterable[EncodedBatch]) -> Iterator[OutRecord]:
    """The sink's records one object each, as the sink produced them before `EncodedBatch`."""
    for batch in batches:
        for key, value in zip(batch.keys, batch.values, strict=True):
            yield OutRecord(batch.topic, None, key, value, None)  # type: ignore[arg-type]


def cpu_per_million(records: int, work: Callable[[], object]) -> tuple[float, object]:
    started = time.process_time()
    result = work()
    return (time.process_time() - started) * 1_000_000 / records, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    args = parser.parse_args()
    batches = bids(args.records)
    spec = SerdeSpec("value", "json", spark_ddl=DDL)
    new, old = JsonCodec(spec), RowByRowJsonCodec(spec)
    figures: dict[str, float] = {}

    figures["encode_new"], encoded = cpu_per_million(
        args.records, lambda: [new.encode(b, "t") for b in batches]
    )
    figures["encode_row_by_row"], reference = cpu_per_million(
        args.records, lambda: [old.encode(b, "t") for b in batches]
    )
    if encoded != reference:
        raise SystemExit("the column-wise encoder wrote different bytes")
    flat = [record for part in encoded for record in part]  # type: ignore[attr-defined]
    size = sum(len(r) for r in flat) / len(flat)
    dicts = [json.loads(r) for r in flat[:200_000]]
    share = args.records / len(dicts)
    plain, _ = cpu_per_million(
        args.records,
        lambda: [json.dumps(d, separators=(",", ":"), ensure_ascii=False).encode() for d in dicts],
    )
    figures["json_dumps_loop"] = plain / share
    fast, _ = cpu_per_million(args.records, lambda: [orjson.dumps(d) for d in dicts])
    figures["orjson_dumps_loop"] = fast / share

    raw = [pa.array(part, pa.binary()) for part in encoded]  # type: ignore[attr-defined]
    positions = list(range(BATCH))
    figures["decode"], _ = cpu_per_million(
        args.records,
        lambda: [new.decode(r, ["t"] * len(r), [0] * len(r), positions[: len(r)]) for r in raw],
    )

    config = KafkaSinkConfig.from_properties(
        {"bootstrap.servers": "127.0.0.1:9", "topic": "out", "value.column": "*", "key.column": "-"}
    )
    outputs = [SinkOutput(config, sink_specs(config, [])[0], spec)]
    tables = [pa.RecordBatch.from_struct_array(b) for b in batches]
    figures["sink_encode_and_produce"], sent = cpu_per_million(
        args.records,
        lambda: send_records(DroppingProducer(), encode_outputs(outputs, tables), None),  # type: ignore[arg-type]
    )
    assert sent == args.records
    figures["sink_one_object_per_record"], sent = cpu_per_million(
        args.records,
        lambda: send_records(DroppingProducer(), per_record(encode_outputs(outputs, tables)), None),  # type: ignore[arg-type]
    )
    assert sent == args.records

    for name, value in figures.items():
        print(f"{name:>26}: {value:6.2f} CPU-s / 1M records")
    print(f"{'mean record':>26}: {size:6.1f} B")
    path = write_result("serde", {"records": args.records, "record_bytes": size, "cpu_s_per_1m": figures})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
