"""The views' reference SQL (``shared.domain.views.reference_sql``): its rows on events
written by hand, the bench's DuckDB peer that runs it over a master dataset, and the
Spark functions held to it.

The events hold the cases the rules decide: an entry sent twice, a visit across two
booths, two entries of a plate at one instant (booths by event_id), a later exit of
the same trip, a trip longer than ``max_trip``, a registration older than
``registration_lookback`` (it no longer applies), and two registrations recorded at
one instant (the greatest ``registration_id`` applies).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
from pyspark.sql import SparkSession

from lambdaline.bench.peer import peer_views
from shared.domain.views import compute_views, reference_sql
from shared.domain.views.rules import without_duplicates
from shared.domain.views.view import Inputs
from shared.settings import Settings
from shared.settings.views import REGISTERED, VIEWS
from tests.integration.oracle import ENTRY_COLUMNS, create_event_tables

SIZES = Settings().views.sizes  # 5 min windows, 1 h rolling every 5 min, 30 min gap, ...


def at(clock: str, day: str = "2026-01-05") -> datetime:
    return datetime.fromisoformat(f"{day}T{clock}")


ENTRIES = [  # event_id, booth, plate, entry_time, toll, copies
    ("e1", "b1", "P1", at("10:00"), Decimal("2.50"), 2),
    ("e2", "b1", "P2", at("10:03"), Decimal("3.00"), 1),
    ("e3", "b2", "P1", at("10:20"), Decimal("1.00"), 1),
    ("e4", "b2", "P3", at("10:20"), Decimal("4.00"), 1),
    ("e5", "b1", "P3", at("10:20"), Decimal("5.00"), 1),
]
EXITS = [  # event_id, booth, plate, exit_time
    ("x1", "b1", "P1", at("10:30")),
    ("x2", "b1", "P1", at("10:40")),  # later than x1: not e1's exit
    ("x3", "b2", "P1", at("11:30")),  # 70 min after e3: past max_trip
]
REGISTRATIONS = [  # event_id, registration_id, plate, registration_time, expired
    ("r1", "R-OLD", "P2", at("09:00", "2024-11-30"), True),  # 401 days before e2
    ("r2", "R-A", "P1", at("00:00", "2026-01-01"), False),
    ("r3", "R-B", "P1", at("00:00", "2026-01-01"), True),  # same instant: R-B > R-A applies
    ("r4", "R-C", "P3", at("00:00", "2026-01-04"), False),
]


def rolling(booth: str, first: str, last: str, count: int, toll: str) -> list[tuple[Any, ...]]:
    """booth_rolling rows of ``booth`` for the hours starting every 5 min from first to
    last, each holding ``count`` entries worth ``toll``."""
    start, end = at(first), at(last)
    rows = []
    while start <= end:
        rows.append((booth, start, start + timedelta(hours=1), count, Decimal(toll)))
        start += timedelta(minutes=5)
    return rows


EXPECTED: dict[str, list[tuple[Any, ...]]] = {
    "booth_stats": [
        ("b1", at("10:00"), at("10:05"), 2, Decimal("5.50"), at("10:00"), at("10:03")),
        ("b1", at("10:20"), at("10:25"), 1, Decimal("5.00"), at("10:20"), at("10:20")),
        ("b2", at("10:20"), at("10:25"), 2, Decimal("5.00"), at("10:20"), at("10:20")),
    ],
    "vehicle_trips": [("b1", "P1", at("10:00"), at("10:30"), 1800.0)],
    "expired_registrations": [
        ("b1", "P1", at("10:00"), "R-B"),
        ("b2", "P1", at("10:20"), "R-B"),
    ],
    "diagnostics": [
        ("b1", at("10:00"), "missing_exit", 1),  # e2
        ("b1", at("10:00"), "missing_registration", 1),  # e2: R-OLD is past the lookback
        ("b1", at("10:20"), "missing_exit", 1),  # e5
        ("b2", at("10:20"), "missing_exit", 2),  # e3 (its exit too late), e4
    ],
    "booth_rolling": [
        *rolling("b1", "09:05", "09:20", 2, "5.50"),  # e1, e2
        *rolling("b1", "09:25", "10:00", 3, "10.50"),  # e1, e2, e5
        *rolling("b1", "10:05", "10:20", 1, "5.00"),  # e5
        *rolling("b2", "09:25", "10:20", 2, "5.00"),  # e3, e4
    ],
    "vehicle_visits": [
        ("P1", at("10:00"), at("10:50"), 2, ["b1", "b2"], Decimal("3.50")),
        ("P2", at("10:03"), at("10:33"), 1, ["b1"], Decimal("3.00")),
        ("P3", at("10:20"), at("10:50"), 2, ["b2", "b1"], Decimal("9.00")),  # e4 before e5
    ],
}


def event_tables(connection: duckdb.DuckDBPyConnection) -> None:
    """The events as the reference reads them (every copy; ``sent`` orders them)."""
    create_event_tables(connection)
    sent = 0
    for *entry, copies in ENTRIES:
        for _ in range(copies):
            connection.execute(f"INSERT INTO entries {ENTRY_COLUMNS} VALUES (?, ?, ?, ?, ?, ?)",
                               [*entry, sent])  # fmt: skip
            sent += 1
    connection.executemany("INSERT INTO exits VALUES (?, ?, ?, ?)", EXITS)
    connection.executemany("INSERT INTO registrations VALUES (?, ?, ?, ?, ?)", REGISTRATIONS)


def test_the_reference_gives_the_rows_worked_out_by_hand() -> None:
    prepare, selects = reference_sql(REGISTERED, SIZES, first_copy="sent")
    with duckdb.connect() as connection:
        event_tables(connection)
        connection.execute(prepare)
        got = {view: connection.execute(text).fetchall() for view, text in selects.items()}
    assert got == EXPECTED


def write_master(settings: Settings) -> None:
    """The events as the batch layer's master dataset holds them: Parquet per topic and
    date, with their source columns."""
    master = Path(settings.master_location)
    with duckdb.connect() as connection:
        event_tables(connection)
        for topic, table in (
            (settings.topics.entries, "entries"), (settings.topics.exits, "exits"),
            (settings.topics.registrations, "registrations"),
        ):  # fmt: skip
            folder = master / f"topic={topic}" / "date=2026-01-05" / "part=0"
            folder.mkdir(parents=True)
            columns, order = (
                ("* EXCLUDE (sent)", "sent") if table == "entries" else ("*", "event_id")
            )
            connection.execute(f"""
                COPY (SELECT {columns}, TIMESTAMP '2026-01-05 12:00' AS source_timestamp,
                             '{topic}' AS source_topic, 0 AS source_partition,
                             row_number() OVER (ORDER BY {order}) AS source_offset
                      FROM {table}) TO '{folder}/0.parquet' (FORMAT parquet)
            """)
        dead = master / "dead_letters" / "date=2026-01-05" / "part=0"
        dead.mkdir(parents=True)
        connection.execute(
            f"COPY (SELECT 'reason' AS reason LIMIT 0) TO '{dead}/0.parquet' (FORMAT parquet)"
        )


def test_the_peer_counts_the_references_rows(tmp_path: Path) -> None:
    """The bench's DuckDB peer runs the reference over the master dataset: with the
    lookback and the tie-break (an as-of join that ignored both counted e2's alert, and
    chose between R-A and R-B as it found them)."""
    settings = Settings(state_dir=tmp_path)
    write_master(settings)
    counts, _ = peer_views(settings, threads=1)
    assert {view: counts[view] for view in EXPECTED} == {
        view: len(rows) for view, rows in EXPECTED.items()
    }


def test_the_spark_functions_give_the_references_rows(spark: SparkSession) -> None:
    """The two statements of each rule, Spark's and the reference's, agree row for row."""
    sources = "TIMESTAMP '2026-01-05 12:00' AS source_timestamp, 't' AS source_topic, 0 AS source_partition"
    entries = spark.createDataFrame(
        [(*entry, n) for n, (*entry, copies) in enumerate(ENTRIES) for _ in range(copies)],
        "event_id string, booth_id string, license_plate string, entry_time timestamp, "
        "toll decimal(12,2), source_offset long",
    ).selectExpr("*", *sources.split(", "))  # fmt: skip
    exits = spark.createDataFrame(
        EXITS, "event_id string, booth_id string, license_plate string, exit_time timestamp"
    )
    registrations = spark.createDataFrame(
        REGISTRATIONS, "event_id string, registration_id string, license_plate string, "
        "registration_time timestamp, expired boolean",
    )  # fmt: skip
    views = compute_views(
        REGISTERED, Inputs(without_duplicates(entries), exits, registrations), SIZES
    )
    got = {spec.name: sorted(tuple(row) for row in views[spec.name].collect()) for spec in VIEWS}
    spark.catalog.clearCache()  # Inputs.shared persists the views' shared parts
    assert got == {view: sorted(rows) for view, rows in EXPECTED.items()}
