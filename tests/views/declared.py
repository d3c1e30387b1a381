"""Two views added from outside the project as declarations only, with nothing else
changed: ``LAMBDALINE_VIEW_MODULES=tests.views.declared`` registers both.

- ``tolls_by_type``, a roll-up with other keys and measures than the project's: per
  booth and ``vehicle_type``, the sum of tolls in 15-minute windows. The speed operator
  keeps it in the booths' roll-up state, beside booth_stats and booth_rolling.
- ``next_entries``, a best match with another interval and its right events of the
  left's own type: for each entry, the same plate's next entry at any booth within 2 h
  (not the entry itself; the earliest, ties by event id). The speed operator keeps it
  in the plates' state, beside the trips and the registrations.

Each states its reference in DuckDB SQL, written apart from the declaration.
"""

from __future__ import annotations

from datetime import timedelta

from shared.domain.views.declarations import (
    AT,
    BestMatchRule,
    Measure,
    Measured,
    Offset,
    RollUpRule,
    best_match_view,
    roll_up_view,
)
from shared.domain.views.rules import sql_interval
from shared.domain.views.spec import (
    Aggregate,
    Candidates,
    Column,
    ColumnType,
    Combine,
    Final,
    ViewSpec,
)
from shared.domain.views.view import Size, View, ViewSizes

TYPE_WINDOW = Size(
    "type_window", timedelta(minutes=15), "tolls_by_type's tumbling window (divides a day)",
    divides_a_day=True,
)  # fmt: skip
NEXT_WITHIN = Size("next_within", timedelta(hours=2), "next_entries: how soon the next entry")

TOLLS_BY_TYPE = ViewSpec(
    name="tolls_by_type",
    columns=(
        Column("booth_id", ColumnType.TEXT),
        Column("vehicle_type", ColumnType.COUNT),
        Column("window_start", ColumnType.INSTANT),
        Column("window_end", ColumnType.INSTANT),
        Column("total_toll", ColumnType.MONEY, "sum of tolls, two decimal places"),
    ),
    key=("booth_id", "vehicle_type", "window_start"),
    time_column="window_start",
    api_row="TollsByTypeRow",
    final=Final("window_end"),
)

TOLLS_RULE = RollUpRule(
    events="toll_entry",
    keys=("booth_id", "vehicle_type"),
    time="entry_time",
    size=TYPE_WINDOW,
    measures=(Measured("total_toll", Measure.SUM, "toll"),),
)


def tolls_reference(sizes: ViewSizes) -> str:
    window = sql_interval(sizes[TYPE_WINDOW.name])
    return f"""
        SELECT booth_id, vehicle_type::BIGINT AS vehicle_type,
               time_bucket({window}, entry_time) AS window_start,
               time_bucket({window}, entry_time) + {window} AS window_end,
               sum(toll)::DECIMAL(18, 2) AS total_toll
        FROM once_entries GROUP BY ALL
    """


NEXT_ENTRIES = ViewSpec(
    name="next_entries",
    columns=(
        Column("booth_id", ColumnType.TEXT),
        Column("license_plate", ColumnType.TEXT),
        Column("entry_time", ColumnType.INSTANT),
        Column("next_entry_time", ColumnType.INSTANT),
        Column("next_booth_id", ColumnType.TEXT),
    ),
    key=("booth_id", "license_plate", "entry_time"),
    time_column="entry_time",
    api_row="NextEntryRow",
    # once the watermark passes entry_time + next_within, no entry that could be the
    # next can still arrive
    final=Final("entry_time", plus=(NEXT_WITHIN.name,)),
    combine=Combine.BEST_CANDIDATE,
    candidates=Candidates(
        rank=("next_entry_time", "next_event_id"),
        best=Aggregate.MIN,
        hidden=(Column("next_event_id", ColumnType.TEXT),),
    ),
)

NEXT_RULE = BestMatchRule(
    left="toll_entry",
    right="toll_entry",
    keys=("license_plate",),
    left_time="entry_time",
    right_time="entry_time",
    start=AT,
    end=Offset(NEXT_WITHIN),
    carries={
        "next_entry_time": "entry_time",
        "next_booth_id": "booth_id",
        "next_event_id": "event_id",
    },
)


def next_reference(sizes: ViewSizes) -> str:
    within = sql_interval(sizes[NEXT_WITHIN.name])
    return f"""
        SELECT e.booth_id, e.license_plate, e.entry_time,
               arg_min(n.entry_time, (n.entry_time, n.event_id)) AS next_entry_time,
               arg_min(n.booth_id, (n.entry_time, n.event_id)) AS next_booth_id
        FROM once_entries e JOIN once_entries n
          ON n.license_plate = e.license_plate AND n.event_id <> e.event_id
         AND n.entry_time BETWEEN e.entry_time AND e.entry_time + {within}
        GROUP BY e.booth_id, e.license_plate, e.entry_time
    """


VIEWS: tuple[View, ...] = (
    roll_up_view(TOLLS_BY_TYPE, TOLLS_RULE, tolls_reference),
    best_match_view(NEXT_ENTRIES, NEXT_RULE, next_reference),
)
