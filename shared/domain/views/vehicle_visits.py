"""vehicle_visits: each plate's visits, runs of its entries less than ``session_gap`` apart."""

from __future__ import annotations

from datetime import timedelta

from shared.domain.views.declarations import Measure, Measured, SessionsRule, sessions_view
from shared.domain.views.rules import sql_interval
from shared.domain.views.spec import Column, ColumnType, Final, Horizon, ViewSpec
from shared.domain.views.view import Size, ViewSizes

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


RULE = SessionsRule(
    events="toll_entry",
    keys=("license_plate",),
    time="entry_time",
    gap=SESSION_GAP,
    measures=(
        Measured("entry_count", Measure.COUNT),
        Measured("total_toll", Measure.SUM, "toll"),
    ),
    lists={"booths": "booth_id"},
)
"""Each plate's visits: runs of its entries less than ``session_gap`` apart (a visit ends at
its last entry + ``session_gap``), with the booths of its entries in entry order."""


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


VIEW = sessions_view(SPEC, RULE, reference_sql)
