"""The speed job's state stays bounded: per plate, the operator keeps only what an event
still to come can use (real broker, real Spark, RocksDB state, read back with Spark's
state data source)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import Row, SparkSession

from shared.settings import Settings
from speed_layer import job
from speed_layer.checkpoint import checkpoint_dir
from speed_layer.operator import VIEWS_QUERY
from tests.integration.helpers import (
    isolated_settings,
    progress_reports,
    send,
    speed_rows,
)
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
        registration_lookback=LOOKBACK, speed_max_offsets_per_trigger=2 * PER_TYPE
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
    # PER_TYPE entries and exits a micro-batch; the registrations are read whole, in the first
    job.run(spark, settings, available_now=True)

    progress = [p for p in progress_reports(settings, VIEWS_QUERY) if p["num_input_rows"] > 0]
    assert len(progress) == SENT // PER_TYPE
    views = checkpoint_dir(settings) / "views"
    registered = {f"R{n}": at for n, at in enumerate(times)}
    for report in progress[1:]:
        watermark = datetime.fromisoformat(report["watermark"])
        held_ = [
            registered[r.strings[0]]  # a held registration's strings: its id, its event id
            for r in held(spark, views, report["batch_id"], "plate_rights_1").get("p:P1", [])
        ]
        # by hand: P1 holds none the lookback behind the watermark its micro-batch ran
        # under has passed (its timer took it out), whatever came before
        assert held_ and min(held_) > watermark - LOOKBACK, report["batch_id"]
    # after the last, of those at or before the watermark only the best one (the latest)
    last = datetime.fromisoformat(progress[-1]["watermark"])
    kept = held(spark, views, progress[-1]["batch_id"], "plate_rights_1")["p:P1"]
    assert sorted(r.strings[0] for r in kept) == sorted(
        [max((f"R{n}" for n, at in enumerate(times) if at <= last), key=registered.__getitem__)]
        + [f"R{n}" for n, at in enumerate(times) if at > last]
    )
    assert len(kept) < LOOKBACK // EVERY
    # P2's entries are held for max_trip (1 h), then leave: 60 min / 5 min + 1 of them,
    # plus the batch's own 4 and one the delay let in; exits only until the watermark
    batches = [report["batch_id"] for report in progress]
    entries = [len(held(spark, views, batch, "plate_entries").get("p:P2", [])) for batch in batches]
    assert max(entries) <= timedelta(hours=1) // EVERY + 1 + PER_TYPE + 1 < SENT
    assert entries[-1] >= timedelta(hours=1) // EVERY  # it got there
    exits = [len(held(spark, views, batch, "plate_rights_0").get("p:P2", [])) for batch in batches]
    assert max(exits) <= PER_TYPE + 1


def test_a_backlog_read_in_capped_micro_batches_reads_each_registration_before_its_entries(
    kafka: Settings, spark: SparkSession, tmp_path: Path
) -> None:
    # a backlog as a day's catch-up makes it: every registration published first, then
    # the traffic; each micro-batch reads 4 records of the capped topics, and Kafka's
    # source would give the registrations their share of those (a quarter here) by offsets
    settings = isolated_settings(kafka, tmp_path).updated(speed_max_offsets_per_trigger=4)
    start = datetime(2026, 1, 5, tzinfo=UTC)
    plates = [f"P{n}" for n in range(8)]
    send(settings, settings.topics.registrations, [
        registration(f"r{n}", f"R{n}", plate, True, wire(start - timedelta(days=1)))
        for n, plate in enumerate(plates)
    ])  # fmt: skip
    # 24 entries ten minutes apart, the plates in turn: the watermark (2 min behind the
    # latest entry read) passes most entries before a capped read reached their plate's
    # registration
    entries = [(f"e{n}", plates[n % 8], start + n * timedelta(minutes=10)) for n in range(24)]
    send(settings, settings.topics.entries, [
        entry(event_id, "b1", plate, wire(at), "1.00") for event_id, plate, at in entries
    ])  # fmt: skip
    job.run(spark, settings, available_now=True)

    batches = [r for r in progress_reports(settings, VIEWS_QUERY) if r["num_input_rows"] > 0]
    assert len(batches) >= 24 // 4  # the entries took a micro-batch each 4
    # by hand: every entry's plate has an expired registration from the day before, so
    # every entry is an alert naming it
    assert speed_rows(settings, "expired_registrations") == sorted(
        ("b1", plate, wire(at).removesuffix(".000Z"), f"R{plates.index(plate)}")
        for _, plate, at in entries
    )


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
