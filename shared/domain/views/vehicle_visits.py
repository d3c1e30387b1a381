"""vehicle_visits: each plate's visits, runs of its entries less than ``session_gap`` apart."""

from __future__ import annotations

from datetime import timedelta

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from shared.domain.views.rules import MONEY_TOTAL, interval, seconds, sql_interval
from shared.domain.views.spec import Column, ColumnType, Final, Horizon, ViewSpec
from shared.domain.views.view import Lane, Size, SpeedPlan, View, ViewSizes

SESSION_GAP = Size(
    "session_gap",
    timedelta(minutes=30),
    "vehicle_visits: entries of a plate less than this apart are one visit",
)

SPEC = ViewSpec(
    name="vehicle_visits",
    columns=(
        Column("license_plate", ColumnType.TEXT),
        Column("session_start", ColumnType.INSTANT, "the visit's first entry"),
        Column("session_end", ColumnType.INSTANT, "its last entry plus session_gap"),
        Column("entry_count", ColumnType.COUNT),
        Column("booths", ColumnType.TEXT_LIST, "the booths of its entries, in entry order"),
        Column("total_toll", ColumnType.MONEY, "sum of tolls, two decimal places"),
    ),
    key=("license_plate", "session_start"),
    time_column="session_start",
    api_row="VehicleVisitRow",
    # the speed layer writes a session once the watermark passes its end (append):
    # final as soon as it is there
    final=Final("session_end"),
    # a session the batch layer sees end at or before H is over (an entry at or
    # after H is a gap or more from its last); one ending after H may go on
    horizon=Horizon.END_AT_OR_BEFORE,
    end_column="session_end",
)


def vehicle_visits(entries: DataFrame, gap: timedelta) -> DataFrame:
    """Each plate's visits: runs of its entries less than ``gap`` apart, as Spark's
    ``session_window`` makes them (a session ends at its last entry + ``gap``), with
    the booths of its entries in entry order (ties by event_id).

    Start and end are aggregates of the session's entries (its first entry, its
    last + ``gap``: the session window's own bounds), not the window's fields:
    Spark pushes a filter on a grouping key below the aggregate, and a session
    window's key below it is each entry's own [entry, entry + gap), so a filter
    on the window's start would drop the entries that join a session to an
    earlier one (the batch layer filters visits by the date of their start)."""
    ordered = F.sort_array(F.collect_list(F.struct("entry_time", "event_id", "booth_id")))
    return (
        entries.groupBy("license_plate", F.session_window("entry_time", seconds(gap)))
        .agg(
            F.min("entry_time").alias("session_start"),
            (F.max("entry_time") + interval(gap)).alias("session_end"),
            F.count(F.lit(1)).alias("entry_count"),
            ordered.alias("_entries"),
            F.sum("toll").cast(MONEY_TOTAL).alias("total_toll"),
        )
        .select(
            "license_plate",
            "session_start",
            "session_end",
            "entry_count",
            F.transform("_entries", lambda entry: entry["booth_id"]).alias("booths"),
            "total_toll",
        )
    )


def reference_sql(sizes: ViewSizes) -> str:
    """vehicle_visits in DuckDB SQL: a running count of the entries that start a visit,
    booths in entry order (ties by event_id)."""
    gap = sql_interval(sizes[SESSION_GAP.name])
    return f"""
        SELECT license_plate, min(entry_time) AS session_start,
               max(entry_time) + {gap} AS session_end, count(*) AS entry_count,
               list(booth_id ORDER BY entry_time, event_id) AS booths,
               sum(toll)::DECIMAL(18, 2) AS total_toll
        FROM (  -- a visit starts at an entry a gap or more after the plate's one before
            SELECT *, sum(starts) OVER (PARTITION BY license_plate ORDER BY entry_time, event_id)
                      AS visit
            FROM (
                SELECT *, CASE WHEN entry_time - lag(entry_time) OVER (
                              PARTITION BY license_plate ORDER BY entry_time, event_id
                          ) < {gap} THEN 0 ELSE 1 END AS starts
                FROM once_entries
            )
        )
        GROUP BY license_plate, visit
    """


VIEW = View(
    spec=SPEC,
    compute=lambda inputs, sizes: vehicle_visits(inputs.spanning, sizes[SESSION_GAP.name]),
    reference_sql=reference_sql,
    # a visit is written once, when the watermark passes its end (last entry + gap)
    # and no entry can still extend it
    speed=SpeedPlan(Lane.PLATES),
    reads={"toll_entry": ("event_id", "booth_id", "license_plate", "entry_time", "toll")},
    sizes=(SESSION_GAP,),
    spanning=True,
)
