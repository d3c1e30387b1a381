"""The registration lookup in streaming: the shared rule under one watermark.

The rule is :func:`shared.views.registrations_at_entry`, the same function the
batch layer calls: each entry left-outer-joined to its plate's registrations
recorded at or before it, the latest one winning. Streaming Spark runs that
plan natively (a stream-stream join, then an aggregation per entry), with one
condition: both sides must carry **one** watermark.

Registrations are recorded days before the entries that use them. With a
watermark of their own it would stay days behind, and Spark's query-wide
watermark (the minimum over the inputs) would hold every entry back. So
entries and registrations are one stream with one event-time column
(:func:`plate_events`), deduplicated, then split into the join's two sides:
both carry its watermark. A registration later than the watermark is dropped
as late, like any other event. An entry is decided once the watermark passes
its entry_time, when every registration recorded before it has arrived.

The join has no lower time bound (a registration applies however old it is),
so registrations are never evicted from its state: it grows with the number of
registrations seen. The batch layer's lookup is the same, over all of them.
"""

from __future__ import annotations

from datetime import timedelta

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from shared.settings import Settings
from shared.topics import UNREGISTERED_ENTRIES, speed_topic
from shared.views import (
    REGISTRATION_AT_ENTRY_COLUMNS,
    REGISTRATION_AT_ENTRY_SCHEMA,
    count_diagnostics,
    expired_at_entry,
    registrations_at_entry,
    unregistered_at_entry,
)
from speed_layer.speed_store import (
    JSON_OPTIONS,
    MicroBatchFunction,
    kafka_sink_options,
    publish_view,
)


def plate_events(entries: DataFrame, registrations: DataFrame, watermark: timedelta) -> DataFrame:
    """Entries and registrations as one stream with one event-time column and watermark."""
    as_entries = entries.select(
        F.lit("entry").alias("kind"), "event_id", "booth_id", "license_plate",
        F.lit(None).cast("string").alias("registration_id"),
        F.lit(None).cast("boolean").alias("expired"),
        F.col("entry_time").alias("event_time"),
    )  # fmt: skip
    as_registrations = registrations.select(
        F.lit("registration").alias("kind"), "event_id",
        F.lit(None).cast("string").alias("booth_id"), "license_plate", "registration_id",
        "expired", F.col("registration_time").alias("event_time"),
    )  # fmt: skip
    return (
        as_entries.unionByName(as_registrations)
        .withWatermark("event_time", f"{int(watermark.total_seconds())} seconds")
        .dropDuplicatesWithinWatermark(["event_id"])
    )


def registrations_at_entry_stream(
    entries: DataFrame, registrations: DataFrame, watermark: timedelta
) -> DataFrame:
    """Each entry with its applicable registration, once the watermark has passed it."""
    plates = plate_events(entries, registrations, watermark)
    entry_side = plates.where(F.col("kind") == "entry").select(
        "event_id", "booth_id", "license_plate", F.col("event_time").alias("entry_time")
    )
    registration_side = plates.where(F.col("kind") == "registration").select(
        "license_plate", F.col("event_time").alias("registration_time"),
        "registration_id", "expired", "event_id",
    )  # fmt: skip
    return registrations_at_entry(entry_side, registration_side)


def publish_registration_decisions(settings: Settings) -> MicroBatchFunction:
    """foreachBatch: expired entries to the speed store, unregistered ones to the internal topic.

    One lookup feeds two views: its expired entries are rows of their own, but its
    unregistered entries are counted per window, an aggregation of their own. A
    second query over the same join would keep the join's state twice, so they
    travel through an internal topic to a small query that counts them
    (:func:`unregistered_entry_counts`).
    """
    publish_expired = publish_view("expired_registrations", settings)
    options = kafka_sink_options(settings)
    internal_topic = speed_topic(settings, UNREGISTERED_ENTRIES)

    def publish(decisions: DataFrame, batch_id: int) -> None:
        decisions.persist()
        try:
            publish_expired(expired_at_entry(decisions), batch_id)
            unregistered = decisions.where(F.col("registration_id").isNull())
            unregistered.select(
                F.col("license_plate").alias("key"),
                F.to_json(F.struct(*REGISTRATION_AT_ENTRY_COLUMNS), JSON_OPTIONS).alias("value"),
            ).write.format("kafka").options(**options).option("topic", internal_topic).save()
        finally:
            decisions.unpersist()

    return publish


def unregistered_entry_counts(spark: SparkSession, settings: Settings) -> DataFrame:
    """``missing_registration`` diagnostics, counted from the internal topic.

    The internal topic is written at least once: a micro-batch of the lookup
    that is replayed after a crash (its records written, its commit not) writes
    its unregistered entries again. So the count drops copies of an entry
    (same ``event_id``) within the watermark, as the views drop duplicate
    events; a replay comes before any later record can move the watermark past
    the replayed entries.
    """
    unregistered = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", settings.kafka_bootstrap)
        .option("subscribe", speed_topic(settings, UNREGISTERED_ENTRIES))
        .option("startingOffsets", "earliest")
        .load()
        .select(
            F.from_json(
                F.col("value").cast("string"), REGISTRATION_AT_ENTRY_SCHEMA, JSON_OPTIONS
            ).alias("decision")
        )
        .select("decision.*")
        .withWatermark("entry_time", f"{int(settings.watermark.total_seconds())} seconds")
        .dropDuplicatesWithinWatermark(["event_id"])
    )
    return count_diagnostics(unregistered_at_entry(unregistered), settings.window)
