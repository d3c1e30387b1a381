"""The serving layer's merge rule (pure functions, hand-written rows)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from shared.domain.merge import (
    Source,
    best_candidates,
    bucket_start,
    final_cut,
    merge_at_horizon,
    roll_up,
    sources_for,
)
from shared.domain.views.booth_rolling import SPEC as BOOTH_ROLLING
from shared.domain.views.booth_stats import SPEC as BOOTH_STATS
from shared.domain.views.diagnostics import SPEC as DIAGNOSTICS
from shared.domain.views.expired_registrations import SPEC as EXPIRED_REGISTRATIONS
from shared.domain.views.spec import Horizon
from shared.domain.views.vehicle_trips import SPEC as VEHICLE_TRIPS
from shared.domain.views.vehicle_visits import SPEC as VEHICLE_VISITS


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def stats(booth: str, start: str, count: int, toll: str) -> dict[str, Any]:
    window_start = at(start)
    return {
        "booth_id": booth, "window_start": window_start,
        "window_end": window_start + timedelta(minutes=5), "vehicle_count": count,
        "total_toll": Decimal(toll), "first_entry_time": window_start + timedelta(seconds=10),
        "last_entry_time": window_start + timedelta(seconds=200),
    }  # fmt: skip


BATCH = [stats("b1", "2026-01-05T23:50", 3, "7.50"), stats("b1", "2026-01-05T23:55", 1, "2.00")]
SPEED = [
    stats("b1", "2026-01-05T23:55", 9, "99.00"),  # below the horizon: the batch row wins
    stats("b1", "2026-01-06T00:00", 2, "5.00"),
    stats("b1", "2026-01-06T00:05", 4, "8.00"),
]
H = at("2026-01-06T00:00")


def test_batch_below_the_horizon_speed_from_it() -> None:
    merged = merge_at_horizon(BOOTH_STATS, BATCH, SPEED, H)
    assert [(r["window_start"], r["vehicle_count"], r["source"]) for r in merged] == [
        (at("2026-01-05T23:50"), 3, "batch"),
        (at("2026-01-05T23:55"), 1, "batch"),
        (at("2026-01-06T00:00"), 2, "speed"),
        (at("2026-01-06T00:05"), 4, "speed"),
    ]


def test_wire_strings_merge_as_their_instants() -> None:
    """The serving layer reads instants as ISO-8601 strings; the rule must pick the same rows."""

    def wire(row: dict[str, Any]) -> dict[str, Any]:
        return {**row, "window_start": row["window_start"].strftime("%Y-%m-%dT%H:%M:%S.000Z")}

    merged = merge_at_horizon(
        BOOTH_STATS, [wire(r) for r in BATCH], [wire(r) for r in SPEED],
        "2026-01-06T00:00:00.000Z",
    )  # fmt: skip
    assert [(r["window_start"], r["vehicle_count"], r["source"]) for r in merged] == [
        ("2026-01-05T23:50:00.000Z", 3, "batch"),
        ("2026-01-05T23:55:00.000Z", 1, "batch"),
        ("2026-01-06T00:00:00.000Z", 2, "speed"),
        ("2026-01-06T00:05:00.000Z", 4, "speed"),
    ]


def test_batch_rows_at_or_after_the_horizon_are_ignored() -> None:
    late_batch = [stats("b1", "2026-01-06T00:00", 50, "1.00")]
    merged = merge_at_horizon(BOOTH_STATS, late_batch, [], H)
    assert merged == []


def test_without_a_batch_version_everything_comes_from_the_speed_layer() -> None:
    merged = merge_at_horizon(BOOTH_STATS, [], SPEED, None)
    assert [r["source"] for r in merged] == ["speed", "speed", "speed"]
    assert [r["vehicle_count"] for r in merged] == [9, 2, 4]


def test_an_hour_bucket_straddling_the_horizon_is_mixed() -> None:
    horizon = at("2026-01-05T23:55")  # a horizon inside the 23:00 bucket
    merged = merge_at_horizon(BOOTH_STATS, BATCH, SPEED, horizon)
    hours = roll_up(BOOTH_STATS, merged, timedelta(hours=1))
    assert [(r["window_start"], r["window_end"], r["vehicle_count"], r["total_toll"], r["source"]) for r in hours] == [
        (at("2026-01-05T23:00"), at("2026-01-06T00:00"), 3 + 9, Decimal("106.50"), "mixed"),
        (at("2026-01-06T00:00"), at("2026-01-06T01:00"), 2 + 4, Decimal("13.00"), "speed"),
    ]  # fmt: skip
    assert hours[0]["first_entry_time"] == at("2026-01-05T23:50:10")
    assert hours[1]["last_entry_time"] == at("2026-01-06T00:08:20")


def test_a_day_bucket_of_one_source_keeps_it() -> None:
    merged = merge_at_horizon(BOOTH_STATS, BATCH, SPEED, H)
    days = roll_up(BOOTH_STATS, merged, timedelta(days=1))
    assert [(r["window_start"], r["vehicle_count"], r["source"]) for r in days] == [
        (at("2026-01-05T00:00"), 4, "batch"),
        (at("2026-01-06T00:00"), 6, "speed"),
    ]


def test_a_horizon_that_moves_between_two_requests() -> None:
    # the batch layer has caught up with 00:00-00:05 when the horizon moves to 00:05
    batch_then = [*BATCH, stats("b1", "2026-01-06T00:00", 2, "5.00")]
    before = merge_at_horizon(BOOTH_STATS, BATCH, SPEED, H)
    after = merge_at_horizon(BOOTH_STATS, batch_then, SPEED, at("2026-01-06T00:05"))
    assert [(r["window_start"], r["source"]) for r in before] == [
        (at("2026-01-05T23:50"), "batch"), (at("2026-01-05T23:55"), "batch"),
        (at("2026-01-06T00:00"), "speed"), (at("2026-01-06T00:05"), "speed"),
    ]  # fmt: skip
    assert [(r["window_start"], r["source"]) for r in after] == [
        (at("2026-01-05T23:50"), "batch"), (at("2026-01-05T23:55"), "batch"),
        (at("2026-01-06T00:00"), "batch"), (at("2026-01-06T00:05"), "speed"),
    ]  # fmt: skip
    # no window is lost or counted twice across the move
    assert sum(r["vehicle_count"] for r in before) == sum(r["vehicle_count"] for r in after) == 10


def test_buckets_align_to_the_epoch_in_utc() -> None:
    assert bucket_start(at("2026-01-05T23:57:12"), timedelta(minutes=5)) == at("2026-01-05T23:55")
    assert bucket_start(at("2026-01-05T23:57:12"), timedelta(days=1)) == at("2026-01-05T00:00")
    naive = datetime(2026, 1, 5, 13, 7)
    assert bucket_start(naive, timedelta(hours=1)) == datetime(2026, 1, 5, 13, 0)


def test_the_stores_a_range_needs() -> None:
    day, next_day = at("2026-01-05T00:00"), at("2026-01-06T00:00")
    assert sources_for(day, next_day, H) == (Source.BATCH,)  # ends at the horizon
    assert sources_for(next_day, at("2026-01-07T00:00"), H) == (Source.SPEED,)  # starts at it
    assert sources_for(at("2026-01-05T12:00"), at("2026-01-06T12:00"), H) == (
        Source.BATCH, Source.SPEED,
    )  # fmt: skip
    assert sources_for(day, next_day, None) == (Source.SPEED,)  # no batch version yet
    assert sources_for(day, day, H) == ()  # an empty range needs no store
    assert sources_for(H, H, None) == ()


def test_a_speed_row_is_final_once_the_watermark_passes_its_views_rule() -> None:
    durations = {"window": timedelta(minutes=5), "max_trip": timedelta(hours=1)}
    w = at("2026-01-06T02:00")
    assert final_cut(BOOTH_STATS, w, durations) == w  # window_end <= W
    assert final_cut(VEHICLE_TRIPS, w, durations) == at("2026-01-06T01:00")  # entry + max_trip
    assert final_cut(EXPIRED_REGISTRATIONS, w, durations) == w  # entry_time <= W
    assert final_cut(DIAGNOSTICS, w, durations) == at("2026-01-06T01:55")  # start + window
    assert final_cut(BOOTH_STATS, None, durations) is None
    rows = merge_at_horizon(BOOTH_STATS, BATCH, SPEED, H, final_before=at("2026-01-06T00:05"))
    assert [(row["window_start"], row["final"], row["source"]) for row in rows] == [
        (at("2026-01-05T23:50"), True, "batch"), (at("2026-01-05T23:55"), True, "batch"),
        (at("2026-01-06T00:00"), True, "speed"),  # ends at 00:05
        (at("2026-01-06T00:05"), False, "speed"),
    ]  # fmt: skip
    hour = roll_up(BOOTH_STATS, rows, timedelta(hours=1))
    assert [(row["window_start"], row["final"]) for row in hour] == [
        (at("2026-01-05T23:00"), True), (at("2026-01-06T00:00"), False),
    ]  # fmt: skip


def candidate(entry: str, recorded: str, registration_id: str, expired: bool) -> dict[str, Any]:
    return {
        "booth_id": "b1", "license_plate": "P1", "entry_time": at(entry),
        "registration_time": at(recorded), "registration_id": registration_id,
        "registration_event_id": registration_id.lower(), "expired": expired,
    }  # fmt: skip


def test_the_best_candidate_per_view_key_is_the_row_if_it_is_shown() -> None:
    alerts = best_candidates(EXPIRED_REGISTRATIONS, [
        candidate("2026-01-05T10:00", "2025-01-01T00:00", "R1", True),
        candidate("2026-01-05T10:00", "2025-06-01T00:00", "R2", False),  # later, valid: no alert
        candidate("2026-01-05T11:00", "2025-06-01T00:00", "R3", False),
        candidate("2026-01-05T11:00", "2025-06-01T00:00", "R4", True),  # same time, greater id
    ])  # fmt: skip
    assert alerts == [{
        "booth_id": "b1", "license_plate": "P1", "entry_time": at("2026-01-05T11:00"),
        "registration_id": "R4",
    }]  # fmt: skip
    trip = {"booth_id": "b1", "license_plate": "P1", "entry_time": at("2026-01-05T10:00")}
    trips = best_candidates(VEHICLE_TRIPS, [
        {**trip, "exit_time": at("2026-01-05T10:30"), "duration_seconds": 1800.0},
        {**trip, "exit_time": at("2026-01-05T10:20"), "duration_seconds": 1200.0},
    ])  # fmt: skip
    assert trips == [{**trip, "exit_time": at("2026-01-05T10:20"), "duration_seconds": 1200.0}]


def rolling(start: str, count: int) -> dict[str, Any]:
    window_start = at(start)
    return {
        "booth_id": "b1", "window_start": window_start,
        "window_end": window_start + timedelta(hours=1), "vehicle_count": count,
        "total_toll": Decimal(count),
    }  # fmt: skip


def test_a_hopping_window_that_straddles_the_horizon_is_the_speed_stores_whole() -> None:
    # H at midnight; 1-h windows every 5 min. The batch layer saw only the entries
    # before H: its 23:30 window (ending 00:30) is a part, 2 of the 5 entries
    batch = [rolling("2026-01-05T22:55", 4), rolling("2026-01-05T23:00", 3),
             rolling("2026-01-05T23:30", 2)]  # fmt: skip
    speed = [rolling("2026-01-05T23:00", 9), rolling("2026-01-05T23:30", 5),
             rolling("2026-01-06T00:00", 3)]  # fmt: skip

    merged = merge_at_horizon(BOOTH_ROLLING, batch, speed, H)

    assert [(r["window_start"], r["vehicle_count"], r["source"]) for r in merged] == [
        (at("2026-01-05T22:55"), 4, "batch"),  # ends 23:55, before H
        (at("2026-01-05T23:00"), 3, "batch"),  # ends at H: the batch layer saw it whole
        (at("2026-01-05T23:30"), 5, "speed"),  # straddles H
        (at("2026-01-06T00:00"), 3, "speed"),
    ]


def visit(start: str, end: str, count: int) -> dict[str, Any]:
    return {
        "license_plate": "P1", "session_start": at(start), "session_end": at(end),
        "entry_count": count, "booths": ["b1"] * count, "total_toll": Decimal(count),
    }  # fmt: skip


def test_a_session_is_the_batch_stores_only_if_it_ends_by_the_horizon() -> None:
    batch = [
        visit("2026-01-05T21:00", "2026-01-05T21:40", 2),
        visit("2026-01-05T23:10", "2026-01-05T23:50", 1),  # over: an entry after H is > gap away
        visit("2026-01-05T23:20", "2026-01-06T00:10", 2),  # may go on after H
    ]
    speed = [
        visit("2026-01-05T21:00", "2026-01-05T21:40", 7),  # ends before H: the batch row's
        visit("2026-01-05T23:20", "2026-01-06T00:50", 4),  # the same session, gone on past H
    ]

    merged = merge_at_horizon(VEHICLE_VISITS, batch, speed, H)

    assert [(r["session_start"], r["entry_count"], r["source"]) for r in merged] == [
        (at("2026-01-05T21:00"), 2, "batch"),
        (at("2026-01-05T23:10"), 1, "batch"),
        (at("2026-01-05T23:20"), 4, "speed"),
    ]


def test_rows_that_span_time_need_the_speed_store_below_the_horizon_too() -> None:
    before = (at("2026-01-05T22:00"), at("2026-01-05T23:00"))
    assert sources_for(*before, H, Horizon.END_AT_OR_BEFORE) == (Source.BATCH, Source.SPEED)
    assert sources_for(*before, H) == (Source.BATCH,)
    after = (at("2026-01-06T01:00"), at("2026-01-06T02:00"))
    assert sources_for(*after, H, Horizon.END_AT_OR_BEFORE) == (Source.SPEED,)
