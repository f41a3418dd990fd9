"""CPU of the JSON codec and the sink's record path, single-threaded, old against new in one run.

    nice -n 19 .venv/bin/python bench/serde.py --records 1000000

Builds N bids of the issue-12 shape (~145 B of JSON: auction, bidder, price, channel, url, date_time, extra) in
Arrow batches of 10,000 rows (Spark's `maxRecordsPerBatch`), then measures CPU-seconds per million records
(`time.process_time`) of:
  - encode: `JsonCodec.encode` now (new) and at `--baseline` (old: its module read from git), checking equal bytes;
    plus plain `json.dumps` and `orjson.dumps` loops over ready dicts, what a hand-written job pays;
  - decode: `JsonCodec.decode` of the encoded records, new and old, checking equal values; and the same with a
    `date` field added (on a fifth of the records), which sends every record down the record-by-record path;
  - sink: `encode_outputs` + `send_records` into a producer that drops records (serialization and the produce
    loop without librdkafka), with its batches and with one `OutRecord` per record as before.
Writes bench/results/serde.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import time
import types
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
from ethereal_kafka.serde import SerdeSpec, build_codec
from ethereal_kafka.serde.json_codec import JsonCodec

DDL = "auction bigint, bidder bigint, price double, channel string, url string, date_time timestamp, extra string"
BATCH = 10_000
REPO = Path(__file__).resolve().parents[1]
#: main before the vectorised codec (issue 12): the "old" figures.
BASELINE = "cde144e"
CHANNELS = ["Google", "Facebook", "Baidu", "Apple"]


def bids(records: int) -> list[pa.StructArray]:
    """`records` bids in batches of BATCH rows, deterministic."""
    codec = build_codec(SerdeSpec("value", "json", spark_ddl=DDL))
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


def baseline_codec(revision: str, spec: SerdeSpec) -> Any:
    """`JsonCodec` as it was at `revision` (its module read from git; the rest of the package is today's), or None
    when git cannot show it (e.g. a shallow clone)."""
    shown = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{revision}:ethereal_kafka/serde/json_codec.py"],
        capture_output=True,
        text=True,
        check=False,
    )
    if shown.returncode != 0:
        print(f"no baseline: git show {revision} failed ({shown.stderr.strip()})")
        return None
    module = types.ModuleType("baseline_json_codec")
    exec(compile(shown.stdout, f"{revision}:json_codec.py", "exec"), module.__dict__)
    return module.JsonCodec(spec)


def decode_all(codec: Any, raw: list[pa.Array]) -> list[Any]:
    positions = list(range(BATCH))
    return [codec.decode(r, ["t"] * len(r), [0] * len(r), positions[: len(r)]) for r in raw]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument(
        "--baseline",
        default=BASELINE,
        help="git revision whose JsonCodec is the 'old' column (default: %(default)s)",
    )
    args = parser.parse_args()
    batches = bids(args.records)
    spec = SerdeSpec("value", "json", spark_ddl=DDL)
    new, old = JsonCodec(spec), baseline_codec(args.baseline, spec)
    figures: dict[str, float] = {}

    figures["encode_new"], encoded = cpu_per_million(
        args.records, lambda: [new.encode(b, "t") for b in batches]
    )
    if old is not None:
        figures["encode_old"], reference = cpu_per_million(
            args.records, lambda: [old.encode(b, "t") for b in batches]
        )
        if encoded != reference:
            raise SystemExit("the new encoder wrote different bytes")
    flat = [record for part in encoded for record in part]  # type: ignore[attr-defined]
    size = sum(len(r) for r in flat) / len(flat)
    dicts = [json.loads(r) for r in flat[:200_000]]
    figures["json_dumps_loop"], _ = cpu_per_million(
        len(dicts), lambda: [json.dumps(d, separators=(",", ":"), ensure_ascii=False).encode() for d in dicts]
    )
    figures["orjson_dumps_loop"], _ = cpu_per_million(len(dicts), lambda: [orjson.dumps(d) for d in dicts])

    raw = [pa.array(part, pa.binary()) for part in encoded]  # type: ignore[attr-defined]
    figures["decode_new"], decoded = cpu_per_million(args.records, lambda: decode_all(new, raw))
    if old is not None:
        figures["decode_old"], expected = cpu_per_million(args.records, lambda: decode_all(old, raw))
        if [d.values for d in decoded] != [d.values for d in expected]:  # type: ignore[attr-defined]
            raise SystemExit("the new decoder read different values")
    # A `date` field keeps every record off Arrow's bulk reader: the record-by-record path.
    dated_spec = SerdeSpec("value", "json", spark_ddl=DDL + ", day date")
    dated = [
        pa.array([r[:-1] + b',"day":"2026-11-01"}' for r in part], pa.binary())
        for part in encoded[: max(1, len(encoded) // 5)]  # type: ignore[index]
    ]
    dated_records = sum(len(d) for d in dated)
    dated_new = JsonCodec(dated_spec)
    figures["decode_record_by_record_new"], decoded = cpu_per_million(
        dated_records, lambda: decode_all(dated_new, dated)
    )
    dated_old = baseline_codec(args.baseline, dated_spec)
    if dated_old is not None:
        figures["decode_record_by_record_old"], expected = cpu_per_million(
            dated_records, lambda: decode_all(dated_old, dated)
        )
        if [d.values for d in decoded] != [d.values for d in expected]:  # type: ignore[attr-defined]
            raise SystemExit("the new record-by-record decoder read different values")

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
