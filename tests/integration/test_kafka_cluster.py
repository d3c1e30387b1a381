"""A Kafka cluster of three KRaft nodes (``lambdaline kafka start --brokers 3``):
replication, and one broker killed with SIGKILL while the generator sends and the
speed job reads, then restarted.

What an acknowledged record is: one the generator's producer (``acks=all``,
idempotent) was told is written; the generator exits non-zero if any was not.
Which records it sent is known independently of the cluster: the generator is
seeded, so the test makes the same records again and compares them with what
the cluster holds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kafka.admin import ConfigResource, ConfigResourceType
from typer.testing import CliRunner

from lambdaline import kafka_broker
from lambdaline.cli import app
from lambdaline.generator import GeneratorConfig, shard_records
from lambdaline.processes import log_tail, stop_process
from shared.platform.kafka_admin import admin_client, offset_bounds
from shared.platform.topic_admin import create_topics
from shared.settings import Settings
from tests.integration.helpers import (
    environment_of,
    isolated_settings,
    read_all,
    spawn_cli,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ENTRIES, RATE, SEED = 3000, 250, 11
START = datetime(2026, 1, 5, 6, tzinfo=UTC)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    folder = tmp_path_factory.mktemp("kafka-cluster")
    with kafka_broker.ephemeral_broker(folder, brokers=3, kafka_heap="512m") as settings:
        create_topics(settings)
        yield settings
    assert not kafka_broker.status(settings).pids  # every node stopped, by its pid


def status_output(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    """``lambdaline kafka status`` as a user runs it, with only the first node's address:
    it finds the other nodes under the state folder."""
    monkeypatch.setenv("LAMBDALINE_STATE_DIR", str(settings.state_dir))
    monkeypatch.setenv("LAMBDALINE_KAFKA_BOOTSTRAP", f"127.0.0.1:{settings.kafka.bootstrap_port}")
    monkeypatch.setenv("LAMBDALINE_KAFKA_CONTROLLER_PORT", str(settings.kafka.controller_port))
    result = CliRunner().invoke(app, ["kafka", "status"])
    return result.exit_code, result.output


def test_topics_have_three_replicas_and_need_two_in_sync(
    cluster: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin = admin_client(cluster.kafka, client_id="lambdaline-tests")
    try:
        topics = admin.describe_topics(
            [cluster.topics.entries, cluster.topics.speed("vehicle_trips")]
        )
        partitions = [part for topic in topics for part in topic["partitions"]]
        assert len(partitions) == 2 * cluster.kafka.partitions
        assert all(sorted(part["replica_nodes"]) == [1, 2, 3] for part in partitions)
        assert all(sorted(part["isr_nodes"]) == [1, 2, 3] for part in partitions)
        configs = admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, cluster.topics.entries)]
        )["topic"][cluster.topics.entries]
        assert configs["min.insync.replicas"]["value"] == "2"
    finally:
        admin.close()
    code, output = status_output(cluster, monkeypatch)
    assert code == 0, output
    port = cluster.kafka.bootstrap_port
    for node in (1, 2, 3):
        assert f"node {node} 127.0.0.1:{port + node - 1} running: pid " in output
    assert output.count("(active controller)") == 1
    assert "under-replicated partitions: none" in output


def test_a_broker_killed_under_load_loses_no_acknowledged_record_and_rejoins(
    cluster: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = isolated_settings(cluster, tmp_path / "state")  # its own topics and checkpoint
    env = environment_of(settings)  # its bootstrap lists all three nodes
    logs = tmp_path / "logs"
    logs.mkdir()
    speed = spawn_cli(["speed", "run"], env, logs / "speed.log")
    generator: subprocess.Popen[bytes] | None = None
    try:
        generator = spawn_cli(
            ["generate", "--events", str(ENTRIES),
             "--rate", str(RATE), "--seed", str(SEED), "--start", START.isoformat(),
             "--workers", "1"],
            env, logs / "generator.log",
        )  # fmt: skip
        inputs = [settings.topics.entries, settings.topics.exits, settings.topics.registrations]
        wait_until(lambda: _records(settings, inputs) >= 1500, 120, "the generator's first records")

        # the leader of the entries' partition 0: the producer and Spark's consumer must
        # both find its successor
        victim = _leader(settings, settings.topics.entries)
        killed = kafka_broker.status(cluster).nodes[victim - 1].pid
        assert killed is not None
        os.kill(killed, signal.SIGKILL)
        assert generator.wait(timeout=300) == 0, log_tail(logs / "generator.log", 30)
        assert kafka_broker.status(cluster).nodes[victim - 1].pid is None

        # it rejoins: `kafka start` starts the missing node alone, and its replicas catch up
        restarted = kafka_broker.start(cluster)
        assert restarted.registered == {1, 2, 3}
        assert restarted.nodes[victim - 1].pid not in (None, killed)
        wait_until(
            lambda: not kafka_broker.status(cluster).under_replicated, 120, "in-sync replicas"
        )
        code, output = status_output(cluster, monkeypatch)
        assert code == 0 and "under-replicated partitions: none" in output, output

        # every record the generator sent, each once, made again from its seed
        config = GeneratorConfig(events=ENTRIES, seed=SEED, start=START, rate=RATE)
        sent = Counter(
            (record.topic, record.key, record.value)
            for record in shard_records(config, settings, list(range(settings.kafka.partitions)))
        )
        held = Counter((r.topic, r.key, r.value) for r in read_all(settings, *inputs))
        assert sum(sent.values()) > 2 * ENTRIES
        assert held == sent

        # the speed job went on by itself and read every entry
        entries = sum(n for (topic, _, _), n in sent.items() if topic == settings.topics.entries)
        wait_until(lambda: _speed_rows_read(settings) == entries, 180, "the speed job's progress")
        assert speed.poll() is None, log_tail(logs / "speed.log", 30)
    finally:
        for process in (generator, speed):
            if process is not None:
                stop_process(process)


def _records(settings: Settings, topics: list[str]) -> int:
    bounds = offset_bounds(settings.kafka, topics)
    return sum(bound.end - bound.earliest for bound in bounds.values())


def _leader(settings: Settings, topic: str) -> int:
    admin = admin_client(settings.kafka, client_id="lambdaline-tests")
    try:
        [described] = admin.describe_topics([topic])
    finally:
        admin.close()
    [partition] = [p for p in described["partitions"] if p["partition_index"] == 0]
    return int(partition["leader_id"])


def _speed_rows_read(settings: Settings) -> int:
    """Input rows of booth_stats' micro-batches, as the speed job reports them."""
    progress = [json.loads(r.value) for r in read_all(settings, settings.topics.speed_progress)]
    return sum(p["num_input_rows"] or 0 for p in progress if p["query"] == "speed.booth_stats")
