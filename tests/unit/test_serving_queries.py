"""The serving layer's reads against the merge rule stated plainly in Python.

``encoded_rows`` has DuckDB write each row's JSON (the store's side of the
horizon, tagged with its source), and ``rolled_up_rows`` has each store roll up
its side in SQL. The reference here reads every row of the range from both
stores into Python, merges them with ``shared.domain.merge.merge_at_horizon``, rolls
them up with ``shared.domain.merge.roll_up`` and encodes them with ``encode_rows``. On
real DuckDB stores (filled by hand, with awkward strings and doubles) both must
give the reference's rows, in the same order, with the same values and sources;
hand-written rows check the reference itself.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pytest

from batch_layer.publish import empty_store_tables, publish_version
from serving.batch_reader import BatchSnapshot
from serving.queries import ViewQuery, encoded_rows, naive_utc, rolled_up_rows
from serving.responses import encode_rows, reads_on_event_loop
from shared.domain.merge import Row, Source, merge_at_horizon, roll_up, sources_for
from shared.domain.views.booth_stats import SPEC as BOOTH_STATS
from shared.domain.views.vehicle_trips import SPEC as VEHICLE_TRIPS
from shared.platform.batch_store import STORE_TABLE_BY_NAME, read_current
from shared.platform.speed_tables import SpeedTables, speed_columns
from shared.settings.views import VIEW_BY_NAME
from tests.unit.api_stores import (
    VIEW_SETTINGS,
    booth_row,
    fill_speed,
    speed_booth,
    speed_record,
    table_of,
)

HORIZON = datetime(2026, 1, 6, tzinfo=UTC)
MID_HOUR = datetime(2026, 1, 5, 23, 55, tzinfo=UTC)
"""A horizon inside a bucket (the batch layer's are midnights): its hour and day are mixed."""
AWKWARD = 'b"\\ü\t€'  # a quote, a backslash, non-ASCII and a control character
HOUR, DAY = timedelta(hours=1), timedelta(days=1)


def filled_stores(store: Path, horizon: datetime) -> tuple[BatchSnapshot, SpeedTables]:
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
    publish_version(store, fresh, [date(2026, 1, 5)], horizon, 0, 5, view_settings=VIEW_SETTINGS)
    speed = SpeedTables()
    fill_speed(speed)
    speed.apply("booth_stats", [speed_record(speed_booth(AWKWARD, "2026-01-06T02:00", 7, 1.1), 1)])
    version = read_current(store)
    assert version is not None
    return BatchSnapshot(store, version), speed


Stores = tuple[BatchSnapshot, SpeedTables]


@pytest.fixture(scope="module")
def stores_at(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[datetime], Stores]]:
    """The :func:`filled_stores` of a horizon, filled once for the module's tests (which
    only read them)."""
    filled: dict[datetime, Stores] = {}

    def at(horizon: datetime) -> Stores:
        if horizon not in filled:
            filled[horizon] = filled_stores(tmp_path_factory.mktemp("stores"), horizon)
        return filled[horizon]

    yield at
    for batch, _ in filled.values():
        batch.retire()


@pytest.fixture
def stores(stores_at: Callable[[datetime], Stores]) -> Stores:
    return stores_at(HORIZON)


def reference_rows(
    query: ViewQuery, batch: BatchSnapshot | None, speed: SpeedTables, size: timedelta | None = None
) -> list[Row]:
    """Every typed row of the range from both stores, merged, rolled up to ``size`` if given."""
    table = STORE_TABLE_BY_NAME[query.view.name]
    filters = sorted(query.filters.items())
    where = " AND ".join(
        [f'"{query.view.time_column}" >= ?', f'"{query.view.time_column}" < ?']
        + [f'"{column}" = ?' for column, _ in filters]
    )

    def read(cursor: duckdb.DuckDBPyConnection, names: list[str]) -> list[Row]:
        params = [naive_utc(query.start), naive_utc(query.end), *(value for _, value in filters)]
        columns = ", ".join(f'"{name}"' for name in names)
        try:
            found = cursor.execute(f'SELECT {columns} FROM "{table.name}" WHERE {where}', params)
            return [dict(zip(names, values, strict=True)) for values in found.fetchall()]
        finally:
            cursor.close()

    horizon = naive_utc(batch.version.horizon) if batch is not None else None
    batch_rows = read(batch.cursor(), list(table.column_names)) if batch is not None else []
    # the speed table holds each view key's best candidate; one not shown is no row
    candidates = query.view.candidates
    shown_if = candidates.shown_if if candidates is not None else None
    speed_rows = [
        {name: row[name] for name in table.column_names}
        for row in read(speed.cursor(), [name for name, _ in speed_columns(query.view)])
        if shown_if is None or row[shown_if]
    ]
    final_before = naive_utc(query.final_before) if query.final_before is not None else None
    rows = merge_at_horizon(query.view, batch_rows, speed_rows, horizon, final_before)
    if size is not None:
        rows = roll_up(query.view, rows, size)
    rows.sort(key=lambda row: tuple(row[name] for name in table.key))
    return rows[: query.limit]


def general(
    query: ViewQuery, batch: BatchSnapshot | None, speed: SpeedTables, size: timedelta | None = None
) -> list[object]:
    """The reference's rows as the response writes them."""
    parsed: list[object] = json.loads(encode_rows(reference_rows(query, batch, speed, size)).json)
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
    spec = VIEW_BY_NAME[view]
    query = ViewQuery(spec, start, end, {}, limit, speed.final_before(spec, speed.watermark))
    assert "+".join(sources_for(start, end, HORIZON)) == sources
    encoded = encoded_rows(query, batch, speed)
    rows = json.loads(encoded.json)
    assert rows == general(query, batch, speed)
    assert encoded.count == len(rows)
    everything = reference_rows(replace(query, limit=None), batch, speed)
    assert encoded.truncated == (len(everything) > len(rows))


@pytest.mark.parametrize(
    ("end", "in_range"),
    [(HORIZON, 4), (datetime(2026, 1, 7, tzinfo=UTC), 4 + 4)],
    ids=["batch", "batch+speed"],
)
def test_truncated_says_whether_the_range_held_more_rows_than_the_limit(
    stores: tuple[BatchSnapshot, SpeedTables], end: datetime, in_range: int
) -> None:
    """booth_stats from 2026-01-05: four batch rows below H, four speed rows from it to the 7th."""
    batch, speed = stores
    for limit, count, truncated in (
        (in_range - 1, in_range - 1, True),
        (in_range, in_range, False),
        (None, in_range, False),
    ):
        query = ViewQuery(BOOTH_STATS, datetime(2026, 1, 5, tzinfo=UTC), end, {}, limit)
        encoded = encoded_rows(query, batch, speed)
        assert (encoded.count, len(json.loads(encoded.json)), encoded.truncated) == (
            count,
            count,
            truncated,
        )


def test_the_hand_written_rows_of_a_batch_only_day(
    stores: tuple[BatchSnapshot, SpeedTables],
) -> None:
    batch, speed = stores
    query = ViewQuery(BOOTH_STATS, datetime(2026, 1, 5, tzinfo=UTC), HORIZON, {}, None)
    rows = json.loads(encoded_rows(query, batch, speed).json)
    assert [(r["booth_id"], r["window_start"], r["total_toll"], r["source"]) for r in rows] == [
        (AWKWARD, "2026-01-05T10:00:00.000Z", "10.05", "batch"),
        ("b0", "2026-01-05T10:00:00.000Z", "0.00", "batch"),
        ("b1", "2026-01-05T23:50:00.000Z", "7.50", "batch"),
        ("b1", "2026-01-05T23:55:00.000Z", "2.00", "batch"),
    ]  # sorted by booth_id as DuckDB orders VARCHAR (byte-wise: '"' < '0')
    trips = ViewQuery(VEHICLE_TRIPS, datetime(2026, 1, 5, tzinfo=UTC), HORIZON, {}, None)
    seconds = {r["license_plate"]: r["duration_seconds"] for r in
               json.loads(encoded_rows(trips, batch, speed).json)}  # fmt: skip
    assert seconds == {"P1": 1200.0, "P0": 0.1, AWKWARD: 1e20, "P2": 1.0 / 3}


def test_a_range_across_the_horizon_interleaves_the_stores_by_key(
    stores: tuple[BatchSnapshot, SpeedTables],
) -> None:
    batch, speed = stores
    query = ViewQuery(
        BOOTH_STATS, datetime(2026, 1, 5, tzinfo=UTC), datetime(2026, 1, 7, tzinfo=UTC), {}, 5
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
        BOOTH_STATS, datetime(2026, 1, 5, tzinfo=UTC), HORIZON + timedelta(days=1), {}, None
    )
    assert sources_for(query.start, query.end, None) == (Source.SPEED,)
    rows = json.loads(encoded_rows(query, None, speed).json)
    assert rows == general(query, None, speed)
    assert [(r["window_start"], r["vehicle_count"]) for r in rows if r["booth_id"] == "b1"] == [
        ("2026-01-05T23:55:00.000Z", 99), ("2026-01-06T00:00:00.000Z", 2),
        ("2026-01-06T00:05:00.000Z", 4),
    ]  # fmt: skip
    assert Decimal(rows[0]["total_toll"]) == Decimal("1.10")  # AWKWARD sorts first


RANGES = [
    (datetime(2026, 1, 5, tzinfo=UTC), datetime(2026, 1, 6, tzinfo=UTC)),
    (datetime(2026, 1, 6, tzinfo=UTC), datetime(2026, 1, 7, tzinfo=UTC)),
    (datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 2, 1, tzinfo=UTC)),
    (datetime(2026, 1, 5, 23, 30, tzinfo=UTC), datetime(2026, 1, 6, 0, 30, tzinfo=UTC)),
]


@pytest.mark.parametrize("horizon", [HORIZON, MID_HOUR], ids=["midnight", "mid-hour"])
@pytest.mark.parametrize("size", [HOUR, DAY], ids=["1h", "1d"])
@pytest.mark.parametrize(("start", "end"), RANGES)
@pytest.mark.parametrize(
    ("filters", "limit"),
    [({}, None), ({}, 2), ({"booth_id": "b1"}, None), ({"booth_id": AWKWARD}, 1)],
)
def test_roll_ups_in_sql_are_the_roll_up_of_the_merged_rows(
    stores_at: Callable[[datetime], Stores],
    horizon: datetime,
    size: timedelta,
    start: datetime,
    end: datetime,
    filters: dict[str, str],
    limit: int | None,
) -> None:
    batch, speed = stores_at(horizon)
    query = ViewQuery(BOOTH_STATS, start, end, filters, limit)
    rows, truncated = rolled_up_rows(query, batch, speed, size)
    assert json.loads(encode_rows(rows).json) == general(query, batch, speed, size)
    assert rows == reference_rows(query, batch, speed, size)  # types too, not only JSON
    everything = reference_rows(replace(query, limit=None), batch, speed, size)
    assert truncated == (len(everything) > len(rows))


def test_the_hand_written_buckets_of_a_horizon_inside_them(tmp_path: Path) -> None:
    """Horizon 23:55: b1's batch row of 23:50 and speed row of 23:55 share the 23:00 hour."""
    batch, speed = filled_stores(tmp_path, MID_HOUR)
    try:
        query = ViewQuery(
            BOOTH_STATS, datetime(2026, 1, 5, tzinfo=UTC), datetime(2026, 1, 7, tzinfo=UTC),
            {"booth_id": "b1"},
        )  # fmt: skip
        hours = [
            (r["window_start"], r["window_end"], r["vehicle_count"], r["total_toll"],
             r["first_entry_time"], r["last_entry_time"], r["source"])
            for r in rolled_up_rows(query, batch, speed, HOUR)[0]
        ]  # fmt: skip
        # b1's batch row of 23:55 is at the horizon, so the speed row of 23:55 (99) counts
        assert hours == [
            (datetime(2026, 1, 5, 23), datetime(2026, 1, 6), 3 + 99, Decimal("106.50"),
             datetime(2026, 1, 5, 23, 50), datetime(2026, 1, 5, 23, 55), "mixed"),
            (datetime(2026, 1, 6), datetime(2026, 1, 6, 1), 2 + 4, Decimal("13.00"),
             datetime(2026, 1, 6), datetime(2026, 1, 6, 0, 5), "speed"),
        ]  # fmt: skip
        days, _ = rolled_up_rows(query, batch, speed, DAY)
        assert [(r["window_start"], r["vehicle_count"], r["source"]) for r in days] == [
            (datetime(2026, 1, 5), 102, "mixed"), (datetime(2026, 1, 6), 6, "speed"),
        ]  # fmt: skip
        every_booth = replace(query, filters={})
        buckets, truncated = rolled_up_rows(every_booth, batch, speed, DAY)
        assert [(r["booth_id"], r["vehicle_count"], r["source"]) for r in buckets] == [
            (AWKWARD, 4, "batch"), (AWKWARD, 7, "speed"), ("b0", 2, "batch"),
            ("b1", 102, "mixed"), ("b1", 6, "speed"), ("b3", 5, "speed"),
        ]  # fmt: skip
        assert not truncated
        # the limit counts buckets: six, so five leave one out and six do not
        for limit, count, cut in ((5, 5, True), (6, 6, False)):
            buckets, truncated = rolled_up_rows(
                replace(every_booth, limit=limit), batch, speed, DAY
            )
            assert (len(buckets), truncated) == (count, cut)
    finally:
        batch.retire()


@pytest.mark.parametrize(
    ("view", "filters", "start", "end", "on_loop"),
    [
        ("booth_stats", {"booth_id": "b1"}, "2026-01-05T00:00", "2026-01-06T00:00", True),
        ("booth_stats", {"booth_id": "b1"}, "2026-01-05T10:00", "2026-01-05T11:00", True),
        ("vehicle_trips", {"license_plate": "P1"}, "2026-01-05T06:00", "2026-01-06T06:00", True),
        ("booth_stats", {"booth_id": "b1"}, "2026-01-05T00:00", "2026-01-06T00:05", False),
        ("booth_stats", {}, "2026-01-05T10:00", "2026-01-05T11:00", False),
        ("diagnostics", {}, "2026-01-05T00:00", "2026-01-05T00:05", False),
    ],
    ids=["booth-day", "booth-hour", "plate-day", "booth-day-and-5m", "all-booths", "no-key"],
)
def test_one_keys_rows_over_at_most_a_day_are_read_on_the_event_loop(
    view: str, filters: dict[str, str], start: str, end: str, on_loop: bool
) -> None:
    """Small reads stay on the event loop; wider ones (no key, or over a day) go to a thread."""
    query = ViewQuery(
        VIEW_BY_NAME[view],
        datetime.fromisoformat(start + "Z"),
        datetime.fromisoformat(end + "Z"),
        filters,
    )
    assert reads_on_event_loop(query) is on_loop


@pytest.mark.parametrize("threads", [1, 2])
def test_a_versions_rows_come_in_key_order_without_a_sort(tmp_path: Path, threads: int) -> None:
    """The batch side is read unsorted: publish stores each table in key order and
    DuckDB keeps it through WHERE and LIMIT, across row groups (60,000 rows: four
    of them) and threads. The rows go in shuffled; the expected order is Python's."""
    first = datetime(2026, 1, 1)
    keys = [(f"b{booth}", first + timedelta(minutes=5 * n)) for booth in range(3)
            for n in range(20_000)]  # fmt: skip
    random.Random(3).shuffle(keys)
    fresh = empty_store_tables()
    fresh["booth_stats"] = table_of(
        "booth_stats", [booth_row(booth, start.isoformat(), 1, "1.00") for booth, start in keys]
    )
    days = sorted({start.date() for _, start in keys})
    horizon = datetime(2026, 6, 1, tzinfo=UTC)
    publish_version(tmp_path, fresh, days, horizon, 0, 5, view_settings=VIEW_SETTINGS)
    version = read_current(tmp_path)
    assert version is not None
    batch, speed = BatchSnapshot(tmp_path, version, threads=threads), SpeedTables()

    def read(start: datetime, end: datetime, booth: str | None, limit: int | None) -> list[Any]:
        filters = {"booth_id": booth} if booth else {}
        query = ViewQuery(BOOTH_STATS, start.replace(tzinfo=UTC), end.replace(tzinfo=UTC),
                          filters, limit)  # fmt: skip
        return [(row["booth_id"], row["window_start"])
                for row in json.loads(encoded_rows(query, batch, speed).json)]  # fmt: skip

    def expected(start: datetime, end: datetime, booth: str | None, limit: int | None) -> Any:
        rows = sorted((b, t) for b, t in keys if start <= t < end and booth in (None, b))
        return [(b, t.strftime("%Y-%m-%dT%H:%M:%S.000Z")) for b, t in rows][:limit]

    for case in (
        (first, datetime(2026, 4, 1), None, None),  # every row
        (datetime(2026, 1, 20), datetime(2026, 2, 25), "b1", None),  # one booth, across groups
        (datetime(2026, 1, 20), datetime(2026, 2, 25), None, 700),  # cut by the limit
    ):
        rows = read(*case)
        assert rows == expected(*case)
        assert rows  # not vacuously equal
