"""diagnostics: entries that miss an exit (within ``max_trip``) or a registration (within
the lookback), counted per booth, window and reason."""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from shared.domain.views.booth_stats import WINDOW
from shared.domain.views.expired_registrations import (
    AT_ENTRY,
    REGISTRATION_COLUMNS,
    REGISTRATION_LOOKBACK,
    registrations_at_entry,
    shared_at_entry,
)
from shared.domain.views.rules import ENTRY_COLUMNS, seconds, sql_interval
from shared.domain.views.spec import Column, ColumnType, Final, ViewSpec
from shared.domain.views.vehicle_trips import MAX_TRIP, shared_trip_matches, trip_matches
from shared.domain.views.view import Lane, SpeedPlan, View, ViewSizes


class DiagnosticReason(StrEnum):
    MISSING_EXIT = "missing_exit"
    MISSING_REGISTRATION = "missing_registration"


SPEC = ViewSpec(
    name="diagnostics",
    columns=(
        Column("booth_id", ColumnType.TEXT),
        Column("window_start", ColumnType.INSTANT),
        Column("reason", ColumnType.TEXT, "missing_exit or missing_registration"),
        Column("count", ColumnType.COUNT),
    ),
    key=("booth_id", "window_start", "reason"),
    time_column="window_start",
    api_row="DiagnosticRow",
    # counted by a derived query from the entries the lookups decided; Spark stops
    # changing a count once that query's watermark passes the window's end
    final=Final("window_start", plus=("window",), own_watermark=True),
)


def unregistered_at_entry(at_entry: DataFrame) -> DataFrame:
    """Diagnostic rows for entries that no registration applies to."""
    return at_entry.where(F.col("registration_id").isNull()).select(
        "booth_id",
        "entry_time",
        F.lit(DiagnosticReason.MISSING_REGISTRATION.value).alias("reason"),
    )


def missing_exits(entries: DataFrame, exits: DataFrame, max_trip: timedelta) -> DataFrame:
    """Diagnostic rows for entries with no exit within max_trip."""
    return unmatched_entries(trip_matches(entries, exits, max_trip, "left_outer"))


def unmatched_entries(matches: DataFrame) -> DataFrame:
    """Diagnostic rows for the entries a left outer ``trip_matches`` found no exit for."""
    return matches.where(F.col("exit_time").isNull()).select(
        "booth_id", "entry_time", F.lit(DiagnosticReason.MISSING_EXIT.value).alias("reason")
    )


def count_diagnostics(rows: DataFrame, window: timedelta) -> DataFrame:
    """``diagnostics``: diagnostic rows counted per booth, entry window and reason."""
    return (
        rows.groupBy("booth_id", F.window("entry_time", seconds(window)).alias("window"), "reason")
        .agg(F.count(F.lit(1)).alias("count"))
        .select("booth_id", F.col("window.start").alias("window_start"), "reason", "count")
    )


def diagnostics_from(exitless: DataFrame, at_entry: DataFrame, window: timedelta) -> DataFrame:
    """``diagnostics`` from the entries missing an exit (:func:`missing_exits`) and the
    entries' registration lookup (``registrations_at_entry``)."""
    return count_diagnostics(exitless.unionByName(unregistered_at_entry(at_entry)), window)


def diagnostics(
    entries: DataFrame,
    exits: DataFrame,
    registrations: DataFrame,
    window: timedelta,
    max_trip: timedelta,
    lookback: timedelta,
) -> DataFrame:
    """Counts of entries that miss an exit (within max_trip) or a registration (within
    the lookback), per window."""
    at_entry = registrations_at_entry(entries, registrations, lookback)
    return diagnostics_from(missing_exits(entries, exits, max_trip), at_entry, window)


def reference_sql(sizes: ViewSizes) -> str:
    """diagnostics in DuckDB SQL: entries with no exit within ``max_trip`` and entries no
    registration applies to, per booth, window and reason."""
    window = sql_interval(sizes[WINDOW.name])
    max_trip = sql_interval(sizes[MAX_TRIP.name])
    return f"""
        SELECT booth_id, window_start, reason, count(*) AS count
        FROM (
            SELECT booth_id, time_bucket({window}, entry_time) AS window_start,
                   'missing_exit' AS reason
            FROM once_entries e WHERE NOT EXISTS (
                SELECT 1 FROM exits x
                WHERE x.booth_id = e.booth_id AND x.license_plate = e.license_plate
                  AND x.exit_time BETWEEN e.entry_time AND e.entry_time + {max_trip})
            UNION ALL
            SELECT booth_id, time_bucket({window}, entry_time), 'missing_registration'
            FROM at_entry WHERE registration_id IS NULL
        )
        GROUP BY booth_id, window_start, reason
    """


VIEW = View(
    spec=SPEC,
    compute=lambda inputs, sizes: diagnostics_from(
        unmatched_entries(shared_trip_matches(inputs, sizes)),
        shared_at_entry(inputs, sizes),
        sizes[WINDOW.name],
    ),
    reference_sql=reference_sql,
    # counted from the entries the lookups decided, which wait for the watermark or max_trip
    speed=SpeedPlan(Lane.DERIVED),
    reads={
        "toll_entry": ENTRY_COLUMNS,
        "toll_exit": ("booth_id", "license_plate", "exit_time"),
        "vehicle_registration": REGISTRATION_COLUMNS,
    },
    sizes=(WINDOW, MAX_TRIP, REGISTRATION_LOOKBACK),
    reference_tables=(AT_ENTRY,),
)
