"""`ethereal-kafka topics`, `produce` and `consume` against the session's real broker (issue 24, item 3).

The CLI runs in-process (`ethereal_kafka.cli.main` with capsys): no interpreter start per command. Every test has
topics of its own; what the commands write is checked with the test kit's plain reader (`read_all`).
"""

from __future__ import annotations

import io
import json
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer

from ethereal_kafka.cli import main
from ethereal_kafka.connectors.kafka.topics import produce, read_all
from ethereal_kafka.testing import KafkaCluster
from ethereal_kafka.testing.plugin import TopicFactory


@pytest.fixture(autouse=True)
def bootstrap(kafka_cluster: KafkaCluster, monkeypatch: pytest.MonkeyPatch) -> str:
    """The commands find the session broker as a user's shell would: through `$KAFKA_BOOTSTRAP`."""
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka_cluster.bootstrap)
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))  # not a terminal: nothing asks
    return kafka_cluster.bootstrap


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run one command in-process; returns (exit code, stdout, stderr)."""
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_topics_create_list_describe_delete(capsys: pytest.CaptureFixture[str], bootstrap: str) -> None:
    name = f"cli-topic-{uuid.uuid4().hex[:8]}"
    code, out, _ = cli(
        capsys, "topics", "create", name, "--partitions", "3", "--config", "cleanup.policy=compact"
    )
    assert (code, out) == (0, f"created topic {name}: 3 partition(s) at {bootstrap}\n")
    code, _, err = cli(capsys, "topics", "create", name)
    assert (code, err) == (1, f"error: topic {name} already exists at {bootstrap}\n")
    assert cli(capsys, "topics", "create", name, "--if-not-exists")[:2] == (
        0,
        f"topic {name} already exists: 3 partition(s) at {bootstrap}\n",
    )

    internal = f"app-{uuid.uuid4().hex[:8]}.ethereal-progress"  # an app's progress topic is internal
    assert cli(capsys, "topics", "create", internal)[0] == 0
    listed = cli(capsys, "topics", "list")[1].splitlines()
    assert name in listed and internal not in listed and listed == sorted(listed)
    assert not any(topic.startswith("__") for topic in listed)
    assert internal in cli(capsys, "topics", "list", "--all")[1].splitlines()

    produce(bootstrap, name, [(b"k", b"v1"), (b"k", b"v2")], partition=1)
    code, out, _ = cli(capsys, "topics", "describe", name)
    lines = out.splitlines()
    assert lines[:3] == [
        f"topic {name}: 3 partition(s), replication factor 1",
        "settings: cleanup.policy=compact",
        "",
    ]
    assert lines[3].split() == ["PARTITION", "LEADER", "REPLICAS", "ISR", "EARLIEST", "END", "STABLE"]
    assert [row.split()[0] for row in lines[4:]] == ["0", "1", "2"]
    assert lines[5].split()[4:] == ["0", "2", "2"]
    described = json.loads(cli(capsys, "topics", "describe", name, "--json")[1])
    assert described["replication_factor"] == 1 and described["configs"] == {"cleanup.policy": "compact"}
    assert [(p["partition"], p["end"], p["stable"]) for p in described["partitions"]] == [
        (0, 0, 0),
        (1, 2, 2),
        (2, 0, 0),
    ]

    code, _, err = cli(capsys, "topics", "delete", name)
    assert code == 1 and "pass --yes to confirm" in err
    assert cli(capsys, "topics", "delete", name, "--yes")[:2] == (0, f"deleted topic {name} at {bootstrap}\n")
    assert name not in cli(capsys, "topics", "list")[1].splitlines()
    code, _, err = cli(capsys, "topics", "describe", name)
    assert (code, err) == (1, f"error: topic {name} does not exist at {bootstrap}\n")
    assert cli(capsys, "topics", "delete", name, "--yes", "--if-exists")[0] == 0


def test_keys_and_headers_round_trip(
    capsys: pytest.CaptureFixture[str], topic_factory: TopicFactory, bootstrap: str, tmp_path: Path
) -> None:
    topic = topic_factory(partitions=2)
    lines = [
        'alice:{"amount": 80}',
        "bob:12",
        "",
        "carol:a:b",
    ]  # a blank line is skipped; a key ends at the first ':'
    source = tmp_path / "orders.txt"
    source.write_text("\n".join(lines) + "\n")
    code, out, err = cli(
        capsys,
        "produce",
        topic,
        "--file",
        str(source),
        "--key-separator",
        ":",
        "--header",
        "source=cli",
        "--header",
        "run=1",
    )
    assert (code, out, err) == (0, f"produced 3 record(s) to {topic} in one transaction\n", "")

    expected = {("alice", '{"amount": 80}'), ("bob", "12"), ("carol", "a:b")}
    written = read_all(
        bootstrap, topic
    )  # at once: `produce` returns when a read_committed reader sees it all
    assert {(r.key.decode(), r.value.decode()) for r in written if r.key and r.value} == expected
    assert {r.headers for r in written} == {(("source", b"cli"), ("run", b"1"))}

    code, out, err = cli(capsys, "consume", topic, "--keys", "--headers")
    assert code == 0 and err == f"3 record(s) from {topic} (read_committed)\n"
    assert {tuple(line.split("\t")) for line in out.splitlines()} == {
        ("source=cli,run=1", key, value) for key, value in expected
    }

    code, out, _ = cli(capsys, "consume", topic, "--json")
    objects = [json.loads(line) for line in out.splitlines()]
    assert {(o["key"], o["value"]) for o in objects} == expected
    assert all(o["topic"] == topic and o["headers"] == [["source", "cli"], ["run", "1"]] for o in objects)

    # what `consume --json` prints, `produce --json` takes back: the same keys, values, headers and partitions
    copy = topic_factory(partitions=2)
    monkey_stdin(out)
    assert cli(capsys, "produce", copy, "--json")[:2] == (0, f"produced 3 record(s) to {copy}\n")
    again = read_all(bootstrap, copy, expected=3)
    assert sorted((r.partition, r.key, r.value, r.headers) for r in again) == sorted(
        (r.partition, r.key, r.value, r.headers) for r in written
    )


def monkey_stdin(text: str) -> None:
    sys.stdin = io.StringIO(text)  # restored by the `bootstrap` fixture's monkeypatch


def test_consume_is_read_committed_by_default_and_ends_at_an_open_transaction(
    capsys: pytest.CaptureFixture[str], topic_factory: TopicFactory, bootstrap: str
) -> None:
    topic = topic_factory()
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"t-{uuid.uuid4().hex}"})
    txn.init_transactions(30)
    for value, commit in (
        (b"committed-1", True),
        (b"aborted", False),
        (b"committed-2", True),
        (b"open", None),
    ):
        txn.begin_transaction()
        txn.produce(topic, value)
        txn.flush(30)
        if commit is True:
            txn.commit_transaction(30)
        elif commit is False:
            txn.abort_transaction(30)
    try:  # the last transaction stays open while the topic is read
        code, out, err = cli(capsys, "consume", topic, "--timeout", "20")
        assert (code, out.splitlines()) == (0, ["committed-1", "committed-2"])
        assert err == f"2 record(s) from {topic} (read_committed)\n"
        _, everything, _ = cli(capsys, "consume", topic, "--isolation", "read_uncommitted")
        assert everything.splitlines() == ["committed-1", "aborted", "committed-2", "open"]
    finally:
        txn.abort_transaction(30)


def test_a_bad_line_in_a_file_leaves_nothing_visible(
    capsys: pytest.CaptureFixture[str], topic_factory: TopicFactory, tmp_path: Path
) -> None:
    topic = topic_factory()
    source = tmp_path / "records.jsonl"
    source.write_text('{"value": "a"}\n{"value": "b"}\n{"value": oops}\n')
    code, out, err = cli(capsys, "produce", topic, "--json", "--file", str(source))
    assert code == 1 and out == ""
    assert err.startswith(f"error: {source}:3: not JSON (")
    assert err.endswith("(nothing produced: the transaction of the 2 record(s) before it was aborted)\n")
    assert cli(capsys, "consume", topic)[1] == ""


def test_stdin_is_sent_as_it_is_read(capsys: pytest.CaptureFixture[str], topic_factory: TopicFactory) -> None:
    topic = topic_factory()
    monkey_stdin("first\nsecond\n")
    assert cli(capsys, "produce", topic)[:2] == (0, f"produced 2 record(s) to {topic}\n")
    assert cli(capsys, "consume", topic)[1].splitlines() == ["first", "second"]


def test_positions_partitions_and_limits(
    capsys: pytest.CaptureFixture[str], topic_factory: TopicFactory, bootstrap: str
) -> None:
    topic = topic_factory(partitions=2)
    for partition in (0, 1):
        produce(
            bootstrap, topic, [(None, f"p{partition}-{i}".encode()) for i in range(10)], partition=partition
        )

    def values(*argv: str) -> list[str]:
        code, out, _ = cli(capsys, "consume", topic, *argv)
        assert code == 0
        return out.splitlines()

    assert values("--partition", "1", "--from", "-3") == ["p1-7", "p1-8", "p1-9"]
    assert values("--partition", "0", "--from", "8") == ["p0-8", "p0-9"]
    assert len(values("--max", "4")) == 4
    assert values("--from", "latest") == []
    assert sorted(values()) == sorted(f"p{p}-{i}" for p in (0, 1) for i in range(10))
    assert values("--partition", "0", "--follow", "--timeout", "1", "--from", "-1") == ["p0-9"]
    code, _, err = cli(capsys, "consume", topic, "--partition", "5")
    assert (code, err) == (1, f"error: topic {topic} has no partition 5 (it has 2)\n")


def test_a_missing_topic_is_one_line(capsys: pytest.CaptureFixture[str], bootstrap: str) -> None:
    missing = f"no-such-topic-{uuid.uuid4().hex[:8]}"
    hint = f"error: topic {missing} does not exist at {bootstrap} (create it: ethereal-kafka topics create {missing})\n"
    monkey_stdin("x\n")
    assert cli(capsys, "produce", missing)[::2] == (1, hint)
    assert cli(capsys, "consume", missing)[::2] == (1, hint)


def test_a_range_read_refuses_records_retention_deleted(topic_factory: TopicFactory, bootstrap: str) -> None:
    """`console_io.read_range` (what `diff` reads production's range with): a start the partition no longer holds
    fails the read in one line, never a shorter range read from the earliest offset left."""
    from confluent_kafka import TopicPartition

    from ethereal_kafka.connectors.kafka.clients import admin_client
    from ethereal_kafka.connectors.kafka.console_io import read_range
    from ethereal_kafka.errors import KafkaConnectionError

    topic = topic_factory(partitions=1)
    produce(bootstrap, topic, [(None, str(i).encode()) for i in range(5)])
    assert [r.value for r in read_range(bootstrap, topic, {0: (1, 4)})] == [b"1", b"2", b"3"]
    admin = admin_client(bootstrap)
    for future in admin.delete_records([TopicPartition(topic, 0, 3)], request_timeout=30).values():
        future.result()
    with pytest.raises(KafkaConnectionError, match=f"consume {topic} at "):
        read_range(bootstrap, topic, {0: (1, 5)})
