"""`offsets`/`replay` see every consumer group the job commits a source's offsets to."""

from __future__ import annotations

from ethereal_kafka.checkpoint.apps import RunRecord
from ethereal_kafka.cli.app_job import with_query_groups
from ethereal_kafka.config.connectors import KafkaSourceConfig


def _source() -> KafkaSourceConfig:
    return KafkaSourceConfig.from_properties(
        {"name": "orders", "bootstrap.servers": "127.0.0.1:1", "topics": "t", "group.id": "app"}
    )


def _record(groups: dict[str, list[str]]) -> RunRecord:
    return RunRecord("app", "/j.properties", "/cp", "i", "h", 1, 0, groups)


def test_one_entry_per_query_group_of_a_source() -> None:
    out = with_query_groups({"orders": _source()}, _record({"orders": ["app.a", "app.b"]}))
    assert {k: c.group for k, c in out.items()} == {"orders@app.a": "app.a", "orders@app.b": "app.b"}
    assert {c.name for c in out.values()} == {"orders"}


def test_the_sources_own_group_without_a_record() -> None:
    assert {k: c.group for k, c in with_query_groups({"orders": _source()}, None).items()} == {
        "orders": "app"
    }
    same = with_query_groups({"orders": _source()}, _record({"orders": ["app"]}))
    assert {k: c.group for k, c in same.items()} == {"orders": "app"}


def test_the_record_round_trips_its_groups() -> None:
    record = _record({"orders": ["app.a"]})
    assert RunRecord.from_json(record.to_json()) == record
