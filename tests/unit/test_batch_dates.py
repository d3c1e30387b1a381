"""Which dates a batch run recomputes (pure: no Spark, no files)."""

from __future__ import annotations

from datetime import date, timedelta

from batch_layer.recompute import DEAD_LETTERS, Inventory, dates_to_recompute
from shared.domain.events import TOLL_ENTRY, TOLL_EXIT, VEHICLE_REGISTRATION


def d(day: int) -> date:
    return date(2026, 1, day)


def inventory(**parts: set[tuple[date, int]]) -> Inventory:
    names = {
        "entries": TOLL_ENTRY.name, "exits": TOLL_EXIT.name,
        "registrations": VEHICLE_REGISTRATION.name, "dead": DEAD_LETTERS,
    }  # fmt: skip
    return Inventory({names[key]: frozenset(found) for key, found in parts.items()})


def choose(
    found: Inventory,
    run_date: date,
    horizon: date | None,
    batch: int | None,
    lookback: int = 0,
    views_changed: bool = False,
    registration_lookback: timedelta = timedelta(days=400),
    rolling_window: timedelta = timedelta(0),
) -> list[date]:
    """The dates chosen; no hopping window reaches back a day unless ``rolling_window``
    says so."""
    return dates_to_recompute(
        run_date=run_date, inventory=found, published_horizon=horizon,
        published_ingest_batch=batch, lookback_days=lookback,
        # vehicle_trips' and expired_registrations' reaches, written out
        reaches={"toll_exit": (timedelta(0), timedelta(hours=1)),
                 "vehicle_registration": (-registration_lookback, timedelta(0))},
        rows_start_before=rolling_window,
        views_changed=views_changed,
    )  # fmt: skip


def test_first_run_takes_every_date_up_to_the_run_date() -> None:
    found = inventory(entries={(d(1), 0), (d(2), 0), (d(3), 0)}, registrations={(d(1), 0)})
    assert choose(found, d(2), None, None) == [d(1), d(2)]


def test_the_day_before_the_first_entries_has_rows_of_the_hopping_windows_that_hold_them() -> None:
    # an entry at 00:10 on day 1 is in the hour-long windows from 23:15 on day 0
    found = inventory(entries={(d(1), 0), (d(2), 0)}, exits={(d(1), 0)})
    hour = timedelta(hours=1)
    assert choose(found, d(2), None, None, rolling_window=hour) == [date(2025, 12, 31), d(1), d(2)]
    two_days = timedelta(hours=36)  # windows that start two days before an entry
    assert choose(found, d(1), None, None, rolling_window=two_days) == [
        date(2025, 12, 30), date(2025, 12, 31), d(1),
    ]  # fmt: skip


def test_dates_from_the_published_horizon_on_are_new() -> None:
    found = inventory(entries={(d(1), 0), (d(2), 0), (d(3), 0), (d(4), 1)})
    # version published for day 2 (horizon day 3) after ingest batch 1
    assert choose(found, d(4), d(3), 1) == [d(3), d(4)]


def test_an_entry_ingested_late_recomputes_its_date_and_the_days_either_side() -> None:
    # a hopping window or a visit of day 2 may hold it; it may join one of day 4 to its own
    found = inventory(entries={(d(n), 0) for n in range(1, 6)} | {(d(3), 2)})
    assert choose(found, d(5), d(6), 1) == [d(2), d(3), d(4)]


def test_a_late_exit_recomputes_its_date_and_the_day_before() -> None:
    found = inventory(entries={(d(1), 0), (d(2), 0), (d(3), 0)}, exits={(d(3), 2)})
    assert choose(found, d(3), d(4), 1) == [d(2), d(3)]


def test_a_late_registration_recomputes_every_later_date_up_to_the_run_date() -> None:
    found = inventory(entries={(d(n), 0) for n in range(1, 7)}, registrations={(d(2), 2)})
    assert choose(found, d(5), d(6), 1) == [d(2), d(3), d(4), d(5)]


def test_a_late_registration_recomputes_the_dates_its_lookback_reaches() -> None:
    found = inventory(entries={(d(n), 0) for n in range(1, 7)}, registrations={(d(2), 2)})
    # recorded on day 2, it applies to entries up to 36 h later: days 2 to 4
    assert choose(found, d(5), d(6), 1, registration_lookback=timedelta(hours=36)) == [
        d(2), d(3), d(4),
    ]  # fmt: skip


def test_a_late_dead_letter_recomputes_its_date() -> None:
    found = inventory(entries={(d(1), 0), (d(2), 0)}, dead={(d(1), 3)})
    assert choose(found, d(2), d(3), 2) == [d(1)]


def test_lookback_dates_with_data_are_always_recomputed() -> None:
    found = inventory(entries={(d(1), 0), (d(3), 0), (d(4), 0)})
    assert choose(found, d(4), d(5), 0, lookback=3) == [d(3), d(4)]  # d(2) has no data


def test_a_lookback_longer_than_the_calendar_recomputes_every_date_up_to_the_run_date() -> None:
    """The way to rebuild every view after a rule changed (was an OverflowError)."""
    found = inventory(entries={(d(1), 0), (d(3), 0), (d(4), 0), (d(9), 0)})
    for lookback in (4, 10**9):  # 4 days ending on the 4th reach back to the 1st
        assert choose(found, d(4), d(5), 0, lookback=lookback) == [d(1), d(3), d(4)]


def test_dates_after_the_run_date_wait_for_a_later_run() -> None:
    found = inventory(entries={(d(1), 0), (d(2), 5), (d(3), 5)}, registrations={(d(2), 5)})
    # day 1 for day 2's new entries (a visit or window of day 1 may hold them); not day 3
    assert choose(found, d(2), d(2), 0) == [d(1), d(2)]


def test_nothing_new_and_no_lookback_recomputes_nothing() -> None:
    found = inventory(entries={(d(1), 0), (d(2), 0)})
    assert choose(found, d(2), d(3), 0) == []


def test_changed_view_settings_recompute_every_date_with_data_the_version_will_hold() -> None:
    found = inventory(entries={(d(1), 0), (d(3), 0), (d(5), 0), (d(8), 0)}, dead={(d(2), 0)})
    # nothing new since batch 0, no lookback: only the changed settings ask for dates
    assert choose(found, d(5), d(6), 0) == []
    assert choose(found, d(5), d(6), 0, views_changed=True) == [d(1), d(2), d(3), d(5)]
    # a run for an older date still replaces every date the published version holds
    assert choose(found, d(3), d(6), 0, views_changed=True) == [d(1), d(2), d(3), d(5)]
