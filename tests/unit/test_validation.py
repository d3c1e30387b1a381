"""Validation on a static DataFrame of raw Kafka records (the batch layer's view of it).

Every expected row is written by hand. The streaming layer calls the same
function; its integration tests check the streaming path.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.testing import assertDataFrameEqual

from shared.domain.events import TOLL_ENTRY, TOLL_EXIT, VEHICLE_REGISTRATION, EventType
from shared.domain.topics import Topics
from shared.domain.validation import (
    DEAD_LETTER_SCHEMA,
    DecodedRecords,
    _shape_pattern,
    classify_records,
    decode_each_topic,
    decode_records,
    split_classified,
)
from tests.scenarios import RAW_SCHEMA

SENT = datetime(2026, 1, 5, 6, 0, 0, tzinfo=UTC)
TOPICS = Topics()
RAW_BYTES = 4096

ENTRY: dict[str, Any] = {
    "event_id": "e-1",
    "booth_id": "booth-01",
    "entry_time": "2026-01-05T05:59:58.125Z",
    "license_plate": "ABC-1234",
    "state": "NY",
    "make": "Ford",
    "model": "F-150",
    "vehicle_type": 1,
    "weight_kg": 1500.5,
    "toll": 4.5,
    "tag": "TAG01",
}


def raw(spark: SparkSession, *records: tuple[str, bytes]) -> DataFrame:
    """Raw Kafka records as Spark's Kafka source yields them, one offset each."""
    rows = [(b"k", value, topic, 0, offset, SENT) for offset, (topic, value) in enumerate(records)]
    return spark.createDataFrame(rows, RAW_SCHEMA)


def entry_json(**changes: Any) -> bytes:
    wire = {**ENTRY, **changes}
    return json.dumps({k: v for k, v in wire.items() if v is not ...}).encode()


def rows_of(decoded: DecodedRecords) -> tuple[list[Row], dict[str, list[Row]]]:
    """Dead letters (offset, reason, detail) and each type's events, in offset order."""
    dead = decoded.dead_letters.select("source_offset", "reason", "detail")
    events = {name: frame.orderBy("source_offset").collect()
              for name, frame in decoded.events.items()}  # fmt: skip
    return dead.orderBy("source_offset").collect(), events


def reasons_of(
    spark: SparkSession, *values: bytes, topic: str = "toll.entries"
) -> list[tuple[str, str]]:
    decoded = decode_records(
        raw(spark, *[(topic, v) for v in values]), TOPICS, timedelta(hours=1), RAW_BYTES
    )
    rows = decoded.dead_letters.orderBy("source_offset").collect()
    return [(row.reason, row.detail) for row in rows]


def test_a_valid_entry_is_typed_and_keeps_its_source(spark: SparkSession) -> None:
    decoded = decode_records(
        raw(spark, ("toll.entries", entry_json(license_plate="ÄÖÜ-Ø001"))),
        TOPICS,
        timedelta(hours=1),
        RAW_BYTES,
    )
    expected = Row(
        event_id="e-1", booth_id="booth-01",
        entry_time=datetime(2026, 1, 5, 5, 59, 58, 125_000),
        license_plate="ÄÖÜ-Ø001", state="NY", make="Ford", model="F-150", vehicle_type=1,
        weight_kg=1500.5, toll=Decimal("4.50"), tag="TAG01",
        source_topic="toll.entries", source_partition=0, source_offset=0,
        source_timestamp=datetime(2026, 1, 5, 6, 0),
    )  # fmt: skip
    assert decoded.of(TOLL_ENTRY).collect() == [expected]
    assert decoded.dead_letters.count() == 0
    assert decoded.of(TOLL_ENTRY).schema.fieldNames()[:11] == TOLL_ENTRY.spark_schema.fieldNames()


def test_exits_and_registrations_are_decoded_by_their_topic(spark: SparkSession) -> None:
    exit_value = (
        b'{"event_id":"x-1","booth_id":"b1","exit_time":"2026-01-05T06:10:00.000Z",'
        b'"license_plate":"P1"}'
    )
    registration = (
        b'{"event_id":"r-1","registration_id":"R1","license_plate":"P1","expired":true,'
        b'"registration_time":"2025-12-24T10:00:00.000Z"}'
    )
    decoded = decode_records(
        raw(spark, ("toll.exits", exit_value), ("vehicle.registrations", registration)),
        TOPICS,
        timedelta(hours=1),
        RAW_BYTES,
    )
    exits = decoded.of(TOLL_EXIT).select("event_id", "exit_time", "license_plate")
    assertDataFrameEqual(
        exits, [Row(event_id="x-1", exit_time=datetime(2026, 1, 5, 6, 10), license_plate="P1")]
    )
    registrations = decoded.of(VEHICLE_REGISTRATION).select("registration_id", "expired")
    assertDataFrameEqual(registrations, [Row(registration_id="R1", expired=True)])
    assert decoded.dead_letters.count() == 0


INVALID_JSON_CASES = [
    (b"not json", "value is not a JSON object"),
    (b'{"event_id": "e-1", "booth_id"', "value is not a JSON object"),
    (b"[1, 2]", "value is not a JSON object"),
    (b'"a string"', "value is not a JSON object"),
    (b"\xff\xfe" + b'{"event_id":"e"}', "value is not UTF-8"),
    (b"", "value is not a JSON object"),
]


def test_invalid_json(spark: SparkSession) -> None:
    values = [value for value, _ in INVALID_JSON_CASES]
    assert reasons_of(spark, *values) == [("invalid_json", d) for _, d in INVALID_JSON_CASES]


def test_missing_fields_absent_or_null(spark: SparkSession) -> None:
    assert reasons_of(spark, entry_json(booth_id=...), entry_json(toll=None, tag=None)) == [
        ("missing_field", "missing: booth_id"),
        ("missing_field", "missing: toll, tag"),
    ]


INVALID_VALUE_CASES: list[tuple[dict[str, Any], str]] = [
    ({"vehicle_type": "1"}, "vehicle_type"),
    ({"vehicle_type": 1.5}, "vehicle_type"),
    ({"vehicle_type": 2**40}, "vehicle_type"),
    ({"weight_kg": "heavy"}, "weight_kg"),
    ({"toll": 1.234}, "toll"),
    ({"toll": "4.50"}, "toll"),
    ({"booth_id": ""}, "booth_id"),
    ({"license_plate": "   "}, "license_plate"),
    ({"event_id": 17}, "event_id"),
    ({"entry_time": "yesterday"}, "entry_time"),
    ({"entry_time": "2026-01-05T05:59:58"}, "entry_time"),
    ({"entry_time": "2026-13-05T05:59:58.000Z"}, "entry_time"),
    ({"state": 7}, "state"),
    ({"make": {"name": "Ford"}}, "make"),
]


def test_invalid_values(spark: SparkSession) -> None:
    values = [entry_json(**changes) for changes, _ in INVALID_VALUE_CASES]
    assert reasons_of(spark, *values) == [
        ("invalid_value", f"invalid: {field}") for _, field in INVALID_VALUE_CASES
    ]


def test_invalid_registration_flag(spark: SparkSession) -> None:
    value = (
        b'{"event_id":"r-1","registration_id":"R1","license_plate":"P1","expired":"yes",'
        b'"registration_time":"2025-12-24T10:00:00.000Z"}'
    )
    assert reasons_of(spark, value, topic="vehicle.registrations") == [
        ("invalid_value", "invalid: expired")
    ]


def test_event_time_too_far_after_the_record_timestamp(spark: SparkSession) -> None:
    # sent at 06:00; one hour of skew allowed: 07:00:00.000 passes, 07:00:00.001 does not
    at_limit = entry_json(entry_time="2026-01-05T07:00:00.000Z")
    beyond = entry_json(entry_time="2026-01-05T07:00:00.001Z")
    assert reasons_of(spark, at_limit, beyond) == [
        ("future_event_time", "event time is more than 1:00:00 after the record timestamp")
    ]


def test_first_failing_rule_names_the_reason(spark: SparkSession) -> None:
    both = entry_json(booth_id=..., vehicle_type="x", entry_time="2026-01-06T00:00:00.000Z")
    assert reasons_of(spark, both) == [("missing_field", "missing: booth_id")]


def test_unknown_topic_is_a_dead_letter(spark: SparkSession) -> None:
    assert reasons_of(spark, entry_json(), topic="other.topic") == [
        ("invalid_value", "topic carries no known event type")
    ]


def test_nothing_is_lost_and_dead_letters_keep_their_coordinates(spark: SparkSession) -> None:
    values = [entry_json(), b"nope", entry_json(booth_id=""), entry_json(event_id="e-2")]
    decoded = decode_records(
        raw(spark, *[("toll.entries", v) for v in values]), TOPICS, timedelta(hours=1), RAW_BYTES
    )
    valid = sum(frame.count() for frame in decoded.events.values())
    assert valid == 2
    assert [(f.name, f.dataType) for f in decoded.dead_letters.schema.fields] == [
        (f.name, f.dataType) for f in DEAD_LETTER_SCHEMA.fields
    ]
    assertDataFrameEqual(
        decoded.dead_letters.select(
            "source_topic", "source_partition", "source_offset", "value", "reason"
        ),
        [
            Row(
                source_topic="toll.entries",
                source_partition=0,
                source_offset=1,
                value=bytearray(b"nope"),
                reason="invalid_json",
            ),
            Row(
                source_topic="toll.entries",
                source_partition=0,
                source_offset=2,
                value=bytearray(entry_json(booth_id="")),
                reason="invalid_value",
            ),
        ],
    )


@pytest.mark.parametrize("field", ["license_plate", "booth_id", "make", "tag"])
def test_a_control_character_in_a_text_is_invalid(spark: SparkSession, field: str) -> None:
    tab_free = entry_json(**{field: "A B-ü"})
    values = [entry_json(**{field: f"A{char}B"}) for char in ("\u0000", "\n", "\u001f", "\u007f")]
    assert reasons_of(spark, tab_free, *values) == [("invalid_value", f"invalid: {field}")] * 4


def test_a_number_beyond_a_doubles_range_is_invalid(spark: SparkSession) -> None:
    """JSON has no infinity; Spark reads 1e400 as one, which no view should sum."""
    largest = entry_json(weight_kg=1.0).replace(b'"weight_kg": 1.0', b'"weight_kg": 1.7e308')
    beyond = entry_json(weight_kg=1.0).replace(b'"weight_kg": 1.0', b'"weight_kg": -1e400')
    assert reasons_of(spark, largest, beyond) == [("invalid_value", "invalid: weight_kg")]


@pytest.mark.parametrize("field", ["license_plate", "booth_id", "event_id", "make", "tag"])
def test_text_longer_than_64_characters_is_invalid(spark: SparkSession, field: str) -> None:
    at_limit, beyond = entry_json(**{field: "Ä" * 64}), entry_json(**{field: "Ä" * 65})
    assert reasons_of(spark, at_limit, beyond) == [("invalid_value", f"invalid: {field}")]


def test_a_dead_letter_keeps_a_bounded_prefix_with_length_and_hash(spark: SparkSession) -> None:
    # just under a broker's default 1 MiB limit: a plate of a million characters
    huge = entry_json(license_plate="P" * 1_000_000)
    key = b"K" * 5000
    rows = [(key, huge, "toll.entries", 0, 0, SENT), (None, b"short", "toll.entries", 0, 1, SENT)]
    decoded = decode_records(
        spark.createDataFrame(rows, RAW_SCHEMA), TOPICS, timedelta(hours=1), RAW_BYTES
    )
    letters = decoded.dead_letters.orderBy("source_offset").collect()
    assert [(row.reason, row.detail) for row in letters] == [
        ("invalid_value", "invalid: license_plate"),
        ("invalid_json", "value is not a JSON object"),
    ]
    big, short = letters
    assert (bytes(big.value), big.value_length) == (huge[:4096], len(huge))
    assert big.value_sha256 == hashlib.sha256(huge).hexdigest()
    assert (bytes(big.key), big.key_length) == (b"K" * 4096, 5000)
    assert big.key_sha256 == hashlib.sha256(key).hexdigest()
    assert (bytes(short.value), short.value_length) == (b"short", 5)
    assert (short.key, short.key_length, short.key_sha256) == (None, None, None)


EXIT_SHAPE = "booth_id: STRING, event_id: STRING, exit_time: STRING, license_plate: STRING"


@pytest.mark.parametrize(
    ("shape", "conforms"),
    [
        (f"OBJECT<{EXIT_SHAPE}>", True),
        # other plain fields before, between and after the exit's own
        (
            "OBJECT<a: BIGINT, booth_id: STRING, event_id: STRING, exit_time: STRING, "
            "lane: DECIMAL(3,1), license_plate: STRING, z: BOOLEAN>",
            True,
        ),
        ("OBJECT<booth_id: STRING, event_id: STRING, exit_time: STRING>", False),
        ("OBJECT<booth_id: STRING, event_id: BIGINT, exit_time: STRING, license_plate: STRING>",
         False),
        ("OBJECT<booth_id: STRING, event_id: STRING, exit_time: VOID, license_plate: STRING>",
         False),
        # a name that only starts like the field's is not the field
        ("OBJECT<booth_id_old: STRING, event_id: STRING, exit_time: STRING, license_plate: STRING>",
         False),
        # nested values and quoted names are left to the field-by-field path
        (f"OBJECT<{EXIT_SHAPE}, meta: OBJECT<by: STRING>>", False),
        (f"OBJECT<`a b`: STRING, {EXIT_SHAPE}>", False),
        (f"ARRAY<OBJECT<{EXIT_SHAPE}>>", False),
    ],
)  # fmt: skip
def test_the_fast_path_pattern_of_exits(shape: str, conforms: bool) -> None:
    assert bool(re.fullmatch(_shape_pattern(TOLL_EXIT), shape)) is conforms


@pytest.mark.parametrize(
    ("toll", "vehicle_type", "conforms"),
    [
        ("DECIMAL(3,2)", "TINYINT", True),
        ("INT", "SMALLINT", True),
        ("DECIMAL(12,2)", "TINYINT", True),
        ("DECIMAL(4,3)", "TINYINT", False),  # three decimal places
        ("DOUBLE", "TINYINT", False),
        ("DECIMAL(3,2)", "DOUBLE", False),
        ("STRING", "TINYINT", False),
        # numbers whose type does not settle the rule: the field-by-field path reads them
        ("BIGINT", "TINYINT", False),
        ("DECIMAL(13,2)", "TINYINT", False),
        ("DECIMAL(11,0)", "TINYINT", False),
        ("DECIMAL(3,2)", "INT", False),
        ("DECIMAL(3,2)", "BIGINT", False),
    ],
)
def test_the_fast_path_pattern_of_entries_checks_number_types(
    toll: str, vehicle_type: str, conforms: bool
) -> None:
    shape = (
        "OBJECT<booth_id: STRING, entry_time: STRING, event_id: STRING, license_plate: STRING, "
        f"make: STRING, model: STRING, state: STRING, tag: STRING, toll: {toll}, "
        f"vehicle_type: {vehicle_type}, weight_kg: DECIMAL(5,1)>"
    )
    assert bool(re.fullmatch(_shape_pattern(TOLL_ENTRY), shape)) is conforms


def test_the_fast_path_decides_as_the_field_by_field_path(spark: SparkSession) -> None:
    exit_ = {"event_id": "x-1", "booth_id": "b", "exit_time": "2026-01-05T05:00:00Z",
             "license_plate": "P"}  # fmt: skip
    entries = [
        entry_json(),
        entry_json(toll=4, weight_kg=1500),
        # valid numbers whose JSON type leaves their rule to the field-by-field path
        entry_json(vehicle_type=100_000, weight_kg=1e300, toll=99_999_999.99),
        entry_json(vehicle_type=2**31 - 1, toll=2_000_000_000),
        # and invalid ones
        entry_json(vehicle_type=-(2**31)),
        entry_json(toll=12_345_678_901.5),
        entry_json(lane=3, note="plain"),  # other fields: ignored by both paths
        entry_json(meta={"by": "sensor"}, tags=[1, 2]),
        entry_json(**{"odd key, with: comma": True}),
        *[entry_json(**changes) for changes, _ in INVALID_VALUE_CASES],
        entry_json(booth_id=...),
        entry_json(toll=None, tag=None),
        entry_json(entry_time="2026-01-05T07:00:00.001Z"),
        *[value for value, _ in INVALID_JSON_CASES],
    ]
    exits = [json.dumps(exit_).encode(), json.dumps({**exit_, "exit_time": 5}).encode()]
    records = [("toll.entries", v) for v in entries] + [("toll.exits", v) for v in exits]

    def decided(fast_path: bool) -> tuple[list[Row], dict[str, list[Row]]]:
        classified = classify_records(raw(spark, *records), TOPICS, timedelta(hours=1), fast_path)
        return rows_of(split_classified(classified, TOPICS, RAW_BYTES))

    fast, slow = decided(True), decided(False)
    assert fast == slow
    # the valid ones, counted by hand: seven entries and the first exit
    assert [len(fast[1][t.name]) for t in (TOLL_ENTRY, TOLL_EXIT, VEHICLE_REGISTRATION)] == [
        7,
        1,
        0,
    ]


def test_a_reader_of_one_topic_decodes_by_its_event_type_alone(spark: SparkSession) -> None:
    entries = [
        entry_json(),
        entry_json(toll=4, weight_kg=1500),
        *[entry_json(**changes) for changes, _ in INVALID_VALUE_CASES],
        entry_json(booth_id=...),
        *[value for value, _ in INVALID_JSON_CASES],
    ]
    exit_ = {"event_id": "x-1", "booth_id": "b", "exit_time": "2026-01-05T05:00:00Z",
             "license_plate": "P"}  # fmt: skip
    records = raw(
        spark, *[("toll.entries", v) for v in entries], ("toll.exits", json.dumps(exit_).encode())
    )

    def decided(*event_types: EventType) -> tuple[list[Row], list[Row]]:
        decoded = decode_records(
            records, TOPICS, timedelta(hours=1), RAW_BYTES, event_types=event_types
        )
        dead = decoded.dead_letters.select("source_offset", "reason", "detail")
        valid = decoded.of(TOLL_ENTRY).orderBy("source_offset").collect()
        return dead.orderBy("source_offset").collect(), valid

    (dead_by_all, valid_by_all), (dead_by_entry, valid_by_entry) = (
        decided(TOLL_ENTRY, TOLL_EXIT, VEHICLE_REGISTRATION),
        decided(TOLL_ENTRY),
    )
    # the entries' records decide alike; the two valid ones are the first two
    assert valid_by_entry == valid_by_all
    assert [row.source_offset for row in valid_by_entry] == [0, 1]
    exit_offset = len(entries)
    assert [row for row in dead_by_entry if row.source_offset != exit_offset] == dead_by_all
    # the exit is valid by every rule, and a dead letter by the entries' alone
    assert (
        Row(
            source_offset=exit_offset,
            reason="invalid_value",
            detail="topic carries no known event type",
        )
        in dead_by_entry
    )


def test_decoding_each_topic_by_its_own_rules_gives_the_same_rows(spark: SparkSession) -> None:
    exit_ = {"event_id": "x-1", "booth_id": "b", "exit_time": "2026-01-05T05:00:00Z",
             "license_plate": "P"}  # fmt: skip
    registration = {"event_id": "r-1", "registration_id": "R1", "license_plate": "P",
                    "expired": True, "registration_time": "2025-12-24T10:00:00.000Z"}  # fmt: skip
    records = raw(
        spark,
        ("toll.entries", entry_json()),
        ("toll.entries", entry_json(booth_id="")),  # invalid_value
        ("toll.entries", json.dumps(exit_).encode()),  # an exit on the entries' topic
        ("toll.exits", json.dumps(exit_).encode()),
        ("toll.exits", b"nope"),  # invalid_json
        ("vehicle.registrations", json.dumps(registration).encode()),
        ("vehicle.registrations", json.dumps({**registration, "expired": "yes"}).encode()),
        ("toll.unknown", entry_json()),  # a topic of no event type
    )

    each_topic = rows_of(decode_each_topic(records, TOPICS, timedelta(hours=1), RAW_BYTES))
    assert each_topic == rows_of(decode_records(records, TOPICS, timedelta(hours=1), RAW_BYTES))
    # by hand: one valid record of each type; offsets 1, 2, 4, 6 and 7 are dead letters
    dead, events = each_topic
    assert [len(events[t.name]) for t in (TOLL_ENTRY, TOLL_EXIT, VEHICLE_REGISTRATION)] == [1, 1, 1]
    assert [(row.source_offset, row.reason) for row in dead] == [
        (1, "invalid_value"),
        (2, "missing_field"),
        (4, "invalid_json"),
        (6, "invalid_value"),
        (7, "invalid_value"),
    ]
