"""booth_rolling: vehicles and tolls per booth in hopping windows of ``rolling_window``
that start every ``rolling_slide``."""

from __future__ import annotations

from datetime import timedelta

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from shared.domain.views.rules import MONEY_TOTAL, seconds, sql_interval
from shared.domain.views.spec import Column, ColumnType, Final, Horizon, ViewSpec
from shared.domain.views.view import Lane, Size, SpeedPlan, View, ViewSizes

ROLLING_WINDOW = Size(
    "rolling_window",
    timedelta(hours=1),
    "booth_rolling hopping window's length (divides a day)",
    divides_a_day=True,
)
ROLLING_SLIDE = Size(
    "rolling_slide",
    timedelta(minutes=5),
    "how far booth_rolling's windows advance (divides rolling_window)",
    divides_a_day=True,
)

SPEC = ViewSpec(
    name="booth_rolling",
    columns=(
        Column("booth_id", ColumnType.TEXT),
        Column("window_start", ColumnType.INSTANT),
        Column("window_end", ColumnType.INSTANT),
        Column("vehicle_count", ColumnType.COUNT),
        Column("total_toll", ColumnType.MONEY, "sum of tolls, two decimal places"),
    ),
    key=("booth_id", "window_start"),
    time_column="window_start",
    api_row="BoothRollingRow",
    final=Final("window_end"),
    # windows overlap: one that straddles H is the speed store's, whole. They never
    # roll up (an entry is in rolling_window / rolling_slide of them)
    horizon=Horizon.END_AT_OR_BEFORE,
    end_column="window_end",
)


def booth_rolling(entries: DataFrame, size: timedelta, slide: timedelta) -> DataFrame:
    """Vehicles and tolls per booth in hopping windows of ``size`` that start every ``slide``
    over entry_time: an entry counts in each of the ``size / slide`` windows holding it."""
    hopping = F.window("entry_time", seconds(size), seconds(slide)).alias("window")
    return (
        entries.groupBy("booth_id", hopping)
        .agg(
            F.count(F.lit(1)).alias("vehicle_count"),
            F.sum("toll").cast(MONEY_TOTAL).alias("total_toll"),
        )
        .select(
            "booth_id",
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "vehicle_count",
            "total_toll",
        )
    )


def reference_sql(sizes: ViewSizes) -> str:
    """booth_rolling in DuckDB SQL: each entry in the ``rolling_window / rolling_slide``
    windows that hold it."""
    window, slide = sizes[ROLLING_WINDOW.name], sizes[ROLLING_SLIDE.name]
    return f"""
        SELECT booth_id, window_start, window_start + {sql_interval(window)} AS window_end,
               count(*) AS vehicle_count, sum(toll)::DECIMAL(18, 2) AS total_toll
        FROM (  -- the slide-aligned windows holding the entry: the latest and those before it
            SELECT booth_id, toll,
                   time_bucket({sql_interval(slide)}, entry_time) - k * {sql_interval(slide)}
                       AS window_start
            FROM once_entries, range({window // slide}) AS r(k)
        )
        GROUP BY booth_id, window_start
    """


def _slide_divides_the_window(sizes: ViewSizes) -> None:
    # every entry is in the same number of windows, and a window starts on a
    # multiple of the slide (so on a day's first instant too)
    window, slide = sizes[ROLLING_WINDOW.name], sizes[ROLLING_SLIDE.name]
    if window % slide != timedelta(0):
        raise ValueError("rolling_slide must divide rolling_window evenly")


VIEW = View(
    spec=SPEC,
    compute=lambda inputs, sizes: booth_rolling(
        inputs.spanning, sizes[ROLLING_WINDOW.name], sizes[ROLLING_SLIDE.name]
    ),
    reference_sql=reference_sql,
    speed=SpeedPlan(Lane.BOOTHS),
    reads={"toll_entry": ("booth_id", "entry_time", "toll")},
    sizes=(ROLLING_WINDOW, ROLLING_SLIDE),
    spanning=True,
    starts_before=lambda sizes: sizes[ROLLING_WINDOW.name],
    check_sizes=_slide_divides_the_window,
)
