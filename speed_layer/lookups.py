"""The speed layer's per-entry lookups: each entry's trip and its registration.

One streaming query decides, for every entry, the earliest exit that ends its
trip and the registration that applies to it, and its foreachBatch function
writes what those decisions give: ``vehicle_trips`` and
``expired_registrations`` rows to the speed store, and the entries missing an
exit or a registration to an internal topic, which a second, small query counts
per window into ``diagnostics`` (:func:`diagnostic_counts`). Each join runs
once, so its state is kept once. The same query carries the input's dead
letters to ``dead.letters``. Its answers wait for the watermark (or max_trip)
anyway, so it runs on a longer trigger than booth_stats
(``speed_lookup_trigger``).

**The trip.** The shared left outer trip join (:func:`shared.domain.views.trip_matches`)
and the earliest exit per entry (:func:`shared.domain.views.exit_at_entry`). Spark emits
an entry once the watermark passes entry_time + max_trip, when no earlier exit
can still arrive: with its exit, a trip; without one, a missing exit.

**The registration.** The rule is :func:`shared.domain.views.registrations_at_entry`,
the same function the batch layer calls: each entry left-outer-joined to its
plate's registrations recorded at or before it, the latest one winning.
Streaming Spark runs that plan natively (a stream-stream join, then an
aggregation per entry), with one condition: both sides must carry **one**
watermark. Registrations are recorded days before the entries that use them.
With a watermark of their own it would stay days behind, and Spark's
query-wide watermark (the minimum over the inputs) would hold every entry
back. So entries and registrations are one stream with one event-time column
(:func:`plate_events`), split into the join's two sides: both carry its
watermark. A registration later than the watermark is dropped as late, like
any other event. An entry is decided once the watermark passes its entry_time,
when every registration recorded before it has arrived. The join has no lower
time bound (a registration applies however old it is), so registrations are
never evicted from its state: it grows with the number of registrations seen.
The batch layer's lookup is the same, over all of them.

**No deduplication step.** Both lookups end in an aggregation per entry
``event_id`` whose result is a ``min`` or ``max``: copies of an entry fall into
its one group, and copies of an exit or registration do not change a minimum
or maximum. So duplicates (same ``event_id``, at-least-once producers) cannot
change a decision, and the query leaves out ``dropDuplicatesWithinWatermark``,
which would be a stateful operator (a shuffle and a state store) per join side.
Copies later than the watermark are dropped by the join as late rows.

**One watermark for both lookups.** Being one query, the lookups share Spark's
query-wide watermark, the minimum over the entries', exits' and plate stream's:
until exits flow, no entry is decided, registrations included.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from shared.domain.view_specs import EXPIRED_REGISTRATIONS, VEHICLE_TRIPS
from shared.domain.views import (
    ENTRY_COLUMNS,
    REGISTRATION_COLUMNS,
    count_diagnostics,
    exit_at_entry,
    expired_at_entry,
    registrations_at_entry,
    trip_matches,
    trips_at_entry,
    unmatched_entries,
    unregistered_at_entry,
)
from shared.platform.streaming import MicroBatchFunction, kafka_stream
from shared.settings import Settings
from speed_layer.speed_store import (
    JSON_OPTIONS,
    dead_letter_records,
    kafka_sink_options,
    speed_records,
)

TRIP, REGISTRATION, DEAD_LETTER = "trip", "registration", "dead_letter"
"""The kinds of row of :func:`entry_lookups` (its ``kind`` column)."""

DIAGNOSTIC_ENTRY_SCHEMA = "event_id string, booth_id string, entry_time timestamp, reason string"
"""An internal-topic record: one entry missing an exit or a registration."""


ENTRY, REGISTERED = "entry", "registration"
"""The kinds of row of :func:`plate_events`."""


def _with_time(columns: Sequence[str], time: str, as_name: str) -> list[Column]:
    """``columns``, the one named ``as_name`` read from the column ``time``."""
    return [F.col(time).alias(as_name) if name == as_name else F.col(name) for name in columns]


def plate_events(entries: DataFrame, registrations: DataFrame, watermark: timedelta) -> DataFrame:
    """Entries and registrations as one stream with one event-time column and watermark:
    the columns the registration rule reads of each (``shared.domain.views``), their
    time as ``event_time``, and a ``kind``."""
    as_entries = entries.select(F.lit(ENTRY).alias("kind"), *ENTRY_COLUMNS).withColumnRenamed(
        "entry_time", "event_time"
    )
    as_registrations = registrations.select(
        F.lit(REGISTERED).alias("kind"), *(F.col(name) for name in REGISTRATION_COLUMNS)
    ).withColumnRenamed("registration_time", "event_time")
    return as_entries.unionByName(as_registrations, allowMissingColumns=True).withWatermark(
        "event_time", f"{int(watermark.total_seconds())} seconds"
    )


def registrations_at_entry_stream(
    entries: DataFrame, registrations: DataFrame, watermark: timedelta
) -> DataFrame:
    """Each entry with its applicable registration, once the watermark has passed it."""
    plates = plate_events(entries, registrations, watermark)
    entry_side = plates.where(F.col("kind") == ENTRY).select(
        *_with_time(ENTRY_COLUMNS, "event_time", "entry_time")
    )
    registration_side = plates.where(F.col("kind") == REGISTERED).select(
        *_with_time(REGISTRATION_COLUMNS, "event_time", "registration_time")
    )
    return registrations_at_entry(entry_side, registration_side)


def entry_lookups(
    trip_entries: DataFrame,
    exits: DataFrame,
    plate_entries: DataFrame,
    registrations: DataFrame,
    dead_letters: DataFrame,
    max_trip: timedelta,
    watermark: timedelta,
) -> DataFrame:
    """Both lookups of every entry, and the dead letters, as one stream (append mode).

    ``kind`` says what a row is: a ``trip`` row has ``exit_time`` (null: no exit
    within max_trip), a ``registration`` row ``registration_id`` and ``expired``
    (null: no registration at entry time), a ``dead_letter`` row the columns of
    :attr:`shared.domain.validation.DecodedRecords.dead_letters`; the other columns are
    null. The inputs carry their watermarks and need no deduplication (see the
    module's docstring); the registration lookup reads entries and registrations
    through :func:`plate_events`. Dead letters ride along, stateless: a query of
    their own would cost a micro-batch of its own every trigger.
    """
    trips = exit_at_entry(trip_matches(trip_entries, exits, max_trip, "left_outer"))
    plates = registrations_at_entry_stream(plate_entries, registrations, watermark)
    return (
        trips.withColumn("kind", F.lit(TRIP))
        .unionByName(plates.withColumn("kind", F.lit(REGISTRATION)), allowMissingColumns=True)
        .unionByName(dead_letters.withColumn("kind", F.lit(DEAD_LETTER)), allowMissingColumns=True)
    )


def _diagnostic_entries(rows: DataFrame) -> DataFrame:
    """Internal-topic records (key: plate) of diagnostic rows that kept event_id and plate."""
    value = F.to_json(F.struct("event_id", "booth_id", "entry_time", "reason"), JSON_OPTIONS)
    return rows.select(F.col("license_plate").alias("key"), value.alias("value"))


def publish_lookups(settings: Settings) -> MicroBatchFunction:
    """foreachBatch: trips and expired registrations to the speed store, entries missing
    an exit or a registration to the internal topic, dead letters to ``dead.letters``,
    in one Kafka write."""
    options = kafka_sink_options(settings.kafka)
    trips_topic = settings.topics.speed(VEHICLE_TRIPS.name)
    expired_topic = settings.topics.speed(EXPIRED_REGISTRATIONS.name)
    internal_topic = settings.topics.diagnostic_entries
    dead_letters_topic = settings.topics.dead_letters

    def records(topic: str, keyed: DataFrame) -> DataFrame:
        return keyed.select(F.lit(topic).alias("topic"), F.col("key").cast("binary"), "value")

    def publish(rows: DataFrame, batch_id: int) -> None:
        rows.persist()  # four selects read it below: compute it once
        try:
            trip = rows.where(F.col("kind") == TRIP)
            registration = rows.where(F.col("kind") == REGISTRATION)
            trips = speed_records(VEHICLE_TRIPS, trips_at_entry(trip), batch_id)
            expired = speed_records(EXPIRED_REGISTRATIONS, expired_at_entry(registration), batch_id)
            keep = ["event_id", "license_plate"]
            diagnostic = unmatched_entries(trip, keep).unionByName(
                unregistered_at_entry(registration, keep)
            )
            dead = dead_letter_records(rows.where(F.col("kind") == DEAD_LETTER))
            (
                records(trips_topic, trips)
                .unionByName(records(expired_topic, expired))
                .unionByName(records(internal_topic, _diagnostic_entries(diagnostic)))
                .unionByName(records(dead_letters_topic, dead))
                # a union of four reads of `rows` has four times its partitions
                # (40 tasks a micro-batch for a few thousand records): one task
                # per slot instead
                .coalesce(rows.sparkSession.sparkContext.defaultParallelism)
                .write.format("kafka")
                .options(**options)
                .save()
            )
        finally:
            rows.unpersist()

    return publish


def diagnostic_counts(spark: SparkSession, settings: Settings) -> DataFrame:
    """``diagnostics``: the internal topic's entries counted per booth, window and reason.

    The internal topic is written at least once: a micro-batch of the lookups
    that is replayed after a crash (its records written, its commit not) writes
    its entries again. So the count drops copies (same ``event_id`` and reason)
    within its watermark, as the views drop duplicate events.

    The watermark is on entry_time, and its delay is max_trip + the watermark:
    an entry's missing registration is decided once the lookups' watermark
    passes its entry_time, its missing exit only once it passes entry_time +
    max_trip, so the count sees entries up to max_trip apart in entry_time, and
    with a shorter delay it would drop the missing exits as late. The delay
    only keeps state longer: in update mode a count is written as it changes.
    """
    delay = settings.views.max_trip + settings.views.watermark
    entries = (
        kafka_stream(spark, settings.kafka, [settings.topics.diagnostic_entries])
        .load()
        .select(
            F.from_json(F.col("value").cast("string"), DIAGNOSTIC_ENTRY_SCHEMA, JSON_OPTIONS).alias(
                "entry"
            )
        )
        .select("entry.*")
        .withWatermark("entry_time", f"{int(delay.total_seconds())} seconds")
        .dropDuplicatesWithinWatermark(["event_id", "reason"])
    )
    return count_diagnostics(entries, settings.views.window)
