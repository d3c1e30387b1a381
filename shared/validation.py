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


def _json_type_of(name: str) -> Column:
    return F.schema_of_variant(_json_of(name))


def _is_missing(field: EventField) -> Column:
    json_type = _json_type_of(field.name)
    return json_type.isNull() | (json_type == "VOID")


def _is_invalid(field: EventField) -> Column:
    """True where a present field breaks its kind's rule."""
    json_type = _json_type_of(field.name)
    text = F.variant_get(_json_of(field.name), "$", "string")
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
        text = F.variant_get(_json_of(field.name), "$", "string")
        return text.try_cast(T.TimestampType()).alias(field.name)
    return F.try_variant_get(_json_of(field.name), "$", field.spark_type.simpleString()).alias(
        field.name
    )


def _names_where(checks: list[tuple[str, Column]]) -> Column:
    """Comma-separated names of the fields whose check is true, or '' if none."""
    return F.concat_ws(", ", *[F.when(check, F.lit(name)) for name, check in checks])


def _failure_of(event_type: EventType, max_future_skew: timedelta) -> tuple[Column, Column]:
    """(reason, detail) of a parsed JSON object of this event type; reason null if valid."""
    fields = event_type.fields
    missing = [(f.name, _is_missing(f)) for f in fields]
    invalid = [(f.name, ~_is_missing(f) & _is_invalid(f)) for f in fields]
    event_time = F.variant_get(_json_of(event_type.time_field), "$", "string").try_cast(
        T.TimestampType()
    )
    latest_allowed = F.col("timestamp") + F.make_dt_interval(
        secs=F.lit(max_future_skew.total_seconds())
    )
    any_missing = F.greatest(*[check for _, check in missing])
    any_invalid = F.greatest(*[check for _, check in invalid])
    reason = (
        F.when(any_missing, F.lit(DeadLetterReason.MISSING_FIELD.value))
        .when(any_invalid, F.lit(DeadLetterReason.INVALID_VALUE.value))
        .when(event_time > latest_allowed, F.lit(DeadLetterReason.FUTURE_EVENT_TIME.value))
    )
    detail = (
        F.when(any_missing, F.concat(F.lit("missing: "), _names_where(missing)))
        .when(any_invalid, F.concat(F.lit("invalid: "), _names_where(invalid)))
        .when(
            event_time > latest_allowed,
            F.concat(
                F.lit(f"{event_type.time_field} is more than {max_future_skew} after the record "),
                F.lit("timestamp"),
            ),
        )
    )
    return reason, detail


def decode_records(
    raw: DataFrame, topics: TopicSettings, max_future_skew: timedelta
) -> DecodedRecords:
    """Split raw Kafka records into valid events (per event type) and dead letters.

    Works on streaming and static DataFrames. Valid events have the event type's
    schema (:attr:`EventType.spark_schema`) followed by the ``SOURCE_COLUMNS``.
    """
    text = F.col("value").cast(T.StringType())
    parsed = raw.withColumn(
        "_json", F.when(F.is_valid_utf8(text), F.try_parse_json(text))
    ).withColumn("_json_type", F.schema_of_variant(F.col("_json")))

    is_object = F.coalesce(F.col("_json_type").startswith("OBJECT<"), F.lit(False))
    reason: Column = F.when(~is_object, F.lit(DeadLetterReason.INVALID_JSON.value))
    detail: Column = F.when(
        ~F.coalesce(F.is_valid_utf8(text), F.lit(False)), F.lit("value is not UTF-8")
    ).when(~is_object, F.lit("value is not a JSON object"))
    known_topics = []
    for event_type in EVENT_TYPES:
        topic = event_type.topic(topics)
        known_topics.append(topic)
        type_reason, type_detail = _failure_of(event_type, max_future_skew)
        reason = reason.when(F.col("topic") == topic, type_reason)
        detail = detail.when(F.col("topic") == topic, type_detail)
    reason = reason.otherwise(F.lit(DeadLetterReason.INVALID_VALUE.value))
    detail = detail.otherwise(F.lit("topic carries no known event type"))

    checked = parsed.withColumn("_reason", reason).withColumn("_detail", detail)
    source = [
        F.col("topic").alias("source_topic"),
        F.col("partition").cast(T.IntegerType()).alias("source_partition"),
        F.col("offset").cast(T.LongType()).alias("source_offset"),
        F.col("timestamp").alias("source_timestamp"),
    ]
    valid = checked.where(F.col("_reason").isNull())
    events = {
        event_type.name: valid.where(F.col("topic") == event_type.topic(topics)).select(
            *[_typed_value(field) for field in event_type.fields], *source
        )
        for event_type in EVENT_TYPES
    }
    dead_letters = checked.where(F.col("_reason").isNotNull()).select(
        *source,
        F.col("key"),
        F.col("value"),
        F.col("_reason").alias("reason"),
        F.coalesce(F.col("_detail"), F.lit("")).alias("detail"),
    )
    return DecodedRecords(events=events, dead_letters=dead_letters)
