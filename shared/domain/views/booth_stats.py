"""booth_stats: vehicles and tolls per booth in tumbling windows of ``window``."""

from __future__ import annotations

from datetime import timedelta

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from shared.domain.views.rules import MONEY_TOTAL, seconds, sql_interval
from shared.domain.views.spec import Aggregate, Column, ColumnType, Final, RollUp, ViewSpec
from shared.domain.views.view import Lane, Size, SpeedPlan, View, ViewSizes

WINDOW = Size(
    "window",
    timedelta(minutes=5),
    "booth_stats' tumbling window, and the window diagnostics are counted in (divides a day)",
    divides_a_day=True,
)

SPEC = ViewSpec(
    name="booth_stats",
    columns=(
        Column("booth_id", ColumnType.TEXT),
        Column("window_start", ColumnType.INSTANT),
        Column("window_end", ColumnType.INSTANT),
        Column("vehicle_count", ColumnType.COUNT),
        Column("total_toll", ColumnType.MONEY, "sum of tolls, two decimal places"),
        Column("first_entry_time", ColumnType.INSTANT),
        Column("last_entry_time", ColumnType.INSTANT),
    ),
    key=("booth_id", "window_start"),
    time_column="window_start",
    api_row="BoothStatsRow",
    final=Final("window_end"),
    # counts and tolls add up, first/last entry times are the min/max
    roll_up=RollUp(
        start="window_start",
        end="window_end",
        values={
            "vehicle_count": Aggregate.SUM,
            "total_toll": Aggregate.SUM,
            "first_entry_time": Aggregate.MIN,
            "last_entry_time": Aggregate.MAX,
        },
    ),
)


def booth_stats(entries: DataFrame, window: timedelta) -> DataFrame:
    """Vehicles and tolls per booth in tumbling windows of ``window`` over entry_time."""
    return (
        entries.groupBy("booth_id", F.window("entry_time", seconds(window)).alias("window"))
        .agg(
            F.count(F.lit(1)).alias("vehicle_count"),
            F.sum("toll").cast(MONEY_TOTAL).alias("total_toll"),
            F.min("entry_time").alias("first_entry_time"),
            F.max("entry_time").alias("last_entry_time"),
        )
        .select(
            "booth_id",
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "vehicle_count",
            "total_toll",
            "first_entry_time",
            "last_entry_time",
        )
    )


def reference_sql(sizes: ViewSizes) -> str:
    """booth_stats in DuckDB SQL: windows of ``window`` from midnight."""
    window = sql_interval(sizes[WINDOW.name])
    return f"""
        SELECT booth_id, window_start, window_start + {window} AS window_end,
               count(*) AS vehicle_count, sum(toll)::DECIMAL(18, 2) AS total_toll,
               min(entry_time) AS first_entry_time, max(entry_time) AS last_entry_time
        FROM (SELECT *, time_bucket({window}, entry_time) AS window_start FROM once_entries)
        GROUP BY booth_id, window_start
    """


VIEW = View(
    spec=SPEC,
    compute=lambda inputs, sizes: booth_stats(inputs.entries, sizes[WINDOW.name]),
    reference_sql=reference_sql,
    # the booth operator counts entries into buckets that make both tumbling and hopping rows
    speed=SpeedPlan(Lane.BOOTHS),
    reads={"toll_entry": ("booth_id", "entry_time", "toll")},
    sizes=(WINDOW,),
)
