"""vehicle_trips: each entry joined to the earliest exit of its booth and plate within
``max_trip``."""

from __future__ import annotations

from datetime import timedelta

from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from shared.domain.views.rules import best_candidates, interval, sql_interval
from shared.domain.views.spec import (
    Aggregate,
    Candidates,
    Column,
    ColumnType,
    Combine,
    Final,
    ViewSpec,
)
from shared.domain.views.view import Inputs, Lane, Size, SpeedPlan, View, ViewSizes

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


def _trip_condition(max_trip: timedelta) -> SparkColumn:
    """An exit of the entry's booth and plate in [entry_time, entry_time + max_trip]."""
    return (
        (F.col("entry.booth_id") == F.col("exit.booth_id"))
        & (F.col("entry.license_plate") == F.col("exit.license_plate"))
        & (F.col("exit.exit_time") >= F.col("entry.entry_time"))
        & (F.col("exit.exit_time") <= F.col("entry.entry_time") + interval(max_trip))
    )


def trip_matches(entries: DataFrame, exits: DataFrame, max_trip: timedelta, how: str) -> DataFrame:
    """Entries joined (``inner`` or ``left_outer``) to each exit that can end their trip.

    An exit can end a trip if it is of the entry's booth and plate with its time
    in [entry_time, entry_time + max_trip]. The join is time-bounded: streaming
    Spark runs it with watermarks on both sides and evicts state older than
    ``max_trip``, emitting an unmatched entry (``left_outer``: ``exit_time``
    null) once the watermark passes entry_time + max_trip.
    """
    entry, exit_ = entries.alias("entry"), exits.alias("exit")
    return entry.join(exit_, _trip_condition(max_trip), how).select(
        F.col("entry.event_id").alias("event_id"),
        F.col("entry.booth_id").alias("booth_id"),
        F.col("entry.license_plate").alias("license_plate"),
        F.col("entry.entry_time").alias("entry_time"),
        F.col("exit.exit_time").alias("exit_time"),
    )


def shared_trip_matches(inputs: Inputs, sizes: ViewSizes) -> DataFrame:
    """One left outer :func:`trip_matches` of the inputs, which vehicle_trips (its matched
    pairs) and diagnostics (its unmatched entries) both read. Neither reads the entry's
    ``event_id`` from it (entries without an exit are counted row by row)."""
    return inputs.shared(
        "trip_matches",
        lambda: trip_matches(inputs.entries, inputs.exits, sizes[MAX_TRIP.name], "left_outer")
        .drop("event_id"),
    )  # fmt: skip


def entries_with_exits(entries: DataFrame, exits: DataFrame, max_trip: timedelta) -> DataFrame:
    """Every (entry, exit) pair of one booth and plate, exit in [entry, entry + max_trip]."""
    return trip_matches(entries, exits, max_trip, "inner")


def trip_duration_seconds(entry_time: SparkColumn, exit_time: SparkColumn) -> SparkColumn:
    return ((F.unix_millis(exit_time) - F.unix_millis(entry_time)) / 1000.0).alias(
        "duration_seconds"
    )


def earliest_exits(pairs: DataFrame) -> DataFrame:
    """Of the (entry, exit) pairs, the earliest exit per entry, with the trip's duration:
    the trip's candidates ranked by the view's rule."""
    key = SPEC.key
    return best_candidates(SPEC, pairs.select(*key, "exit_time"), key).transform(trip_candidates)


def trip_candidates(matches: DataFrame) -> DataFrame:
    """``vehicle_trips`` candidates (the view's columns) of :func:`trip_matches`: one per
    matched (entry, exit) pair. The speed layer writes one when an exit beats an entry's
    earliest so far."""
    return matches.where(F.col("exit_time").isNotNull()).select(
        "booth_id",
        "license_plate",
        "entry_time",
        "exit_time",
        trip_duration_seconds(F.col("entry_time"), F.col("exit_time")),
    )


def vehicle_trips(entries: DataFrame, exits: DataFrame, max_trip: timedelta) -> DataFrame:
    """Each entry joined to the earliest exit of the same booth and plate within max_trip."""
    return earliest_exits(entries_with_exits(entries, exits, max_trip))


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


VIEW = View(
    spec=SPEC,
    compute=lambda inputs, sizes: earliest_exits(
        shared_trip_matches(inputs, sizes).where(F.col("exit_time").isNotNull())
    ),
    reference_sql=reference_sql,
    speed=SpeedPlan(Lane.PLATES),
    reads={
        "toll_entry": ("event_id", "booth_id", "license_plate", "entry_time"),
        "toll_exit": ("booth_id", "license_plate", "exit_time"),
    },
    sizes=(MAX_TRIP,),
)
