"""The speed job's state stays bounded: per plate, the operator keeps only what an event
still to come can use (real broker, real Spark, RocksDB state, read back with Spark's
state data source)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import Row, SparkSession

from shared.settings import Settings
from speed_layer import job
from speed_layer.checkpoint import checkpoint_dir
from speed_layer.operator import VIEWS_QUERY
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
    # P1 registered every 5 minutes; P2 drives through meanwhile (its entries move the
    # watermark), each entry followed by its exit
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
    batches = [
        p["batch_id"] for p in progress if p["query"] == VIEWS_QUERY and p["num_input_rows"] > 0
    ]
    assert len(batches) == SENT // PER_TYPE
    views = checkpoint_dir(settings) / "views"
    registrations = [held(spark, views, batch, "plate_rights_1") for batch in batches]
    # by hand: after a micro-batch, P1 holds the registrations after the watermark it
    # was read under (the batch's own 4 at most, and the one the 2 min delay let in)
    # and the best one before it: never more, whatever the lookback
    assert max(len(state.get("p:P1", [])) for state in registrations) <= PER_TYPE + 2
    assert PER_TYPE + 2 < LOOKBACK // EVERY
    # the last is kept: an entry of the next lookback would still use it
    # (a held registration's strings: its registration_id, then its event id)
    assert max(r.strings[0] for r in registrations[-1]["p:P1"]) == f"R{SENT - 1}"
    # P2's entries are held for max_trip (1 h), then leave: 60 min / 5 min + 1 of them,
    # plus the batch's own 4 and one the delay let in; exits only until the watermark
    entries = [len(held(spark, views, batch, "plate_entries").get("p:P2", [])) for batch in batches]
    assert max(entries) <= timedelta(hours=1) // EVERY + 1 + PER_TYPE + 1 < SENT
    assert entries[-1] >= timedelta(hours=1) // EVERY  # it got there
    exits = [len(held(spark, views, batch, "plate_rights_0").get("p:P2", [])) for batch in batches]
    assert max(exits) <= PER_TYPE + 1


def held(spark: SparkSession, query: Path, batch_id: int, variable: str) -> dict[str, list[Row]]:
    """One state variable of the operator after a micro-batch (Spark's state data source),
    per grouping key: its values (a map's values; a value's ``held`` elements)."""
    rows = (
        spark.read.format("statestore")
        .option("stateVarName", variable)
        .option("batchId", batch_id)
        .load(str(query))
        .collect()
    )
    found: dict[str, list[Row]] = {}
    for row in rows:
        values = [v for name, v in row.asDict().items() if name not in ("key", "partition_id")]
        value = values[-1]
        if "held" in value.asDict():  # a plate's rights: one value holding them all
            found.setdefault(row.key[0], []).extend(value.held)
        else:
            found.setdefault(row.key[0], []).append(value)
    return found
