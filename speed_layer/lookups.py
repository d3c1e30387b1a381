"""The speed layer's per-entry lookups: each entry's trip and its registration.

One streaming query keeps, per licence plate, what the plate's entries still
wait for, in one stateful operator (Spark's ``transformWithState``, event
time): the Java processor ``jvm/lambdaline/speed/PlateLookups.java``. Its
foreachBatch function writes what it finds at once: a candidate row of
``vehicle_trips`` or ``expired_registrations`` to the speed store, keyed by
the view key and the candidate's rank (``shared.domain.views.spec``:
``Combine.BEST_CANDIDATE``). The serving layer keeps, per view key, the
candidate the view's rule ranks best: the earliest exit ends a trip; the
latest registration at or before the entry decides an alert, and withdraws it
if that registration had not expired. So a trip is served seconds after its
exit, provisional (``final`` false) until the watermark passes entry_time +
max_trip, when no earlier exit can still arrive; an alert seconds after its
entry, provisional until the watermark passes the entry.

**Plate state, not joins.** Entries, exits and registrations are one stream
keyed by plate, with one event-time column and watermark
(:func:`plate_events`). Per plate the operator holds the entries of the last
``max_trip`` (each with its best exit and registration so far), the exits an
entry still to come can use (those after the watermark W), and of the
registrations the best one recorded at or before W (it outranks every older
one for any later entry) plus those after W, each for ``registration_lookback``.
An event writes a candidate only where it beats what an entry has, and one
event-time timer per plate, at its next deadline, decides what the watermark
settles: an entry's missing registration once W passes it, its missing exit
once W passes entry_time + max_trip, when it leaves the state. So the state is
what a plate can still need, and each micro-batch touches the plates that
changed, not the whole store (the stream-stream joins this replaces scanned
every row of their state every micro-batch to evict: docs/performance.md).

**One rule, two forms.** The rules are the view modules' (the trip condition of
``shared.domain.views.vehicle_trips.trip_matches``, the lookback of
``shared.domain.views.expired_registrations.registration_applies``, the
candidates' ranks of the view specs), which the batch layer runs as SQL; the processor keeps them
in the form plate state needs, with the sizes passed in from settings. The
equivalence, generated cross-layer, restart and cluster tests hold the two
layers to each other. It is Java because the Python state API crosses to the
JVM on every state call, about seven times the cost per key
(``benchmarks/plate_state.py``, docs/performance.md).

The entries missing an exit or a registration go to an internal topic, which
a second, small query counts per window into ``diagnostics``
(:func:`diagnostic_counts`). The same query carries the input's dead letters
to ``dead.letters``.

**Copies.** Copies of an entry (same ``event_id``, at-least-once producers)
are held once; copies of an exit or a registration change no best. A
replayed micro-batch writes the same candidates again (same record key and
value: the compacted topic and the serving layer keep one) and its missing
entries again, which :func:`diagnostic_counts` drops.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from shared.domain.events import TOLL_ENTRY, TOLL_EXIT, VEHICLE_REGISTRATION
from shared.domain.views.diagnostics import DiagnosticReason, count_diagnostics
from shared.domain.views.expired_registrations import SPEC as EXPIRED_REGISTRATIONS
from shared.domain.views.vehicle_trips import SPEC as VEHICLE_TRIPS
from shared.domain.views.vehicle_trips import trip_candidates
from shared.platform.jvm import compiled_jar
from shared.platform.streaming import MicroBatchFunction, kafka_stream
from shared.settings import Settings
from speed_layer.speed_store import (
    JSON_OPTIONS,
    dead_letter_records,
    kafka_sink_options,
    speed_records,
    topic_records,
    write_records,
)

OPERATORS_SOURCES = Path(__file__).with_name("jvm")
"""The speed layer's Java operators (compiled by ``make setup``: :func:`operators_jar`)."""

PLATE_LOOKUPS_CLASS = "lambdaline.speed.PlateLookups"

ENTRY, EXIT, REGISTERED = "entry", "exit", "registration"
"""The kinds of row of :func:`plate_events` (``PlateLookups``' input kinds)."""

TRIP, REGISTRATION, DEAD_LETTER = "trip", "registration", "dead_letter"
"""The kinds of candidate row of :func:`entry_lookups`, and its dead letters."""

DIAGNOSTIC_KINDS: dict[str, DiagnosticReason] = {
    reason.value: reason for reason in DiagnosticReason
}
"""The kinds of row of :func:`entry_lookups` that are entries missing a lookup: the
processor names each by its diagnostic reason (``missing_exit``, ``missing_registration``)."""

DIAGNOSTIC_ENTRY_SCHEMA = "event_id string, booth_id string, entry_time timestamp, reason string"
"""An internal-topic record: one entry missing an exit or a registration."""

_TIMES = {"entry_ms": "entry_time", "exit_ms": "exit_time", "registration_ms": "registration_time"}
"""The processor's times (epoch milliseconds) and the columns they become."""


def operators_jar(cache_dir: Path) -> Path:
    """The jar of :data:`OPERATORS_SOURCES`, compiled into ``cache_dir`` if not there yet."""
    return compiled_jar(OPERATORS_SOURCES, cache_dir, "lambdaline-speed-operators")


def _as_plate_event(
    events: DataFrame, kind: str, time: str, columns: dict[str, Column]
) -> DataFrame:
    return events.select(
        F.lit(kind).alias("kind"),
        "license_plate",
        F.col(time).alias("event_time"),
        "event_id",
        *(column.alias(name) for name, column in columns.items()),
    )


def plate_events(
    entries: DataFrame, exits: DataFrame, registrations: DataFrame, watermark: timedelta
) -> DataFrame:
    """Entries, exits and registrations as one stream with one event-time column: the
    columns the lookups read of each, their time as ``event_time`` (and in milliseconds,
    ``time_ms``), and a ``kind``.

    Two watermarks, and Spark's query-wide one is the lesser: the entries' and
    registrations' (one, over both) and the exits'. So no entry is known to miss an
    exit before exits flow, and an exit that comes after others it would precede
    is not late while the entries have not moved on. Registrations share the
    entries' watermark because they are recorded days before the entries that use
    them: with one of their own, the query-wide watermark would stay days behind
    and hold every entry back. A registration later than the watermark is dropped
    as late, like any other event.
    """
    none = F.lit(None)
    delay = f"{int(watermark.total_seconds())} seconds"
    as_entries = _as_plate_event(
        entries, ENTRY, TOLL_ENTRY.time_field,
        {"booth_id": F.col("booth_id"), "registration_id": none.cast("string"),
         "expired": none.cast("boolean")},
    )  # fmt: skip
    as_registrations = _as_plate_event(
        registrations, REGISTERED, VEHICLE_REGISTRATION.time_field,
        {"booth_id": none.cast("string"), "registration_id": F.col("registration_id"),
         "expired": F.col("expired")},
    )  # fmt: skip
    as_exits = _as_plate_event(
        exits, EXIT, TOLL_EXIT.time_field,
        {"booth_id": F.col("booth_id"), "registration_id": none.cast("string"),
         "expired": none.cast("boolean")},
    )  # fmt: skip
    plates = as_entries.unionByName(as_registrations).withWatermark("event_time", delay)
    union = plates.unionByName(as_exits.withWatermark("event_time", delay))
    return union.withColumn("time_ms", F.unix_millis("event_time"))


def plate_lookups(events: DataFrame, max_trip: timedelta, lookback: timedelta) -> DataFrame:
    """``PlateLookups`` over :func:`plate_events`: ``kind`` (:data:`TRIP`,
    :data:`REGISTRATION` or a :data:`DIAGNOSTIC_KINDS` reason), the entry's ``event_id``,
    ``booth_id``, ``license_plate``, ``entry_time``, and a candidate's ``exit_time`` or
    ``registration_time``, ``registration_id``, ``registration_event_id``, ``expired``.

    The session must have :func:`operators_jar` on its classpath
    (``speed_layer.job.speed_spark_session`` adds it).
    """
    spark = events.sparkSession
    processor = spark.sparkContext._jvm.lambdaline.speed.PlateLookups  # type: ignore[union-attr]
    ms = (max_trip // timedelta(milliseconds=1), lookback // timedelta(milliseconds=1))
    found = DataFrame(processor.apply(events._jdf, *ms), spark)
    return found.select(
        *(
            F.timestamp_millis(name).alias(_TIMES[name]) if name in _TIMES else F.col(name)
            for name in found.columns
        )
    )


def entry_lookups(
    entries: DataFrame,
    exits: DataFrame,
    registrations: DataFrame,
    dead_letters: DataFrame,
    max_trip: timedelta,
    watermark: timedelta,
    lookback: timedelta,
) -> DataFrame:
    """Both lookups of every entry, and the dead letters, as one stream (append mode).

    :func:`plate_lookups`' rows, and ``dead_letter`` rows with the columns of
    :attr:`shared.domain.validation.DecodedRecords.dead_letters` (the other columns
    null). The inputs need no watermark or deduplication of their own (see the
    module's docstring). Dead letters ride along, stateless: a query of their own
    would cost a micro-batch of its own every trigger.
    """
    events = plate_events(entries, exits, registrations, watermark)
    return plate_lookups(events, max_trip, lookback).unionByName(
        dead_letters.withColumn("kind", F.lit(DEAD_LETTER)), allowMissingColumns=True
    )


def _diagnostic_entries(rows: DataFrame) -> DataFrame:
    """Internal-topic records (key: plate) of the entries missing a lookup."""
    value = F.to_json(F.struct("event_id", "booth_id", "entry_time", "reason"), JSON_OPTIONS)
    return rows.select(F.col("license_plate").alias("key"), value.alias("value"))


def publish_lookups(settings: Settings) -> MicroBatchFunction:
    """foreachBatch: trip and registration candidates to the speed store, entries missing
    an exit or a registration to the internal topic, dead letters to ``dead.letters``,
    in one Kafka write."""
    options = kafka_sink_options(settings.kafka)
    trips_topic = settings.speed_topics.speed(VEHICLE_TRIPS.name)
    expired_topic = settings.speed_topics.speed(EXPIRED_REGISTRATIONS.name)
    internal_topic = settings.speed_topics.diagnostic_entries
    dead_letters_topic = settings.topics.dead_letters

    def publish(rows: DataFrame, batch_id: int) -> None:
        rows.persist()  # four selects read it below: compute it once
        try:
            trip = rows.where(F.col("kind") == TRIP)
            registration = rows.where(F.col("kind") == REGISTRATION)
            trips = speed_records(VEHICLE_TRIPS, trip_candidates(trip), batch_id)
            expired = speed_records(EXPIRED_REGISTRATIONS, registration, batch_id)
            diagnostic = rows.where(F.col("kind").isin(*DIAGNOSTIC_KINDS)).withColumn(
                "reason", F.col("kind")
            )
            dead = dead_letter_records(rows.where(F.col("kind") == DEAD_LETTER))
            write_records(
                [
                    topic_records(trips_topic, trips),
                    topic_records(expired_topic, expired),
                    topic_records(internal_topic, _diagnostic_entries(diagnostic)),
                    topic_records(dead_letters_topic, dead),
                ],
                options,
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
    delay = settings.views.sizes["max_trip"] + settings.views.watermark
    entries = (
        kafka_stream(spark, settings.kafka, [settings.speed_topics.diagnostic_entries])
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
    return count_diagnostics(entries, settings.views.sizes["window"])
