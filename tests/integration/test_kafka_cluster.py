"""A Kafka cluster of three KRaft nodes (``lambdaline kafka start --brokers 3``): its
topics' replication and what ``kafka status`` says of it. A broker killed under load
is a case of the fault suite (``tests/faults/test_broker_kill.py``).
"""

from __future__ import annotations

import pytest
from kafka.admin import ConfigResource, ConfigResourceType
from typer.testing import CliRunner

from lambdaline.cli import app
from shared.platform.kafka_admin import admin_client
from shared.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def status_output(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    """``lambdaline kafka status`` as a user runs it, with only the first node's address:
    it finds the other nodes under the state folder."""
    monkeypatch.setenv("LAMBDALINE_STATE_DIR", str(settings.state_dir))
    monkeypatch.setenv("LAMBDALINE_KAFKA_BOOTSTRAP", f"127.0.0.1:{settings.kafka.bootstrap_port}")
    monkeypatch.setenv("LAMBDALINE_KAFKA_CONTROLLER_PORT", str(settings.kafka.controller_port))
    result = CliRunner().invoke(app, ["kafka", "status"])
    return result.exit_code, result.output


def test_topics_have_three_replicas_and_need_two_in_sync(
    kafka_cluster: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin = admin_client(kafka_cluster.kafka, client_id="lambdaline-tests")
    try:
        topics = admin.describe_topics(
            [kafka_cluster.topics.entries, kafka_cluster.topics.speed("vehicle_trips")]
        )
        partitions = [part for topic in topics for part in topic["partitions"]]
        assert len(partitions) == 2 * kafka_cluster.kafka.partitions
        assert all(sorted(part["replica_nodes"]) == [1, 2, 3] for part in partitions)
        assert all(sorted(part["isr_nodes"]) == [1, 2, 3] for part in partitions)
        configs = admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, kafka_cluster.topics.entries)]
        )["topic"][kafka_cluster.topics.entries]
        assert configs["min.insync.replicas"]["value"] == "2"
    finally:
        admin.close()
    code, output = status_output(kafka_cluster, monkeypatch)
    assert code == 0, output
    port = kafka_cluster.kafka.bootstrap_port
    for node in (1, 2, 3):
        assert f"node {node} 127.0.0.1:{port + node - 1} running: pid " in output
    assert output.count("(active controller)") == 1
    assert "under-replicated partitions: none" in output
