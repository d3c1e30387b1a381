"""The speed layer's per-entry lookups: each entry's trip and its registration.

One streaming query finds, for every entry, the exits that can end its trip and
the registrations that can apply to it, and its foreachBatch function writes
each pair as soon as the join finds it: a candidate row of ``vehicle_trips`` or
``expired_registrations`` to the speed store, keyed by the view key and the
candidate's rank (``shared.domain.view_specs``: ``Combine.BEST_CANDIDATE``).
The serving layer keeps, per view key, the candidate the view's rule ranks
best: the earliest exit ends a trip; the latest registration at or before the
entry decides an alert, and withdraws it if that registration had not
expired. So a trip is served seconds after its exit, provisional (``final``
false) until the watermark passes entry_time + max_trip, when no earlier exit
can still arrive; an alert seconds after its entry, provisional until the
watermark passes the entry.

The entries no exit or registration matched are known only when the watermark
passes what they wait for; the join emits them then, and they go to an
internal topic, which a second, small query counts per window into
``diagnostics`` (:func:`diagnostic_counts`). Each join runs once, so its state
is kept once, and no aggregation follows it (an aggregation after a
stream-stream join emits only once the watermark passes its groups). The same
query carries the input's dead letters to ``dead.letters``.

**The trip.** The shared left outer trip join (:func:`shared.domain.views.trip_matches`):
Spark emits a matched (entry, exit) pair at once, and an entry without one
once the watermark passes entry_time + max_trip (a missing exit).

**The registration.** The shared candidates of the registration rule
(:func:`shared.domain.views.registration_candidates`), which the batch layer
ranks by the same rule: each entry left-outer-joined to its plate's
registrations recorded at or before it. Streaming Spark runs that join with
one condition: both sides must carry **one** watermark. Registrations are
recorded days before the entries that use them. With a watermark of their own
it would stay days behind, and Spark's query-wide watermark (the minimum over
the inputs) would hold every entry back. So entries and registrations are one
stream with one event-time column (:func:`plate_events`), split into the
join's two sides: both carry its watermark. A registration later than the
watermark is dropped as late, like any other event. An entry leaves the
join's state once the watermark passes its entry_time, when every
registration recorded before it has arrived. A registration applies for
``registration_lookback`` (the shared rule,
:func:`shared.domain.views.registration_applies`), the join's lower time
bound: it leaves the state once the watermark passes registration_time +
lookback, so the state holds the registrations recorded within the lookback
(and the entries of the last watermark delay). The batch layer's lookup is
the same rule.

**No deduplication step.** Copies of an event (same ``event_id``,
at-least-once producers) make copies of a candidate, with the same record key
and value: the compacted topic and the serving layer keep one. Copies of an
unmatched entry are written to the internal topic twice and counted once
(:func:`diagnostic_counts` drops them). So the query leaves out
``dropDuplicatesWithinWatermark``, which would be a stateful operator (a
shuffle and a state store) per join side. Copies later than the watermark are
dropped by the join as late rows.

**One watermark for both lookups.** Being one query, the lookups share Spark's
query-wide watermark, the minimum over the entries', exits' and plate stream's:
until exits flow, no entry is known to miss anything. Candidates do not wait
for it.
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
    registration_candidates,
    trip_candidates,
    trip_matches,
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


def registration_candidates_stream(
    entries: DataFrame, registrations: DataFrame, watermark: timedelta, lookback: timedelta
) -> DataFrame:
    """Each entry with each registration that can apply to it, as the join finds them
    (an entry with none once the watermark has passed it)."""
    plates = plate_events(entries, registrations, watermark)
    entry_side = plates.where(F.col("kind") == ENTRY).select(
        *_with_time(ENTRY_COLUMNS, "event_time", "entry_time")
    )
    registration_side = plates.where(F.col("kind") == REGISTERED).select(
        *_with_time(REGISTRATION_COLUMNS, "event_time", "registration_time")
    )
    return registration_candidates(entry_side, registration_side, lookback)


def entry_lookups(
    trip_entries: DataFrame,
    exits: DataFrame,
    plate_entries: DataFrame,
    registrations: DataFrame,
    dead_letters: DataFrame,
    max_trip: timedelta,
    watermark: timedelta,
    lookback: timedelta,
) -> DataFrame:
    """Both lookups of every entry, and the dead letters, as one stream (append mode).

    ``kind`` says what a row is: a ``trip`` row is an entry with an exit that can
    end its trip (``exit_time``; null: none within max_trip), a ``registration``
    row an entry with a registration that can apply to it (the registration's
    columns; null: none at entry time), a ``dead_letter`` row has the columns of
    :attr:`shared.domain.validation.DecodedRecords.dead_letters`; the other
    columns are null. The inputs carry their watermarks and need no
    deduplication (see the module's docstring); the registration lookup reads
    entries and registrations through :func:`plate_events`. Dead letters ride
    along, stateless: a query of their own would cost a micro-batch of its own
    every trigger.
    """
    trips = trip_matches(trip_entries, exits, max_trip, "left_outer")
    plates = registration_candidates_stream(plate_entries, registrations, watermark, lookback)
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
    """foreachBatch: trip and registration candidates to the speed store, entries missing
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
            trips = speed_records(VEHICLE_TRIPS, trip_candidates(trip), batch_id)
            matched = registration.where(F.col("registration_time").isNotNull())
            expired = speed_records(EXPIRED_REGISTRATIONS, matched, batch_id)
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
