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
    registration id) is blank, a text is longer than :data:`MAX_TEXT_CHARS` or
    holds a control character (a NUL byte, a line break), a number is beyond a
    double's range, a time is not ISO-8601 with a zone, a toll has more than two
    decimal places, or the topic carries no known event type;
``future_event_time``
    the event time is more than ``max_future_skew`` after the Kafka record
    timestamp (the time the event was sent).

The first failing rule, in that order, names the reason; ``detail`` says which
fields failed.

A dead letter keeps the raw key and value bounded, so that no record the
broker accepts makes a dead letter it refuses (or one a reader chokes on):
each as at most ``raw_bytes`` leading bytes, with its full length and its
SHA-256 (:func:`bounded_raw`). Valid events keep text no longer than
:data:`MAX_TEXT_CHARS`, so the records the views build from them are small too.

JSON is parsed once into a VARIANT, so the JSON type of each
field is checked exactly (``"7"`` is not an integer, ``7`` is not a string).

Most records are valid, so the JSON types are first read from the whole
object's schema (``schema_of_variant``, one string per record) matched against
the event type's pattern; only a record that does not match has every field
looked up one by one to name what failed (three times the cost). Both paths
apply the same per-kind rules (:data:`_JSON_TYPES`, :func:`_value_rule`). Each
text field is looked up once per record (``_texts``), for the rules and the typed
event alike; on the fast path a number's JSON type settles its rule
(:data:`_FAST_JSON_TYPES`), so a valid record's numbers are read only as typed
values (each ``variant_get`` of a number builds a cast, per record).
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from shared.domain.events import EVENT_TYPES, EventField, EventType, FieldKind
from shared.domain.topics import Topics


class DeadLetterReason(StrEnum):
    INVALID_JSON = "invalid_json"
    MISSING_FIELD = "missing_field"
    INVALID_VALUE = "invalid_value"
    FUTURE_EVENT_TIME = "future_event_time"


SOURCE_COLUMNS = ("source_topic", "source_partition", "source_offset", "source_timestamp")
"""Where a record came from; carried by valid events and dead letters alike."""

RAW_COLUMNS = ("key", "value")
"""The raw record's bytes: kept whole by a valid event (``keep_raw``), bounded by a
dead letter (:func:`bounded_raw`)."""

MAX_TEXT_CHARS = 64
"""The longest text (identifier or not) a valid event field may hold, in characters.
Plates, booths and ids are a few characters; the views key their speed records
by them, so a longer one would make records of any size."""


def _raw_fields(name: str) -> list[T.StructField]:
    return [
        T.StructField(name, T.BinaryType(), nullable=True),
        T.StructField(f"{name}_length", T.IntegerType(), nullable=True),
        T.StructField(f"{name}_sha256", T.StringType(), nullable=True),
    ]


DEAD_LETTER_SCHEMA = T.StructType(
    [
        T.StructField("source_topic", T.StringType(), nullable=False),
        T.StructField("source_partition", T.IntegerType(), nullable=False),
        T.StructField("source_offset", T.LongType(), nullable=False),
        T.StructField("source_timestamp", T.TimestampType(), nullable=False),
        *_raw_fields("key"),
        *_raw_fields("value"),
        T.StructField("reason", T.StringType(), nullable=False),
        T.StructField("detail", T.StringType(), nullable=False),
    ]
)
"""A dead letter: where it came from, its bounded raw bytes (``key``/``value`` at most
``raw_bytes`` long, ``*_length`` the full length, ``*_sha256`` the hex SHA-256 of
the whole; all null for a null key), why."""


def _bounded(name: str, raw_bytes: int) -> dict[str, Column]:
    raw = F.col(name)
    return {
        name: F.substring(raw, 1, raw_bytes),
        f"{name}_length": F.octet_length(raw),
        f"{name}_sha256": F.sha2(raw, 256),
    }


def bounded_raw(name: str, raw_bytes: int) -> list[Column]:
    """A raw byte column as a dead letter keeps it: its first ``raw_bytes`` bytes, its
    full length and the hex SHA-256 of the whole."""
    return [column.alias(alias) for alias, column in _bounded(name, raw_bytes).items()]


_ISO_INSTANT = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})$"
_INTEGERS = "TINYINT|SMALLINT|INT|BIGINT"
_JSON_TYPES: dict[FieldKind, str] = {
    FieldKind.TEXT: "STRING",
    FieldKind.IDENTIFIER: "STRING",
    FieldKind.TIMESTAMP: "STRING",
    FieldKind.INTEGER: _INTEGERS,
    FieldKind.NUMBER: _INTEGERS + r"|DOUBLE|FLOAT|DECIMAL\(\d+,\d+\)",
    FieldKind.MONEY: _INTEGERS + r"|DECIMAL\(\d+,[0-2]\)",  # at most two decimal places
    FieldKind.BOOLEAN: "BOOLEAN",
}
"""The JSON types (as ``schema_of_variant`` names them) a field of each kind may have."""
_FAST_JSON_TYPES: dict[FieldKind, str] = {
    **_JSON_TYPES,
    FieldKind.INTEGER: "TINYINT|SMALLINT",
    FieldKind.NUMBER: _INTEGERS + r"|DECIMAL\(\d+,\d+\)",
    FieldKind.MONEY: r"TINYINT|SMALLINT|INT|DECIMAL\(([1-9]|10),[0-2]\)|DECIMAL\(11,[12]\)"
    r"|DECIMAL\(12,2\)",
}
"""The JSON types the fast path admits, of each kind: for a number, only those whose every
value keeps the kind's rule (an INT may be -2**31, a DOUBLE 1e400, a DECIMAL(13,2) ten
billion), so that its value need not be read; a number of any other type it may have
takes the field-by-field path."""
_STRING_KINDS = frozenset({FieldKind.TEXT, FieldKind.IDENTIFIER, FieldKind.TIMESTAMP})
"""The kinds whose JSON type is a string: their text is read once per record (``_texts``)."""
_INT32_MAX = 2**31 - 1
_DOUBLE_MAX = sys.float_info.max
_CONTROL_CHARACTER = r"[\x00-\x1f\x7f]"
_OTHER_FIELD = r"[A-Za-z0-9_]+: [A-Z_]+(\(\d+,\d+\))?"
"""A field the event type does not read, in a schema string: a plain name and a scalar
type. Anything else (a nested value, a quoted name) fails the pattern, and the record
takes the slow path, which ignores such fields just the same."""


@dataclass(frozen=True)
class DecodedRecords:
    """The two sides of validation: valid events per event type, and dead letters."""

    events: dict[str, DataFrame]
    dead_letters: DataFrame

    def of(self, event_type: EventType) -> DataFrame:
        return self.events[event_type.name]


def _json_of(name: str) -> Column:
    return F.variant_get(F.col("_json"), f"$.{name}", "variant")


def _json_string(name: str) -> Column:
    """A field's value as text (a JSON string's contents, else the value's JSON text)."""
    return F.variant_get(F.col("_json"), f"$.{name}", "string")


def _json_type(name: str) -> Column:
    """The JSON type of a field (``STRING``, ``BIGINT``, ``VOID`` for null; null if absent)."""
    return F.col(f"_json_type.{name}")


def _json_text(name: str) -> Column:
    """A string-kind field's text, as ``_texts`` holds it (null for a record of a type
    without the field)."""
    return F.col(f"_texts.{name}")


def _texts(topics: Topics, event_types: tuple[EventType, ...]) -> Column:
    """Every string-kind field's text (:func:`_json_string`), each looked up once per
    record and only in records of a type that has it: the fast path's rules, the slow
    path's and the typed values all read these."""
    having: dict[str, list[str]] = {}
    for event_type in event_types:
        for field in event_type.fields:
            if field.kind in _STRING_KINDS:
                having.setdefault(field.name, []).append(topics.of(event_type))
    return F.struct(
        *[
            F.when(F.col("topic").isin(of), _json_string(name)).alias(name)
            for name, of in sorted(having.items())
        ]
    )


def _with_field_types(parsed: DataFrame, event_types: tuple[EventType, ...]) -> DataFrame:
    """Look up every field's JSON type once, as a column the rules then read; only for
    records the fast path did not pass (``_conforms``), null for the others."""
    names = sorted({field.name for event_type in event_types for field in event_type.fields})
    types = F.struct(*[F.schema_of_variant(_json_of(name)).alias(name) for name in names])
    return _computed_once(parsed, _json_type=F.when(~F.col("_conforms"), types))


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


def _value_rule(field: EventField, text: Column, instant: Column | None = None) -> Column | None:
    """True where a field that has one of its kind's JSON types holds an allowed value;
    None for the kinds whose JSON type is the whole rule. ``instant``: a time field's
    text already cast to a timestamp (:func:`_event_time`), if it has been."""
    match field.kind:
        case FieldKind.IDENTIFIER:
            return (F.trim(text) != "") & _plain_text(text)
        case FieldKind.TEXT:
            return _plain_text(text)
        case FieldKind.TIMESTAMP:
            cast = text.try_cast(T.TimestampType()) if instant is None else instant
            return text.rlike(_ISO_INSTANT) & cast.isNotNull()
        case FieldKind.INTEGER:
            number = F.try_variant_get(_json_of(field.name), "$", "bigint")
            return F.abs(number) <= _INT32_MAX
        case FieldKind.MONEY:
            amount = F.try_variant_get(_json_of(field.name), "$", "decimal(12,2)")
            return amount.isNotNull()
        case FieldKind.NUMBER:
            # JSON has no infinity, but a number beyond a double's range (1e400) reads as one
            number = F.try_variant_get(_json_of(field.name), "$", "double")
            return F.abs(number) <= _DOUBLE_MAX
        case FieldKind.BOOLEAN:
            return None


def _plain_text(text: Column) -> Column:
    """At most :data:`MAX_TEXT_CHARS` characters, none a control character (a NUL byte,
    a line break): no reader of an id, a plate or a make expects one."""
    return (F.char_length(text) <= MAX_TEXT_CHARS) & ~text.rlike(_CONTROL_CHARACTER)


def _is_invalid(field: EventField) -> Column:
    """True where a present field breaks its kind's rule (the slow path's check)."""
    json_type = _json_type(field.name)
    valid = json_type.rlike(f"^({_JSON_TYPES[field.kind]})$")
    value_rule = _value_rule(field, _json_text(field.name))
    return ~(valid if value_rule is None else valid & value_rule)


def _shape_pattern(event_type: EventType) -> str:
    """A regex matching the whole-object schema string of an object whose fields of this
    event type are all present with allowed JSON types (other plain fields may be there).

    Variant objects list their fields sorted by name, so the pattern names the event
    type's fields in that order. Before each one, other fields are skipped by a
    possessive loop that stops at that field's name: no backtracking, so matching
    is linear in the string (a greedy loop costs ~11 us per entry record).
    """
    fields = sorted(event_type.fields, key=lambda field: field.name.encode())  # variant order
    known = ", ".join(
        f"((?!{field.name}: ){_OTHER_FIELD}, )*+{field.name}: ({_FAST_JSON_TYPES[field.kind]})"
        for field in fields
    )
    return f"^OBJECT<{known}(, {_OTHER_FIELD})*+>$"


def _conforms(event_type: EventType) -> Column:
    """The fast path: true only where no field of this event type is missing or invalid
    (the slow path would find nothing to name); false says nothing either way. A number's
    JSON type decides its rule here (:data:`_FAST_JSON_TYPES`), so only texts are read."""
    value_rules = [
        _value_rule(
            field,
            _json_text(field.name),
            F.col("_event_time") if field.name == event_type.time_field else None,
        )
        for field in event_type.fields
        if field.kind in _STRING_KINDS
    ]
    shape = F.col("_shape").rlike(_shape_pattern(event_type))
    conforms = reduce(operator.and_, [rule for rule in value_rules if rule is not None], shape)
    return F.coalesce(conforms, F.lit(False))


def _typed_value(field: EventField, time_field: bool) -> Column:
    """A valid event's field, typed as its kind is; ``time_field``: it is the event time of
    the record's type (already cast: ``_event_time``)."""
    if time_field:
        return F.col("_event_time").alias(field.name)
    if field.kind is FieldKind.TIMESTAMP:
        return _json_text(field.name).try_cast(T.TimestampType()).alias(field.name)
    if field.kind in _STRING_KINDS:
        return _json_text(field.name).alias(field.name)
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


def _by_topic(
    topics: Topics,
    event_types: tuple[EventType, ...],
    rule: Callable[[EventType], Column],
    other: Column,
) -> Column:
    """``rule`` of the record's event type, chosen by its topic; ``other`` for other topics."""
    for event_type in event_types:
        of_type = F.col("topic") == topics.of(event_type)
        other = F.when(of_type, rule(event_type)).otherwise(other)
    return other


_LOOKUPS = ("_json_type", "_failures", "_is_utf8", "_is_object", "_shape", "_conforms")
"""The intermediate columns of :func:`classify_records`, dropped from its result (the
typed values read ``_texts`` and ``_event_time``)."""


def classify_records(
    raw: DataFrame,
    topics: Topics,
    max_future_skew: timedelta,
    fast_path: bool = True,
    event_types: tuple[EventType, ...] = EVENT_TYPES,
) -> DataFrame:
    """Raw Kafka records with their parsed JSON (``_json``), dead-letter ``_reason``
    (null if valid) and ``_detail``: the first half of :func:`decode_records`.
    Persist this frame to split it more than once at the cost of one decode (the
    batch layer's ingest does). ``fast_path=False`` checks every record field by
    field: the same result, slower; the tests hold the fast path to it.
    ``event_types``: see :func:`decode_records`."""
    text = F.col("value").cast(T.StringType())
    is_utf8 = F.coalesce(F.is_valid_utf8(text), F.lit(False))
    parsed = raw.withColumn("_json", F.when(is_utf8, F.try_parse_json(text)))
    shaped = _computed_once(
        parsed, _is_utf8=is_utf8, _shape=F.schema_of_variant(F.col("_json")),
        _texts=_texts(topics, event_types),
    )  # fmt: skip
    no_time = F.lit(None).cast(T.TimestampType())
    timed = _computed_once(shaped, _event_time=_by_topic(topics, event_types, _event_time, no_time))

    conforms = (
        _by_topic(topics, event_types, _conforms, F.lit(False)) if fast_path else F.lit(False)
    )
    is_object = F.coalesce(F.col("_shape").startswith("OBJECT<"), F.lit(False))
    typed = _with_field_types(
        _computed_once(timed, _is_object=is_object, _conforms=conforms), event_types
    )

    no_failures = F.struct(F.lit("").alias("missing"), F.lit("").alias("invalid"))
    failures = F.when(F.col("_conforms"), no_failures).otherwise(
        _by_topic(topics, event_types, _failures, F.lit(None))
    )
    known_topic = F.col("topic").isin([topics.of(event_type) for event_type in event_types])
    checked = _computed_once(typed, _failures=failures)

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
    classified: DataFrame,
    topics: Topics,
    raw_bytes: int,
    keep_raw: bool = False,
    event_types: tuple[EventType, ...] = EVENT_TYPES,
) -> DecodedRecords:
    """Valid events per type (of ``event_types``, those it was classified by) and
    dead letters from :func:`classify_records`' output; a dead letter keeps at most
    ``raw_bytes`` of the record's key and of its value (:func:`bounded_raw`)."""
    source = [
        F.col("topic").alias("source_topic"),
        F.col("partition").cast(T.IntegerType()).alias("source_partition"),
        F.col("offset").cast(T.LongType()).alias("source_offset"),
        F.col("timestamp").alias("source_timestamp"),
    ]
    valid = classified.where(F.col("_reason").isNull())
    events = {
        event_type.name: valid.where(F.col("topic") == topics.of(event_type)).select(
            *[
                _typed_value(field, field.name == event_type.time_field)
                for field in event_type.fields
            ],
            *source,
            *([F.col("key"), F.col("value")] if keep_raw else []),
        )
        for event_type in event_types
    }
    dead_letters = classified.where(F.col("_reason").isNotNull()).select(
        *source,
        *bounded_raw("key", raw_bytes),
        *bounded_raw("value", raw_bytes),
        F.col("_reason").alias("reason"),
        F.col("_detail").alias("detail"),
    )
    return DecodedRecords(events=events, dead_letters=dead_letters)


def decode_records(
    raw: DataFrame,
    topics: Topics,
    max_future_skew: timedelta,
    raw_bytes: int,
    keep_raw: bool = False,
    event_types: tuple[EventType, ...] = EVENT_TYPES,
) -> DecodedRecords:
    """Split raw Kafka records into valid events (per event type) and dead letters.

    Works on streaming and static DataFrames. Valid events have the event type's
    schema (:attr:`EventType.spark_schema`) followed by the ``SOURCE_COLUMNS``
    and, with ``keep_raw``, the record's own ``key`` and ``value`` bytes (the
    batch layer's master dataset keeps both).

    ``event_types`` are those whose topics the records may come from (default:
    all); a record of any other topic is a dead letter (``invalid_value``,
    "topic carries no known event type"). A reader of one topic passes its
    event type, so that the decode holds that type's rules only: the Java code
    Spark generates for it, every micro-batch of a streaming query, is then a
    fraction of the size. A dead letter keeps at most ``raw_bytes`` of the
    record's key and of its value (:func:`bounded_raw`).
    """
    classified = classify_records(raw, topics, max_future_skew, event_types=event_types)
    return split_classified(classified, topics, raw_bytes, keep_raw, event_types)


def decode_together(
    raw: DataFrame,
    topics: Topics,
    max_future_skew: timedelta,
    raw_bytes: int,
    event_types: tuple[EventType, ...] = EVENT_TYPES,
) -> DataFrame:
    """:func:`decode_records` as one frame, a row per record: the same rules, in one
    pass, for a plan that reads every record once (a streaming query's branches each
    read and decode their input again).

    ``event_type`` names a valid event's type (null for a dead letter). Each field of
    the event types is a column, typed as its type has it, null where the record is
    not of a type with it (a name two types share, like ``booth_id``, is one column).
    Then the ``SOURCE_COLUMNS``, and the dead letter's columns
    (:data:`DEAD_LETTER_SCHEMA`' ``key`` … ``detail``), null for a valid event.
    """
    classified = classify_records(raw, topics, max_future_skew, event_types=event_types)
    valid = F.col("_reason").isNull()
    of_type = {
        event_type.name: F.col("topic") == topics.of(event_type) for event_type in event_types
    }
    fields: dict[str, tuple[EventField, list[str]]] = {}
    for event_type in event_types:
        for field in event_type.fields:
            known, names = fields.setdefault(field.name, (field, []))
            if known.kind is not field.kind:
                raise ValueError(
                    f"{field.name}: a {known.kind} in one event type, a {field.kind} in another"
                )
            names.append(event_type.name)
    time_field_of = {event_type.name: event_type.time_field for event_type in event_types}
    typed = [
        F.when(
            valid & reduce(operator.or_, [of_type[name] for name in names]),
            _typed_value(field, all(time_field_of[name] == field.name for name in names)),
        ).alias(field.name)
        for field, names in fields.values()
    ]
    event_type_name = reduce(
        lambda other, event_type: F.when(
            of_type[event_type.name], F.lit(event_type.name)
        ).otherwise(other),
        event_types,
        F.lit(None).cast(T.StringType()),
    )
    dead_letter = {
        **_bounded("key", raw_bytes),
        **_bounded("value", raw_bytes),
        "reason": F.col("_reason"),
        "detail": F.col("_detail"),
    }
    return classified.select(
        F.when(valid, event_type_name).alias("event_type"),
        *typed,
        F.col("topic").alias("source_topic"),
        F.col("partition").cast(T.IntegerType()).alias("source_partition"),
        F.col("offset").cast(T.LongType()).alias("source_offset"),
        F.col("timestamp").alias("source_timestamp"),
        *(F.when(~valid, column).alias(name) for name, column in dead_letter.items()),
    )


def decode_each_topic(
    raw: DataFrame,
    topics: Topics,
    max_future_skew: timedelta,
    raw_bytes: int,
    event_types: tuple[EventType, ...] = EVENT_TYPES,
) -> DecodedRecords:
    """:func:`decode_records`, with each event type's valid events decoded from its
    topic's records by its own rules alone: the same rows, in plan branches whose
    generated code holds one type's rules instead of every type's.

    For a streaming query that reads several topics and uses each type's events
    in a branch of its own: Spark generates every branch's code again each
    micro-batch and serialises it into the branch's tasks, so the smaller the
    branch, the less each micro-batch costs. The dead letters still come from
    one decode by every type's rules, so a record of a topic of none of these
    types is one of them, as in :func:`decode_records`.
    """
    every_rule = decode_records(raw, topics, max_future_skew, raw_bytes, event_types=event_types)
    events = {
        event_type.name: decode_records(
            raw.where(F.col("topic") == topics.of(event_type)),
            topics,
            max_future_skew,
            raw_bytes,
            event_types=(event_type,),
        ).of(event_type)
        for event_type in event_types
    }
    return DecodedRecords(events=events, dead_letters=every_rule.dead_letters)
