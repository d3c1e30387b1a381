"""The registration rule as a plain pandas function (no Spark)."""

from __future__ import annotations

from datetime import datetime

import pandas as pd

from shared.views import registration_at_entry


def frame(rows: list[dict[str, object]], columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=columns)


ENTRY_COLUMNS = ["event_id", "booth_id", "license_plate", "entry_time"]
REGISTRATION_COLUMNS = [
    "license_plate",
    "registration_time",
    "registration_id",
    "expired",
    "event_id",
]


def test_latest_registration_at_or_before_entry_applies() -> None:
    entries = frame(
        [
            {
                "event_id": "e1",
                "booth_id": "b1",
                "license_plate": "P1",
                "entry_time": datetime(2026, 1, 5, 10, 0),
            },
            {
                "event_id": "e2",
                "booth_id": "b1",
                "license_plate": "P1",
                "entry_time": datetime(2026, 1, 5, 12, 0),
            },
            {
                "event_id": "e3",
                "booth_id": "b1",
                "license_plate": "P1",
                "entry_time": datetime(2026, 1, 4, 0, 0),
            },
        ],
        ENTRY_COLUMNS,
    )
    registrations = frame(
        [
            {
                "license_plate": "P1",
                "registration_time": datetime(2026, 1, 5, 9, 0),
                "registration_id": "R1",
                "expired": False,
                "event_id": "r1",
            },
            # recorded at the very instant of e2: applies to it (<=)
            {
                "license_plate": "P1",
                "registration_time": datetime(2026, 1, 5, 12, 0),
                "registration_id": "R2",
                "expired": True,
                "event_id": "r2",
            },
        ],
        REGISTRATION_COLUMNS,
    )
    result = registration_at_entry(entries, registrations).sort_values("event_id")
    assert list(result["registration_id"].fillna("none")) == ["R1", "R2", "none"]
    assert list(result["expired"].astype(object).where(result["expired"].notna(), None)) == [
        False,
        True,
        None,
    ]


def test_ties_on_registration_time_go_to_the_greatest_registration_id() -> None:
    entries = frame(
        [
            {
                "event_id": "e1",
                "booth_id": "b1",
                "license_plate": "P1",
                "entry_time": datetime(2026, 1, 5),
            }
        ],
        ENTRY_COLUMNS,
    )
    registrations = frame(
        [
            {
                "license_plate": "P1",
                "registration_time": datetime(2026, 1, 1),
                "registration_id": "R9",
                "expired": True,
                "event_id": "a",
            },
            {
                "license_plate": "P1",
                "registration_time": datetime(2026, 1, 1),
                "registration_id": "R10",
                "expired": False,
                "event_id": "b",
            },
        ],
        REGISTRATION_COLUMNS,
    )
    assert list(registration_at_entry(entries, registrations)["registration_id"]) == [
        "R9"
    ]  # "R9" > "R10" as text


def test_no_entries_gives_no_rows_and_no_registrations_gives_nulls() -> None:
    empty_entries = frame([], ENTRY_COLUMNS)
    no_registrations = frame([], REGISTRATION_COLUMNS)
    assert registration_at_entry(empty_entries, no_registrations).empty
    entries = frame(
        [
            {
                "event_id": "e1",
                "booth_id": "b1",
                "license_plate": "P1",
                "entry_time": datetime(2026, 1, 5),
            }
        ],
        ENTRY_COLUMNS,
    )
    result = registration_at_entry(entries, no_registrations)
    assert result["registration_id"].isna().tolist() == [True]
