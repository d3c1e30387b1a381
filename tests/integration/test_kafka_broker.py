from __future__ import annotations

from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType
from pydantic import SecretStr
from typer.testing import CliRunner

from lambdaline import kafka_broker
from lambdaline.cli import app
from shared.platform.topic_admin import create_topics
from shared.settings import Settings
from tests.integration.conftest import broker_settings

pytestmark = pytest.mark.integration


def test_topics_are_created_once_with_their_configuration(kafka: Settings) -> None:
    assert all(not outcome.created for outcome in create_topics(kafka))  # fixture made them
    admin = KafkaAdminClient(bootstrap_servers=kafka.kafka.bootstrap)
    try:
        described = {t["name"]: t for t in admin.describe_topics(["toll.entries"])}
        assert len(described["toll.entries"]["partitions"]) == 2
        configs = admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, "speed.booth_stats")]
        )["topic"]["speed.booth_stats"]
        assert configs["cleanup.policy"]["value"] == "compact,delete"
        assert configs["retention.ms"]["value"] == str(3 * 24 * 3600 * 1000)
        assert {"toll.entries", "toll.exits", "vehicle.registrations", "dead.letters",
                "speed.booth_stats", "speed.vehicle_trips", "speed.expired_registrations",
                "speed.diagnostics", "speed.progress"} <= set(admin.list_topics())  # fmt: skip
    finally:
        admin.close()


def test_start_is_idempotent_stop_waits_and_data_survives(tmp_path: Path) -> None:
    settings = broker_settings(tmp_path)
    first = kafka_broker.start(settings)
    try:
        assert first.running and first.answering and first.pid is not None
        assert kafka_broker.start(settings).pid == first.pid
        # a broker reads its settings at start: other ones are refused, not ignored
        with pytest.raises(
            kafka_broker.BrokerError,
            match=r"differ in num\.partitions, offsets\.topic\.num\.partitions\)",
        ):
            kafka_broker.start(settings.updated(kafka_partitions=3))
        with pytest.raises(kafka_broker.BrokerError, match=r"differ in heap \(kafka_heap\)\)"):
            kafka_broker.start(settings.updated(kafka_heap="768m"))
        sasl = settings.updated(
            **{
                "kafka_security_protocol": "SASL_PLAINTEXT",
                "kafka_sasl_username": "lambdaline",
                "kafka_sasl_password": SecretStr("secret"),
            }
        )
        with pytest.raises(kafka_broker.BrokerError) as refused:
            kafka_broker.start(sasl)
        assert "advertised.listeners, inter.broker.listener.name" in str(refused.value)
        assert "secret" not in str(refused.value)
        assert kafka_broker.status(settings).pid == first.pid
        create_topics(settings)
        producer = KafkaProducer(bootstrap_servers=settings.kafka.bootstrap)
        producer.send("toll.exits", value=b"kept", key=b"P", partition=0).get(timeout=30)
        producer.close()
        assert kafka_broker.stop(settings) == [first.pid]
        assert not Path(f"/proc/{first.pid}").exists()
        assert not kafka_broker.status(settings).running

        second = kafka_broker.start(settings)
        assert second.pid != first.pid
        consumer = KafkaConsumer(
            bootstrap_servers=settings.kafka.bootstrap, consumer_timeout_ms=10_000
        )
        consumer.assign([TopicPartition("toll.exits", 0)])
        consumer.seek_to_beginning()
        assert [record.value for record in consumer] == [b"kept"]
        consumer.close()
    finally:
        kafka_broker.stop(settings)
    assert kafka_broker.stop(settings) == []  # stopping twice is harmless


def test_start_refuses_a_port_in_use(kafka: Settings, tmp_path: Path) -> None:
    clash = Settings(
        state_dir=tmp_path, kafka_bootstrap=kafka.kafka.bootstrap, kafka_controller_port=1
    )
    with pytest.raises(kafka_broker.BrokerError, match="already in use"):
        kafka_broker.start(clash)


@pytest.mark.parametrize(
    ("command", "missing"),
    [
        (
            ["speed", "run", "--available-now"],
            "missing.entries, speed.missing.booth_rolling, speed.missing.booth_stats",
        ),
        (["batch", "run", "--date", "2026-01-05"], "missing.entries"),
        (["generate", "--events", "10"], "missing.entries"),  # kafka-python waited 60 s
    ],
)
def test_a_job_without_its_topics_says_which_before_spark_starts(
    kafka: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    command: list[str],
    missing: str,
) -> None:
    """Spark's Kafka source would retry, then fail with a Java stack trace of ~200 lines."""
    monkeypatch.setenv("LAMBDALINE_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("LAMBDALINE_KAFKA_BOOTSTRAP", kafka.kafka.bootstrap)
    monkeypatch.setenv("LAMBDALINE_TOPICS__ENTRIES", "missing.entries")
    monkeypatch.setenv("LAMBDALINE_TOPICS__SPEED_PREFIX", "speed.missing.")
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 1
    said = " ".join(result.output.split())
    assert f"topics not found on {kafka.kafka.bootstrap}: {missing}" in said
    assert "lambdaline topics create" in said
    assert "Exception" not in result.output
    assert not (tmp_path / "spark-local").exists()  # no Spark driver was started


def test_topics_with_fewer_partitions_than_the_setting_are_named(
    kafka: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fixture's topics have 2 partitions; the generator would write to partitions 0 to 3."""
    monkeypatch.setenv("LAMBDALINE_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("LAMBDALINE_KAFKA_BOOTSTRAP", kafka.kafka.bootstrap)
    monkeypatch.setenv("LAMBDALINE_KAFKA_PARTITIONS", "4")
    generated = CliRunner().invoke(app, ["generate", "--events", "10"])
    assert generated.exit_code == 1
    assert (
        "topics with fewer than the 4 partitions the kafka_partitions setting asks for, "
        f"on {kafka.kafka.bootstrap}: toll.entries (2), toll.exits (2), vehicle.registrations (2)"
    ) in " ".join(generated.output.split())
    assert "Traceback" not in generated.output
    created = CliRunner().invoke(app, ["topics", "create"])
    assert created.exit_code == 0
    rows = [line.split() for line in created.output.splitlines()]
    assert ["toll.entries", "2", "exists", "(kafka_partitions", "is", "4)"] in [
        row[:6] for row in rows
    ]
