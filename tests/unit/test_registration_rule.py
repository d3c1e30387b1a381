"""The registration rule (``shared.domain.views.expired_registrations.RULE``) on static DataFrames:
the batch layer's pairs of it, and the best pair per entry by the view's rank.

Every expected row is written by hand from the events listed in the test.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pyspark.sql import DataFrame, SparkSession

from shared.domain.views.declarations import match_pairs
from shared.domain.views.expired_registrations import RULE, SPEC
from shared.domain.views.rules import best_candidates

ENTRY_SCHEMA = "event_id string, booth_id string, license_plate string, entry_time timestamp"
REGISTRATION_SCHEMA = (
    "license_plate string, registration_time timestamp, registration_id string, "
    "expired boolean, event_id string"
)


def lookup(
    spark: SparkSession,
    entries: list[tuple[object, ...]],
    registrations: list[tuple[object, ...]],
    lookback: timedelta = timedelta(days=400),
) -> dict[str, tuple[object, object]]:
    """event_id -> (registration_id, expired) of the rule's result."""
    pairs = match_pairs(
        RULE, SPEC,
        spark.createDataFrame(entries, ENTRY_SCHEMA),
        spark.createDataFrame(registrations, REGISTRATION_SCHEMA),
        {"registration_lookback": lookback},
    )  # fmt: skip
    result: DataFrame = best_candidates(SPEC, pairs.drop(*SPEC.key), ["event_id"])
    return {row.event_id: (row.registration_id, row.expired) for row in result.collect()}


def test_latest_registration_at_or_before_entry_applies(spark: SparkSession) -> None:
    entries = [
        ("e1", "b1", "P1", datetime(2026, 1, 5, 10, 0)),
        ("e2", "b1", "P1", datetime(2026, 1, 5, 12, 0)),
        ("e3", "b1", "P1", datetime(2026, 1, 4, 0, 0)),  # before any registration
        ("e4", "b2", "P2", datetime(2026, 1, 5, 12, 0)),  # another plate's registration only
    ]
    registrations = [
        ("P1", datetime(2026, 1, 5, 9, 0), "R1", False, "r1"),
        # recorded at the very instant of e2: applies to it (<=)
        ("P1", datetime(2026, 1, 5, 12, 0), "R2", True, "r2"),
        ("P1", datetime(2025, 6, 1, 0, 0), "R0", True, "r0"),  # older: R1 and R2 win over it
        ("P1", datetime(2026, 1, 6, 0, 0), "R3", True, "r3"),  # after every entry
        ("P3", datetime(2026, 1, 1, 0, 0), "R9", False, "r9"),
    ]
    assert lookup(spark, entries, registrations) == {
        "e1": ("R1", False),
        "e2": ("R2", True),
        "e3": ("R0", True),
        "e4": (None, None),
    }


def test_ties_on_registration_time_go_to_the_greatest_registration_id(
    spark: SparkSession,
) -> None:
    entries = [("e1", "b1", "P1", datetime(2026, 1, 5))]
    registrations = [
        ("P1", datetime(2026, 1, 1), "R9", True, "a"),
        ("P1", datetime(2026, 1, 1), "R10", False, "b"),
    ]
    assert lookup(spark, entries, registrations) == {"e1": ("R9", True)}  # "R9" > "R10" as text


def test_ties_on_time_and_id_go_to_the_greatest_event_id(spark: SparkSession) -> None:
    entries = [("e1", "b1", "P1", datetime(2026, 1, 5))]
    registrations = [
        ("P1", datetime(2026, 1, 1), "R1", False, "b"),
        ("P1", datetime(2026, 1, 1), "R1", True, "a"),
    ]
    assert lookup(spark, entries, registrations) == {"e1": ("R1", False)}


def test_no_entries_gives_no_rows_and_no_registrations_gives_nulls(spark: SparkSession) -> None:
    assert lookup(spark, [], [("P1", datetime(2026, 1, 1), "R1", False, "r1")]) == {}
    assert lookup(spark, [("e1", "b1", "P1", datetime(2026, 1, 5))], []) == {"e1": (None, None)}


def test_a_registration_older_than_the_lookback_no_longer_counts(spark: SparkSession) -> None:
    entries = [
        ("e1", "b1", "P1", datetime(2026, 1, 5, 10, 0)),
        ("e2", "b1", "P2", datetime(2026, 1, 5, 10, 0)),
        ("e3", "b1", "P3", datetime(2026, 1, 5, 10, 0)),
    ]
    registrations = [
        # exactly the lookback before e1: applies (the bound is inclusive)
        ("P1", datetime(2026, 1, 4, 10, 0), "R1", True, "r1"),
        # a millisecond older than that: none applies to e2
        ("P2", datetime(2026, 1, 4, 9, 59, 59, 999000), "R2", True, "r2"),
        # the older one is out of reach, so the newer decides even though it is older than
        # e3 by less than the lookback
        ("P3", datetime(2026, 1, 1), "R3-old", True, "r3"),
        ("P3", datetime(2026, 1, 5, 9, 0), "R3", False, "r4"),
    ]
    assert lookup(spark, entries, registrations, timedelta(days=1)) == {
        "e1": ("R1", True),
        "e2": (None, None),
        "e3": ("R3", False),
    }
