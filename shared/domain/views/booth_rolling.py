"""booth_rolling: vehicles and tolls per booth in hopping windows of ``rolling_window``
that start every ``rolling_slide``."""

from __future__ import annotations

from datetime import timedelta

from shared.domain.views.declarations import Measure, Measured, RollUpRule, roll_up_view
from shared.domain.views.rules import sql_interval
from shared.domain.views.spec import Column, ColumnType, Final, Horizon, ViewSpec
from shared.domain.views.view import Size, ViewSizes

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


RULE = RollUpRule(
    events="toll_entry",
    keys=("booth_id",),
    time="entry_time",
    size=ROLLING_WINDOW,
    slide=ROLLING_SLIDE,
    measures=(
        Measured("vehicle_count", Measure.COUNT),
        Measured("total_toll", Measure.SUM, "toll"),
    ),
)
"""Vehicles and tolls per booth in hopping windows of ``rolling_window`` that start every
``rolling_slide`` over entry_time: an entry counts in each of the windows holding it."""


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


VIEW = roll_up_view(SPEC, RULE, reference_sql)
