"""The view functions on static DataFrames: the batch layer's definition of truth.

One small day at two booths (``tests.scenarios.OneDay``, whose comments name
each edge case); every expected row below was worked out by hand from its events.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import types as T
from pyspark.testing import assertDataFrameEqual

from shared.domain.events import TOLL_ENTRY, TOLL_EXIT, VEHICLE_REGISTRATION, EventType
from shared.domain.views import (
    booth_stats,
    compute_views,
    diagnostics,
    expired_registrations,
    vehicle_trips,
)
from shared.domain.views.rules import without_duplicates
from shared.domain.views.view import Inputs
from shared.settings.views import REGISTERED
from tests.scenarios import OneDay, Record, as_event, entry

WINDOW = timedelta(minutes=5)
MAX_TRIP = timedelta(hours=1)
LOOKBACK = timedelta(days=400)
SIZES = dict(
    window=WINDOW, rolling_window=timedelta(hours=1), rolling_slide=timedelta(minutes=5),
    session_gap=timedelta(minutes=30), max_trip=MAX_TRIP, registration_lookback=LOOKBACK,
)  # fmt: skip
SOURCE = T.StructType(
    [
        T.StructField("source_topic", T.StringType()),
        T.StructField("source_partition", T.IntegerType()),
        T.StructField("source_offset", T.LongType()),
        T.StructField("source_timestamp", T.TimestampType()),
    ]
)


def at(hhmmss: str, day: int = 5) -> datetime:
    hours, minutes, seconds = (int(part) for part in hhmmss.split(":"))
    return datetime(2026, 1, day, hours, minutes, seconds)


def events(spark: SparkSession, event_type: EventType, records: list[Record]) -> DataFrame:
    """The records' events as validation yields them: the event type's fields, then
    source coordinates (offset = the record's position)."""
    schema = T.StructType(event_type.spark_schema.fields + SOURCE.fields)
    sourced = [
        (*as_event(record, event_type), event_type.name, 0, offset, at("00:00:00"))
        for offset, record in enumerate(records)
    ]
    return spark.createDataFrame(sourced, schema)


@pytest.fixture(scope="module")
def entries(spark: SparkSession) -> DataFrame:
    return without_duplicates(
        events(
            spark,
            TOLL_ENTRY,
            # e1 twice: a duplicate
            [OneDay.E1, OneDay.E2, OneDay.E3, OneDay.E4, OneDay.E1, OneDay.E5],
        )
    )


@pytest.fixture(scope="module")
def exits(spark: SparkSession) -> DataFrame:
    return without_duplicates(
        events(
            spark,
            TOLL_EXIT,
            # x4 twice: a duplicate
            [OneDay.X1, OneDay.X1B, OneDay.X2, OneDay.X3, OneDay.X4, OneDay.X5, OneDay.X4],
        )
    )


@pytest.fixture(scope="module")
def registrations(spark: SparkSession) -> DataFrame:
    return without_duplicates(
        events(
            spark,
            VEHICLE_REGISTRATION,
            [OneDay.R1, OneDay.R1B, OneDay.R2, OneDay.R4],
        )
    )


def test_duplicates_count_once(entries: DataFrame) -> None:
    assert sorted(row.event_id for row in entries.collect()) == ["e1", "e2", "e3", "e4", "e5"]


def test_booth_stats(entries: DataFrame) -> None:
    assertDataFrameEqual(
        booth_stats.VIEW.compute(Inputs(entries), SIZES),
        [
            Row(booth_id="b1", window_start=at("10:00:00"), window_end=at("10:05:00"),
                vehicle_count=2, total_toll=Decimal("6.50"),
                first_entry_time=at("10:00:10"), last_entry_time=at("10:03:00")),
            Row(booth_id="b1", window_start=at("10:05:00"), window_end=at("10:10:00"),
                vehicle_count=1, total_toll=Decimal("5.75"),
                first_entry_time=at("10:05:00"), last_entry_time=at("10:05:00")),
            Row(booth_id="b2", window_start=at("10:00:00"), window_end=at("10:05:00"),
                vehicle_count=1, total_toll=Decimal("7.25"),
                first_entry_time=at("10:01:00"), last_entry_time=at("10:01:00")),
            Row(booth_id="b1", window_start=at("23:55:00"), window_end=at("00:00:00", day=6),
                vehicle_count=1, total_toll=Decimal("2.50"),
                first_entry_time=at("23:58:00"), last_entry_time=at("23:58:00")),
        ],
        checkRowOrder=False,
    )  # fmt: skip


def test_vehicle_trips(entries: DataFrame, exits: DataFrame) -> None:
    assertDataFrameEqual(
        vehicle_trips.VIEW.compute(Inputs(entries, exits), SIZES),
        [
            Row(booth_id="b1", license_plate="P1", entry_time=at("10:00:10"),
                exit_time=at("10:12:00"), duration_seconds=710.0),
            Row(booth_id="b2", license_plate="P1", entry_time=at("10:01:00"),
                exit_time=at("10:31:00"), duration_seconds=1800.0),
            Row(booth_id="b1", license_plate="P4", entry_time=at("23:58:00"),
                exit_time=at("00:10:00", day=6), duration_seconds=720.0),
        ],
        checkRowOrder=False,
    )  # fmt: skip


def test_expired_registrations(entries: DataFrame, registrations: DataFrame) -> None:
    assertDataFrameEqual(
        expired_registrations.VIEW.compute(Inputs(entries, registrations=registrations), SIZES),
        [
            Row(booth_id="b1", license_plate="P2", entry_time=at("10:03:00"), registration_id="R2"),
            Row(
                booth_id="b2", license_plate="P1", entry_time=at("10:01:00"), registration_id="R1b"
            ),
        ],
        checkRowOrder=False,
    )


def test_diagnostics(entries: DataFrame, exits: DataFrame, registrations: DataFrame) -> None:
    assertDataFrameEqual(
        diagnostics.VIEW.compute(Inputs(entries, exits, registrations), SIZES),
        [
            Row(booth_id="b1", window_start=at("10:00:00"), reason="missing_exit", count=1),
            Row(booth_id="b1", window_start=at("10:05:00"), reason="missing_exit", count=1),
            Row(booth_id="b1", window_start=at("10:05:00"), reason="missing_registration", count=1),
        ],
        checkRowOrder=False,
    )


def test_window_size_is_an_argument(entries: DataFrame) -> None:
    hourly = (
        booth_stats.VIEW.compute(Inputs(entries), {**SIZES, "window": timedelta(hours=1)})
        .where("booth_id = 'b1'")
        .orderBy("window_start")
    )
    assert [(row.window_start, row.vehicle_count) for row in hourly.collect()] == [
        (at("10:00:00"), 3),
        (at("23:00:00"), 1),
    ]


def test_all_views_count_entries_of_one_key_row_by_row(
    spark: SparkSession, exits: DataFrame, registrations: DataFrame
) -> None:
    """Two vehicles (two event_ids) at one booth, plate and instant, neither with an
    exit or a registration: two of each diagnostic, and no trip. all_views persists
    the trip join and the registration lookup without event_id; the rows must
    still be counted one by one."""
    twins = without_duplicates(
        events(
            spark,
            TOLL_ENTRY,
            [
                entry("t1", "b2", "P9", "2026-01-05T12:00:00.000Z", "1.00"),
                entry("t2", "b2", "P9", "2026-01-05T12:00:00.000Z", "1.00"),
                entry("t1", "b2", "P9", "2026-01-05T12:00:00.000Z", "1.00"),  # a copy of t1
            ],
        )
    )
    views = compute_views(REGISTERED, Inputs(twins, exits, registrations), SIZES)
    try:
        assertDataFrameEqual(
            views["diagnostics"],
            [
                Row(booth_id="b2", window_start=at("12:00:00"), reason="missing_exit", count=2),
                Row(
                    booth_id="b2",
                    window_start=at("12:00:00"),
                    reason="missing_registration",
                    count=2,
                ),
            ],
            checkRowOrder=False,
        )
        assert views["vehicle_trips"].count() == 0
        assert [row.vehicle_count for row in views["booth_stats"].collect()] == [2]
    finally:
        spark.catalog.clearCache()
