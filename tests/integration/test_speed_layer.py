"""The speed job on the real broker and real Spark, on small hand-written inputs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from kafka import KafkaProducer
from pyspark.sql import SparkSession

from shared.settings import Settings
from speed_layer import job
from speed_layer.checkpoint import checkpoint_dir
from speed_layer.operator import VIEWS_QUERY
from tests.integration.helpers import (
    hand_rows,
    isolated_settings,
    lookback_scenario,
    read_all,
    send,
    speed_booth_stats,
    speed_rows,
    speed_view,
    without_version,
)
from tests.scenarios import Lookback, Lookups, OneDay, entry, entry_value, exit_

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def drained(
    kafka: Settings, spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Settings]:
    """One available-now run over valid entries (with a duplicate) and one record per dead-letter class."""
    settings = isolated_settings(kafka, tmp_path_factory.mktemp("speed"))
    send(settings, settings.topics.entries, OneDay.ENTRIES + OneDay.MALFORMED)
    job.run(spark, settings, available_now=True)
    yield settings


def test_booth_stats_counts_each_event_once(drained: Settings) -> None:
    assert speed_booth_stats(drained) == OneDay.BOOTH_STATS


def test_speed_store_records_are_keyed_by_the_view_key(drained: Settings) -> None:
    keys = {
        json.loads(key)["booth_id"] + "@" + json.loads(key)["window_start"]
        for key in speed_view(drained, "booth_stats")
    }
    assert keys == {
        "b1@2026-01-05T10:00:00.000Z", "b1@2026-01-05T10:05:00.000Z", "b2@2026-01-05T10:00:00.000Z",
    }  # fmt: skip


def test_every_malformed_class_lands_in_dead_letters(drained: Settings) -> None:
    letters = [
        json.loads(record.value) for record in read_all(drained, drained.topics.dead_letters)
    ]
    by_offset = sorted(letters, key=lambda letter: letter["source_offset"])
    assert [(letter["source_offset"], letter["reason"]) for letter in by_offset] == [
        (5, "invalid_json"),
        (6, "missing_field"),
        (7, "invalid_value"),
        (8, "future_event_time"),
    ]
    assert by_offset[0]["value"] == "not json"
    assert by_offset[0]["value_base64"] == "bm90IGpzb24="  # base64 of b"not json"
    assert {letter["source_topic"] for letter in letters} == {drained.topics.entries}


def test_spark_reads_the_speed_jobs_scheduler_pools(spark: SparkSession) -> None:
    # the test session has the speed job's tuning (tests/conftest.py); Spark
    # builds its pools from the allocation file when the context starts
    assert spark.sparkContext.getConf().get("spark.scheduler.mode") == "FAIR"
    context = spark.sparkContext._jsc.sc()
    for pool in (job.VIEWS_POOL, job.OTHERS_POOL):
        assert context.getPoolForName(pool).isDefined(), pool


def test_progress_is_published_per_query(drained: Settings, spark: SparkSession) -> None:
    progress = [
        json.loads(record.value) for record in read_all(drained, drained.topics.speed_progress)
    ]
    views = [p for p in progress if p["query"] == VIEWS_QUERY and p["num_input_rows"] > 0]
    assert sum(p["num_input_rows"] for p in views) == len(OneDay.ENTRIES) + len(OneDay.MALFORMED)
    assert views[-1]["watermark"] is not None
    # where each micro-batch's time went, as Spark times its phases
    assert views[-1]["phases_ms"]["addBatch"] <= views[-1]["batch_duration_ms"]
    # the API compares them with its own window and max_trip (/v1/status)
    assert {json.dumps(p["view_settings"], sort_keys=True) for p in progress} == {
        '{"max_trip": "1h", "registration_lookback": "400d", "rolling_slide": "5m", '
        '"rolling_window": "1h", "session_gap": "30m", "window": "5m"}'
    }
    # state per stateful operator: the one operator, whose roll-up holds each booth's
    # 5-minute buckets (OneDay.BOOTH_STATS' three windows; none dropped: the watermark
    # stays in the morning)
    last = {p["query"]: p for p in progress}
    [operator] = last[VIEWS_QUERY]["state_operators"]
    assert operator["operator"] == "transformWithStateExec"
    # RocksDB: memory in use; SST files only once a snapshot is made (changelog
    # checkpointing writes the changes of each batch, not files of the store)
    assert operator["memory_bytes"] > 0
    assert operator["disk_bytes"] is not None
    assert operator["counters"]["rocksdb_puts"] > 0
    held = (
        spark.read.format("statestore")
        .option("stateVarName", "roll_up")
        .load(str(checkpoint_dir(drained) / "views"))
        .collect()
    )
    buckets = {row.key[0]: [bucket.start for bucket in row.value.buckets] for row in held}
    ten = int(datetime(2026, 1, 5, 10, tzinfo=UTC).timestamp() * 1000)
    assert buckets == {"r:b1": [ten, ten + 300_000], "r:b2": [ten]}


def test_a_record_later_than_the_watermark_is_dropped_and_counted(
    kafka: Settings, spark: SparkSession, tmp_path: Path
) -> None:
    settings = isolated_settings(kafka, tmp_path)
    send(settings, settings.topics.entries, [
        OneDay.E1,
        entry("e5", "b1", "P5", "2026-01-05T10:20:00.000Z", "3.00", sent_at="2026-01-05T10:20:00.100Z"),
    ])  # fmt: skip
    job.run(spark, settings, available_now=True)  # the watermark moves to 10:18 (2 min behind)

    late = entry_value("e6", "b1", "P6", "2026-01-05T10:01:30.000Z", "9.00")
    send(settings, settings.topics.entries, [(b"P6", late, "2026-01-05T10:21:00.000Z")])
    job.run(spark, settings, available_now=True)  # restarts from the checkpoint

    window_10_00 = speed_view(settings, "booth_stats")[
        '{"booth_id":"b1","window_start":"2026-01-05T10:00:00.000Z"}'
    ]
    assert window_10_00["vehicle_count"] == 1  # e6 was not counted
    progress = [json.loads(r.value) for r in read_all(settings, settings.topics.speed_progress)]
    second_run = [p for p in progress if p["query"] == VIEWS_QUERY and p["num_input_rows"] == 1]
    # Spark's count of the operator's input rows: e6's booth row and its plate row
    assert [p["rows_dropped_by_watermark"] for p in second_run] == [2]


def test_each_entrys_trip_is_its_earliest_exit_within_max_trip(
    kafka: Settings, spark: SparkSession, tmp_path: Path
) -> None:
    settings = isolated_settings(kafka, tmp_path)
    send(settings, settings.topics.entries, [
        OneDay.E1,
        OneDay.E4,
        OneDay.E2,
        # closes the hour: moves the entries' watermark past 10:03 + max_trip
        entry("e9", "b9", "P9", "2026-01-05T11:30:00.000Z", "1.00", sent_at="2026-01-05T11:30:00.100Z"),
    ])  # fmt: skip
    send(settings, settings.topics.exits, [
        OneDay.X1,
        OneDay.X1B,
        OneDay.X2,
        OneDay.X4,
        exit_("x9", "b9", "P9", "2026-01-05T11:31:00.000Z", sent_at="2026-01-05T11:31:00.100Z"),
    ])  # fmt: skip
    job.run(spark, settings, available_now=True)

    trips = sorted(
        (without_version(row) for row in speed_view(settings, "vehicle_trips").values()),
        key=lambda row: str(row["entry_time"]),
    )
    assert trips == [
        {"booth_id": "b1", "license_plate": "P1", "entry_time": "2026-01-05T10:00:10.000Z",
         "exit_time": "2026-01-05T10:12:00.000Z", "duration_seconds": Decimal("710.0")},
        {"booth_id": "b2", "license_plate": "P1", "entry_time": "2026-01-05T10:01:00.000Z",
         "exit_time": "2026-01-05T10:31:00.000Z", "duration_seconds": Decimal("1800.0")},
        # served at once, provisional: an earlier exit could still come
        {"booth_id": "b9", "license_plate": "P9", "entry_time": "2026-01-05T11:30:00.000Z",
         "exit_time": "2026-01-05T11:31:00.000Z", "duration_seconds": Decimal("60.0")},
    ]  # fmt: skip


def test_expired_registrations_and_diagnostics(
    kafka: Settings, spark: SparkSession, tmp_path: Path
) -> None:
    settings = isolated_settings(kafka, tmp_path)
    send(settings, settings.topics.registrations, Lookups.REGISTRATIONS)
    send(settings, settings.topics.entries, Lookups.ENTRIES)
    send(settings, settings.topics.exits, Lookups.EXITS)
    job.run(spark, settings, available_now=True)

    assert speed_rows(settings, "expired_registrations") == hand_rows(Lookups.EXPIRED)
    assert speed_rows(settings, "diagnostics") == hand_rows(Lookups.DIAGNOSTICS)


def test_a_registration_applies_for_the_lookback_only(
    kafka: Settings, spark: SparkSession, tmp_path: Path
) -> None:
    settings = lookback_scenario(kafka, tmp_path)
    job.run(spark, settings, available_now=True)

    alerts = speed_view(settings, "expired_registrations").values()
    assert (
        sorted(
            (row["booth_id"], row["license_plate"], row["entry_time"][:19], row["registration_id"])
            for row in alerts
        )
        == Lookback.ALERTS
    )
    diagnostics = speed_view(settings, "diagnostics").values()
    assert (
        sorted(
            (row["booth_id"], row["window_start"][:19], row["count"])
            for row in diagnostics
            if row["reason"] == "missing_registration"
        )
        == Lookback.MISSING_REGISTRATIONS
    )
    assert {row["reason"] for row in diagnostics} == {"missing_registration"}


def test_a_replayed_lookup_batch_does_not_count_its_diagnostic_entries_twice(
    kafka: Settings, spark: SparkSession, tmp_path: Path
) -> None:
    settings = isolated_settings(kafka, tmp_path)
    send(settings, settings.topics.registrations, [
        OneDay.R1,
    ])  # fmt: skip
    send(settings, settings.topics.entries, [
        OneDay.E1,
        OneDay.E3,
        # moves the watermark past 10:05; itself undecided at the end of the run
        entry("e9", "b9", "P1", "2026-01-05T12:30:00.000Z", "1.00", sent_at="2026-01-05T12:30:00.100Z"),
    ])  # fmt: skip
    # an exit too (the watermark is the entries' alone)
    send(settings, settings.topics.exits, [
        exit_("x9", "b9", "P1", "2026-01-05T12:31:00.000Z", sent_at="2026-01-05T12:31:00.100Z"),
    ])  # fmt: skip
    job.run(spark, settings, available_now=True)

    def diagnostics() -> list[dict[str, object]]:
        rows = [without_version(row) for row in speed_view(settings, "diagnostics").values()]
        return sorted(rows, key=lambda row: (str(row["window_start"]), str(row["reason"])))

    # e1 and e3 have no exit within max_trip (the watermark, 12:28, is past 11:05);
    # e3 has no registration
    expected = [
        {"booth_id": "b1", "window_start": "2026-01-05T10:00:00.000Z",
         "reason": "missing_exit", "count": 1},
        {"booth_id": "b1", "window_start": "2026-01-05T10:05:00.000Z",
         "reason": "missing_exit", "count": 1},
        {"booth_id": "b1", "window_start": "2026-01-05T10:05:00.000Z",
         "reason": "missing_registration", "count": 1},
    ]  # fmt: skip
    assert diagnostics() == expected

    # a crash after the lookup's micro-batch wrote the internal topic but before
    # Spark committed it: the replay writes the same records again
    internal = settings.topics.diagnostic_entries
    written = read_all(settings, internal)
    decided = sorted(
        (json.loads(r.value)["event_id"], json.loads(r.value)["reason"]) for r in written
    )
    assert decided == [
        ("e1", "missing_exit"),
        ("e3", "missing_exit"),
        ("e3", "missing_registration"),
    ]
    producer = KafkaProducer(bootstrap_servers=settings.kafka.bootstrap)
    for record in written:
        producer.send(internal, key=record.key, value=record.value, timestamp_ms=record.timestamp)
    producer.flush()
    producer.close()
    job.run(spark, settings, available_now=True)

    assert diagnostics() == expected
