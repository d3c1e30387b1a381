"""booth_stats: vehicles and tolls per booth in tumbling windows of ``window``."""

from __future__ import annotations

from datetime import timedelta

from shared.domain.views.declarations import Measure, Measured, RollUpRule, roll_up_view
from shared.domain.views.rules import sql_interval
from shared.domain.views.spec import Aggregate, Column, ColumnType, Final, RollUp, ViewSpec
from shared.domain.views.view import Size, ViewSizes

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


RULE = RollUpRule(
    events="toll_entry",
    keys=("booth_id",),
    time="entry_time",
    size=WINDOW,
    measures=(
        Measured("vehicle_count", Measure.COUNT),
        Measured("total_toll", Measure.SUM, "toll"),
        Measured("first_entry_time", Measure.MIN, "entry_time"),
        Measured("last_entry_time", Measure.MAX, "entry_time"),
    ),
)
"""Vehicles and tolls per booth in tumbling windows of ``window`` over entry_time."""


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


VIEW = roll_up_view(SPEC, RULE, reference_sql)
