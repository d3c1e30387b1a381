"""vehicle_trips: each entry joined to the earliest exit of its booth and plate within
``max_trip``."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from pyspark.sql import Column as SparkColumn
from pyspark.sql import functions as F

from shared.domain.views.declarations import AT, BestMatchRule, Offset, best_match_view
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
from shared.domain.views.view import Size, ViewSizes

MAX_TRIP = Size("max_trip", timedelta(hours=1), "longest entry->exit trip")

SPEC = ViewSpec(
    name="vehicle_trips",
    columns=(
        Column("booth_id", ColumnType.TEXT),
        Column("license_plate", ColumnType.TEXT),
        Column("entry_time", ColumnType.INSTANT),
        Column("exit_time", ColumnType.INSTANT),
        Column("duration_seconds", ColumnType.SECONDS),
    ),
    key=("booth_id", "license_plate", "entry_time"),
    time_column="entry_time",
    api_row="VehicleTripRow",
    # no exit later than the watermark is accepted: once it passes entry_time +
    # max_trip, no exit that could end the trip can still arrive
    final=Final("entry_time", plus=("max_trip",)),
    # every exit that matches the entry is a candidate; the earliest ends the trip
    combine=Combine.BEST_CANDIDATE,
    candidates=Candidates(rank=("exit_time",), best=Aggregate.MIN),
)


def trip_duration_seconds(column: Callable[[str], SparkColumn]) -> SparkColumn:
    """A trip's length, from its entry to its exit (``column``: a row's column by name)."""
    return (F.unix_millis(column("exit_time")) - F.unix_millis(column("entry_time"))) / 1000.0


RULE = BestMatchRule(
    left="toll_entry",
    right="toll_exit",
    keys=("booth_id", "license_plate"),
    left_time="entry_time",
    right_time="exit_time",
    start=AT,
    end=Offset(MAX_TRIP),
    carries={"exit_time": "exit_time"},
    derived={"duration_seconds": trip_duration_seconds},
    missing="missing_exit",
)
"""Each entry's earliest exit of its booth and plate in [entry_time, entry_time + max_trip]
(the earliest: the spec's candidate rank)."""


def reference_sql(sizes: ViewSizes) -> str:
    """vehicle_trips in DuckDB SQL: each entry's earliest exit of its booth and plate within
    ``max_trip``."""
    return f"""
        SELECT booth_id, license_plate, entry_time, exit_time,
               (epoch_ms(exit_time) - epoch_ms(entry_time)) / 1000.0 AS duration_seconds
        FROM (
            SELECT e.booth_id, e.license_plate, e.entry_time, min(x.exit_time) AS exit_time
            FROM once_entries e JOIN exits x
              ON x.booth_id = e.booth_id AND x.license_plate = e.license_plate
             AND x.exit_time BETWEEN e.entry_time AND e.entry_time
                                     + {sql_interval(sizes[MAX_TRIP.name])}
            GROUP BY e.booth_id, e.license_plate, e.entry_time
        )
    """


VIEW = best_match_view(SPEC, RULE, reference_sql)
