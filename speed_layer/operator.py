"""The speed layer's one stateful operator, and the query around it.

One query (:data:`VIEWS_QUERY`) reads the three input topics with one Kafka
source, decodes every record once by the shared validation
(``shared.domain.validation.decode_together``) and groups the events, in one
shuffle, through one event-time ``transformWithState`` operator: the Java
processor ``jvm/lambdaline/speed/SpeedOperator.java``. Its output goes straight
to Kafka through Spark's Kafka sink, each row to its topic: no Python runs per
micro-batch.

Each input row is keyed by what it is grouped by (:func:`operator_input`):

- an entry by its booth, for the **roll-up** (``Lane.BOOTHS``: booth_stats and
  booth_rolling, from 5-minute buckets of counts and tolls), and by its plate;
- an exit or a registration by its plate, for the **best matches**
  (``Lane.PLATES``: an entry's trip is its earliest exit of its booth in
  [entry, entry + ``max_trip``]; its registration the greatest by (time, id,
  event id) in [entry - ``registration_lookback``, entry]) and the plate's
  **sessions** (vehicle_visits, runs of entries less than ``session_gap``
  apart);
- a dead letter by ``d:``, passed through to ``dead.letters`` as it came, so
  that the plan is one pipeline and no record is decoded twice.

What each part computes is stated here from the view modules (:func:`operator_config`)
and handed to the processor as JSON; the processor holds no view's rule. Its
rules are the views' (``shared.domain.views``), in the form keyed state needs;
the equivalence, generated cross-layer, restart and cluster tests hold the two
layers to each other. It is Java because the Python state API crosses to the JVM
on every state call (``benchmarks/plate_state.py``, docs/performance.md).

**Watermark.** One, on the entries' time (the plate's copy of each entry:
``event_time``). Exits and registrations have none of their own: an exit can
still end a trip while its entry is held (until the watermark passes entry +
``max_trip``), and a registration is recorded days before the entries it
applies to, so a watermark of theirs would hold every entry back, or drop them.
The operator judges them itself. Spark drops an entry at or before the
previous micro-batch's watermark before the operator sees it, counted as late.

**Records.** A candidate (trip, registration) is written when an event makes it
better than what its entry had, except a registration candidate its view hides
(not expired) while none was written for the entry; an entry missing a match,
once the watermark passes its deadline, goes to the internal topic
(:func:`diagnostic_counts` counts them per window in a small query of its own);
a roll-up window's row each micro-batch an entry changes it; a visit once, when
the watermark passes its end. A record's ``version`` orders the records of one
view key (the operator's, past the key's last; a replayed micro-batch writes the
same records again: the compacted topic and the serving layer keep one).
"""

from __future__ import annotations

import json
import math
from datetime import timedelta
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.readwriter import DataStreamWriter

from shared.domain.events import TOLL_ENTRY, TOLL_EXIT, VEHICLE_REGISTRATION
from shared.domain.views.diagnostics import DiagnosticReason, count_diagnostics
from shared.domain.views.expired_registrations import SPEC as EXPIRED_REGISTRATIONS
from shared.domain.views.rules import MONEY_TOTAL
from shared.domain.views.spec import Aggregate, ViewSpec
from shared.domain.views.vehicle_trips import SPEC as VEHICLE_TRIPS
from shared.domain.views.vehicle_trips import trip_duration_seconds
from shared.domain.views.vehicle_visits import SPEC as VEHICLE_VISITS
from shared.domain.views.view import Lane, View, ViewSizes
from shared.platform.jvm import compiled_jar
from shared.platform.streaming import kafka_stream
from shared.settings import Settings
from shared.settings.views import REGISTERED
from speed_layer.checkpoint import checkpoint_dir
from speed_layer.speed_store import (
    JSON_OPTIONS,
    dead_letter_value,
    kafka_sink_options,
    record_key,
    record_value,
)

OPERATORS_SOURCES = Path(__file__).with_name("jvm")
"""The speed layer's Java operator (compiled by ``make setup``: :func:`operators_jar`)."""

VIEWS_QUERY = "speed.views"
"""The query of :func:`views_writer`: every view the operator computes."""

ENTRY, EXIT, REGISTRATION, DEAD_LETTER = "entry", "exit", "registration", "dead_letter"
"""The kinds of input row (``Input.java``), and the kind of a dead letter's output row."""

ROLL_UP_KEY, PLATE_KEY, DEAD_LETTER_KEY = "r:", "p:", "d:"
"""What an input row's key begins with: which part of the operator it is for."""

DIAGNOSTIC_KINDS = tuple(reason.value for reason in DiagnosticReason)
"""The kinds of output row that are entries missing a match (``missing_exit``,
``missing_registration``): what the internal topic carries."""

DIAGNOSTIC_ENTRY_SCHEMA = "event_id string, booth_id string, entry_time timestamp, reason string"
"""An internal-topic record: one entry missing an exit or a registration."""

ROLL_UP_WINDOWS: dict[str, tuple[str, str, bool]] = {
    "booth_stats": ("window", "window", True),
    "booth_rolling": ("rolling_window", "rolling_slide", False),
}
"""Per roll-up view: the sizes of its windows' length and slide, and whether its rows
carry their first and last entry times."""

SWEEP = timedelta(minutes=1)
"""How often, in event time, the roll-up forgets the event ids of entries the
watermark has passed (the copies it drops)."""


def operators_jar(cache_dir: Path) -> Path:
    """The jar of :data:`OPERATORS_SOURCES`, compiled into ``cache_dir`` if not there yet."""
    return compiled_jar(OPERATORS_SOURCES, cache_dir, "lambdaline-speed-operators")


def _ms(duration: timedelta) -> int:
    return duration // timedelta(milliseconds=1)


def operator_views(views: tuple[View, ...] = REGISTERED) -> tuple[View, ...]:
    """The registered views the operator computes."""
    return tuple(view for view in views if view.speed.lane in (Lane.BOOTHS, Lane.PLATES))


_RIGHT_COLUMNS = {
    "exit_time": "time",
    "registration_time": "time",
    "registration_id": "registration_id",
    "registration_event_id": "event_id",
}
"""A candidate's rank columns, as the operator's match events name them."""


def _match(view: ViewSpec, right: str, same_booth: bool, interval: tuple[timedelta, timedelta],
           missing: DiagnosticReason) -> dict[str, Any]:  # fmt: skip
    rule = view.candidates
    assert rule is not None, f"{view.name} has no candidates"
    return {
        "view": view.name, "right": right, "same_booth": same_booth,
        "from_ms": _ms(interval[0]), "to_ms": _ms(interval[1]),
        "order": [_RIGHT_COLUMNS[name] for name in rule.rank],
        "best": "max" if rule.best is Aggregate.MAX else "min",
        "missing": missing.value, "shown_if": rule.shown_if,
    }  # fmt: skip


def operator_config(sizes: ViewSizes, views: tuple[View, ...] = REGISTERED) -> dict[str, Any]:
    """What the operator computes for these views and sizes (``OperatorConfig.java``)."""
    names = {view.name for view in operator_views(views)}
    shapes = [
        (name, _ms(sizes[size]), _ms(sizes[slide]), times)
        for name, (size, slide, times) in ROLL_UP_WINDOWS.items()
        if name in names
    ]
    windows = [
        {"view": name, "size_ms": size, "slide_ms": slide, "times": times}
        for name, size, slide, times in shapes
    ]
    bucket = math.gcd(*(size for _, size, _, _ in shapes), *(slide for _, _, slide, _ in shapes))
    lookback = sizes["registration_lookback"]
    matches = []
    if VEHICLE_TRIPS.name in names:
        interval = (timedelta(0), sizes["max_trip"])
        matches.append(_match(VEHICLE_TRIPS, EXIT, True, interval, DiagnosticReason.MISSING_EXIT))
    if EXPIRED_REGISTRATIONS.name in names:
        matches.append(
            _match(
                EXPIRED_REGISTRATIONS, REGISTRATION, False, (-lookback, timedelta(0)),
                DiagnosticReason.MISSING_REGISTRATION,
            )
        )  # fmt: skip
    sessions = (
        {"view": VEHICLE_VISITS.name, "gap_ms": _ms(sizes["session_gap"])}
        if VEHICLE_VISITS.name in names
        else None
    )
    return {
        "roll_up": {"bucket_ms": bucket, "windows": windows} if windows else None,
        "matches": matches,
        "sessions": sessions,
        "sweep_ms": _ms(SWEEP),
    }


def operator_input(decoded: DataFrame, watermark: timedelta) -> DataFrame:
    """The operator's input rows (``Input.java``) from ``decode_together``'s: an entry
    twice (its booth's row, its plate's), an exit or a registration once (its plate's), a
    dead letter once; ``event_time``, the watermark's column, is the entry time of an
    entry's plate row and null on every other."""
    event_type = F.col("event_type")
    kind = (
        F.when(event_type == TOLL_ENTRY.name, F.lit(ENTRY))
        .when(event_type == TOLL_EXIT.name, F.lit(EXIT))
        .when(event_type == VEHICLE_REGISTRATION.name, F.lit(REGISTRATION))
        .otherwise(F.lit(DEAD_LETTER))
    )
    plate = F.concat(F.lit(PLATE_KEY), F.col("license_plate"))
    keys = (
        F.when(kind == ENTRY, F.array(F.concat(F.lit(ROLL_UP_KEY), F.col("booth_id")), plate))
        .when(kind == DEAD_LETTER, F.array(F.lit(DEAD_LETTER_KEY)))
        .otherwise(F.array(plate))
    )
    time = F.coalesce(
        *(F.col(event.time_field) for event in (TOLL_ENTRY, TOLL_EXIT, VEHICLE_REGISTRATION))
    )
    dead = kind == DEAD_LETTER
    rows = decoded.select(
        kind.alias("kind"),
        keys.alias("_keys"),
        F.unix_millis(time).alias("time_ms"),
        F.col(TOLL_ENTRY.time_field).alias("_entry_time"),
        "event_id",
        "booth_id",
        "license_plate",
        (F.col("toll") * 100).cast("long").alias("toll_cents"),
        "registration_id",
        "expired",
        F.when(dead, F.col("key")).alias("dead_key"),
        F.when(dead, dead_letter_value()).alias("dead_value"),
    )
    exploded = rows.select(F.explode("_keys").alias("key"), "*").drop("_keys")
    event_time = F.when(
        (F.col("kind") == ENTRY) & F.col("key").startswith(PLATE_KEY), F.col("_entry_time")
    )
    return (
        exploded.withColumn("event_time", event_time)
        .drop("_entry_time")
        .withWatermark("event_time", f"{int(watermark.total_seconds())} seconds")
    )


def apply_operator(rows: DataFrame, config: dict[str, Any]) -> DataFrame:
    """``SpeedOperator`` over :func:`operator_input` rows. The session must have
    :func:`operators_jar` on its classpath (``speed_layer.job.speed_spark_session``)."""
    spark = rows.sparkSession
    operator = spark.sparkContext._jvm.lambdaline.speed.SpeedOperator  # type: ignore[union-attr]
    return DataFrame(operator.apply(rows._jdf, json.dumps(config)), spark)


def _timestamp(column: str) -> Column:
    return F.timestamp_millis(F.col(column))


def _typed(found: DataFrame) -> DataFrame:
    """The operator's output with the columns the views name (``Output.java``'s, typed)."""
    toll = (F.col("toll_cents").cast("decimal(20,0)") / 100).cast(MONEY_TOTAL)
    entry_time, exit_time = _timestamp("entry_ms"), _timestamp("exit_ms")
    return found.select(
        "kind", "booth_id", "license_plate", "event_id",
        _timestamp("start_ms").alias("window_start"), _timestamp("end_ms").alias("window_end"),
        F.col("count").alias("vehicle_count"), toll.alias("total_toll"),
        _timestamp("first_ms").alias("first_entry_time"),
        _timestamp("last_ms").alias("last_entry_time"),
        entry_time.alias("entry_time"), exit_time.alias("exit_time"),
        trip_duration_seconds(entry_time, exit_time),
        _timestamp("registration_ms").alias("registration_time"),
        "registration_id", "registration_event_id", "expired",
        _timestamp("start_ms").alias("session_start"), _timestamp("end_ms").alias("session_end"),
        F.col("count").alias("entry_count"), "booths",
        "version", "dead_key", "dead_value",
    )  # fmt: skip


def operator_records(found: DataFrame, settings: Settings) -> DataFrame:
    """The Kafka records (topic, key, value) of the operator's output rows: each view's to
    its speed-store topic, entries missing a match to the internal topic, dead letters to
    ``dead.letters``."""
    typed = _typed(found)
    kind = F.col("kind")
    by_kind: list[tuple[Column, str, Column, Column]] = [
        (
            kind == view.name,
            settings.speed_topics.speed(view.name),
            record_key(view.spec),
            record_value(view.spec, F.col("version")),
        )
        for view in operator_views()
    ]
    diagnostic = F.struct(
        "event_id", "booth_id", "entry_time", kind.alias("reason")
    )  # the internal topic's record (DIAGNOSTIC_ENTRY_SCHEMA)
    by_kind.append(
        (
            kind.isin(*DIAGNOSTIC_KINDS),
            settings.speed_topics.diagnostic_entries,
            F.col("license_plate"),
            F.to_json(diagnostic, JSON_OPTIONS),
        )
    )
    by_kind.append(
        (kind == DEAD_LETTER, settings.topics.dead_letters, F.col("dead_key"), F.col("dead_value"))
    )

    def case(part: int) -> Column:
        chosen: Column = F.lit(None)
        for condition, topic, key, value in reversed(by_kind):
            picked = (F.lit(topic), key.cast("binary"), value)[part]
            chosen = F.when(condition, picked).otherwise(chosen)
        return chosen

    return typed.select(
        case(0).alias("topic"), case(1).alias("key"), case(2).cast("string").alias("value")
    )


def views_writer(rows: DataFrame, settings: Settings) -> DataStreamWriter:
    """The operator's query: its records to Kafka (not started; add the trigger)."""
    found = apply_operator(rows, operator_config(settings.views.sizes))
    return (
        operator_records(found, settings)
        .writeStream.queryName(VIEWS_QUERY)
        .outputMode("append")
        .format("kafka")
        .options(**kafka_sink_options(settings.kafka))
        .option("checkpointLocation", str(checkpoint_dir(settings) / "views"))
    )


def diagnostic_counts(spark: SparkSession, settings: Settings) -> DataFrame:
    """``diagnostics``: the internal topic's entries counted per booth, window and reason.

    The internal topic is written at least once: a micro-batch of the operator that is
    replayed after a crash (its records written, its commit not) writes its entries
    again. So the count drops copies (same ``event_id`` and reason) within its
    watermark, as the views drop duplicate events.

    The watermark is on entry_time, and its delay is max_trip + the watermark: an
    entry's missing registration is decided once the operator's watermark passes its
    entry_time, its missing exit only once it passes entry_time + max_trip, so the count
    sees entries up to max_trip apart in entry_time, and with a shorter delay it would
    drop the missing exits as late. The delay only keeps state longer: in update mode a
    count is written as it changes.
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
