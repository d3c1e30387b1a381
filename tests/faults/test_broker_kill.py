"""kill -9 one broker of three while the generator sends and the speed job reads, then
restart it: no acknowledged record is missing, from the topics or from the master
dataset after the next batch run, and the speed job goes on without a restart.

What an acknowledged record is: one the generator's producer (``acks=all``,
idempotent, topics with ``min.insync.replicas`` 2) was told is written; the
generator exits non-zero if any was not. Which records it sent is known without the
cluster: the generator is seeded, so the test makes the same records again.
"""

from __future__ import annotations

import io
import os
import random
import signal
import time
from collections import Counter
from datetime import UTC, date, datetime
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from rich.console import Console

from batch_layer.run import run_batch
from lambdaline import kafka_broker
from lambdaline.generator import GeneratorConfig, shard_records
from lambdaline.processes import log_tail, stop_process
from shared.platform.kafka_admin import admin_client, offset_bounds
from shared.settings import Settings
from speed_layer.operator import VIEWS_QUERY
from tests.faults.conftest import Results, times
from tests.integration.helpers import (
    environment_of,
    isolated_settings,
    master_coordinates,
    progress_reports,
    read_all,
    spawn_cli,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.faults]

RATE, SEED, PLATES = 250, 11, 300
START = datetime(2026, 1, 5, 6, tzinfo=UTC)
KILLS = times(reduced=1, full=3)
ENTRIES = 1500 * KILLS + 1500  # about 12 s of sending per kill, and as long after the last


def test_a_broker_killed_under_load_loses_no_acknowledged_record(
    kafka_cluster: Settings,
    spark: SparkSession,
    tmp_path: Path,
    rng: random.Random,
    results: Results,
) -> None:
    settings = isolated_settings(kafka_cluster, tmp_path / "state")  # its own topics and checkpoint
    env = environment_of(settings)  # its bootstrap lists all three nodes
    inputs = settings.topics.inputs()
    logs = tmp_path / "logs"
    logs.mkdir()
    speed = spawn_cli(["speed", "run"], env, logs / "speed.log")
    generator = spawn_cli(
        ["generate", "--events", str(ENTRIES), "--rate", str(RATE), "--seed", str(SEED),
         "--plates", str(PLATES), "--start", START.isoformat(), "--workers", "1"],
        env, logs / "generator.log",
    )  # fmt: skip
    killed: list[int] = []
    try:
        for kill in range(1, KILLS + 1):
            wait_until(
                lambda: _records(settings, inputs) >= 1500 * kill,  # noqa: B023 (called at once)
                180, f"the generator's records before kill {kill}",
            )  # fmt: skip
            # the leader of a random partition of the entries: the producer and Spark's
            # consumer must both find its successor
            victim = _leader(settings, settings.topics.entries, rng)
            pid = kafka_broker.status(kafka_cluster).nodes[victim - 1].pid
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
            wait_until(
                lambda: kafka_broker.status(kafka_cluster).nodes[victim - 1].pid is None,  # noqa: B023
                30, f"node {victim} to be gone",
            )  # fmt: skip
            assert generator.poll() is None, "the generator had ended: the kill was not under load"
            # it rejoins a few seconds later (the generator sends meanwhile): `kafka start`
            # starts the missing node alone, and its replicas catch up
            time.sleep(rng.uniform(3.0, 8.0))
            restarted = kafka_broker.start(kafka_cluster)
            assert restarted.registered == {1, 2, 3}
            assert restarted.nodes[victim - 1].pid not in (None, *killed)
        assert generator.wait(timeout=300) == 0, log_tail(logs / "generator.log", 30)
        wait_until(
            lambda: not kafka_broker.status(kafka_cluster).under_replicated, 120, "in-sync replicas"
        )

        # every record the generator sent, each once, made again from its seed
        config = GeneratorConfig(events=ENTRIES, seed=SEED, start=START, rate=RATE, plates=PLATES)
        sent = Counter(
            (record.topic, record.key, record.value)
            for record in shard_records(config, settings, list(range(settings.kafka.partitions)))
        )
        held = read_all(settings, *inputs)
        assert sum(sent.values()) > 2 * ENTRIES
        assert Counter((r.topic, r.key, r.value) for r in held) == sent

        # the speed job went on by itself and read every record, each once
        wait_until(
            lambda: _speed_rows_read(settings) == sum(sent.values()),
            180,
            "the speed job's progress",
        )
        assert speed.poll() is None, log_tail(logs / "speed.log", 30)
    finally:
        stop_process(generator)
        stop_process(speed)
        kafka_broker.start(
            kafka_cluster
        )  # the cluster whole again for the next case, whatever failed

    # the next batch run stores every record in the master dataset, valid or dead letter
    run_batch(spark, settings, date(2026, 1, 5), 2, console=Console(file=io.StringIO()))
    stored = master_coordinates(spark, settings)
    coordinates = Counter((r.topic, r.partition, r.offset) for r in held)
    missing = coordinates - stored
    assert not missing, f"{sum(missing.values())} acknowledged records missing from the master"
    assert stored == coordinates  # and none twice
    results.add(
        "kill -9 one broker of three (a partition leader) under load, restarted later",
        KILLS,
        f"generator acknowledged all {len(held):,} records; topics and master dataset hold "
        "each once; the speed job went on unrestarted",
        records_lost=sum(missing.values()),
    )


def _records(settings: Settings, topics: list[str]) -> int:
    bounds = offset_bounds(settings.kafka, topics)
    return sum(bound.end - bound.earliest for bound in bounds.values())


def _leader(settings: Settings, topic: str, rng: random.Random) -> int:
    admin = admin_client(settings.kafka, client_id="lambdaline-tests")
    try:
        [described] = admin.describe_topics([topic])
    finally:
        admin.close()
    partition = rng.choice(described["partitions"])
    return int(partition["leader_id"])


def _speed_rows_read(settings: Settings) -> int:
    """Input rows of the views query's micro-batches (every input topic's records), as the
    speed job reports them."""
    return sum(r["num_input_rows"] or 0 for r in progress_reports(settings, VIEWS_QUERY))
