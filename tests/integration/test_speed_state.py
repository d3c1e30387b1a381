"""The speed job's state stays bounded: the registration join keeps only what the
lookback can still use (real broker, real Spark, RocksDB state)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from shared.settings import Settings
from speed_layer import job
from tests.integration.helpers import isolated_settings, read_all, send
from tests.scenarios import entry, exit_, registration

pytestmark = pytest.mark.integration

LOOKBACK = timedelta(hours=1)
EVERY = timedelta(minutes=5)
SENT = 60  # five hours of registrations: five lookbacks
PER_TYPE = 4  # records of each input a micro-batch reads


def wire(at: datetime) -> str:
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def test_registration_state_of_one_plate_stays_within_the_lookback(
    kafka: Settings, spark: SparkSession, tmp_path: Path
) -> None:
    settings = isolated_settings(kafka, tmp_path)
    settings = settings.updated(
        registration_lookback=LOOKBACK, speed_max_offsets_per_trigger=3 * PER_TYPE
    )
    times = [datetime(2026, 1, 5, tzinfo=UTC) + n * EVERY for n in range(SENT)]
    # P1 registered every 5 minutes; P2 drives through meanwhile: the query's
    # watermark is the least of its inputs', so entries and exits must flow too
    send(settings, settings.topics.registrations, [
        registration(f"r{n}", f"R{n}", "P1", n % 2 == 0, wire(at)) for n, at in enumerate(times)
    ])  # fmt: skip
    send(settings, settings.topics.entries, [
        entry(f"e{n}", "b1", "P2", wire(at), "1.00") for n, at in enumerate(times)
    ])  # fmt: skip
    send(settings, settings.topics.exits, [
        exit_(f"x{n}", "b1", "P2", wire(at + timedelta(minutes=1))) for n, at in enumerate(times)
    ])  # fmt: skip
    job.run(spark, settings, available_now=True)  # PER_TYPE records of each a micro-batch

    progress = [
        json.loads(record.value) for record in read_all(settings, settings.topics.speed_progress)
    ]
    # the lookups' second join is the registration join (the plan's order: trips first)
    joined = [
        next(op["rows"] for op in p["state_operators"] if op["operator"] == "symmetricHashJoin#2")
        for p in progress
        if p["query"] == "speed.lookups" and p["num_input_rows"] > 0
    ]
    assert len(joined) == SENT // PER_TYPE
    # by hand: after a micro-batch, the registrations within the lookback of its
    # watermark (its latest time less the 2 min delay) are in state, at most
    # 60 min / 5 min + 1 of them, plus the batch's own 4 and one the 2 min let in;
    # and the entries the watermark has not passed: the batch's 4 and one more
    bound = (LOOKBACK // EVERY + 1 + PER_TYPE + 1) + (PER_TYPE + 1)
    assert max(joined) <= bound < SENT
    # and it got there: the state filled up to the lookback, then stopped growing
    assert joined[-1] >= LOOKBACK // EVERY
