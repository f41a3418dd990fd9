"""Global tables without a broker: the executor's RocksDB copy (records applied, tombstones, positions kept with
the rows, slots, rebuilds when ahead of the pins, poison records), key canonicalization, and the pinning rules."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from rocksdict import Rdict

from ethereal_kafka.config.connectors import KafkaTableConfig
from ethereal_kafka.connectors import table_pins
from ethereal_kafka.connectors.table import TableSpec, TableStore, TableStoreError, lookup_key
from ethereal_kafka.connectors.table_pins import (
    TablePinner,
    decode_pins,
    decode_tables,
    encode_pins,
    encode_tables,
    pins_of,
    topics_only,
    with_pins,
)


def _config(tmp_path: Path, **extra: str) -> KafkaTableConfig:
    props = {
        "connector.class": "kafka-table",
        "name": "customers",
        "bootstrap.servers": "127.0.0.1:1",
        "topic": "customers",
        "key.format": "string",
        "value.format": "json",
        "value.schema": "name string, tier long",
        "store.dir": str(tmp_path / "tables"),
        **extra,
    }
    return KafkaTableConfig.from_properties(props, "test")


def _batch(records: list[tuple[int, str | None, Any]]) -> pa.RecordBatch:
    """Raw table records `(offset, key, value)`; a dict value is JSON, None a tombstone, bytes as they are."""
    values = [v if v is None or isinstance(v, bytes) else json.dumps(v).encode() for _, _, v in records]
    return pa.RecordBatch.from_arrays(
        [
            pa.array([None if k is None else k.encode() for _, k, _ in records], pa.binary()),
            pa.array(values, pa.binary()),
            pa.array([o for o, _, _ in records], pa.int64()),
        ],
        names=["key", "value", "offset"],
    )


@pytest.fixture
def store(tmp_path: Path) -> Any:
    opened = TableStore(TableSpec.from_config(_config(tmp_path), "app"))
    yield opened
    opened.close()


def test_records_put_update_and_tombstones_delete(store: TableStore) -> None:
    store._apply(_batch([(0, "c1", {"name": "a", "tier": 1}), (1, "c2", {"name": "b", "tier": 2})]), 0, 2)
    store._apply(_batch([(2, "c1", {"name": "a2", "tier": 3}), (3, "c2", None), (4, "c3", None)]), 0, 5)
    assert store.lookup([b"c1", b"c2", b"c3", None]) == [{"name": "a2", "tier": 3}, None, None, None]
    assert store.positions == {0: 5}


def test_positions_survive_a_reopen_and_a_changed_table_is_rebuilt(tmp_path: Path) -> None:
    spec = TableSpec.from_config(_config(tmp_path), "app")
    first = TableStore(spec)
    first._apply(_batch([(0, "c1", {"name": "a", "tier": 1})]), 1, 7)
    first.close()
    again = TableStore(spec)
    assert again.positions == {1: 7} and again.lookup([b"c1"]) == [{"name": "a", "tier": 1}]
    again.close()
    changed = TableStore(TableSpec.from_config(_config(tmp_path, **{"value.schema": "name string"}), "app"))
    assert changed.positions == {} and changed.lookup([b"c1"]) == [None]
    changed.close()


def test_a_second_process_copy_takes_another_slot(tmp_path: Path) -> None:
    spec = TableSpec.from_config(_config(tmp_path), "app")
    one, two = TableStore(spec), TableStore(spec)
    try:
        assert one.path.name == "slot-0" and two.path.name == "slot-1"
    finally:
        one.close()
        two.close()


def test_a_rebuild_keeps_its_slot_against_a_worker_opening_meanwhile(
    tmp_path: Path, monkeypatch: Any
) -> None:
    # CI failure: a rebuild closed RocksDB (freeing its lock) before destroying the folder; a second worker opened
    # the same slot in that window and the two destroyed each other's files ("while unlink() ... No such file").
    spec = TableSpec.from_config(_config(tmp_path), "app")
    first = TableStore(spec)
    opened: list[TableStore] = []
    destroy, calls = Rdict.destroy, []

    def destroy_while_another_worker_opens(path: str, options: Any) -> None:
        calls.append(path)
        if len(calls) == 1:  # the second worker's own first build destroys too
            opened.append(TableStore(spec))
        destroy(path, options)

    monkeypatch.setattr(Rdict, "destroy", destroy_while_another_worker_opens)
    try:
        first._reset("test")
        assert [store.path.name for store in opened] == ["slot-1"]
        assert first.path.name == "slot-0" and first.lookup([b"c1"]) == [None]
    finally:
        first.close()
        for store in opened:
            store.close()


def test_sync_reads_forward_and_rebuilds_when_ahead_of_the_pins(store: TableStore, monkeypatch: Any) -> None:
    reads: list[tuple[int, int, int]] = []

    def fake_read(partition: int, start: int, until: int) -> None:
        reads.append((partition, start, until))
        store._apply(
            _batch([(until - 1, f"c{partition}", {"name": str(until), "tier": 0})]), partition, until
        )

    monkeypatch.setattr(store, "_read", fake_read)
    store.sync({0: 5, 1: 3})
    store.sync({0: 8, 1: 3})
    assert reads == [(0, 0, 5), (1, 0, 3), (0, 5, 8)]
    reads.clear()
    store.sync({0: 6, 1: 3})  # behind the copy: a reset checkpoint; the copy is rebuilt from the start
    assert reads == [(0, 0, 6), (1, 0, 3)]
    assert store.lookup([b"c0"]) == [{"name": "6", "tier": 0}]


def test_poison_records_fail_or_are_skipped(tmp_path: Path) -> None:
    bad = _batch([(0, "c1", b"{not json"), (1, "c2", {"name": "ok", "tier": 1})])
    strict = TableStore(TableSpec.from_config(_config(tmp_path), "strict"))
    with pytest.raises(TableStoreError, match=r"on\.error=skip"):
        strict._apply(bad, 0, 2)
    strict.close()
    lenient = TableStore(TableSpec.from_config(_config(tmp_path, **{"on.error": "skip"}), "lenient"))
    lenient._apply(bad, 0, 2)
    assert lenient.lookup([b"c1", b"c2"]) == [None, {"name": "ok", "tier": 1}]
    lenient.close()


def test_string_values_and_struct_keys(tmp_path: Path) -> None:
    spec = TableSpec.from_config(
        _config(
            tmp_path,
            **{"key.format": "json", "key.schema": "region string, id long", "value.format": "string"},
        ),
        "app",
    )
    assert spec.key_fields() == ("region", "id")
    assert spec.row_type() == pa.struct([pa.field("value", pa.string())])
    store = TableStore(spec)
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array([json.dumps({"region": "eu", "id": 7}).encode()], pa.binary()),
            pa.array([b"gold"], pa.binary()),
            pa.array([0], pa.int64()),
        ],
        names=["key", "value", "offset"],
    )
    store._apply(batch, 0, 1)
    assert store.lookup([lookup_key({"id": 7, "region": "eu"}, spec.key_fields())]) == [{"value": "gold"}]
    assert store.lookup([lookup_key(("eu", 7), spec.key_fields())]) == [{"value": "gold"}]
    store.close()


def test_lookup_keys_are_canonical() -> None:
    assert lookup_key("c1") == lookup_key(b"c1") == b"c1"
    assert lookup_key(42) == lookup_key("42") == lookup_key(42.0) == b"42"
    assert lookup_key(True) == b"true"
    assert lookup_key(None) is None
    assert lookup_key({"id": 1}) == lookup_key([1]) == b"1"
    assert lookup_key({"b": 2, "a": "x"}, ("a", "b")) == lookup_key(("x", 2)) == b'["x","2"]'


def test_pins_live_beside_the_topics_in_the_offsets(tmp_path: Path) -> None:
    offset = {"orders": {"0": 5}, "@table/customers": {"1": 9, "0": 3}}
    assert topics_only(offset) == {"orders": {"0": 5}}
    assert pins_of(offset) == {"customers": {0: 3, 1: 9}}
    assert list(with_pins({"orders": {"0": 5}}, {"customers": {1: 9, 0: 3}})["@table/customers"]) == [
        "0",
        "1",
    ]
    assert decode_pins(encode_pins({"customers": {1: 9, 0: 3}})) == {"customers": {0: 3, 1: 9}}
    assert encode_pins({}) == "" and decode_pins(None) == {}
    config = _config(tmp_path, **{"kafka.sasl.password": "s3cret"})
    assert decode_tables(encode_tables([config])) == [config]


def test_pins_move_forward_only_and_only_with_new_input(tmp_path: Path, monkeypatch: Any) -> None:
    pinner = TablePinner([_config(tmp_path)])
    ends = {0: 10, 1: 4}
    monkeypatch.setattr(pinner, "_end_offsets", lambda name: dict(ends))
    start = {"orders": {"0": 0}}
    assert pinner.pin(start, {"orders": {"0": 0}}) == {"orders": {"0": 0}}, "no input, no pins: no epoch"
    first = pinner.pin(start, {"orders": {"0": 5}})
    assert pins_of(first) == {"customers": {0: 10, 1: 4}}
    ends.update({0: 12, 1: 2})  # a partition behind what was pinned (the topic was recreated) never goes back
    idle = pinner.pin(first, {"orders": {"0": 5}})
    assert idle == first, "table updates alone do not make an epoch"
    second = pinner.pin(first, {"orders": {"0": 9}})
    assert pins_of(second) == {"customers": {0: 12, 1: 4}}


def test_end_offsets_asked_within_the_alignment_window_are_shared(tmp_path: Path, monkeypatch: Any) -> None:
    calls: list[str] = []

    class Resolver:
        def __init__(self, config: Any) -> None:
            pass

        def topic_partitions(self) -> list[tuple[str, int]]:
            return [("customers", 0)]

        def latest(self, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
            calls.append("latest")
            return {("customers", 0): 3 + len(calls)}

        def close(self) -> None:
            pass

    monkeypatch.setattr(table_pins, "PositionResolver", Resolver)
    monkeypatch.setattr(table_pins, "_RECENT", {})
    shared = str(tmp_path / "sources")
    one, two = TablePinner([_config(tmp_path)], shared), TablePinner([_config(tmp_path)], shared)
    a = one.pin({"a": {"0": 0}}, {"a": {"0": 1}})
    monkeypatch.setattr(table_pins, "_RECENT", {})  # the other source's reader runs in another process
    b = two.pin({"b": {"0": 0}}, {"b": {"0": 1}})
    assert pins_of(a) == pins_of(b) == {"customers": {0: 4}} and calls == ["latest"]
    monkeypatch.setattr(table_pins, "ALIGN_S", 0.0)
    monkeypatch.setattr(table_pins, "_RECENT", {})
    c = two.pin(b, {"b": {"0": 2}})
    assert pins_of(c) == {"customers": {0: 5}} and calls == ["latest", "latest"]


def test_a_job_file_lists_its_tables(tmp_path: Path) -> None:
    from ethereal_kafka.config.job import load_job
    from ethereal_kafka.errors import ConfigError

    (tmp_path / "orders.properties").write_text(
        "connector.class=kafka-source\nname=orders\nbootstrap.servers=b:1\ntopics=orders\n"
    )
    (tmp_path / "out.properties").write_text(
        "connector.class=kafka-sink\nname=out\nbootstrap.servers=b:1\ntopic=o\n"
    )
    (tmp_path / "customers.properties").write_text(
        "connector.class=kafka-table\nname=customers\nbootstrap.servers=b:1\ntopic=customers\nkey.format=string\n"
    )
    job = tmp_path / "job.properties"
    job.write_text(
        "app.id=a\nsources=orders.properties\nsinks=out.properties\ntables=customers.properties\n"
        "pipeline=m:f\ncheckpoint.location=/tmp/x\n"
    )
    loaded = load_job(job)
    assert list(loaded.tables) == ["customers"] and loaded.tables["customers"].topic == "customers"
    job.write_text(job.read_text().replace("tables=customers.properties", "tables=orders.properties"))
    with pytest.raises(ConfigError, match="listed under tables"):
        load_job(job)
