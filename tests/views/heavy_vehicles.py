"""heavy_vehicles: entries of heavy vehicles (``vehicle_type`` 2 or more) per booth in
windows of ``window``. A view added from outside the project, with nothing else
changed: ``LAMBDALINE_VIEW_MODULES=tests.views.heavy_vehicles`` registers it
(docs/adding-a-view.md writes it step by step)."""

from __future__ import annotations

from datetime import timedelta

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from shared.domain.views.booth_stats import WINDOW
from shared.domain.views.rules import seconds, sql_interval
from shared.domain.views.spec import Column, ColumnType, Final, ViewSpec
from shared.domain.views.view import Lane, SpeedPlan, View, ViewSizes

HEAVY = 2
"""The least ``vehicle_type`` that is heavy."""

SPEC = ViewSpec(
    name="heavy_vehicles",
    columns=(
        Column("booth_id", ColumnType.TEXT),
        Column("window_start", ColumnType.INSTANT),
        Column("window_end", ColumnType.INSTANT),
        Column("heavy_count", ColumnType.COUNT, f"entries of vehicle_type {HEAVY} or more"),
    ),
    key=("booth_id", "window_start"),
    time_column="window_start",
    api_row="HeavyVehicleRow",
    final=Final("window_end"),
)


def heavy_vehicles(entries: DataFrame, window: timedelta) -> DataFrame:
    return (
        entries.where(F.col("vehicle_type") >= HEAVY)
        .groupBy("booth_id", F.window("entry_time", seconds(window)).alias("window"))
        .agg(F.count(F.lit(1)).alias("heavy_count"))
        .select(
            "booth_id",
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "heavy_count",
        )
    )


def reference_sql(sizes: ViewSizes) -> str:
    window = sql_interval(sizes[WINDOW.name])
    return f"""
        SELECT booth_id, time_bucket({window}, entry_time) AS window_start,
               time_bucket({window}, entry_time) + {window} AS window_end,
               count(*) AS heavy_count
        FROM once_entries WHERE vehicle_type >= {HEAVY}
        GROUP BY ALL
    """


VIEW = View(
    spec=SPEC,
    compute=lambda inputs, sizes: heavy_vehicles(inputs.entries, sizes[WINDOW.name]),
    reference_sql=reference_sql,
    speed=SpeedPlan(Lane.OWN_QUERY, output_mode="update"),
    reads={"toll_entry": ("booth_id", "entry_time", "vehicle_type")},
    sizes=(WINDOW,),
)
