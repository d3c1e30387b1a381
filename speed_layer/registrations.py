"""The registration lookup in streaming: per-plate state around the shared rule.

A stream-stream join cannot express "the latest registration at or before the
entry": registrations come days before entries, so join state would grow
without bound. Instead entries and registrations are keyed by plate into
``applyInPandasWithState``. Each plate's state holds its registrations (pruned to
the ones a future entry can still need) and the entries not yet decided. An
entry is decided once the watermark passes its entry_time: by then every
registration recorded before it has arrived (unless later than the watermark
allows). The decision itself is :func:`shared.views.registration_at_entry`, the
same function the batch layer calls.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from shared.settings import Settings
from shared.topics import UNREGISTERED_ENTRIES, speed_topic
from shared.views import (
    ENTRY_COLUMNS,
    REGISTRATION_AT_ENTRY_COLUMNS,
    REGISTRATION_AT_ENTRY_SCHEMA,
    REGISTRATION_COLUMNS,
    count_diagnostics,
    expired_at_entry,
    registration_at_entry,
    unregistered_at_entry,
)
from speed_layer.speed_store import (
    JSON_OPTIONS,
    MicroBatchFunction,
    kafka_sink_options,
    publish_view,
)

STATE_SCHEMA = "registrations string, pending string"
"""JSON lists: registrations [ms, registration_id, expired, event_id];
pending entries [event_id, booth_id, ms]."""

PLATE_EVENT_COLUMNS = (
    "kind", "event_id", "booth_id", "license_plate", "entry_time",
    "registration_time", "registration_id", "expired", "event_time",
)  # fmt: skip


def plate_events(entries: DataFrame, registrations: DataFrame, watermark: timedelta) -> DataFrame:
    """Entries and registrations as one stream keyed by plate, with one event-time column."""
    delay = f"{int(watermark.total_seconds())} seconds"
    as_entries = entries.select(
        F.lit("entry").alias("kind"), "event_id", "booth_id", "license_plate", "entry_time",
        F.lit(None).cast("timestamp").alias("registration_time"),
        F.lit(None).cast("string").alias("registration_id"),
        F.lit(None).cast("boolean").alias("expired"),
        F.col("entry_time").alias("event_time"),
    )  # fmt: skip
    as_registrations = registrations.select(
        F.lit("registration").alias("kind"), "event_id",
        F.lit(None).cast("string").alias("booth_id"), "license_plate",
        F.lit(None).cast("timestamp").alias("entry_time"),
        "registration_time", "registration_id", "expired",
        F.col("registration_time").alias("event_time"),
    )  # fmt: skip
    return (
        as_entries.unionByName(as_registrations)
        .withWatermark("event_time", delay)
        .dropDuplicatesWithinWatermark(["event_id"])
    )


def _ms(values: pd.Series) -> list[int]:
    return [int(value.value // 1_000_000) for value in pd.to_datetime(values)]


def _timestamps(ms: list[int]) -> pd.Series:
    return pd.to_datetime(pd.Series(ms, dtype="int64"), unit="ms")


def decide_registrations(
    key: tuple[Any, ...], batches: Iterator[pd.DataFrame], state: GroupState
) -> Iterator[pd.DataFrame]:
    """One plate's step: remember what arrived, decide the entries the watermark has passed."""
    (plate,) = key
    registrations: list[list[Any]] = []
    pending: list[list[Any]] = []
    if state.exists:
        stored_registrations, stored_pending = state.get
        registrations, pending = json.loads(stored_registrations), json.loads(stored_pending)
    for batch in batches:
        new_registrations = batch[batch["kind"] == "registration"]
        registrations += [
            [ms, rid, bool(expired), eid]
            for ms, rid, expired, eid in zip(
                _ms(new_registrations["registration_time"]),
                new_registrations["registration_id"],
                new_registrations["expired"],
                new_registrations["event_id"],
                strict=True,
            )
        ]
        new_entries = batch[batch["kind"] == "entry"]
        pending += [
            [eid, booth, ms]
            for eid, booth, ms in zip(
                new_entries["event_id"], new_entries["booth_id"], _ms(new_entries["entry_time"]),
                strict=True,
            )
        ]  # fmt: skip

    watermark_ms = state.getCurrentWatermarkMs()
    due = [entry for entry in pending if entry[2] <= watermark_ms]
    pending = [entry for entry in pending if entry[2] > watermark_ms]
    if due:
        entries = pd.DataFrame(
            {
                "event_id": [entry[0] for entry in due],
                "booth_id": [entry[1] for entry in due],
                "license_plate": plate,
                "entry_time": _timestamps([entry[2] for entry in due]),
            },
            columns=list(ENTRY_COLUMNS),
        )
        known = pd.DataFrame(
            {
                "license_plate": plate,
                "registration_time": _timestamps([r[0] for r in registrations]),
                "registration_id": [r[1] for r in registrations],
                "expired": [r[2] for r in registrations],
                "event_id": [r[3] for r in registrations],
            },
            columns=list(REGISTRATION_COLUMNS),
        )
        yield registration_at_entry(entries, known).loc[:, list(REGISTRATION_AT_ENTRY_COLUMNS)]

    # entries still to come are not later than the watermark: they need the latest
    # registration at or before it, and any newer ones
    registrations.sort()
    settled = [r for r in registrations if r[0] <= watermark_ms]
    registrations = settled[-1:] + [r for r in registrations if r[0] > watermark_ms]
    state.update((json.dumps(registrations), json.dumps(pending)))
    if pending:
        state.setTimeoutTimestamp(min(entry[2] for entry in pending))


def publish_registration_decisions(settings: Settings) -> MicroBatchFunction:
    """foreachBatch: expired entries to the speed store, unregistered ones to the internal topic.

    The decisions leave the state operator behind its watermark (that is when they
    can be made), so counting them per window cannot happen downstream in the
    same query: Spark would drop them as late. They travel through an internal
    topic to a query of their own (:func:`unregistered_entry_counts`).
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
    """``missing_registration`` diagnostics, counted from the internal topic."""
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
    )
    return count_diagnostics(unregistered_at_entry(unregistered), settings.window)


def registrations_at_entry_stream(plate_stream: DataFrame) -> DataFrame:
    """Each entry with its applicable registration, once the watermark has passed it."""
    return plate_stream.groupBy("license_plate").applyInPandasWithState(
        decide_registrations,  # type: ignore[arg-type]  # pyspark's stub wants Iterable[Any]
        outputStructType=REGISTRATION_AT_ENTRY_SCHEMA,
        stateStructType=STATE_SCHEMA,
        outputMode="append",
        timeoutConf=GroupStateTimeout.EventTimeTimeout,
    )
