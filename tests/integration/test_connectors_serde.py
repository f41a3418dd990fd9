"""Source → Spark → sink with JSON and Avro serde, poison records under each policy, sink routing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ethereal_kafka.config import KafkaSinkConfig, KafkaSourceConfig
from ethereal_kafka.connectors.kafka.sink import KafkaSink
from ethereal_kafka.connectors.kafka.topics import produce, read_committed
from ethereal_kafka.serde import build_codec, pin_schema
from ethereal_kafka.testing.cluster import KafkaCluster
from ethereal_kafka.testing.plugin import TopicFactory
from ethereal_kafka.testing.spark_io import read_source_available

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

REPO = Path(__file__).resolve().parents[2]
ORDER_DDL = "order_id bigint, customer string, amount double"


def _orders(n: int) -> list[dict[str, object]]:
    return [{"order_id": i, "customer": f"c{i % 4}", "amount": float(i % 50) + 0.25} for i in range(n)]


def _run_to_sink(
    spark: SparkSession,
    source: dict[str, str],
    sink: dict[str, str],
    transform: object,
    checkpoint: Path,
) -> None:
    frame: DataFrame = spark.readStream.format("ethereal-kafka").options(**source).load()
    out = transform(frame)  # type: ignore[operator]
    query = (
        out.writeStream.foreachBatch(KafkaSink(KafkaSinkConfig.from_properties(sink)))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    if query.exception() is not None:
        raise query.exception()  # type: ignore[misc]


def test_json_round_trip_with_typed_columns(
    spark: SparkSession, kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    bs = kafka_cluster.bootstrap
    src, dst = topic_factory(partitions=2), topic_factory(partitions=2)
    orders = _orders(200)
    produce(bs, src, [(str(o["customer"]).encode(), json.dumps(o).encode()) for o in orders])
    source = {
        "bootstrap.servers": bs,
        "topics": src,
        "starting.offsets": "earliest",
        "key.format": "string",
        "value.format": "json",
        "value.schema": ORDER_DDL,
    }
    sink = {
        "bootstrap.servers": bs,
        "topic": dst,
        "key.column": "key",
        "value.format": "json",
        "value.column": "*",
    }

    def transform(frame: DataFrame) -> DataFrame:
        from pyspark.sql import functions as F

        assert dict(frame.dtypes)["amount"] == "double" and dict(frame.dtypes)["key"] == "string"
        return frame.where(F.col("amount") > 10).select(
            "key", "order_id", "customer", (F.col("amount") * 2).alias("doubled")
        )

    _run_to_sink(spark, source, sink, transform, tmp_path / "ckpt")
    got = read_committed(bs, dst)
    want = {o["order_id"]: float(o["amount"]) * 2 for o in orders if float(o["amount"]) > 10}  # type: ignore[arg-type]
    decoded = [json.loads(r.value or b"") for r in got]
    assert {d["order_id"]: d["doubled"] for d in decoded} == want
    assert len(decoded) == len(want)
    assert all(r.key == f"c{json.loads(r.value or b'')['order_id'] % 4}".encode() for r in got)


def test_avro_round_trip_with_local_schema(
    spark: SparkSession, kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    from ethereal_kafka.serde import SerdeSpec

    bs = kafka_cluster.bootstrap
    src, dst = topic_factory(partitions=2), topic_factory()
    avsc = str(REPO / "serde" / "order.avsc")
    codec = build_codec(SerdeSpec(field="value", format="avro", schema_file=avsc))
    import pyarrow as pa

    orders = _orders(150)
    encoded = codec.encode(pa.array(orders, codec.arrow_type()), src)
    produce(bs, src, [(None, v) for v in encoded])
    source = {
        "bootstrap.servers": bs,
        "topics": src,
        "starting.offsets": "earliest",
        "value.format": "avro",
        "value.schema.file": avsc,
    }
    sink = {
        "bootstrap.servers": bs,
        "topic": dst,
        "value.format": "avro",
        "value.schema.file": avsc,
        "value.column": "*",
    }
    _run_to_sink(spark, source, sink, lambda f: f.select("order_id", "customer", "amount"), tmp_path / "ckpt")
    got = read_committed(bs, dst)
    back = codec.decode(
        pa.array([r.value for r in got], pa.binary()), [dst] * len(got), [0] * len(got), list(range(len(got)))
    )
    assert back.errors == {}
    assert sorted(back.values.to_pylist(), key=lambda o: o["order_id"]) == orders


def _poison_input(bs: str, topic: str) -> tuple[list[int], list[int]]:
    """Produce good and bad JSON on partition 0; returns (good offsets, bad offsets)."""
    values: list[bytes] = []
    bad: list[int] = []
    for i in range(120):
        if i % 10 == 3:
            values.append(b"{not json")
            bad.append(i)
        elif i % 10 == 7:
            values.append(json.dumps({"order_id": "not-a-number", "customer": "x", "amount": 1}).encode())
            bad.append(i)
        else:
            values.append(json.dumps({"order_id": i, "customer": "c", "amount": 1.5}).encode())
    produce(bs, topic, [(b"k%d" % i, v) for i, v in enumerate(values)], partition=0)
    return [i for i in range(120) if i not in bad], bad


def test_poison_records_go_to_the_dead_letter_topic_and_nothing_is_lost(
    spark: SparkSession, kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    bs = kafka_cluster.bootstrap
    src, dst, dlq = topic_factory(), topic_factory(), topic_factory()
    good, bad = _poison_input(bs, src)
    source = {
        "bootstrap.servers": bs,
        "topics": src,
        "starting.offsets": "earliest",
        "value.format": "json",
        "value.schema": ORDER_DDL,
        "on.error": "dlq",
        "dlq.topic": dlq,
        "max.records.per.epoch": "50",
    }
    sink = {"bootstrap.servers": bs, "topic": dst, "value.format": "json", "value.column": "*"}
    _run_to_sink(spark, source, sink, lambda f: f.select("offset", "order_id"), tmp_path / "ckpt")
    out = read_committed(bs, dst)
    dead = read_committed(bs, dlq)
    out_offsets = sorted(json.loads(r.value or b"")["offset"] for r in out)
    dead_offsets = sorted(int(dict(r.headers)["ethereal.source.offset"] or b"-1") for r in dead)
    assert out_offsets == good
    assert dead_offsets == bad
    assert len(out) + len(dead) == 120, "every input offset is in the output or in the dead-letter topic"
    first = next(r for r in dead if dict(r.headers)["ethereal.source.offset"] == b"3")
    headers = dict(first.headers)
    assert first.value == b"{not json" and first.key == b"k3"
    assert headers["ethereal.source.topic"] == src.encode()
    assert headers["ethereal.source.partition"] == b"0"
    assert headers["ethereal.error.field"] == b"value"
    assert headers["ethereal.error.class"] and headers["ethereal.error.message"]
    assert int(headers["ethereal.source.timestamp"] or b"0") > 0


def test_skip_policy_drops_poison_records(
    spark: SparkSession, kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    src = topic_factory()
    good, _ = _poison_input(kafka_cluster.bootstrap, src)
    opts = {
        "bootstrap.servers": kafka_cluster.bootstrap,
        "topics": src,
        "starting.offsets": "earliest",
        "value.format": "json",
        "value.schema": ORDER_DDL,
        "on.error": "skip",
    }
    rows, _ = read_source_available(spark, opts, tmp_path / "ckpt")
    assert sorted(r["offset"] for r in rows) == good


def test_fail_policy_stops_the_query_naming_the_record(
    spark: SparkSession, kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    src = topic_factory()
    _poison_input(kafka_cluster.bootstrap, src)
    opts = {
        "bootstrap.servers": kafka_cluster.bootstrap,
        "topics": src,
        "starting.offsets": "earliest",
        "value.format": "json",
        "value.schema": ORDER_DDL,
    }
    with pytest.raises(Exception, match=rf"{src}.*\b3\b") as info:
        read_source_available(spark, opts, tmp_path / "ckpt")
    assert "SerdeError" in str(info.value) or "offset" in str(info.value)


def test_sink_routes_by_topic_column_with_headers(
    spark: SparkSession, kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    bs = kafka_cluster.bootstrap
    src, even, odd = topic_factory(), topic_factory(), topic_factory()
    produce(bs, src, [(b"%d" % i, b"v%d" % i) for i in range(40)])
    source = {"bootstrap.servers": bs, "topics": src, "starting.offsets": "earliest", "key.format": "string"}
    sink = {"bootstrap.servers": bs}

    def transform(frame: DataFrame) -> DataFrame:
        from pyspark.sql import functions as F

        route = F.when(F.col("key").cast("int") % 2 == 0, F.lit(even)).otherwise(F.lit(odd))
        header = F.array(F.struct(F.lit("origin").alias("key"), F.col("topic").cast("binary").alias("value")))
        return frame.select("key", "value", route.alias("topic"), header.alias("headers"))

    _run_to_sink(spark, source, sink, transform, tmp_path / "ckpt")
    got_even, got_odd = read_committed(bs, even), read_committed(bs, odd)
    assert sorted(int(r.key or b"") for r in got_even) == list(range(0, 40, 2))
    assert sorted(int(r.key or b"") for r in got_odd) == list(range(1, 40, 2))
    assert all(dict(r.headers) == {"origin": src.encode()} for r in got_even + got_odd)


def test_demo_connector_files_validate() -> None:
    from ethereal_kafka.config import validate_file
    from ethereal_kafka.demo import demo_job_file

    for path in sorted(demo_job_file().parent.glob("*.properties")):
        assert ": ok (" in validate_file(path, env={"ETHEREAL_KAFKA_BOOTSTRAP": "127.0.0.1:1"})


def test_source_config_rejects_a_decoded_field_shadowing_a_kafka_column(kafka_cluster: KafkaCluster) -> None:
    from ethereal_kafka.connectors.kafka.decoding import SourceLayout
    from ethereal_kafka.errors import ConfigError

    cfg = KafkaSourceConfig.from_properties(
        {
            "bootstrap.servers": kafka_cluster.bootstrap,
            "topics": "t",
            "value.format": "json",
            "value.schema": "timestamp bigint, amount double",
        }
    )
    with pytest.raises(ConfigError, match=r"value\.fields\.prefix"):
        SourceLayout.from_config(cfg)


def test_avro_with_schema_registry_round_trip_and_evolution(
    spark: SparkSession,
    kafka_cluster: KafkaCluster,
    schema_registry: object,
    topic_factory: TopicFactory,
    tmp_path: Path,
) -> None:
    """Confluent wire format through Spark: v1 and v2 writers in one topic, read with the v2 schema as reader."""
    import pyarrow as pa

    from ethereal_kafka.serde import SerdeSpec

    bs = kafka_cluster.bootstrap
    url = schema_registry.url  # type: ignore[attr-defined]
    src, dst = topic_factory(), topic_factory()
    v1 = build_codec(
        pin_schema(
            SerdeSpec(
                field="value",
                format="avro",
                registry_url=url,
                subject=f"{src}-value",
                schema_file=str(REPO / "serde" / "order.avsc"),
            )
        )
    )
    v2_file = str(REPO / "serde" / "order_v2.avsc")
    v2 = build_codec(
        pin_schema(
            SerdeSpec(
                field="value", format="avro", registry_url=url, subject=f"{src}-value", schema_file=v2_file
            )
        )
    )
    old = _orders(30)
    new = [{**o, "order_id": 100 + i, "currency": "USD"} for i, o in enumerate(_orders(30))]
    produce(bs, src, [(None, v) for v in v1.encode(pa.array(old, v1.arrow_type()), src)])
    produce(bs, src, [(None, v) for v in v2.encode(pa.array(new, v2.arrow_type()), src)])
    source = {
        "bootstrap.servers": bs,
        "topics": src,
        "starting.offsets": "earliest",
        "value.format": "avro",
        "schema.registry.url": url,
        "value.schema.file": v2_file,
    }
    sink = {
        "bootstrap.servers": bs,
        "topic": dst,
        "value.format": "avro",
        "schema.registry.url": url,
        "value.schema.file": v2_file,
        "value.column": "*",
    }
    _run_to_sink(
        spark,
        source,
        sink,
        lambda f: f.select("order_id", "customer", "amount", "currency"),
        tmp_path / "ckpt",
    )
    got = read_committed(bs, dst)
    reader = build_codec(
        pin_schema(
            SerdeSpec(
                field="value", format="avro", registry_url=url, subject=f"{dst}-value", schema_file=v2_file
            )
        )
    )
    back = reader.decode(
        pa.array([r.value for r in got], pa.binary()), [dst] * len(got), [0] * len(got), list(range(len(got)))
    )
    assert back.errors == {}
    assert all(r.value is not None and r.value[0] == 0 for r in got), "Confluent wire format: magic byte 0"
    rows = sorted(back.values.to_pylist(), key=lambda o: o["order_id"])
    assert rows == [{**o, "currency": "EUR"} for o in old] + new, "v1 records get the v2 default"
