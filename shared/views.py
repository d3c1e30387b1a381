"""The four views of lambdaline, each defined once as DataFrame -> DataFrame.

These functions are the definition of truth: the batch layer applies them to
the whole master dataset, and the speed layer wires the same functions between
its sources (with watermarks) and its sinks. Sizes (window, max trip) are
arguments, taken from settings by the caller, never written here.

Inputs are validated events as :func:`shared.validation.decode_records` yields
them (event fields plus ``source_*`` columns). Duplicates (same ``event_id``)
are removed by :func:`without_duplicates` before any view counts them.

Output columns, named as in DESIGN.md:

``booth_stats``
    booth_id, window_start, window_end, vehicle_count, total_toll,
    first_entry_time, last_entry_time
``vehicle_trips``
    booth_id, license_plate, entry_time, exit_time, duration_seconds
``expired_registrations``
    booth_id, license_plate, entry_time, registration_id
``diagnostics``
    booth_id, window_start, reason, count
"""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

MONEY_TOTAL = T.DecimalType(18, 2)


class DiagnosticReason(StrEnum):
    MISSING_EXIT = "missing_exit"
    MISSING_REGISTRATION = "missing_registration"


VIEW_KEYS: dict[str, tuple[str, ...]] = {
    "booth_stats": ("booth_id", "window_start"),
    "vehicle_trips": ("booth_id", "license_plate", "entry_time"),
    "expired_registrations": ("booth_id", "license_plate", "entry_time"),
    "diagnostics": ("booth_id", "window_start", "reason"),
}
"""Each view's key columns, in DESIGN.md order; the speed store keys its records by them."""


def _seconds(duration: timedelta) -> str:
    return f"{int(duration.total_seconds())} seconds"


def _interval(duration: timedelta) -> Column:
    return F.make_dt_interval(secs=F.lit(duration.total_seconds()))


def without_duplicates(events: DataFrame) -> DataFrame:
    """Keep one event per ``event_id``.

    A static DataFrame keeps the first copy by (source timestamp, topic,
    partition, offset), so reruns choose the same row. A streaming DataFrame
    drops copies within its watermark (``dropDuplicatesWithinWatermark``).
    """
    if events.isStreaming:
        return events.dropDuplicatesWithinWatermark(["event_id"])
    first_copy = Window.partitionBy("event_id").orderBy(
        "source_timestamp", "source_topic", "source_partition", "source_offset"
    )
    return (
        events.withColumn("_copy", F.row_number().over(first_copy))
        .where(F.col("_copy") == 1)
        .drop("_copy")
    )


def booth_stats(entries: DataFrame, window: timedelta) -> DataFrame:
    """Vehicles and tolls per booth in tumbling windows of ``window`` over entry_time."""
    return (
        entries.groupBy("booth_id", F.window("entry_time", _seconds(window)).alias("window"))
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


def entries_with_exits(entries: DataFrame, exits: DataFrame, max_trip: timedelta) -> DataFrame:
    """Every (entry, exit) pair of one booth and plate with the exit in [entry, entry + max_trip].

    An inner, time-bounded join: streaming Spark can run it with watermarks on
    both sides and evicts state older than ``max_trip``.
    """
    entry, exit_ = entries.alias("entry"), exits.alias("exit")
    return entry.join(
        exit_,
        (F.col("entry.booth_id") == F.col("exit.booth_id"))
        & (F.col("entry.license_plate") == F.col("exit.license_plate"))
        & (F.col("exit.exit_time") >= F.col("entry.entry_time"))
        & (F.col("exit.exit_time") <= F.col("entry.entry_time") + _interval(max_trip)),
    ).select(
        F.col("entry.booth_id").alias("booth_id"),
        F.col("entry.license_plate").alias("license_plate"),
        F.col("entry.entry_time").alias("entry_time"),
        F.col("exit.exit_time").alias("exit_time"),
    )


def trip_duration_seconds(entry_time: Column, exit_time: Column) -> Column:
    return ((F.unix_millis(exit_time) - F.unix_millis(entry_time)) / 1000.0).alias(
        "duration_seconds"
    )


def earliest_exits(pairs: DataFrame) -> DataFrame:
    """Of the (entry, exit) pairs, the earliest exit per entry, with the trip's duration."""
    return (
        pairs.groupBy("booth_id", "license_plate", "entry_time")
        .agg(F.min("exit_time").alias("exit_time"))
        .select(
            "booth_id",
            "license_plate",
            "entry_time",
            "exit_time",
            trip_duration_seconds(F.col("entry_time"), F.col("exit_time")),
        )
    )


def vehicle_trips(entries: DataFrame, exits: DataFrame, max_trip: timedelta) -> DataFrame:
    """Each entry joined to the earliest exit of the same booth and plate within max_trip."""
    return earliest_exits(entries_with_exits(entries, exits, max_trip))


def _latest_registration_at_entry(entries: DataFrame, registrations: DataFrame) -> DataFrame:
    """Each entry with its plate's latest registration recorded at or before entry_time.

    Entries without any such registration keep null registration columns. Ties on
    registration_time are broken by registration_id, then event_id, so the
    answer is deterministic.
    """
    entry = entries.select("event_id", "booth_id", "license_plate", "entry_time").alias("entry")
    registration = registrations.select(
        F.col("license_plate").alias("registered_plate"),
        "registration_id",
        "expired",
        "registration_time",
        F.col("event_id").alias("registration_event_id"),
    ).alias("registration")
    candidates = entry.join(
        registration,
        (F.col("entry.license_plate") == F.col("registered_plate"))
        & (F.col("registration_time") <= F.col("entry.entry_time")),
        "left",
    )
    latest_first = Window.partitionBy("entry.event_id").orderBy(
        F.col("registration_time").desc_nulls_last(),
        F.col("registration_id").desc_nulls_last(),
        F.col("registration_event_id").desc_nulls_last(),
    )
    return (
        candidates.withColumn("_rank", F.row_number().over(latest_first))
        .where(F.col("_rank") == 1)
        .select(
            "entry.event_id",
            "entry.booth_id",
            "entry.license_plate",
            "entry.entry_time",
            "registration_id",
            "expired",
        )
    )


def is_expired_registration(expired: Column) -> Column:
    """The rule of ``expired_registrations``: the applicable registration has expired."""
    return F.coalesce(expired, F.lit(False))


def expired_registrations(entries: DataFrame, registrations: DataFrame) -> DataFrame:
    """Entries whose latest registration at entry time has expired = true."""
    return (
        _latest_registration_at_entry(entries, registrations)
        .where(is_expired_registration(F.col("expired")))
        .select("booth_id", "license_plate", "entry_time", "registration_id")
    )


def diagnostics(
    entries: DataFrame,
    exits: DataFrame,
    registrations: DataFrame,
    window: timedelta,
    max_trip: timedelta,
) -> DataFrame:
    """Counts of entries that miss an exit (within max_trip) or a registration, per window."""
    matched = entries_with_exits(entries, exits, max_trip).select(
        "booth_id", "license_plate", "entry_time"
    )
    missing_exit = entries.join(
        matched, ["booth_id", "license_plate", "entry_time"], "left_anti"
    ).select("booth_id", "entry_time", F.lit(DiagnosticReason.MISSING_EXIT.value).alias("reason"))
    missing_registration = (
        _latest_registration_at_entry(entries, registrations)
        .where(F.col("registration_id").isNull())
        .select(
            "booth_id",
            "entry_time",
            F.lit(DiagnosticReason.MISSING_REGISTRATION.value).alias("reason"),
        )
    )
    return (
        missing_exit.unionByName(missing_registration)
        .groupBy("booth_id", F.window("entry_time", _seconds(window)).alias("window"), "reason")
        .agg(F.count(F.lit(1)).alias("count"))
        .select("booth_id", F.col("window.start").alias("window_start"), "reason", "count")
    )
