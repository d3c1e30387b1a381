"""A query one store answers alone: DuckDB's JSON against the general merge path.

``one_store_json`` writes the rows' JSON in DuckDB; ``merged_rows`` reads them
into Python, merges and ``encode_rows`` writes them. On real DuckDB stores
(filled by hand, with awkward strings and doubles) the two must give the same
rows, in the same order, with the same values and sources.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from batch_layer.publish import empty_store_tables, publish_version
from serving.batch_reader import BatchSnapshot
from serving.queries import ViewQuery, merged_rows, one_store, one_store_json
from serving.responses import encode_rows
from serving.speed_tables import SpeedTables
from shared.batch_store import read_current
from shared.merge import Source
from tests.unit.test_api import booth_row, fill_speed, speed_booth, speed_record, table_of

HORIZON = datetime(2026, 1, 6, tzinfo=UTC)
AWKWARD = 'b"\\ü\t€'  # a quote, a backslash, non-ASCII and a control character


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[tuple[BatchSnapshot, SpeedTables]]:
    fresh = empty_store_tables()
    fresh["booth_stats"] = table_of("booth_stats", [
        booth_row("b1", "2026-01-05T23:50", 3, "7.50"),
        booth_row("b1", "2026-01-05T23:55", 1, "2.00"),
        booth_row(AWKWARD, "2026-01-05T10:00", 4, "10.05"),
        booth_row("b0", "2026-01-05T10:00", 2, "0.00"),
    ])  # fmt: skip
    fresh["vehicle_trips"] = table_of("vehicle_trips", [
        {"booth_id": "b1", "license_plate": plate, "entry_time": datetime(2026, 1, 5, 23, 50),
         "exit_time": datetime(2026, 1, 6, 0, 10), "duration_seconds": seconds}
        for plate, seconds in (("P1", 1200.0), ("P0", 0.1), (AWKWARD, 1e20), ("P2", 1.0 / 3))
    ])  # fmt: skip
    fresh["expired_registrations"] = table_of("expired_registrations", [{
        "booth_id": "b2", "license_plate": "P2", "entry_time": datetime(2026, 1, 5, 10, 1),
        "registration_id": AWKWARD,
    }])  # fmt: skip
    fresh["diagnostics"] = table_of("diagnostics", [{
        "booth_id": "b1", "window_start": datetime(2026, 1, 5, 23, 50),
        "reason": "missing_exit", "count": 1,
    }])  # fmt: skip
    publish_version(tmp_path, fresh, [date(2026, 1, 5)], HORIZON, 0, 5)
    batch = BatchSnapshot(tmp_path, read_current(tmp_path))
    speed = SpeedTables()
    fill_speed(speed)
    speed.apply("booth_stats", [speed_record(speed_booth(AWKWARD, "2026-01-06T02:00", 7, 1.1), 1)])
    try:
        yield batch, speed
    finally:
        batch.retire()


def general(query: ViewQuery, batch: BatchSnapshot | None, speed: SpeedTables) -> list[object]:
    parsed: list[object] = json.loads(encode_rows(merged_rows(query, batch, speed)).json)
    return parsed


@pytest.mark.parametrize(
    "view", ["booth_stats", "vehicle_trips", "expired_registrations", "diagnostics"]
)
@pytest.mark.parametrize(
    ("start", "end", "limit", "source"),
    [
        (datetime(2026, 1, 5, tzinfo=UTC), HORIZON, None, Source.BATCH),
        (datetime(2026, 1, 5, tzinfo=UTC), HORIZON, 2, Source.BATCH),
        (HORIZON, datetime(2026, 1, 7, tzinfo=UTC), None, Source.SPEED),
    ],
)
def test_one_store_json_is_what_the_merge_path_encodes(
    stores: tuple[BatchSnapshot, SpeedTables],
    view: str,
    start: datetime,
    end: datetime,
    limit: int | None,
    source: Source,
) -> None:
    batch, speed = stores
    query = ViewQuery(view, start, end, {}, limit)
    assert one_store(query, batch) is source
    encoded = one_store_json(query, source, batch, speed)
    rows = json.loads(encoded.json)
    assert rows == general(query, batch, speed)
    assert encoded.count == len(rows)
    assert {row["source"] for row in rows} <= {source.value}


def test_the_hand_written_rows_of_a_batch_only_booth_day(
    stores: tuple[BatchSnapshot, SpeedTables],
) -> None:
    batch, speed = stores
    query = ViewQuery("booth_stats", datetime(2026, 1, 5, tzinfo=UTC), HORIZON, {}, None)
    rows = json.loads(one_store_json(query, Source.BATCH, batch, speed).json)
    assert [(r["booth_id"], r["window_start"], r["total_toll"], r["source"]) for r in rows] == [
        (AWKWARD, "2026-01-05T10:00:00.000Z", "10.05", "batch"),
        ("b0", "2026-01-05T10:00:00.000Z", "0.00", "batch"),
        ("b1", "2026-01-05T23:50:00.000Z", "7.50", "batch"),
        ("b1", "2026-01-05T23:55:00.000Z", "2.00", "batch"),
    ]  # sorted by booth_id as DuckDB orders VARCHAR (byte-wise: '"' < '0')
    trips = ViewQuery("vehicle_trips", datetime(2026, 1, 5, tzinfo=UTC), HORIZON, {}, None)
    seconds = {r["license_plate"]: r["duration_seconds"] for r in
               json.loads(one_store_json(trips, Source.BATCH, batch, speed).json)}  # fmt: skip
    assert seconds == {"P1": 1200.0, "P0": 0.1, AWKWARD: 1e20, "P2": 1.0 / 3}


def test_before_any_batch_version_the_speed_store_answers_alone(
    stores: tuple[BatchSnapshot, SpeedTables],
) -> None:
    _, speed = stores
    query = ViewQuery(
        "booth_stats", datetime(2026, 1, 5, tzinfo=UTC), HORIZON + timedelta(days=1), {}, None
    )
    assert one_store(query, None) is Source.SPEED
    rows = json.loads(one_store_json(query, Source.SPEED, None, speed).json)
    assert rows == general(query, None, speed)
    assert [(r["window_start"], r["vehicle_count"]) for r in rows if r["booth_id"] == "b1"] == [
        ("2026-01-05T23:55:00.000Z", 99), ("2026-01-06T00:00:00.000Z", 2),
        ("2026-01-06T00:05:00.000Z", 4),
    ]  # fmt: skip
    assert Decimal(rows[0]["total_toll"]) == Decimal("1.10")  # AWKWARD sorts first


def test_a_range_across_the_horizon_is_not_one_stores(
    stores: tuple[BatchSnapshot, SpeedTables],
) -> None:
    batch, _ = stores
    query = ViewQuery("booth_stats", HORIZON - timedelta(hours=1), HORIZON + timedelta(hours=1), {})
    assert one_store(query, batch) is None
