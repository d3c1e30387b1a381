"""expired_registrations: entries whose latest registration at entry time had expired,
and the registration rule it is decided by."""

from __future__ import annotations

from datetime import timedelta

from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from shared.domain.views.rules import ENTRY_COLUMNS, best_candidates, interval, sql_interval
from shared.domain.views.spec import (
    Aggregate,
    Candidates,
    Column,
    ColumnType,
    Combine,
    Final,
    ViewSpec,
)
from shared.domain.views.view import Inputs, Lane, ReferenceTable, Size, SpeedPlan, View, ViewSizes

REGISTRATION_LOOKBACK = Size(
    "registration_lookback",
    timedelta(days=400),
    "how long a registration applies: an entry uses its plate's latest registration "
    "recorded at most this long before it",
)

SPEC = ViewSpec(
    name="expired_registrations",
    columns=(
        Column("booth_id", ColumnType.TEXT),
        Column("license_plate", ColumnType.TEXT),
        Column("entry_time", ColumnType.INSTANT),
        Column("registration_id", ColumnType.TEXT),
    ),
    key=("booth_id", "license_plate", "entry_time"),
    time_column="entry_time",
    api_row="ExpiredRegistrationRow",
    # a registration recorded at or before the entry is no later than the entry:
    # once the watermark passes the entry, none can still arrive
    final=Final("entry_time"),
    # every registration of the plate at or before the entry is a candidate; the
    # latest decides, and it is an alert only if that registration had expired
    combine=Combine.BEST_CANDIDATE,
    candidates=Candidates(
        rank=("registration_time", "registration_id", "registration_event_id"),
        best=Aggregate.MAX,
        hidden=(
            Column("registration_time", ColumnType.INSTANT),
            Column("registration_event_id", ColumnType.TEXT),
            Column("expired", ColumnType.FLAG),
        ),
        shown_if="expired",
    ),
)

REGISTRATION_COLUMNS = (
    "license_plate",
    "registration_time",
    "registration_id",
    "expired",
    "event_id",
)


def registration_applies(lookback: timedelta) -> SparkColumn:
    """The registration rule's join condition (``entry`` and ``registration`` aliases): a
    registration of the entry's plate recorded at or before the entry, at most
    ``lookback`` before it (a registration older than that no longer counts)."""
    registered = F.col("registration.registration_time")
    entered = F.col("entry.entry_time")
    return (
        (F.col("entry.license_plate") == F.col("registration.license_plate"))
        & (registered <= entered)
        & (registered + interval(lookback) >= entered)
    )


def registration_candidates(
    entries: DataFrame, registrations: DataFrame, lookback: timedelta
) -> DataFrame:
    """Each entry left-outer-joined to every registration that can apply to it
    (:func:`registration_applies`).

    A row per (entry, registration) pair: ``ENTRY_COLUMNS``, then the
    registration's ``registration_time``, ``registration_id``,
    ``registration_event_id`` and ``expired`` (all null for an entry that no
    registration applies to). These are the view's candidates (its spec's hidden
    columns): the speed layer writes one when a registration outranks an entry's
    best so far (``speed_layer.operator``).
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
    registration_id, then event_id, greatest wins: the view's candidate rank), or
    none (``registration_id`` and ``expired`` null): the best of the entry's
    :func:`registration_candidates`.
    """
    candidates = registration_candidates(entries, registrations, lookback)
    return best_candidates(SPEC, candidates, ENTRY_COLUMNS).select(
        *ENTRY_COLUMNS, "registration_id", "expired"
    )


def shared_at_entry(inputs: Inputs, sizes: ViewSizes) -> DataFrame:
    """The registration lookup of the inputs' entries, which this view and diagnostics
    both read (without the entry's ``event_id``, which neither reads)."""
    lookback = sizes[REGISTRATION_LOOKBACK.name]
    return inputs.shared(
        "at_entry",
        lambda: registrations_at_entry(inputs.entries, inputs.registrations, lookback)
        .drop("event_id"),
    )  # fmt: skip


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


def _at_entry_sql(sizes: ViewSizes) -> str:
    """The registration rule in DuckDB SQL: per entry, of its plate's registrations
    recorded in the ``registration_lookback`` up to it, the greatest by
    (registration_time, registration_id, event_id); none: NULLs."""
    lookback = sql_interval(sizes[REGISTRATION_LOOKBACK.name])
    return f"""
        SELECT e.event_id, e.booth_id, e.license_plate, e.entry_time,
               arg_max(r.registration_id, (r.registration_time, r.registration_id, r.event_id))
                   AS registration_id,
               arg_max(r.expired, (r.registration_time, r.registration_id, r.event_id))
                   AS expired
        FROM once_entries e LEFT JOIN registrations r
          ON r.license_plate = e.license_plate AND r.registration_time <= e.entry_time
         AND r.registration_time >= e.entry_time - {lookback}
        GROUP BY e.event_id, e.booth_id, e.license_plate, e.entry_time
    """


AT_ENTRY = ReferenceTable("at_entry", _at_entry_sql)
"""The registration rule's table in the reference SQL, which diagnostics reads too."""

VIEW = View(
    spec=SPEC,
    compute=lambda inputs, sizes: expired_at_entry(shared_at_entry(inputs, sizes)),
    reference_sql=lambda sizes: (
        """
        SELECT booth_id, license_plate, entry_time, registration_id FROM at_entry WHERE expired
    """
    ),
    speed=SpeedPlan(Lane.PLATES),
    reads={
        "toll_entry": ENTRY_COLUMNS,
        "vehicle_registration": REGISTRATION_COLUMNS,
    },
    sizes=(REGISTRATION_LOOKBACK,),
    reference_tables=(AT_ENTRY,),
)
