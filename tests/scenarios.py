"""The hand-written scenarios every layer's tests share: the events, and the rows they give.

Events are written as the records a producer sends (key, JSON value, record
timestamp), with their JSON typed out here rather than encoded by the code under
test. Every expected row was worked out by hand from the events above it.

``OneDay`` (2026-01-05; window 5 min, max_trip 1 h) is the cast of the view
tests and the speed layer's: entries, exits and registrations, each named, from
which a test picks what it needs. ``ThreeDays`` is the batch layer's: three
days of input, with late copies, and the batch store's rows for 2026-01-05.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any, ClassVar

from pyspark.sql import types as T

from shared.domain.events import EventType

Record = tuple[bytes, bytes, str]
"""A record as sent: key, value, record timestamp (ISO-8601 UTC)."""

RAW_SCHEMA = T.StructType(
    [
        T.StructField("key", T.BinaryType()),
        T.StructField("value", T.BinaryType()),
        T.StructField("topic", T.StringType()),
        T.StructField("partition", T.IntegerType()),
        T.StructField("offset", T.LongType()),
        T.StructField("timestamp", T.TimestampType()),
    ]
)
"""Raw Kafka records as Spark's Kafka source yields them."""


# --- records, written out ------------------------------------------------------------


def entry_value(event_id: str, booth: str, plate: str, entry_time: str, toll: str) -> bytes:
    entry = {
        "event_id": event_id, "booth_id": booth, "entry_time": entry_time,
        "license_plate": plate, "state": "NY", "make": "Ford", "model": "F-150",
        "vehicle_type": 1, "weight_kg": 1500.0, "toll": float(toll), "tag": "",
    }  # fmt: skip
    return json.dumps(entry).encode()


def exit_value(event_id: str, booth: str, plate: str, exit_time: str) -> bytes:
    exit_ = {
        "event_id": event_id,
        "booth_id": booth,
        "exit_time": exit_time,
        "license_plate": plate,
    }
    return json.dumps(exit_).encode()


def registration_value(
    event_id: str, registration_id: str, plate: str, expired: bool, at: str
) -> bytes:
    registration = {
        "event_id": event_id, "registration_id": registration_id, "license_plate": plate,
        "expired": expired, "registration_time": at,
    }  # fmt: skip
    return json.dumps(registration).encode()


def _sent(at: str, sent_at: str | None) -> str:
    """The record timestamp: as given, else 100 ms after the event time."""
    if sent_at is not None:
        return sent_at
    moment = datetime.fromisoformat(at.replace("Z", "+00:00")) + timedelta(milliseconds=100)
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def entry(
    event_id: str, booth: str, plate: str, at: str, toll: str, sent_at: str | None = None
) -> Record:
    return plate.encode(), entry_value(event_id, booth, plate, at, toll), _sent(at, sent_at)


def exit_(event_id: str, booth: str, plate: str, at: str, sent_at: str | None = None) -> Record:
    return plate.encode(), exit_value(event_id, booth, plate, at), _sent(at, sent_at)


def registration(
    event_id: str,
    registration_id: str,
    plate: str,
    expired: bool,
    at: str,
    sent_at: str | None = None,
) -> Record:
    value = registration_value(event_id, registration_id, plate, expired, at)
    return plate.encode(), value, _sent(at, sent_at)


def as_event(record: Record, event_type: EventType) -> tuple[Any, ...]:
    """A valid record's event as a row of its type's fields, in the type's order, read
    from its JSON by hand (times zone-less UTC, money as Decimal): what validation
    should make of it."""
    value = json.loads(record[1])
    row: list[Any] = []
    for field in event_type.fields:
        found = value[field.name]
        if field.name.endswith("_time"):
            found = datetime.fromisoformat(found.replace("Z", "+00:00")).replace(tzinfo=None)
        elif field.name == "toll":
            found = Decimal(str(found)).quantize(Decimal("0.01"))
        row.append(found)
    return tuple(row)


# --- OneDay: 2026-01-05 at booths b1 and b2 ---------------------------------------------


class OneDay:
    """Entries, exits and registrations of one day, each named once."""

    E1 = entry("e1", "b1", "P1", "2026-01-05T10:00:10.000Z", "2.50")
    E2 = entry("e2", "b1", "P2", "2026-01-05T10:03:00.000Z", "4.00")
    E3 = entry("e3", "b1", "P3", "2026-01-05T10:05:00.000Z", "5.75")  # first instant of a window
    E4 = entry("e4", "b2", "P1", "2026-01-05T10:01:00.000Z", "7.25")
    E5 = entry("e5", "b1", "P4", "2026-01-05T23:58:00.000Z", "2.50")  # exits after midnight

    X1 = exit_("x1", "b1", "P1", "2026-01-05T10:12:00.000Z")  # e1's earliest exit: 710 s
    X1B = exit_("x1b", "b1", "P1", "2026-01-05T10:20:00.000Z")  # a later exit of P1 at b1
    X2 = exit_("x2", "b1", "P2", "2026-01-05T11:04:00.000Z")  # 61 min after e2: beyond max_trip
    X3 = exit_("x3", "b1", "P3", "2026-01-05T10:04:59.000Z")  # before e3 entered: no match
    X4 = exit_("x4", "b2", "P1", "2026-01-05T10:31:00.000Z")  # e4's: 1800 s
    X5 = exit_("x5", "b1", "P4", "2026-01-06T00:10:00.000Z")  # e5's, the next day: 720 s

    R1 = registration("r1", "R1", "P1", False, "2025-12-20T09:00:00.000Z")
    R1B = registration("r1b", "R1b", "P1", True, "2026-01-05T10:00:30.000Z")  # after e1, before e4
    R2 = registration("r2", "R2", "P2", True, "2025-12-01T00:00:00.000Z")
    R4 = registration("r4", "R4", "P4", False, "2026-01-02T00:00:00.000Z")
    # P3 is never registered

    # the speed layer's first input: e2 sent twice (a copy 5 s later), and one record
    # per dead-letter reason
    ENTRIES: ClassVar[list[Record]] = [E1, E2, entry("e2", "b1", "P2", "2026-01-05T10:03:00.000Z", "4.00",
                             sent_at="2026-01-05T10:03:05.000Z"), E3, E4]  # fmt: skip
    MALFORMED: ClassVar[list[Record]] = [
        (b"P9", b"not json", "2026-01-05T10:06:00.000Z"),
        (b"P9", b'{"event_id": "m1", "booth_id": "b1"}', "2026-01-05T10:06:01.000Z"),
        entry("m2", "", "P9", "2026-01-05T10:06:00.000Z", "1.00", sent_at="2026-01-05T10:06:02.000Z"),
        entry("m3", "b1", "P9", "2026-01-05T12:00:00.000Z", "1.00", sent_at="2026-01-05T10:06:03.000Z"),
    ]  # fmt: skip

    # booth_stats of ENTRIES, as the speed store writes them: e2 counts once
    BOOTH_STATS: ClassVar[list[dict[str, Any]]] = [
        {"booth_id": "b1", "window_start": "2026-01-05T10:00:00.000Z",
         "window_end": "2026-01-05T10:05:00.000Z", "vehicle_count": 2,
         "total_toll": Decimal("6.50"), "first_entry_time": "2026-01-05T10:00:10.000Z",
         "last_entry_time": "2026-01-05T10:03:00.000Z"},
        {"booth_id": "b1", "window_start": "2026-01-05T10:05:00.000Z",
         "window_end": "2026-01-05T10:10:00.000Z", "vehicle_count": 1,
         "total_toll": Decimal("5.75"), "first_entry_time": "2026-01-05T10:05:00.000Z",
         "last_entry_time": "2026-01-05T10:05:00.000Z"},
        {"booth_id": "b2", "window_start": "2026-01-05T10:00:00.000Z",
         "window_end": "2026-01-05T10:05:00.000Z", "vehicle_count": 1,
         "total_toll": Decimal("7.25"), "first_entry_time": "2026-01-05T10:01:00.000Z",
         "last_entry_time": "2026-01-05T10:01:00.000Z"},
    ]  # fmt: skip


# --- Lookups: every speed view of one morning, 2026-01-05 --------------------------------


class Lookups:
    """OneDay's events with copies, in the order the speed layer is sent them, and what
    each speed view holds after one available-now run (window 5 min, max_trip 1 h,
    watermark 2 min; rolling windows of 15 min every 5 min, a visit gap of 30 min).

    - registrations: P1's R1 (valid) and R1b (expired, from 10:00:30: after e1,
      before e4); P2's R2 (expired; a copy too); P3 never registered.
    - entries: e1 b1 P1 10:00:10, e4 b2 P1 10:01, e2 b1 P2 10:03, e3 b1 P3 10:05,
      copies of e3 and e2, then e9 b9 P9 12:30, which moves the watermarks to 12:28
      (itself undecided).
    - exits: x1 b1 P1 10:12 (and a copy), x4 b2 P1 10:31, x2 b1 P2 11:04 (61 min
      after e2: beyond max_trip), x9 b9 P9 12:31.

    So: trips e1-x1 (710 s), e4-x4 (1800 s) and e9-x9 (60 s, provisional); e2 and
    e3 miss an exit; e4 and e2 met an expired registration; e3 misses one. Each
    entry is in three rolling windows (09:50, 09:55, 10:00 for 10:00-10:05). P1's
    two entries 50 s apart are one visit; P9's visit (to 13:00) is still open.
    """

    REGISTRATIONS: ClassVar[list[Record]] = [
        OneDay.R1,
        OneDay.R2,
        registration("r2", "R2", "P2", True, "2025-12-01T00:00:00.000Z", sent_at="2025-12-01T00:00:05.000Z"),
        OneDay.R1B,
    ]  # fmt: skip
    ENTRIES: ClassVar[list[Record]] = [
        OneDay.E1,
        OneDay.E4,
        OneDay.E2,
        OneDay.E3,
        entry("e3", "b1", "P3", "2026-01-05T10:05:00.000Z", "5.75", sent_at="2026-01-05T10:05:04.000Z"),
        entry("e2", "b1", "P2", "2026-01-05T10:03:00.000Z", "4.00", sent_at="2026-01-05T10:05:05.000Z"),
        entry("e9", "b9", "P9", "2026-01-05T12:30:00.000Z", "1.00", sent_at="2026-01-05T12:30:00.100Z"),
    ]  # fmt: skip
    EXITS: ClassVar[list[Record]] = [
        OneDay.X1,
        exit_("x1", "b1", "P1", "2026-01-05T10:12:00.000Z", sent_at="2026-01-05T10:12:03.000Z"),
        OneDay.X4,
        OneDay.X2,
        exit_("x9", "b9", "P9", "2026-01-05T12:31:00.000Z", sent_at="2026-01-05T12:31:00.100Z"),
    ]  # fmt: skip
    ROLLING_WINDOW = timedelta(minutes=15)
    ROLLING_SLIDE = timedelta(minutes=5)
    GAP = timedelta(minutes=30)

    BOOTH_STATS: ClassVar[list[tuple[str, str, int, str]]] = [
        ("b1", "2026-01-05T10:00:00", 2, "6.50"),
        ("b1", "2026-01-05T10:05:00", 1, "5.75"),
        ("b2", "2026-01-05T10:00:00", 1, "7.25"),
        ("b9", "2026-01-05T12:30:00", 1, "1.00"),
    ]
    """(booth, window start, vehicles, tolls)."""
    TRIPS: ClassVar[list[tuple[str, str, str, str, str]]] = [
        ("b1", "P1", "2026-01-05T10:00:10", "2026-01-05T10:12:00", "710.0"),
        ("b2", "P1", "2026-01-05T10:01:00", "2026-01-05T10:31:00", "1800.0"),
        ("b9", "P9", "2026-01-05T12:30:00", "2026-01-05T12:31:00", "60.0"),
    ]
    """(booth, plate, entry time, exit time, seconds)."""
    EXPIRED: ClassVar[list[tuple[str, str, str, str]]] = [
        ("b2", "P1", "2026-01-05T10:01:00", "R1b"),
        ("b1", "P2", "2026-01-05T10:03:00", "R2"),
    ]
    """(booth, plate, entry time, registration)."""
    DIAGNOSTICS: ClassVar[list[tuple[str, str, str, int]]] = [
        ("b1", "2026-01-05T10:00:00", "missing_exit", 1),
        ("b1", "2026-01-05T10:05:00", "missing_exit", 1),
        ("b1", "2026-01-05T10:05:00", "missing_registration", 1),
    ]
    """(booth, window start, reason, count)."""
    BOOTH_ROLLING: ClassVar[list[tuple[str, str, int, str]]] = [
        ("b1", "2026-01-05T09:50:00", 2, "6.50"),
        ("b1", "2026-01-05T09:55:00", 3, "12.25"),
        ("b1", "2026-01-05T10:00:00", 3, "12.25"),
        ("b1", "2026-01-05T10:05:00", 1, "5.75"),
        ("b2", "2026-01-05T09:50:00", 1, "7.25"),
        ("b2", "2026-01-05T09:55:00", 1, "7.25"),
        ("b2", "2026-01-05T10:00:00", 1, "7.25"),
        ("b9", "2026-01-05T12:20:00", 1, "1.00"),
        ("b9", "2026-01-05T12:25:00", 1, "1.00"),
        ("b9", "2026-01-05T12:30:00", 1, "1.00"),
    ]
    """(booth, window start, vehicles, tolls): each window is 15 minutes long."""
    VISITS: ClassVar[list[tuple[str, str, str, int, list[str], str]]] = [
        ("P1", "2026-01-05T10:00:10", "2026-01-05T10:31:00", 2, ["b1", "b2"], "9.75"),
        ("P2", "2026-01-05T10:03:00", "2026-01-05T10:33:00", 1, ["b1"], "4.00"),
        ("P3", "2026-01-05T10:05:00", "2026-01-05T10:35:00", 1, ["b1"], "5.75"),
    ]
    """(plate, start, end, entries, booths, tolls)."""


# --- ThreeDays: the batch layer's input, 2026-01-04 to 01-06 ------------------------------


def t(text: str) -> datetime:
    """A batch-store time: zone-less UTC."""
    return datetime.fromisoformat(text)


class ThreeDays:
    """Input, by hand (window 5 min, max_trip 1 h; the run date D = 2026-01-05):

    - registrations: P1 "R-1" valid on 01-02, P1 "R-2" expired on 01-05 12:00,
      P2 "R-3" expired on 01-03; P3 never registered.
    - 01-04: e1 b1 P1 10:00:10 (exit 10:20:10), e2 b1 P2 10:03 (exits 10:30 and
      10:40: the earliest counts), e3 b1 P3 23:50 (exit 00:20 the next day).
    - 01-05: e4 b2 P1 13:00 (no exit), and e1 sent again (a duplicate a day later).
    - copies of exits x1 and x3 and of registrations R-2 and R-3, sent later: they
      change nothing (the batch drops duplicates of entries only, which it counts).
    - 01-06: e6 b1 P2 08:00 (exit 08:05), after D.
    - dead letters: not JSON (01-04), a missing field and a blank booth (01-05), an
      event time hours after its record timestamp (01-06, after D).
    """

    D = date(2026, 1, 5)

    REGISTRATIONS: ClassVar[list[Record]] = [
        registration("r1", "R-1", "P1", False, "2026-01-02T09:00:00.000Z"),
        registration("r3", "R-3", "P2", True, "2026-01-03T08:00:00.000Z"),
        registration("r2", "R-2", "P1", True, "2026-01-05T12:00:00.000Z"),
        # copies, a day later: a registration's copy cannot change which one applies
        registration("r3", "R-3", "P2", True, "2026-01-03T08:00:00.000Z", sent_at="2026-01-04T08:00:00.000Z"),
        registration("r2", "R-2", "P1", True, "2026-01-05T12:00:00.000Z", sent_at="2026-01-06T12:00:00.000Z"),
    ]  # fmt: skip
    ENTRIES: ClassVar[list[Record]] = [
        entry("e1", "b1", "P1", "2026-01-04T10:00:10.000Z", "2.50"),
        entry("e2", "b1", "P2", "2026-01-04T10:03:00.000Z", "4.00"),
        entry("e3", "b1", "P3", "2026-01-04T23:50:00.000Z", "5.75"),
        entry("e4", "b2", "P1", "2026-01-05T13:00:00.000Z", "7.25"),
        entry("e1", "b1", "P1", "2026-01-04T10:00:10.000Z", "2.50", sent_at="2026-01-05T09:00:00.000Z"),
        entry("e6", "b1", "P2", "2026-01-06T08:00:00.000Z", "3.00"),
    ]  # fmt: skip
    EXITS: ClassVar[list[Record]] = [
        exit_("x1", "b1", "P1", "2026-01-04T10:20:10.000Z"),
        exit_("x2", "b1", "P2", "2026-01-04T10:30:00.000Z"),
        exit_("x2b", "b1", "P2", "2026-01-04T10:40:00.000Z"),
        exit_("x3", "b1", "P3", "2026-01-05T00:20:00.000Z"),
        exit_("x6", "b1", "P2", "2026-01-06T08:05:00.000Z"),
        # copies, hours later: an exit's copy cannot change a trip or make one
        exit_("x3", "b1", "P3", "2026-01-05T00:20:00.000Z", sent_at="2026-01-05T09:00:00.000Z"),
        exit_("x1", "b1", "P1", "2026-01-04T10:20:10.000Z", sent_at="2026-01-05T09:00:01.000Z"),
    ]  # fmt: skip
    MALFORMED: ClassVar[list[Record]] = [
        (b"P9", b"not json", "2026-01-04T11:00:00.000Z"),
        (b"P9", b'{"event_id": "m1", "booth_id": "b1"}', "2026-01-05T11:00:00.000Z"),
        entry("m2", "", "P9", "2026-01-05T11:00:00.000Z", "1.00", sent_at="2026-01-05T11:00:01.000Z"),
        entry("m3", "b1", "P9", "2026-01-06T15:00:00.000Z", "1.00", sent_at="2026-01-06T11:00:00.000Z"),
    ]  # fmt: skip

    # the batch store's rows for D (zone-less UTC times)
    BOOTH_STATS: ClassVar[list[dict[str, Any]]] = [
        {"booth_id": "b1", "window_start": t("2026-01-04T10:00"), "window_end": t("2026-01-04T10:05"),
         "vehicle_count": 2, "total_toll": Decimal("6.50"),
         "first_entry_time": t("2026-01-04T10:00:10"), "last_entry_time": t("2026-01-04T10:03")},
        {"booth_id": "b1", "window_start": t("2026-01-04T23:50"), "window_end": t("2026-01-04T23:55"),
         "vehicle_count": 1, "total_toll": Decimal("5.75"),
         "first_entry_time": t("2026-01-04T23:50"), "last_entry_time": t("2026-01-04T23:50")},
        {"booth_id": "b2", "window_start": t("2026-01-05T13:00"), "window_end": t("2026-01-05T13:05"),
         "vehicle_count": 1, "total_toll": Decimal("7.25"),
         "first_entry_time": t("2026-01-05T13:00"), "last_entry_time": t("2026-01-05T13:00")},
    ]  # fmt: skip
    VEHICLE_TRIPS: ClassVar[list[dict[str, Any]]] = [
        {"booth_id": "b1", "license_plate": "P1", "entry_time": t("2026-01-04T10:00:10"),
         "exit_time": t("2026-01-04T10:20:10"), "duration_seconds": 1200.0},
        {"booth_id": "b1", "license_plate": "P2", "entry_time": t("2026-01-04T10:03"),
         "exit_time": t("2026-01-04T10:30"), "duration_seconds": 1620.0},
        {"booth_id": "b1", "license_plate": "P3", "entry_time": t("2026-01-04T23:50"),
         "exit_time": t("2026-01-05T00:20"), "duration_seconds": 1800.0},
    ]  # fmt: skip
    EXPIRED_REGISTRATIONS: ClassVar[list[dict[str, Any]]] = [
        {"booth_id": "b1", "license_plate": "P2", "entry_time": t("2026-01-04T10:03"),
         "registration_id": "R-3"},
        {"booth_id": "b2", "license_plate": "P1", "entry_time": t("2026-01-05T13:00"),
         "registration_id": "R-2"},
    ]  # fmt: skip
    DIAGNOSTICS: ClassVar[list[dict[str, Any]]] = [
        {"booth_id": "b1", "window_start": t("2026-01-04T23:50"), "reason": "missing_registration", "count": 1},
        {"booth_id": "b2", "window_start": t("2026-01-05T13:00"), "reason": "missing_exit", "count": 1},
    ]  # fmt: skip
    ROLLING_STARTS: ClassVar[list[tuple[str, str, int, str]]] = [
        ("b1", "2026-01-04T09:05", 2, "6.50"),
        ("b1", "2026-01-04T22:55", 1, "5.75"),
        ("b2", "2026-01-05T12:05", 1, "7.25"),
    ]
    """booth_rolling with the default sizes (1 h every 5 min), by hand: e1 (10:00:10) and
    e2 (10:03) are both in the twelve windows from 09:05 to 10:00; e3 (23:50) in the
    twelve from 22:55, e4 (13:00) in the twelve from 12:05. (booth, first window
    start, vehicles, tolls) of each run of twelve windows, five minutes apart."""
    VISITS: ClassVar[list[tuple[str, datetime, datetime, int, list[str], Decimal]]] = [
        ("P1", t("2026-01-04T10:00:10"), t("2026-01-04T10:30:10"), 1, ["b1"], Decimal("2.50")),
        ("P1", t("2026-01-05T13:00"), t("2026-01-05T13:30"), 1, ["b2"], Decimal("7.25")),
        ("P2", t("2026-01-04T10:03"), t("2026-01-04T10:33"), 1, ["b1"], Decimal("4.00")),
        ("P3", t("2026-01-04T23:50"), t("2026-01-05T00:20"), 1, ["b1"], Decimal("5.75")),
    ]  # fmt: skip
    """vehicle_visits with the default gap (30 min): one entry each (e1's copy is dropped)."""


# --- Lookback: the registration lookback (1 day here), 2026-01-05 -------------------------


class Lookback:
    """Registrations just inside and just outside a lookback of one day.

    P1's expired registration is 1 ms too old for its entry: no alert, and the
    entry misses a registration. P2's is exactly one day old: it applies. P3's
    expired one is too old and a valid one is recent: no alert, registered.
    Every entry has its exit, so no entry misses one; e9 and x9 only move the
    speed layer's watermark past the morning (e9 is still undecided at the end).
    """

    LOOKBACK = timedelta(days=1)
    REGISTRATIONS: ClassVar[list[Record]] = [
        registration("o1", "R1", "P1", True, "2026-01-04T09:59:59.999Z"),
        registration("o2", "R2", "P2", True, "2026-01-04T10:03:00.000Z"),
        registration("o3", "R3-old", "P3", True, "2026-01-02T00:00:00.000Z"),
        registration("o4", "R3", "P3", False, "2026-01-05T09:00:00.000Z"),
        registration("o9", "R9", "P9", False, "2026-01-05T09:00:00.000Z"),
    ]
    ENTRIES: ClassVar[list[Record]] = [
        entry("e1", "b1", "P1", "2026-01-05T10:00:00.000Z", "1.00"),
        entry("e2", "b1", "P2", "2026-01-05T10:03:00.000Z", "1.00"),
        entry("e3", "b2", "P3", "2026-01-05T10:04:00.000Z", "1.00"),
        entry("e9", "b9", "P9", "2026-01-05T12:30:00.000Z", "1.00"),
    ]
    EXITS: ClassVar[list[Record]] = [
        exit_("x1", "b1", "P1", "2026-01-05T10:20:00.000Z"),
        exit_("x2", "b1", "P2", "2026-01-05T10:21:00.000Z"),
        exit_("x3", "b2", "P3", "2026-01-05T10:22:00.000Z"),
        exit_("x9", "b9", "P9", "2026-01-05T12:31:00.000Z"),
    ]
    ALERTS: ClassVar[list[tuple[str, str, str, str]]] = [
        ("b1", "P2", "2026-01-05T10:03:00", "R2"),
    ]
    """(booth, plate, entry time, registration): both layers' ``expired_registrations``."""
    MISSING_REGISTRATIONS: ClassVar[list[tuple[str, str, int]]] = [
        ("b1", "2026-01-05T10:00:00", 1),
    ]
    """(booth, window start, count): both layers' ``diagnostics`` (every row is one)."""


# --- Windows: hopping windows and sessions, 2026-01-05 to 06 -------------------------------


class Windows:
    """Entries for ``booth_rolling`` (15-min windows every 5 min here: each entry is in
    three) and ``vehicle_visits`` (gap 30 min), in the order the speed layer is sent
    them; every expected row worked out by hand.

    - w1, w2 (b1): overlapping hopping windows. w1 at 10:02 is in the windows of
      09:50, 09:55 and 10:00; w2 at 10:07 in those of 09:55, 10:00 and 10:05.
    - P1 (w1 at b1, w3 at b2 18 min later, w4 70 min after w3): two visits split by
      the gap, the first with its booths in entry order.
    - P3: w5 at 12:00, w6 at 12:31 (31 min: a gap), then w7 at 12:29:30, sent after
      w6 yet within the 2-min watermark: it fills the gap (29.5 and 1.5 min), so
      P3 has one visit of three entries.
    - P4: w8 at 23:50, w9 at 00:10 the next day: one visit across midnight, of the
      day it starts.
    - w11 (b5, P5, 00:02 on the 6th) shares b5's window of 23:50-00:05 with w8: a
      window across midnight, where the merge tests put the horizon.
    - w10 (b9, P9, 23:59 on the 6th) only moves the speed layer's watermark past
      every other visit's end (its own stays open).

    ``BEFORE_MIDNIGHT``: the entries of the 5th (w1-w8), whose midnight is the merge tests' H.
    """

    ROLLING_WINDOW = timedelta(minutes=15)
    ROLLING_SLIDE = timedelta(minutes=5)
    GAP = timedelta(minutes=30)
    ENTRIES: ClassVar[list[Record]] = [
        entry("w1", "b1", "P1", "2026-01-05T10:02:00.000Z", "2.00"),
        entry("w2", "b1", "P2", "2026-01-05T10:07:00.000Z", "3.00"),
        entry("w3", "b2", "P1", "2026-01-05T10:20:00.000Z", "1.50"),
        entry("w4", "b1", "P1", "2026-01-05T11:30:00.000Z", "4.00"),
        entry("w5", "b3", "P3", "2026-01-05T12:00:00.000Z", "1.00"),
        entry("w6", "b3", "P3", "2026-01-05T12:31:00.000Z", "1.00"),
        entry("w7", "b4", "P3", "2026-01-05T12:29:30.000Z", "1.00", "2026-01-05T12:31:05.000Z"),
        entry("w8", "b5", "P4", "2026-01-05T23:50:00.000Z", "2.50"),
        entry("w9", "b6", "P4", "2026-01-06T00:10:00.000Z", "2.50"),
        entry("w11", "b5", "P5", "2026-01-06T00:02:00.000Z", "1.00"),
        entry("w10", "b9", "P9", "2026-01-06T23:59:00.000Z", "1.00"),
    ]
    BOOTH_ROLLING: ClassVar[list[tuple[str, str, int, str]]] = [
        ("b1", "2026-01-05T09:50:00", 1, "2.00"),
        ("b1", "2026-01-05T09:55:00", 2, "5.00"),
        ("b1", "2026-01-05T10:00:00", 2, "5.00"),
        ("b1", "2026-01-05T10:05:00", 1, "3.00"),
        ("b1", "2026-01-05T11:20:00", 1, "4.00"),
        ("b1", "2026-01-05T11:25:00", 1, "4.00"),
        ("b1", "2026-01-05T11:30:00", 1, "4.00"),
        ("b2", "2026-01-05T10:10:00", 1, "1.50"),
        ("b2", "2026-01-05T10:15:00", 1, "1.50"),
        ("b2", "2026-01-05T10:20:00", 1, "1.50"),
        ("b3", "2026-01-05T11:50:00", 1, "1.00"),
        ("b3", "2026-01-05T11:55:00", 1, "1.00"),
        ("b3", "2026-01-05T12:00:00", 1, "1.00"),
        ("b3", "2026-01-05T12:20:00", 1, "1.00"),
        ("b3", "2026-01-05T12:25:00", 1, "1.00"),
        ("b3", "2026-01-05T12:30:00", 1, "1.00"),
        ("b4", "2026-01-05T12:15:00", 1, "1.00"),
        ("b4", "2026-01-05T12:20:00", 1, "1.00"),
        ("b4", "2026-01-05T12:25:00", 1, "1.00"),
        ("b5", "2026-01-05T23:40:00", 1, "2.50"),
        ("b5", "2026-01-05T23:45:00", 1, "2.50"),
        ("b5", "2026-01-05T23:50:00", 2, "3.50"),
        ("b5", "2026-01-05T23:55:00", 1, "1.00"),
        ("b5", "2026-01-06T00:00:00", 1, "1.00"),
        ("b6", "2026-01-06T00:00:00", 1, "2.50"),
        ("b6", "2026-01-06T00:05:00", 1, "2.50"),
        ("b6", "2026-01-06T00:10:00", 1, "2.50"),
        ("b9", "2026-01-06T23:45:00", 1, "1.00"),
        ("b9", "2026-01-06T23:50:00", 1, "1.00"),
        ("b9", "2026-01-06T23:55:00", 1, "1.00"),
    ]
    """(booth, window start, vehicles, tolls): each window is 15 minutes long."""
    VISITS: ClassVar[list[tuple[str, str, str, int, list[str], str]]] = [
        ("P1", "2026-01-05T10:02:00", "2026-01-05T10:50:00", 2, ["b1", "b2"], "3.50"),
        ("P1", "2026-01-05T11:30:00", "2026-01-05T12:00:00", 1, ["b1"], "4.00"),
        ("P2", "2026-01-05T10:07:00", "2026-01-05T10:37:00", 1, ["b1"], "3.00"),
        ("P3", "2026-01-05T12:00:00", "2026-01-05T13:01:00", 3, ["b3", "b4", "b3"], "3.00"),
        ("P4", "2026-01-05T23:50:00", "2026-01-06T00:40:00", 2, ["b5", "b6"], "5.00"),
        ("P5", "2026-01-06T00:02:00", "2026-01-06T00:32:00", 1, ["b5"], "1.00"),
        ("P9", "2026-01-06T23:59:00", "2026-01-07T00:29:00", 1, ["b9"], "1.00"),
    ]
    """(plate, start, end, entries, booths, tolls): the speed layer has all but P9's,
    whose end the watermark has not passed."""
    BEFORE_MIDNIGHT: ClassVar[list[Record]] = ENTRIES[:8]
    """w1-w8."""
