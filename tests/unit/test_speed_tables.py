"""The materialised speed store: latest value per key, never moved back by a replay."""

from __future__ import annotations

import json
from datetime import datetime
from decimal import Decimal
from typing import Any

import pytest

from shared.platform.speed_tables import BadSpeedRecordError, SpeedTables


def record(window: str, count: int, toll: str, version: int) -> tuple[bytes, bytes]:
    value: dict[str, Any] = {
        "booth_id": "b1", "window_start": window, "window_end": "2026-01-05T06:05:00.000Z",
        "vehicle_count": count, "total_toll": toll,
        "first_entry_time": "2026-01-05T06:00:01.000Z",
        "last_entry_time": "2026-01-05T06:04:00.000Z", "version": version,
    }  # fmt: skip
    return f"b1|{window}".encode(), json.dumps(value).encode()


def rows(tables: SpeedTables) -> list[tuple[Any, ...]]:
    cursor = tables.cursor()
    try:
        return cursor.execute(
            "SELECT window_start, vehicle_count, total_toll, version FROM booth_stats "
            "ORDER BY window_start"
        ).fetchall()
    finally:
        cursor.close()


def test_latest_batch_wins_and_an_older_replay_is_ignored() -> None:
    tables = SpeedTables()
    six, ten = "2026-01-05T06:00:00.000Z", "2026-01-05T10:00:00.000Z"
    assert tables.apply("booth_stats", [record(six, 3, "7.50", 2), record(ten, 1, "2.5", 2)]) == 2
    assert tables.apply("booth_stats", [record(six, 1, "2.50", 1)]) == 0  # a replay of batch 1
    # within one poll, the newest record of a key wins whatever the order
    tables.apply("booth_stats", [record(ten, 4, "10.00", 4), record(ten, 2, "5.00", 3)])
    assert rows(tables) == [
        (datetime(2026, 1, 5, 6), 3, Decimal("7.50"), 2),
        (datetime(2026, 1, 5, 10), 4, Decimal("10.00"), 4),
    ]
    # and so read record by record (a poll with one that is not a row)
    tables.apply(
        "booth_stats", [record(six, 9, "9.00", 5), (b"k", b"{"), record(six, 8, "8.00", 4)]
    )
    assert rows(tables)[0] == (datetime(2026, 1, 5, 6), 9, Decimal("9.00"), 5)


def test_an_equal_batch_replaces_and_a_newer_one_after_an_older_poll_wins() -> None:
    tables = SpeedTables()
    six = "2026-01-05T06:00:00.000Z"
    assert tables.apply("booth_stats", [record(six, 3, "7.50", 2)]) == 1
    assert tables.apply("booth_stats", [record(six, 5, "9.00", 2)]) == 1  # batch 2 replayed
    assert tables.apply("booth_stats", [record(six, 6, "9.50", 3)]) == 1
    assert rows(tables) == [(datetime(2026, 1, 5, 6), 6, Decimal("9.50"), 3)]


def registration(
    entry: str, recorded: str, registration_id: str, expired: bool, version: int
) -> tuple[bytes, bytes]:
    """An expired_registrations candidate of plate P1's entry at b1 on 2026-01-05."""
    value: dict[str, Any] = {
        "booth_id": "b1", "license_plate": "P1", "entry_time": f"2026-01-05T{entry}:00.000Z",
        "registration_id": registration_id, "registration_time": f"{recorded}T00:00:00.000Z",
        "registration_event_id": registration_id.lower(), "expired": expired,
        "version": version,
    }  # fmt: skip
    return f"{entry}|{registration_id}".encode(), json.dumps(value).encode()


def shown_alerts(tables: SpeedTables) -> list[tuple[Any, ...]]:
    cursor = tables.cursor()
    try:
        return cursor.execute(
            "SELECT entry_time, registration_id FROM expired_registrations WHERE expired "
            "ORDER BY entry_time"
        ).fetchall()
    finally:
        cursor.close()


def test_the_latest_registration_at_entry_decides_whatever_order_or_batch_it_comes_in() -> None:
    tables = SpeedTables()
    # 10:00: an expired registration raises the alert, a later valid one withdraws it
    tables.apply("expired_registrations", [registration("10:00", "2025-01-01", "R1", True, 5)])
    assert shown_alerts(tables) == [(datetime(2026, 1, 5, 10), "R1")]
    tables.apply("expired_registrations", [registration("10:00", "2025-06-01", "R2", False, 3)])
    assert shown_alerts(tables) == []
    # the withdrawn candidate again (a replay, a newer batch) does not bring the alert back
    tables.apply("expired_registrations", [registration("10:00", "2025-01-01", "R1", True, 9)])
    assert shown_alerts(tables) == []
    # 11:00: the two in one poll, the winner first; equal times: the greater id wins
    tables.apply("expired_registrations", [
        registration("11:00", "2025-06-01", "R4", True, 6),
        registration("11:00", "2025-06-01", "R3", False, 6),
    ])  # fmt: skip
    assert shown_alerts(tables) == [(datetime(2026, 1, 5, 11), "R4")]


def trip(exit_at: str, version: int) -> tuple[bytes, bytes]:
    value = {
        "booth_id": "b1", "license_plate": "P1", "entry_time": "2026-01-05T10:00:00.000Z",
        "exit_time": f"2026-01-05T{exit_at}:00.000Z", "duration_seconds": 60.0,
        "version": version,
    }  # fmt: skip
    return exit_at.encode(), json.dumps(value).encode()


def test_the_earliest_exit_ends_a_trip_whatever_order_or_batch_it_comes_in() -> None:
    tables = SpeedTables()
    tables.apply("vehicle_trips", [trip("10:30", 2)])
    tables.apply("vehicle_trips", [trip("10:20", 1), trip("10:40", 3)])
    tables.apply("vehicle_trips", [trip("10:25", 7)])
    cursor = tables.cursor()
    try:
        held = cursor.execute("SELECT exit_time, version FROM vehicle_trips").fetchall()
    finally:
        cursor.close()
    assert held == [(datetime(2026, 1, 5, 10, 20), 1)]


def test_prune_deletes_the_rows_before_the_bound_in_every_view() -> None:
    tables = SpeedTables()
    tables.apply("booth_stats", [
        record("2026-01-05T06:00:00.000Z", 3, "7.50", 1),
        record("2026-01-06T23:55:00.000Z", 1, "2.50", 1),
        record("2026-01-07T00:00:00.000Z", 2, "5.00", 1),  # at the bound: kept
    ])  # fmt: skip
    trip = {
        "booth_id": "b1", "license_plate": "P1", "entry_time": "2026-01-06T08:00:00.000Z",
        "exit_time": "2026-01-07T08:05:00.000Z", "duration_seconds": 300.0, "version": 1,
    }  # fmt: skip
    tables.apply("vehicle_trips", [(b"t1", json.dumps(trip).encode())])
    # a visit is pruned by its end: the one that began before the bound and ends after
    # it is still served
    visits = [
        {"license_plate": "P1", "session_start": start, "session_end": end, "entry_count": 1,
         "booths": ["b1"], "total_toll": 1.0, "version": 1}
        for start, end in (("2026-01-06T22:00:00.000Z", "2026-01-06T22:30:00.000Z"),
                           ("2026-01-06T23:50:00.000Z", "2026-01-07T00:20:00.000Z"))
    ]  # fmt: skip
    tables.apply(
        "vehicle_visits", [(b"v%d" % n, json.dumps(v).encode()) for n, v in enumerate(visits)]
    )
    deleted = tables.prune(datetime(2026, 1, 7))
    assert deleted == {
        "booth_stats": 2, "vehicle_trips": 1, "expired_registrations": 0, "diagnostics": 0,
        "booth_rolling": 0, "vehicle_visits": 1,
    }  # fmt: skip
    cursor = tables.cursor()
    try:
        kept = cursor.execute("SELECT session_start FROM vehicle_visits").fetchall()
    finally:
        cursor.close()
    assert kept == [(datetime(2026, 1, 6, 23, 50),)]
    assert rows(tables) == [(datetime(2026, 1, 7), 2, Decimal("5.00"), 1)]
    assert tables.prune(datetime(2026, 1, 7)) == dict.fromkeys(deleted, 0)


def with_field(name: str, value: Any) -> bytes:
    fields = json.loads(record("2026-01-05T07:00:00.000Z", 1, "1.00", 1)[1])
    return json.dumps({**fields, name: value}).encode()


def test_records_that_are_not_rows_are_skipped_with_a_reason_and_the_rest_applied() -> None:
    tables = SpeedTables()
    good = record("2026-01-05T06:00:00.000Z", 3, "7.50", 2)
    without_count = json.loads(good[1])
    del without_count["vehicle_count"]
    bad: list[tuple[bytes | None, bytes | None]] = [
        (b"k1", b"{not json"),
        (b"k2", None),  # a tombstone
        (b"k3", json.dumps(without_count).encode()),
        (b"k4", with_field("vehicle_count", "three")),
        (b"k5", with_field("vehicle_count", True)),
        (b"k6", with_field("vehicle_count", 2.5)),
        (b"k7", with_field("window_start", "yesterday")),
        (b"k8", with_field("total_toll", "NaN")),
        (b"k9", with_field("booth_id", None)),
        (b"k10", b"[1, 2]"),
        (None, good[1]),
        (b"k12", with_field("version", "7")),
        (b"k13", with_field("total_toll", 10**16)),  # DECIMAL(18,2) holds 16 integer digits
        (b"k14", with_field("vehicle_count", 2**63)),
    ]
    reasons: dict[int, str] = {}

    changed = tables.apply("booth_stats", [good, *bad], lambda n, why: reasons.update({n: why}))

    assert changed == 1 and rows(tables) == [(datetime(2026, 1, 5, 6), 3, Decimal("7.50"), 2)]
    largest = record("2026-01-05T08:00:00.000Z", 2**63 - 1, "9999999999999999.99", 3)
    assert tables.apply("booth_stats", [largest]) == 1  # the bounds themselves are rows
    assert tables.rejected == len(bad) == 14
    assert sorted(reasons) == list(range(1, 15))  # positions in the records given
    expected = {
        1: "Expecting property name", 2: "no value (a tombstone)", 3: "no vehicle_count",
        4: 'vehicle_count is "three", not a BIGINT', 5: "vehicle_count is true, not a BIGINT",
        6: "vehicle_count is 2.5, not a BIGINT", 7: 'window_start is "yesterday", not a TIMESTAMP',
        8: 'total_toll is "NaN", not a DECIMAL(18,2)', 9: "booth_id is null, not a VARCHAR",
        10: "the value is list, not a JSON object", 11: "no key",
        12: 'version is "7", not a BIGINT', 13: "total_toll is 10000000000000000, not a DECIMAL",
        14: "vehicle_count is 9223372036854775808, not a BIGINT",
    }  # fmt: skip
    for position, words in expected.items():
        assert words in reasons[position], (position, reasons[position])


def test_a_progress_record_that_is_not_a_report_is_refused() -> None:
    tables = SpeedTables()
    for raw in (b"{", b"[]", b'{"watermark": "2026-01-05T06:00:00.000Z"}', None,
                b'{"query": "speed.booth_stats", "watermark": "soon"}'):  # fmt: skip
        with pytest.raises(BadSpeedRecordError, match="not a progress report"):
            tables.note_progress(raw)
    assert tables.rejected == 5 and tables.watermark is None
    tables.note_progress(
        b'{"query": "speed.booth_stats", "watermark": "2026-01-05T06:00:00.000Z", '
        b'"view_settings": {"window": "5m", "max_trip": "1h"}}'
    )
    assert tables.watermark == datetime(2026, 1, 5, 6)


def test_progress_records_give_the_view_settings_the_speed_store_was_written_with() -> None:
    tables = SpeedTables()
    for bad in ('"10m"', '{"window": 10}', "[]"):
        raw = f'{{"query": "speed.booth_stats", "view_settings": {bad}}}'
        with pytest.raises(BadSpeedRecordError, match="not a progress report"):
            tables.note_progress(raw.encode())
    assert tables.view_settings == []
    five, ten = '{"window": "5m", "max_trip": "1h"}', '{"window": "10m", "max_trip": "1h"}'
    for query, made_with in (("speed.booth_stats", five), ("speed.vehicle_trips", five),
                             ("speed.booth_stats", ten)):  # fmt: skip
        tables.note_progress(f'{{"query": "{query}", "view_settings": {made_with}}}'.encode())
    # each query's latest counts: two queries, two settings
    assert tables.view_settings == [
        {"window": "10m", "max_trip": "1h"},
        {"window": "5m", "max_trip": "1h"},
    ]
    tables.forget_progress()  # speed.progress created again
    assert tables.view_settings == []


def test_progress_records_give_each_querys_state_operators() -> None:
    tables = SpeedTables()
    head = '{"query": "speed.lookups", "view_settings": {"window": "5m"}'
    with pytest.raises(BadSpeedRecordError, match="not a progress report"):
        tables.note_progress(f'{head}, "state_operators": [{{"rows": 3}}]}}'.encode())
    assert tables.state_by_query == {}
    tables.note_progress(f"{head}}}".encode())  # a report of an earlier release: none
    assert tables.state_by_query == {"speed.lookups": []}
    join = '{"operator": "symmetricHashJoin#1", "rows": 3}'
    tables.note_progress(f'{head}, "state_operators": [{join}]}}'.encode())
    assert tables.state_by_query == {
        "speed.lookups": [{"operator": "symmetricHashJoin#1", "rows": 3}]
    }


def test_a_poll_is_read_by_the_same_rules_in_one_pass_or_record_by_record() -> None:
    """Records the one-pass read would read otherwise (leniently, or not at all) go the
    per-record way: each poll below holds one, beside a plain row of another window."""
    five, seven = datetime(2026, 1, 5, 5), datetime(2026, 1, 5, 7)
    plain = record("2026-01-05T05:00:00.000Z", 9, "9.00", 1)
    pretty = json.dumps(json.loads(record("2026-01-05T07:00:00.000Z", 2, "2.00", 1)[1]), indent=2)
    cases: list[tuple[bytes, tuple[datetime, Decimal] | str]] = [
        # accepted as the per-record rules read them
        (with_field("window_start", "2026-01-05T08:00:00+01:00"), (seven, Decimal("1.00"))),
        (with_field("total_toll", 2.555), (seven, Decimal("2.56"))),
        (with_field("other", {"nested": [1]}), (seven, Decimal("1.00"))),
        (pretty.encode(), (seven, Decimal("2.00"))),
        # refused, though a lenient reader would take them
        (with_field("window_start", "2026-01-05"), "not a TIMESTAMP"),
        (with_field("window_start", "2026-01-05T07:00:00"), "not a TIMESTAMP"),
        (with_field("vehicle_count", -(2**63)), "not a BIGINT"),
        (b"{}\n{}", "Extra data"),
    ]
    for value, outcome in cases:
        tables = SpeedTables()
        reasons: dict[int, str] = {}
        tables.apply("booth_stats", [plain, (b"k", value)], reasons.__setitem__)
        cursor = tables.cursor()
        got = cursor.execute(
            "SELECT window_start, total_toll FROM booth_stats ORDER BY window_start"
        ).fetchall()
        cursor.close()
        tables.close()
        if isinstance(outcome, str):
            assert list(reasons) == [1] and outcome in reasons[1], (value, reasons)
            assert got == [(five, Decimal("9.00"))], value
        else:
            assert reasons == {}, (value, reasons)
            assert got == [(five, Decimal("9.00")), outcome], value
