"""Which cluster `topics`, `produce` and `consume` talk to, and their arguments: no broker."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ethereal_kafka.cli import build_parser, kafka_target, main
from ethereal_kafka.cli.kafka_target import resolve_cluster
from ethereal_kafka.errors import ConfigError


def parse(*argv: str) -> object:
    return build_parser().parse_args(list(argv))


def test_bootstrap_from_the_flag_then_the_environment_then_the_local_broker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = {"KAFKA_BOOTSTRAP": "10.0.0.1:9092"}
    flagged = resolve_cluster(parse("topics", "list", "--bootstrap", "10.0.0.2:9092"), env)  # type: ignore[arg-type]
    assert (flagged.bootstrap, flagged.origin) == ("10.0.0.2:9092", "--bootstrap")
    from_env = resolve_cluster(parse("topics", "list"), env)  # type: ignore[arg-type]
    assert (from_env.bootstrap, from_env.origin) == ("10.0.0.1:9092", "$KAFKA_BOOTSTRAP")
    monkeypatch.setattr(kafka_target, "_local_broker", lambda: "127.0.0.1:40213")
    local = resolve_cluster(parse("consume", "orders"), {})  # type: ignore[arg-type]
    assert local.bootstrap == "127.0.0.1:40213" and "local broker" in local.origin


def test_no_cluster_at_all_is_one_line_saying_what_to_do(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("KAFKA_BOOTSTRAP", raising=False)
    monkeypatch.setattr(kafka_target, "_local_broker", lambda: None)
    assert main(["topics", "list"]) == 1
    assert capsys.readouterr().err == (
        "error: no Kafka cluster named: pass --bootstrap HOST:PORT, set KAFKA_BOOTSTRAP, or start a local broker "
        "with `ethereal-kafka broker start`\n"
    )


def test_settings_from_a_command_config_file_and_x_flags(tmp_path: Path) -> None:
    config = tmp_path / "client.properties"
    config.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n")
    args = parse(
        "produce",
        "t",
        "--bootstrap",
        "b:1",
        "--command-config",
        str(config),
        "-X",
        "sasl.mechanism=SCRAM-SHA-512",
    )
    assert resolve_cluster(args).settings == {  # type: ignore[arg-type]
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
    }
    with pytest.raises(ConfigError, match="-X 'nothing': expected KEY=VALUE"):
        resolve_cluster(parse("consume", "t", "--bootstrap", "b:1", "-X", "nothing"))  # type: ignore[arg-type]


def test_a_setting_librdkafka_refuses_gets_a_did_you_mean(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topics", "list", "--bootstrap", "127.0.0.1:9", "-X", "fetch.max.byte=5"]) == 1
    assert capsys.readouterr().err == (
        'error: librdkafka rejects the -X/--command-config settings: No such configuration property: "fetch.max.byte"'
        " (did you mean -X fetch.max.bytes, -X fetch.min.bytes or -X fetch.message.max.bytes?)\n"
    )


def test_a_refused_address_is_one_line_naming_it_and_where_it_came_from(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], refused_address: str
) -> None:
    address = refused_address
    monkeypatch.setenv("KAFKA_BOOTSTRAP", address)
    began = time.monotonic()
    assert main(["consume", "orders"]) == 1
    assert time.monotonic() - began < 4
    assert capsys.readouterr().err == (
        f"error: Kafka at {address} is not reachable: Connect to ipv4#{address} failed: Connection refused "
        "(bootstrap servers from $KAFKA_BOOTSTRAP)\n"
    )


def test_the_commands_arguments() -> None:
    create = parse("topics", "create", "orders", "--partitions", "3", "--config", "a=1", "--config", "b=2")
    assert (create.name, create.partitions, create.replication_factor, create.config) == (  # type: ignore[attr-defined]
        "orders",
        3,
        -1,
        ["a=1", "b=2"],
    )
    produce = parse("produce", "orders", "--file", "f", "--header", "h=1", "--no-transactional")
    assert (produce.file, produce.header, produce.transactional) == ("f", ["h=1"], False)  # type: ignore[attr-defined]
    consume = parse("consume", "orders", "--from", "-5", "--pretty", "--keys", "--max", "3")
    assert (consume.start, consume.pretty, consume.isolation, consume.max) == (  # type: ignore[attr-defined]
        "-5",
        True,
        "read_committed",
        3,
    )
    with pytest.raises(SystemExit):
        parse("consume", "orders", "--json", "--pretty")
