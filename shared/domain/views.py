"""The views of lambdaline, each defined once as DataFrame -> DataFrame.

These functions are the definition of truth: the batch layer applies them to
the whole master dataset; the speed layer wires the stateless ones and
``vehicle_visits`` between its sources (with watermarks) and its sinks, and
keeps the rest in per-booth and per-plate state (``speed_layer.booths``,
``speed_layer.lookups``) by the same rules, which the equivalence tests hold it
to. Sizes (window, max trip) are arguments, taken from settings by the caller,
never written here.

Inputs are validated events as :func:`shared.domain.validation.decode_records` yields
them (event fields plus ``source_*`` columns). Duplicates (same ``event_id``)
are removed by :func:`without_duplicates` before any view counts them
(:data:`COUNTED_INPUTS`: only entries are counted).

Each view's output columns are those its spec declares
(:mod:`shared.domain.view_specs`), in that order; a unit test holds them to it.

Beside each function is the same rule in DuckDB SQL (``<VIEW>_SQL``), written apart
from it: :func:`reference_sql` puts them together, and the bench's DuckDB peer and
the tests' oracle run them. A reader compares the two statements of a rule in one
place; a test holds the Spark functions to them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from enum import StrEnum

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from shared.domain.view_specs import (
    EXPIRED_REGISTRATIONS,
    VEHICLE_TRIPS,
    VIEWS,
    Aggregate,
    ViewSizes,
    ViewSpec,
)

MONEY_TOTAL = T.DecimalType(18, 2)


class DiagnosticReason(StrEnum):
    MISSING_EXIT = "missing_exit"
    MISSING_REGISTRATION = "missing_registration"


def _seconds(duration: timedelta) -> str:
    return f"{int(duration.total_seconds())} seconds"


def _interval(duration: timedelta) -> Column:
    """A literal interval (a session window's gap, a join's time bound)."""
    return F.expr(f"INTERVAL '{duration.total_seconds():.3f}' SECOND")


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


BOOTH_STATS_SQL = """
    SELECT booth_id, window_start, window_start + {window} AS window_end,
           count(*) AS vehicle_count, sum(toll)::DECIMAL(18, 2) AS total_toll,
           min(entry_time) AS first_entry_time, max(entry_time) AS last_entry_time
    FROM (SELECT *, time_bucket({window}, entry_time) AS window_start FROM once_entries)
    GROUP BY booth_id, window_start
"""
"""booth_stats in DuckDB SQL (:func:`reference_sql`): windows of ``window`` from midnight."""


def booth_rolling(entries: DataFrame, size: timedelta, slide: timedelta) -> DataFrame:
    """Vehicles and tolls per booth in hopping windows of ``size`` that start every ``slide``
    over entry_time: an entry counts in each of the ``size / slide`` windows holding it."""
    hopping = F.window("entry_time", _seconds(size), _seconds(slide)).alias("window")
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


BOOTH_ROLLING_SQL = """
    SELECT booth_id, window_start, window_start + {rolling_window} AS window_end,
           count(*) AS vehicle_count, sum(toll)::DECIMAL(18, 2) AS total_toll
    FROM (  -- the slide-aligned windows holding the entry: the latest and those before it
        SELECT booth_id, toll,
               time_bucket({rolling_slide}, entry_time) - k * {rolling_slide} AS window_start
        FROM once_entries, range({windows_per_entry}) AS r(k)
    )
    GROUP BY booth_id, window_start
"""
"""booth_rolling in DuckDB SQL: each entry in the ``rolling_window / rolling_slide``
windows that hold it."""


def vehicle_visits(entries: DataFrame, gap: timedelta) -> DataFrame:
    """Each plate's visits: runs of its entries less than ``gap`` apart, as Spark's
    ``session_window`` makes them (a session ends at its last entry + ``gap``), with
    the booths of its entries in entry order (ties by event_id).

    Start and end are aggregates of the session's entries (its first entry, its
    last + ``gap``: the session window's own bounds), not the window's fields:
    Spark pushes a filter on a grouping key below the aggregate, and a session
    window's key below it is each entry's own [entry, entry + gap), so a filter
    on the window's start would drop the entries that join a session to an
    earlier one (the batch layer filters visits by the date of their start)."""
    ordered = F.sort_array(F.collect_list(F.struct("entry_time", "event_id", "booth_id")))
    return (
        entries.groupBy("license_plate", F.session_window("entry_time", _seconds(gap)))
        .agg(
            F.min("entry_time").alias("session_start"),
            (F.max("entry_time") + _interval(gap)).alias("session_end"),
            F.count(F.lit(1)).alias("entry_count"),
            ordered.alias("_entries"),
            F.sum("toll").cast(MONEY_TOTAL).alias("total_toll"),
        )
        .select(
            "license_plate",
            "session_start",
            "session_end",
            "entry_count",
            F.transform("_entries", lambda entry: entry["booth_id"]).alias("booths"),
            "total_toll",
        )
    )


VEHICLE_VISITS_SQL = """
    SELECT license_plate, min(entry_time) AS session_start,
           max(entry_time) + {session_gap} AS session_end, count(*) AS entry_count,
           list(booth_id ORDER BY entry_time, event_id) AS booths,
           sum(toll)::DECIMAL(18, 2) AS total_toll
    FROM (  -- a visit starts at an entry a gap or more after the plate's one before
        SELECT *, sum(starts) OVER (PARTITION BY license_plate ORDER BY entry_time, event_id)
                  AS visit
        FROM (
            SELECT *, CASE WHEN entry_time - lag(entry_time) OVER (
                          PARTITION BY license_plate ORDER BY entry_time, event_id
                      ) < {session_gap} THEN 0 ELSE 1 END AS starts
            FROM once_entries
        )
    )
    GROUP BY license_plate, visit
"""
"""vehicle_visits in DuckDB SQL: a running count of the entries that start a visit,
booths in entry order (ties by event_id)."""


def _trip_condition(max_trip: timedelta) -> Column:
    """An exit of the entry's booth and plate in [entry_time, entry_time + max_trip]."""
    return (
        (F.col("entry.booth_id") == F.col("exit.booth_id"))
        & (F.col("entry.license_plate") == F.col("exit.license_plate"))
        & (F.col("exit.exit_time") >= F.col("entry.entry_time"))
        & (F.col("exit.exit_time") <= F.col("entry.entry_time") + _interval(max_trip))
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


def entries_with_exits(entries: DataFrame, exits: DataFrame, max_trip: timedelta) -> DataFrame:
    """Every (entry, exit) pair of one booth and plate, exit in [entry, entry + max_trip]."""
    return trip_matches(entries, exits, max_trip, "inner")


def trip_duration_seconds(entry_time: Column, exit_time: Column) -> Column:
    return ((F.unix_millis(exit_time) - F.unix_millis(entry_time)) / 1000.0).alias(
        "duration_seconds"
    )


def best_candidates(view: ViewSpec, candidates: DataFrame, by: Sequence[str]) -> DataFrame:
    """Per ``by``, the candidate the view's rule ranks best (``ViewSpec.candidates``).

    The rule's ``best`` over a struct of the rank columns and then the other
    columns, which compare field by field: the rank decides. A row with no
    candidate (an outer join's, its first rank column null) ranks below every
    real one; with none at all the candidate columns are null. The serving
    layer combines the speed layer's candidate records by the same rule
    (``shared.platform.speed_tables``).
    """
    rule = view.candidates
    assert rule is not None, f"{view.name} has no candidates"
    others = [name for name in candidates.columns if name not in (*by, *rule.rank)]
    # null where there is no candidate: min and max skip it
    ranked = F.when(F.col(rule.rank[0]).isNotNull(), F.struct(*rule.rank, *others))
    pick = {Aggregate.MIN: F.min, Aggregate.MAX: F.max}[rule.best]
    return (
        candidates.groupBy(*by)
        .agg(pick(ranked).alias("best"))
        .select(*by, *(F.col(f"best.{name}").alias(name) for name in (*rule.rank, *others)))
    )


def earliest_exits(pairs: DataFrame) -> DataFrame:
    """Of the (entry, exit) pairs, the earliest exit per entry, with the trip's duration:
    the trip's candidates ranked by ``VEHICLE_TRIPS``' rule."""
    key = VEHICLE_TRIPS.key
    return best_candidates(VEHICLE_TRIPS, pairs.select(*key, "exit_time"), key).transform(
        trip_candidates
    )


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


VEHICLE_TRIPS_SQL = """
    SELECT booth_id, license_plate, entry_time, exit_time,
           (epoch_ms(exit_time) - epoch_ms(entry_time)) / 1000.0 AS duration_seconds
    FROM (
        SELECT e.booth_id, e.license_plate, e.entry_time, min(x.exit_time) AS exit_time
        FROM once_entries e JOIN exits x
          ON x.booth_id = e.booth_id AND x.license_plate = e.license_plate
         AND x.exit_time BETWEEN e.entry_time AND e.entry_time + {max_trip}
        GROUP BY e.booth_id, e.license_plate, e.entry_time
    )
"""
"""vehicle_trips in DuckDB SQL: each entry's earliest exit of its booth and plate within
``max_trip``."""


REGISTRATION_COLUMNS = (
    "license_plate",
    "registration_time",
    "registration_id",
    "expired",
    "event_id",
)
ENTRY_COLUMNS = ("event_id", "booth_id", "license_plate", "entry_time")

VIEW_INPUTS: dict[str, tuple[str, ...]] = {
    "toll_entry": (*ENTRY_COLUMNS, "toll"),
    "toll_exit": ("booth_id", "license_plate", "exit_time"),
    "vehicle_registration": REGISTRATION_COLUMNS,
}
"""The event columns (by event type name) that :func:`all_views` reads: a caller that keeps
deduplicated events for several views keeps these and drops the rest."""

COUNTED_INPUTS: frozenset[str] = frozenset({"toll_entry"})
"""The event types (by name) whose copies a view would count twice: booth_stats
counts and sums entries, so entries lose their duplicates (:func:`without_duplicates`)
before any view reads them. Exits and registrations reach the views only through
a ``min`` per entry (its earliest exit) or a ``max`` (its latest registration),
which copies of them do not change; neither layer spends a shuffle and a sort
(or a state store) on their duplicates."""


def registration_applies(lookback: timedelta) -> Column:
    """The registration rule's join condition (``entry`` and ``registration`` aliases): a
    registration of the entry's plate recorded at or before the entry, at most
    ``lookback`` before it (a registration older than that no longer counts)."""
    registered = F.col("registration.registration_time")
    entered = F.col("entry.entry_time")
    return (
        (F.col("entry.license_plate") == F.col("registration.license_plate"))
        & (registered <= entered)
        & (registered + _interval(lookback) >= entered)
    )


def registration_candidates(
    entries: DataFrame, registrations: DataFrame, lookback: timedelta
) -> DataFrame:
    """Each entry left-outer-joined to every registration that can apply to it
    (:func:`registration_applies`).

    A row per (entry, registration) pair: :data:`ENTRY_COLUMNS`, then the
    registration's ``registration_time``, ``registration_id``,
    ``registration_event_id`` and ``expired`` (all null for an entry that no
    registration applies to). These are ``expired_registrations``' candidates
    (its spec's hidden columns): the speed layer writes one when a registration
    outranks an entry's best so far (``speed_layer.lookups``).
    """
    entry = entries.select(*ENTRY_COLUMNS).alias("entry")
    registration = registrations.select(*REGISTRATION_COLUMNS).alias("registration")
    applies = registration_applies(lookback)
    return entry.join(registration, applies, "left_outer").select(
        *(F.col(f"entry.{name}").alias(name) for name in ENTRY_COLUMNS),
        F.col("registration.registration_time").alias("registration_time"),
        F.col("registration.registration_id").alias("registration_id"),
        F.col("registration.event_id").alias("registration_event_id"),
        F.col("registration.expired").alias("expired"),
    )


def registrations_at_entry(
    entries: DataFrame, registrations: DataFrame, lookback: timedelta
) -> DataFrame:
    """The registration rule: each entry's latest registration at entry time.

    For every entry, the registration of its plate with the greatest
    registration_time in [entry_time - lookback, entry_time] (ties broken by
    registration_id, then event_id, greatest wins: ``EXPIRED_REGISTRATIONS``'
    candidate rank), or none (``registration_id`` and ``expired`` null): the
    best of the entry's :func:`registration_candidates`.
    """
    candidates = registration_candidates(entries, registrations, lookback)
    return best_candidates(EXPIRED_REGISTRATIONS, candidates, ENTRY_COLUMNS).select(
        *ENTRY_COLUMNS, "registration_id", "expired"
    )


def expired_at_entry(at_entry: DataFrame) -> DataFrame:
    """``expired_registrations`` rows from entries with their applicable registration."""
    return at_entry.where(F.col("expired")).select(
        "booth_id", "license_plate", "entry_time", "registration_id"
    )


def expired_registrations(
    entries: DataFrame, registrations: DataFrame, lookback: timedelta
) -> DataFrame:
    """Entries whose latest registration at entry time has expired = true."""
    return expired_at_entry(registrations_at_entry(entries, registrations, lookback))


REGISTRATION_AT_ENTRY_SQL = """
    SELECT e.event_id, e.booth_id, e.license_plate, e.entry_time,
           arg_max(r.registration_id, (r.registration_time, r.registration_id, r.event_id))
               AS registration_id,
           arg_max(r.expired, (r.registration_time, r.registration_id, r.event_id)) AS expired
    FROM once_entries e LEFT JOIN registrations r
      ON r.license_plate = e.license_plate AND r.registration_time <= e.entry_time
     AND r.registration_time >= e.entry_time - {registration_lookback}
    GROUP BY e.event_id, e.booth_id, e.license_plate, e.entry_time
"""
"""The registration rule in DuckDB SQL (the table ``at_entry``): per entry, of its plate's
registrations recorded in the ``registration_lookback`` up to it, the greatest by
(registration_time, registration_id, event_id); none: NULLs."""

EXPIRED_REGISTRATIONS_SQL = """
    SELECT booth_id, license_plate, entry_time, registration_id FROM at_entry WHERE expired
"""
"""expired_registrations in DuckDB SQL: entries whose applicable registration expired."""


def unregistered_at_entry(at_entry: DataFrame) -> DataFrame:
    """Diagnostic rows for entries that no registration applies to."""
    return at_entry.where(F.col("registration_id").isNull()).select(
        "booth_id",
        "entry_time",
        F.lit(DiagnosticReason.MISSING_REGISTRATION.value).alias("reason"),
    )


def missing_exits(entries: DataFrame, exits: DataFrame, max_trip: timedelta) -> DataFrame:
    """Diagnostic rows for entries with no exit within max_trip."""
    return unmatched_entries(trip_matches(entries, exits, max_trip, "left_outer"))


def unmatched_entries(matches: DataFrame) -> DataFrame:
    """Diagnostic rows for the entries a left outer :func:`trip_matches` found no exit for."""
    return matches.where(F.col("exit_time").isNull()).select(
        "booth_id", "entry_time", F.lit(DiagnosticReason.MISSING_EXIT.value).alias("reason")
    )


def count_diagnostics(rows: DataFrame, window: timedelta) -> DataFrame:
    """``diagnostics``: diagnostic rows counted per booth, entry window and reason."""
    return (
        rows.groupBy("booth_id", F.window("entry_time", _seconds(window)).alias("window"), "reason")
        .agg(F.count(F.lit(1)).alias("count"))
        .select("booth_id", F.col("window.start").alias("window_start"), "reason", "count")
    )


def diagnostics_from(exitless: DataFrame, at_entry: DataFrame, window: timedelta) -> DataFrame:
    """``diagnostics`` from the entries missing an exit (:func:`missing_exits`) and the
    entries' registration lookup (:func:`registrations_at_entry`)."""
    return count_diagnostics(exitless.unionByName(unregistered_at_entry(at_entry)), window)


def diagnostics(
    entries: DataFrame,
    exits: DataFrame,
    registrations: DataFrame,
    window: timedelta,
    max_trip: timedelta,
    lookback: timedelta,
) -> DataFrame:
    """Counts of entries that miss an exit (within max_trip) or a registration (within
    the lookback), per window."""
    at_entry = registrations_at_entry(entries, registrations, lookback)
    return diagnostics_from(missing_exits(entries, exits, max_trip), at_entry, window)


DIAGNOSTICS_SQL = """
    SELECT booth_id, window_start, reason, count(*) AS count
    FROM (
        SELECT booth_id, time_bucket({window}, entry_time) AS window_start,
               'missing_exit' AS reason
        FROM once_entries e WHERE NOT EXISTS (
            SELECT 1 FROM exits x
            WHERE x.booth_id = e.booth_id AND x.license_plate = e.license_plate
              AND x.exit_time BETWEEN e.entry_time AND e.entry_time + {max_trip})
        UNION ALL
        SELECT booth_id, time_bucket({window}, entry_time), 'missing_registration'
        FROM at_entry WHERE registration_id IS NULL
    )
    GROUP BY booth_id, window_start, reason
"""
"""diagnostics in DuckDB SQL: entries with no exit within ``max_trip`` and entries no
registration applies to, per booth, window and reason."""


def all_views(
    entries: DataFrame,
    exits: DataFrame,
    registrations: DataFrame,
    sizes: ViewSizes,
    spanning: DataFrame | None = None,
) -> dict[str, DataFrame]:
    """Every view over static, deduplicated events: the definition of truth.

    Two intermediate results feed two views each, so they are computed once and
    persisted (``spark.catalog.clearCache()`` or ``unpersist`` releases them):
    the registration lookup, and one left outer trip join whose matched pairs
    give ``vehicle_trips`` and whose unmatched entries give the missing exits.
    No view reads the entry's ``event_id`` from either (entries without an exit
    or a registration are counted row by row), so neither keeps it.

    ``spanning``: the entries the views whose rows span time (a hopping window,
    a visit) are computed from, if not ``entries`` (the batch layer reads the
    days either side for them).
    """
    spanning = entries if spanning is None else spanning
    lookback, window = sizes.registration_lookback, sizes.window
    at_entry = registrations_at_entry(entries, registrations, lookback).drop("event_id")
    at_entry = at_entry.persist()  # its default level, MEMORY_AND_DISK_DESER
    matches = trip_matches(entries, exits, sizes.max_trip, "left_outer").drop("event_id")
    matches = matches.persist()
    return {
        "booth_stats": booth_stats(entries, window),
        "vehicle_trips": earliest_exits(matches.where(F.col("exit_time").isNotNull())),
        "expired_registrations": expired_at_entry(at_entry),
        "diagnostics": diagnostics_from(unmatched_entries(matches), at_entry, window),
        "booth_rolling": booth_rolling(spanning, sizes.rolling_window, sizes.rolling_slide),
        "vehicle_visits": vehicle_visits(spanning, sizes.session_gap),
    }


REFERENCE_SQL = {
    "booth_stats": BOOTH_STATS_SQL,
    "vehicle_trips": VEHICLE_TRIPS_SQL,
    "expired_registrations": EXPIRED_REGISTRATIONS_SQL,
    "diagnostics": DIAGNOSTICS_SQL,
    "booth_rolling": BOOTH_ROLLING_SQL,
    "vehicle_visits": VEHICLE_VISITS_SQL,
}


def _sql_interval(duration: timedelta) -> str:
    return f"to_microseconds({int(duration / timedelta(microseconds=1))})"


def reference_sql(sizes: ViewSizes, first_copy: str) -> tuple[str, dict[str, str]]:
    """Every view's rule stated again in DuckDB SQL over raw events, apart from the Spark
    functions above: the one reference the bench's DuckDB peer and the tests' oracle run.

    Input: tables (or views) ``entries``, ``exits`` and ``registrations`` of the events'
    fields, instants as zone-less UTC ``TIMESTAMP``, every copy of a record.
    ``first_copy``: the ``ORDER BY`` that makes an entry's first copy first (the one
    counted). Returns the statements that make the tables ``once_entries`` and
    ``at_entry``, and per view a ``SELECT`` of its columns in the spec's order, rows in
    key order, typed as the batch store's.
    """
    values = {
        "window": _sql_interval(sizes.window),
        "rolling_window": _sql_interval(sizes.rolling_window),
        "rolling_slide": _sql_interval(sizes.rolling_slide),
        "windows_per_entry": str(sizes.rolling_window // sizes.rolling_slide),
        "session_gap": _sql_interval(sizes.session_gap),
        "max_trip": _sql_interval(sizes.max_trip),
        "registration_lookback": _sql_interval(sizes.registration_lookback),
    }
    prepare = f"""
        CREATE OR REPLACE TEMP TABLE once_entries AS
            SELECT * FROM entries
            QUALIFY row_number() OVER (PARTITION BY event_id ORDER BY {first_copy}) = 1;
        CREATE OR REPLACE TEMP TABLE at_entry AS {REGISTRATION_AT_ENTRY_SQL.format(**values)};
    """
    selects = {}
    for spec in VIEWS:
        key = ", ".join(spec.key)
        selects[spec.name] = f"{REFERENCE_SQL[spec.name].format(**values)} ORDER BY {key}"
    return prepare, selects
