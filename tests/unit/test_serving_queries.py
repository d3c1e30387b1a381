"""The rows' JSON written by DuckDB against the merge path in Python.

``encoded_rows`` has DuckDB write each row's JSON (the store's side of the
horizon, tagged with its source); ``merged_rows`` reads the rows into Python,
merges them (``shared.merge``) and ``encode_rows`` writes them. On real DuckDB
stores (filled by hand, with awkward strings and doubles) the two must give the
same rows, in the same order, with the same values and sources.
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
from serving.queries import ViewQuery, encoded_rows, merged_rows
from serving.responses import encode_rows
from serving.speed_tables import SpeedTables
from shared.batch_store import read_current
from shared.merge import Source, sources_for
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
    ("start", "end", "limit", "sources"),
    [
        (datetime(2026, 1, 5, tzinfo=UTC), HORIZON, None, "batch"),
        (datetime(2026, 1, 5, tzinfo=UTC), HORIZON, 2, "batch"),
        (HORIZON, datetime(2026, 1, 7, tzinfo=UTC), None, "speed"),
        (datetime(2026, 1, 5, tzinfo=UTC), datetime(2026, 1, 7, tzinfo=UTC), None, "batch+speed"),
        (datetime(2026, 1, 5, tzinfo=UTC), datetime(2026, 1, 7, tzinfo=UTC), 3, "batch+speed"),
    ],
)
def test_duckdb_json_is_what_the_merge_path_encodes(
    stores: tuple[BatchSnapshot, SpeedTables],
    view: str,
    start: datetime,
    end: datetime,
    limit: int | None,
    sources: str,
) -> None:
    batch, speed = stores
    query = ViewQuery(view, start, end, {}, limit)
    assert "+".join(sources_for(start, end, HORIZON)) == sources
    encoded = encoded_rows(query, batch, speed)
    rows = json.loads(encoded.json)
    assert rows == general(query, batch, speed)
    assert encoded.count == len(rows)


def test_the_hand_written_rows_of_a_batch_only_day(
    stores: tuple[BatchSnapshot, SpeedTables],
) -> None:
    batch, speed = stores
    query = ViewQuery("booth_stats", datetime(2026, 1, 5, tzinfo=UTC), HORIZON, {}, None)
    rows = json.loads(encoded_rows(query, batch, speed).json)
    assert [(r["booth_id"], r["window_start"], r["total_toll"], r["source"]) for r in rows] == [
        (AWKWARD, "2026-01-05T10:00:00.000Z", "10.05", "batch"),
        ("b0", "2026-01-05T10:00:00.000Z", "0.00", "batch"),
        ("b1", "2026-01-05T23:50:00.000Z", "7.50", "batch"),
        ("b1", "2026-01-05T23:55:00.000Z", "2.00", "batch"),
    ]  # sorted by booth_id as DuckDB orders VARCHAR (byte-wise: '"' < '0')
    trips = ViewQuery("vehicle_trips", datetime(2026, 1, 5, tzinfo=UTC), HORIZON, {}, None)
    seconds = {r["license_plate"]: r["duration_seconds"] for r in
               json.loads(encoded_rows(trips, batch, speed).json)}  # fmt: skip
    assert seconds == {"P1": 1200.0, "P0": 0.1, AWKWARD: 1e20, "P2": 1.0 / 3}


def test_a_range_across_the_horizon_interleaves_the_stores_by_key(
    stores: tuple[BatchSnapshot, SpeedTables],
) -> None:
    batch, speed = stores
    query = ViewQuery(
        "booth_stats", datetime(2026, 1, 5, tzinfo=UTC), datetime(2026, 1, 7, tzinfo=UTC), {}, 5
    )
    rows = json.loads(encoded_rows(query, batch, speed).json)
    assert [(r["booth_id"], r["window_start"], r["vehicle_count"], r["source"]) for r in rows] == [
        (AWKWARD, "2026-01-05T10:00:00.000Z", 4, "batch"),
        (AWKWARD, "2026-01-06T02:00:00.000Z", 7, "speed"),
        ("b0", "2026-01-05T10:00:00.000Z", 2, "batch"),
        ("b1", "2026-01-05T23:50:00.000Z", 3, "batch"),
        ("b1", "2026-01-05T23:55:00.000Z", 1, "batch"),  # the speed row of 23:55 is below H
    ]  # fmt: skip


def test_before_any_batch_version_the_speed_store_answers_alone(
    stores: tuple[BatchSnapshot, SpeedTables],
) -> None:
    _, speed = stores
    query = ViewQuery(
        "booth_stats", datetime(2026, 1, 5, tzinfo=UTC), HORIZON + timedelta(days=1), {}, None
    )
    assert sources_for(query.start, query.end, None) == (Source.SPEED,)
    rows = json.loads(encoded_rows(query, None, speed).json)
    assert rows == general(query, None, speed)
    assert [(r["window_start"], r["vehicle_count"]) for r in rows if r["booth_id"] == "b1"] == [
        ("2026-01-05T23:55:00.000Z", 99), ("2026-01-06T00:00:00.000Z", 2),
        ("2026-01-06T00:05:00.000Z", 4),
    ]  # fmt: skip
    assert Decimal(rows[0]["total_toll"]) == Decimal("1.10")  # AWKWARD sorts first
