"""The embedded Kafka cluster's layout and refusals, the replication rule, and the
generator's account of records Kafka did not acknowledge: no JVM is started here."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from lambdaline import generator, kafka_broker
from lambdaline.cli import app
from shared.platform.topic_admin import replication
from shared.settings import Settings


def cluster_of(tmp_path: Path, brokers: int = 3, **more: Any) -> Settings:
    return Settings(
        state_dir=tmp_path, kafka_bootstrap="127.0.0.1:19092", kafka_controller_port=19192,
        kafka_brokers=brokers, **more,
    )  # fmt: skip


def test_clients_bootstrap_from_every_node_of_the_embedded_cluster(tmp_path: Path) -> None:
    settings = cluster_of(tmp_path)
    assert settings.kafka.bootstrap == "127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094"
    assert settings.kafka.bootstrap_port == 19092
    # the list given in full is the same cluster
    same = Settings(
        kafka_brokers=3, kafka_bootstrap="127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094"
    )
    assert same.kafka.bootstrap == settings.kafka.bootstrap
    with pytest.raises(ValidationError, match="kafka_brokers 3 puts the embedded cluster's nodes"):
        Settings(kafka_brokers=3, kafka_bootstrap="a:9092,b:9092")
    with pytest.raises(ValidationError, match="runs past 65535"):
        Settings(kafka_brokers=3, kafka_bootstrap="a:65534")


@pytest.mark.parametrize(
    ("brokers", "expected"), [(1, (1, 1)), (2, (2, 1)), (3, (3, 2)), (5, (3, 2))]
)
def test_three_copies_two_in_sync_from_three_brokers(
    brokers: int, expected: tuple[int, int]
) -> None:
    assert replication(brokers) == expected


def test_each_node_listens_on_its_own_ports_and_knows_every_voter(tmp_path: Path) -> None:
    settings = cluster_of(tmp_path)
    paths = kafka_broker.BrokerPaths.of(settings, 2)
    lines = kafka_broker.server_properties(settings, paths, 2).splitlines()
    assert "node.id=2" in lines
    assert "controller.quorum.voters=1@127.0.0.1:19192,2@127.0.0.1:19193,3@127.0.0.1:19194" in lines
    assert "listeners=PLAINTEXT://127.0.0.1:19093,CONTROLLER://127.0.0.1:19193" in lines
    assert "advertised.listeners=PLAINTEXT://127.0.0.1:19093" in lines
    assert f"log.dirs={tmp_path / 'kafka' / 'node-2' / 'data'}" in lines
    for line in (
        "default.replication.factor=3", "min.insync.replicas=2",
        "offsets.topic.replication.factor=3", "transaction.state.log.min.isr=2",
    ):  # fmt: skip
        assert line in lines
    assert paths.log_file == tmp_path / "logs" / "kafka-2.log"
    # one certificate for every node: they share the host
    assert paths.keystore == kafka_broker.BrokerPaths.of(settings, 1).keystore


def test_overlapping_client_and_controller_ports_are_refused_before_a_jvm_starts(
    tmp_path: Path,
) -> None:
    settings = Settings(
        state_dir=tmp_path, kafka_bootstrap="127.0.0.1:19092", kafka_controller_port=19093,
        kafka_brokers=3,
    )  # fmt: skip
    with pytest.raises(kafka_broker.BrokerError) as refused:
        kafka_broker.start(settings)
    assert "client ports (19092-19094) and controller ports (19093-19095) overlap" in str(
        refused.value
    )
    assert not (tmp_path / "kafka" / "node-1").exists()


def test_a_cluster_formatted_with_more_nodes_is_not_started_with_fewer(tmp_path: Path) -> None:
    for node in (1, 2, 3):
        data = kafka_broker.BrokerPaths.of(cluster_of(tmp_path), node).data
        data.mkdir(parents=True)
        (data / "meta.properties").write_text("cluster.id=abc\nnode.id=1\n")
    with pytest.raises(kafka_broker.BrokerError, match=r"has 3 nodes.*--brokers 3"):
        kafka_broker.start(cluster_of(tmp_path, brokers=1))
    # `kafka status` without the setting still sees all three
    assert kafka_broker.cluster_settings(cluster_of(tmp_path, brokers=1)).kafka.brokers == 3


def test_kafka_status_lists_every_node_of_a_cluster_none_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAMBDALINE_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("LAMBDALINE_KAFKA_BOOTSTRAP", "127.0.0.1:1")  # nothing listens
    monkeypatch.setenv("LAMBDALINE_KAFKA_BROKERS", "2")
    monkeypatch.setenv("LAMBDALINE_KAFKA_TIMEOUT", "1s")
    result = CliRunner().invoke(app, ["kafka", "status"])
    assert result.exit_code == 3  # not running, as LSB status commands say
    assert "node 1 127.0.0.1:1 not running" in result.output
    assert "node 2 127.0.0.1:2 not running" in result.output
    assert "answering on 127.0.0.1:1,127.0.0.1:2: no" in result.output


def test_kafka_start_with_a_cluster_size_the_bootstrap_list_contradicts_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAMBDALINE_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("LAMBDALINE_KAFKA_BOOTSTRAP", "a:9092,b:9092")
    result = CliRunner().invoke(app, ["kafka", "start", "--brokers", "3"])
    assert result.exit_code == 2
    assert "kafka_brokers 3 puts the embedded cluster's nodes on a:9092,a:9093,a:9094" in (
        " ".join(result.output.split())
    )


class _Refused:
    """A send's future that fails, as kafka-python's does after its retries."""

    def add_errback(self, callback: Any) -> None:
        callback(TimeoutError("NotEnoughReplicas after 120 s"))


class _Producer:
    def __init__(self, refuse_every: int) -> None:
        self.refuse_every, self.sent = refuse_every, 0

    def send(self, *args: Any, **kwargs: Any) -> Any:
        self.sent += 1
        if self.sent % self.refuse_every == 0:
            return _Refused()
        return _Accepted()

    def flush(self) -> None: ...

    def close(self) -> None: ...


class _Accepted:
    def add_errback(self, callback: Any) -> None: ...


@pytest.fixture
def refusing(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Producer]:
    producer = _Producer(refuse_every=10)
    monkeypatch.setattr(generator, "kafka_producer", lambda *args, **kwargs: producer)
    yield producer


def test_records_kafka_did_not_acknowledge_are_counted_and_named(
    refusing: _Producer, tmp_path: Path
) -> None:
    config = generator.GeneratorConfig(events=50)
    summary = generator._send_shards(config, Settings(state_dir=tmp_path), [0, 1], 0.0, print)
    assert refusing.sent == summary.records > 50
    assert summary.unacknowledged == refusing.sent // 10
    assert summary.first_error == "TimeoutError: NotEnoughReplicas after 120 s"
