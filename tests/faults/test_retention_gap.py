"""Retention gap: Kafka deletes input records (as retention does) before the batch layer
ingested them, while the generator sends.

The next batch run stops with the named error and leaves the served version alone.
After ``batch reset-ingest``, the lost ranges (topic, partition, offsets) are in the
master dataset's ingest log, in the next version's metadata and in ``/v1/status``;
and every offset ever written to an input partition is, exactly once, either a
record of the master dataset (an event or a dead letter) or inside a lost range.
"""

from __future__ import annotations

import io
import json
import time
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from kafka import TopicPartition
from pyspark.sql import SparkSession
from rich.console import Console

from batch_layer import ingest_log
from batch_layer.run import run_batch
from lambdaline.processes import log_tail, stop_process
from serving.main import create_app
from shared.platform.batch_store import read_current
from shared.platform.kafka_admin import admin_client, offset_bounds
from shared.settings import Settings
from tests.faults.conftest import Results
from tests.integration.helpers import (
    environment_of,
    isolated_settings,
    master_coordinates,
    run_cli,
    spawn_cli,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.faults]

KEY = "faults-gap-key"
RUN_DATE = date(2026, 1, 5)


def test_records_deleted_before_the_ingest_are_named_then_recorded_as_lost(
    kafka_cluster: Settings, spark: SparkSession, tmp_path: Path, results: Results
) -> None:
    settings = isolated_settings(kafka_cluster, tmp_path / "state").updated(api_keys=[KEY])
    entries = settings.topics.entries
    log = tmp_path / "generator.log"
    generator = spawn_cli(
        ["generate", "--events", "1000000", "--rate", "100", "--seed", "6", "--plates", "200",
         "--start", "2026-01-05T06:00:00Z", "--workers", "1"],
        environment_of(settings), log,
    )  # fmt: skip
    try:
        time.sleep(3)
        _batch(spark, settings)  # version 1 (ingest batch 0)
        served = read_current(settings.batch_store)
        assert served is not None and served.lost_input == ()
        time.sleep(3)
        # retention's work, by hand: every entry the ingest has not read yet, and some it has
        deleted_to = {
            partition: bounds.end
            for (_, partition), bounds in offset_bounds(settings.kafka, [entries]).items()
        }
        admin = admin_client(settings.kafka)
        try:
            admin.delete_records({TopicPartition(entries, p): end for p, end in deleted_to.items()})
        finally:
            admin.close()
        time.sleep(2)
        assert generator.poll() is None, log_tail(log, 20)  # it sent throughout
    finally:
        stop_process(generator)

    stopped = run_cli(settings, "batch", "run", "--date", RUN_DATE.isoformat(), timeout_s=300)
    said = " ".join(stopped.stderr.split())
    assert stopped.returncode == 1, stopped.stdout + stopped.stderr
    assert "Kafka no longer holds records its checkpoint has read or expects" in said, said
    assert "retention deleted records the master dataset never stored" in said
    assert read_current(settings.batch_store) == served  # the served version stays

    reset = run_cli(settings, "batch", "reset-ingest", "--yes", timeout_s=300)
    assert reset.returncode == 0, reset.stdout + reset.stderr
    assert "records before they were read: it records them as lost" in " ".join(
        reset.stdout.split()
    )

    _batch(spark, settings)  # version 2
    version = read_current(settings.batch_store)
    assert version is not None and version.version == served.version + 1
    lost = version.lost_input
    assert lost == ingest_log.lost_input(spark, settings.master_location)  # the ingest log's record
    assert {item.topic for item in lost} == {entries}
    assert {item.partition: item.end_offset for item in lost} == {
        p: end for p, end in deleted_to.items() if end > 0
    }

    # every offset written: stored once, or in a lost range, never both
    stored = master_coordinates(spark, settings)
    assert max(stored.values()) == 1
    ends = offset_bounds(settings.kafka, settings.topics.inputs())
    for (topic, partition), bounds in ends.items():
        held = {offset for (t, p, offset) in stored if (t, p) == (topic, partition)}
        gone = {
            offset
            for item in lost
            if (item.topic, item.partition) == (topic, partition)
            for offset in range(item.first_offset, item.end_offset)
        }
        assert not held & gone, (topic, partition)
        assert held | gone == set(range(bounds.end)), (topic, partition)

    status = _status(settings)
    assert status["batch_version"] == version.version
    assert status["batch_lost_input"] == [item.to_document() for item in lost]
    records = sum(item.records for item in lost)
    assert records > 0
    results.add(
        "input records deleted from Kafka (retention) before the batch ingested them",
        len(lost),
        "the next run stopped naming it, the served version unchanged; after "
        f"`batch reset-ingest` the {records:,} records deleted are recorded as lost ranges "
        "in the ingest log, the next version and /v1/status; every other offset is stored once",
        records_lost=f"none unrecorded ({records:,} deleted by Kafka, each in a lost range)",
    )


def _batch(spark: SparkSession, settings: Settings) -> None:
    run_batch(spark, settings, RUN_DATE, 2, console=Console(file=io.StringIO()))


def _status(settings: Settings) -> Any:
    app = create_app(settings)
    with TestClient(app, headers={"X-API-Key": KEY}) as client:
        response = client.get("/v1/status")
        assert response.status_code == 200, response.text
        return json.loads(response.text)
