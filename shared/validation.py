"""Validation: raw Kafka records in, valid events and dead letters out.

Both layers call :func:`decode_records` on a DataFrame of raw Kafka records
(the columns Spark's Kafka source yields: key, value, topic, partition, offset,
timestamp), streaming or static alike. Nothing is dropped: every input record
comes out exactly once, either as a valid event of its topic's type or as a
dead letter carrying its source coordinates, its raw bytes and a reason:

``invalid_json``
    the value is not UTF-8, not JSON, or not a JSON object;
``missing_field``
    a field of the event type is absent or JSON ``null``;
``invalid_value``
    a field has the wrong JSON type, an identifier (event id, booth, plate,
    registration id) is blank, a time is not ISO-8601 with a zone, a toll has more
    than two decimal places, or the topic carries no known event type;
``future_event_time``
    the event time is more than ``max_future_skew`` after the Kafka record
    timestamp (the time the event was sent).

The first failing rule, in that order, names the reason; ``detail`` says which
fields failed. JSON is parsed once into a VARIANT, so the JSON type of each
field is checked exactly (``"7"`` is not an integer, ``7`` is not a string).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from shared.events import EVENT_TYPES, EventField, EventType, FieldKind
from shared.settings import TopicSettings


class DeadLetterReason(StrEnum):
    INVALID_JSON = "invalid_json"
    MISSING_FIELD = "missing_field"
    INVALID_VALUE = "invalid_value"
    FUTURE_EVENT_TIME = "future_event_time"


SOURCE_COLUMNS = ("source_topic", "source_partition", "source_offset", "source_timestamp")
"""Where a record came from; carried by valid events and dead letters alike."""

DEAD_LETTER_SCHEMA = T.StructType(
    [
        T.StructField("source_topic", T.StringType(), nullable=False),
        T.StructField("source_partition", T.IntegerType(), nullable=False),
        T.StructField("source_offset", T.LongType(), nullable=False),
        T.StructField("source_timestamp", T.TimestampType(), nullable=False),
        T.StructField("key", T.BinaryType(), nullable=True),
        T.StructField("value", T.BinaryType(), nullable=True),
        T.StructField("reason", T.StringType(), nullable=False),
        T.StructField("detail", T.StringType(), nullable=False),
    ]
)

_ISO_INSTANT = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})$"
_INTEGER_JSON = r"^(TINYINT|SMALLINT|INT|BIGINT)$"
_NUMBER_JSON = r"^(TINYINT|SMALLINT|INT|BIGINT|DOUBLE|FLOAT|DECIMAL\(\d+,\d+\))$"
_MONEY_JSON = r"^(TINYINT|SMALLINT|INT|BIGINT|DECIMAL\(\d+,[0-2]\))$"
_INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class DecodedRecords:
    """The two sides of validation: valid events per event type, and dead letters."""

    events: dict[str, DataFrame]
    dead_letters: DataFrame

    def of(self, event_type: EventType) -> DataFrame:
        return self.events[event_type.name]


def _json_of(name: str) -> Column:
    return F.variant_get(F.col("_json"), f"$.{name}", "variant")


def _json_type(name: str) -> Column:
    """The JSON type of a field (``STRING``, ``BIGINT``, ``VOID`` for null; null if absent)."""
    return F.col(f"_json_type.{name}")


def _json_text(name: str) -> Column:
    return F.col(f"_json_text.{name}")


def _with_field_types(parsed: DataFrame) -> DataFrame:
    """Look up every field's JSON type and text once, as columns the rules then read."""
    names = sorted({field.name for event_type in EVENT_TYPES for field in event_type.fields})
    types = F.struct(*[F.schema_of_variant(_json_of(name)).alias(name) for name in names])
    texts = F.struct(
        *[F.variant_get(F.col("_json"), f"$.{name}", "string").alias(name) for name in names]
    )
    return _computed_once(parsed, _json_type=types, _json_text=texts)


def _computed_once(frame: DataFrame, **columns: Column) -> DataFrame:
    """``frame`` with these columns added, each expression evaluated once per row.

    The columns come out of a Generate node (``inline`` of a one-element array),
    which the optimizer cannot see through. With ``withColumn``, Spark collapses
    projections and pushes filters down by substituting an expression into
    every place that reads its column, so a rule read three times (a reason,
    its detail, the valid/dead-letter filter) is evaluated three times, and
    the generated Java method outgrows the JVM's 64 KB limit (codegen then fails
    and Spark interprets, slowly, every micro-batch).
    """
    row = F.struct(*[column.alias(name) for name, column in columns.items()])
    return frame.select("*", F.inline(F.array(row)))


def _is_missing(field: EventField) -> Column:
    json_type = _json_type(field.name)
    return json_type.isNull() | (json_type == "VOID")


def _is_invalid(field: EventField) -> Column:
    """True where a present field breaks its kind's rule."""
    json_type = _json_type(field.name)
    text = _json_text(field.name)
    match field.kind:
        case FieldKind.TEXT:
            valid = json_type == "STRING"
        case FieldKind.IDENTIFIER:
            valid = (json_type == "STRING") & (F.trim(text) != "")
        case FieldKind.TIMESTAMP:
            valid = (
                (json_type == "STRING")
                & text.rlike(_ISO_INSTANT)
                & text.try_cast(T.TimestampType()).isNotNull()
            )
        case FieldKind.INTEGER:
            number = F.try_variant_get(_json_of(field.name), "$", "bigint")
            valid = json_type.rlike(_INTEGER_JSON) & (F.abs(number) <= _INT32_MAX)
        case FieldKind.NUMBER:
            valid = json_type.rlike(_NUMBER_JSON)
        case FieldKind.MONEY:
            amount = F.try_variant_get(_json_of(field.name), "$", "decimal(12,2)")
            valid = json_type.rlike(_MONEY_JSON) & amount.isNotNull()
        case FieldKind.BOOLEAN:
            valid = json_type == "BOOLEAN"
    return ~valid


def _typed_value(field: EventField) -> Column:
    if field.kind is FieldKind.TIMESTAMP:
        text = F.variant_get(F.col("_json"), f"$.{field.name}", "string")
        return text.try_cast(T.TimestampType()).alias(field.name)
    return F.try_variant_get(_json_of(field.name), "$", field.spark_type.simpleString()).alias(
        field.name
    )


def _names_where(checks: list[tuple[str, Column]]) -> Column:
    """Comma-separated names of the fields whose check is true, or '' if none."""
    return F.concat_ws(", ", *[F.when(check, F.lit(name)) for name, check in checks])


def _failures(event_type: EventType) -> Column:
    """The names of missing and of invalid fields of a JSON object of this event type."""
    fields = event_type.fields
    missing = _names_where([(f.name, _is_missing(f)) for f in fields])
    invalid = _names_where([(f.name, ~_is_missing(f) & _is_invalid(f)) for f in fields])
    return F.struct(missing.alias("missing"), invalid.alias("invalid"))


def _event_time(event_type: EventType) -> Column:
    return _json_text(event_type.time_field).try_cast(T.TimestampType())


_LOOKUPS = ("_json_type", "_json_text", "_failures", "_event_time", "_is_utf8", "_is_object")
"""The intermediate columns of :func:`classify_records`, dropped from its result."""


def classify_records(
    raw: DataFrame, topics: TopicSettings, max_future_skew: timedelta
) -> DataFrame:
    """Raw Kafka records with their parsed JSON (``_json``), dead-letter ``_reason``
    (null if valid) and ``_detail``: the first half of :func:`decode_records`.
    Persist this frame to split it more than once at the cost of one decode (the
    batch layer's ingest does)."""
    text = F.col("value").cast(T.StringType())
    is_utf8 = F.coalesce(F.is_valid_utf8(text), F.lit(False))
    parsed = raw.withColumn("_json", F.when(is_utf8, F.try_parse_json(text)))
    is_object = F.coalesce(F.schema_of_variant(F.col("_json")).startswith("OBJECT<"), F.lit(False))
    typed = _with_field_types(
        parsed.withColumn("_is_utf8", is_utf8).withColumn("_is_object", is_object)
    )

    failures: Column = F.lit(None)
    event_time: Column = F.lit(None).cast(T.TimestampType())
    known_topic: Column = F.lit(False)
    for event_type in EVENT_TYPES:
        of_type = F.col("topic") == event_type.topic(topics)
        failures = F.when(of_type, _failures(event_type)).otherwise(failures)
        event_time = F.when(of_type, _event_time(event_type)).otherwise(event_time)
        known_topic = known_topic | of_type
    checked = _computed_once(typed, _failures=failures, _event_time=event_time)

    latest_allowed = F.col("timestamp") + F.make_dt_interval(
        secs=F.lit(max_future_skew.total_seconds())
    )
    missing, invalid = F.col("_failures.missing"), F.col("_failures.invalid")
    reason = (
        F.when(~F.col("_is_object"), F.lit(DeadLetterReason.INVALID_JSON.value))
        .when(~known_topic, F.lit(DeadLetterReason.INVALID_VALUE.value))
        .when(missing != "", F.lit(DeadLetterReason.MISSING_FIELD.value))
        .when(invalid != "", F.lit(DeadLetterReason.INVALID_VALUE.value))
        .when(
            F.col("_event_time") > latest_allowed, F.lit(DeadLetterReason.FUTURE_EVENT_TIME.value)
        )
    )
    detail = (
        F.when(~F.col("_is_utf8"), F.lit("value is not UTF-8"))
        .when(~F.col("_is_object"), F.lit("value is not a JSON object"))
        .when(~known_topic, F.lit("topic carries no known event type"))
        .when(missing != "", F.concat(F.lit("missing: "), missing))
        .when(invalid != "", F.concat(F.lit("invalid: "), invalid))
        .otherwise(
            F.concat(
                F.lit("event time is more than "),
                F.lit(str(max_future_skew)),
                F.lit(" after the record timestamp"),
            )
        )
    )
    # the field lookups are large (two strings per field name) and no longer needed
    return _computed_once(checked, _reason=reason, _detail=detail).drop(*_LOOKUPS)


def split_classified(
    classified: DataFrame, topics: TopicSettings, keep_raw: bool = False
) -> DecodedRecords:
    """Valid events per type and dead letters from :func:`classify_records`' output."""
    source = [
        F.col("topic").alias("source_topic"),
        F.col("partition").cast(T.IntegerType()).alias("source_partition"),
        F.col("offset").cast(T.LongType()).alias("source_offset"),
        F.col("timestamp").alias("source_timestamp"),
    ]
    valid = classified.where(F.col("_reason").isNull())
    events = {
        event_type.name: valid.where(F.col("topic") == event_type.topic(topics)).select(
            *[_typed_value(field) for field in event_type.fields],
            *source,
            *([F.col("key"), F.col("value")] if keep_raw else []),
        )
        for event_type in EVENT_TYPES
    }
    dead_letters = classified.where(F.col("_reason").isNotNull()).select(
        *source,
        F.col("key"),
        F.col("value"),
        F.col("_reason").alias("reason"),
        F.col("_detail").alias("detail"),
    )
    return DecodedRecords(events=events, dead_letters=dead_letters)


def decode_records(
    raw: DataFrame, topics: TopicSettings, max_future_skew: timedelta, keep_raw: bool = False
) -> DecodedRecords:
    """Split raw Kafka records into valid events (per event type) and dead letters.

    Works on streaming and static DataFrames. Valid events have the event type's
    schema (:attr:`EventType.spark_schema`) followed by the ``SOURCE_COLUMNS``
    and, with ``keep_raw``, the record's own ``key`` and ``value`` bytes (the
    batch layer's master dataset keeps both).
    """
    return split_classified(classify_records(raw, topics, max_future_skew), topics, keep_raw)
