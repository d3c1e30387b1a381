from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal

import duckdb
from pyspark.sql import types as T

from shared.domain.events import (
    INSTANT_STRFTIME,
    TOLL_ENTRY,
    TOLL_EXIT,
    VEHICLE_REGISTRATION,
    BoothId,
    EventId,
    LicensePlate,
    Toll,
    TollEntry,
    TollExit,
    encode_event,
    format_instant,
)
from shared.domain.topics import Topics


def test_entry_schema_follows_the_design() -> None:
    assert [(f.name, f.dataType) for f in TOLL_ENTRY.spark_schema.fields] == [
        ("event_id", T.StringType()),
        ("booth_id", T.StringType()),
        ("entry_time", T.TimestampType()),
        ("license_plate", T.StringType()),
        ("state", T.StringType()),
        ("make", T.StringType()),
        ("model", T.StringType()),
        ("vehicle_type", T.IntegerType()),
        ("weight_kg", T.DoubleType()),
        ("toll", T.DecimalType(12, 2)),
        ("tag", T.StringType()),
    ]


def test_exit_and_registration_schemas() -> None:
    assert TOLL_EXIT.spark_schema.fieldNames() == [
        "event_id", "booth_id", "exit_time", "license_plate",
    ]  # fmt: skip
    assert [(f.name, f.dataType) for f in VEHICLE_REGISTRATION.spark_schema.fields] == [
        ("event_id", T.StringType()),
        ("registration_id", T.StringType()),
        ("license_plate", T.StringType()),
        ("expired", T.BooleanType()),
        ("registration_time", T.TimestampType()),
    ]


def test_topics_come_from_settings() -> None:
    topics = Topics(entries="a.entries")
    assert topics.of(TOLL_ENTRY) == "a.entries"
    assert topics.of(TOLL_EXIT) == "toll.exits"


def test_instants_are_utc_with_milliseconds() -> None:
    assert format_instant(datetime(2026, 11, 22, 8, 15, 0, 250_999, tzinfo=UTC)) == (
        "2026-11-22T08:15:00.250Z"
    )
    assert format_instant(datetime(2026, 11, 22, 8, 15, tzinfo=UTC)) == "2026-11-22T08:15:00.000Z"


def test_duckdb_formats_instants_as_format_instant_does() -> None:
    moments = [
        datetime(2026, 11, 22, 8, 15, 0, 250_999),
        datetime(2026, 11, 22, 8, 15),
        datetime(999, 1, 2, 3, 4, 5, 6_000),
    ]
    with duckdb.connect() as connection:
        formatted = [
            connection.execute("SELECT strftime(?::TIMESTAMP, ?)", [m, INSTANT_STRFTIME]).fetchone()
            for m in moments
        ]
    assert formatted == [
        ("2026-11-22T08:15:00.250Z",),
        ("2026-11-22T08:15:00.000Z",),
        ("0999-01-02T03:04:05.006Z",),
    ]
    assert [format_instant(m.replace(tzinfo=UTC)) for m in moments] == [f for (f,) in formatted]


def test_entry_encodes_to_compact_utf8_json() -> None:
    entry = TollEntry(
        event_id=EventId("e1"), booth_id=BoothId("booth-01"),
        entry_time=datetime(2026, 1, 5, 6, 0, 1, 500_000, tzinfo=UTC),
        license_plate=LicensePlate("ÄÖÜ-0001"), state="NY", make="Škoda", model="Octavia",
        vehicle_type=2, weight_kg=1450.5, toll=Toll(Decimal("5.75")), tag="",
    )  # fmt: skip
    value = encode_event(entry)
    assert (
        value
        == (
            '{"event_id":"e1","booth_id":"booth-01","entry_time":"2026-01-05T06:00:01.500Z",'
            '"license_plate":"ÄÖÜ-0001","state":"NY","make":"Škoda","model":"Octavia",'
            '"vehicle_type":2,"weight_kg":1450.5,"toll":5.75,"tag":""}'
        ).encode()
    )
    assert json.loads(value)["license_plate"] == "ÄÖÜ-0001"


def test_exit_encodes() -> None:
    exit_event = TollExit(
        EventId("x"), BoothId("b"), datetime(2026, 1, 1, tzinfo=UTC), LicensePlate("P")
    )
    assert encode_event(exit_event) == (
        b'{"event_id":"x","booth_id":"b","exit_time":"2026-01-01T00:00:00.000Z",'
        b'"license_plate":"P"}'
    )
