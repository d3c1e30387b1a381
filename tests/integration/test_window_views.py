"""booth_rolling (hopping windows) and vehicle_visits (sessions) in both layers and
merged across the horizon through the API, on ``tests.scenarios.Windows``, whose
docstring works out every expected row by hand."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pyspark.sql import SparkSession
from rich.console import Console

from batch_layer.run import run_batch
from serving.main import create_app
from shared.platform.batch_store import read_current
from shared.settings import Settings
from speed_layer import job
from tests.integration.helpers import batch_rows, isolated_settings, send, speed_view
from tests.scenarios import Windows

pytestmark = pytest.mark.integration

KEY = {"X-API-Key": "windows-test-key"}


def windows_settings(kafka: Settings, state_dir: Path) -> Settings:
    return isolated_settings(kafka, state_dir).updated(
        rolling_window=Windows.ROLLING_WINDOW,
        rolling_slide=Windows.ROLLING_SLIDE,
        session_gap=Windows.GAP,
        api_keys=[KEY["X-API-Key"]],
    )


def batch(spark: SparkSession, settings: Settings, run_date: date, lookback: int) -> None:
    report = run_batch(spark, settings, run_date, lookback, console=Console(file=io.StringIO()))
    assert report.version is not None


def rolling_expected(*, day: str | None = None) -> list[tuple[Any, ...]]:
    """Windows.BOOTH_ROLLING as (booth, start, end, vehicles, tolls), of one date if given."""
    return [
        (booth, datetime.fromisoformat(start), datetime.fromisoformat(start) + Windows.ROLLING_WINDOW,
         count, Decimal(toll))
        for booth, start, count, toll in Windows.BOOTH_ROLLING
        if day is None or start.startswith(day)
    ]  # fmt: skip


def visits_expected(
    *, day: str | None = None, plates: set[str] | None = None
) -> list[tuple[Any, ...]]:
    """Windows.VISITS as (plate, start, end, entries, booths, tolls), filtered."""
    return [
        (plate, datetime.fromisoformat(start), datetime.fromisoformat(end), count, booths, Decimal(toll))
        for plate, start, end, count, booths, toll in Windows.VISITS
        if (day is None or start.startswith(day)) and (plates is None or plate in plates)
    ]  # fmt: skip


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text.removesuffix("Z"))


# --- speed layer ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def speed(
    kafka: Settings, spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> Settings:
    """Two available-now runs: w1-w6, then the rest, so that w7 comes in a later
    micro-batch than the visits it joins."""
    settings = windows_settings(kafka, tmp_path_factory.mktemp("speed-windows"))
    send(settings, settings.topics.entries, Windows.ENTRIES[:6])
    job.run(spark, settings, available_now=True)
    first_visits = speed_view(settings, "vehicle_visits").values()
    # the watermark (12:29, 2 min behind w6) has passed the end of P1's visits (10:50,
    # 12:00) and P2's (10:37), not P3's first (12:30): none of P3's is out yet
    assert sorted((row["license_plate"], row["session_start"]) for row in first_visits) == [
        ("P1", "2026-01-05T10:02:00.000Z"), ("P1", "2026-01-05T11:30:00.000Z"),
        ("P2", "2026-01-05T10:07:00.000Z"),
    ]  # fmt: skip
    send(settings, settings.topics.entries, Windows.ENTRIES[6:])
    job.run(spark, settings, available_now=True)
    return settings


def test_speed_layer_counts_an_entry_in_every_hopping_window_that_holds_it(speed: Settings) -> None:
    rows = speed_view(speed, "booth_rolling").values()
    assert sorted(
        (row["booth_id"], _instant(row["window_start"]), _instant(row["window_end"]),
         row["vehicle_count"], row["total_toll"])
        for row in rows
    ) == rolling_expected()  # fmt: skip


def test_speed_layer_visits_split_by_the_gap_joined_by_a_late_entry_and_across_midnight(
    speed: Settings,
) -> None:
    rows = speed_view(speed, "vehicle_visits").values()
    assert sorted(
        (row["license_plate"], _instant(row["session_start"]), _instant(row["session_end"]),
         row["entry_count"], row["booths"], row["total_toll"])
        for row in rows
    ) == visits_expected(plates={"P1", "P2", "P3", "P4", "P5"})  # P9's is still open  # fmt: skip


# --- batch layer ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def batched(
    kafka: Settings, spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> Settings:
    """Version 1 computes every date (none was held); version 2 recomputes 2026-01-06 alone
    and keeps the 5th's rows of version 1."""
    settings = windows_settings(kafka, tmp_path_factory.mktemp("batch-windows"))
    send(settings, settings.topics.entries, Windows.ENTRIES)
    batch(spark, settings, date(2026, 1, 6), lookback=1)
    batch(spark, settings, date(2026, 1, 6), lookback=1)
    return settings


def _batch_rolling(settings: Settings, version: int) -> list[tuple[Any, ...]]:
    return [
        (row["booth_id"], row["window_start"], row["window_end"], row["vehicle_count"],
         row["total_toll"])
        for row in batch_rows(settings, "booth_rolling", version)
    ]  # fmt: skip


def _batch_visits(settings: Settings, version: int) -> list[tuple[Any, ...]]:
    return [
        (row["license_plate"], row["session_start"], row["session_end"], row["entry_count"],
         row["booths"], row["total_toll"])
        for row in batch_rows(settings, "vehicle_visits", version)
    ]  # fmt: skip


def test_batch_layer_counts_an_entry_in_every_hopping_window_that_holds_it(
    batched: Settings,
) -> None:
    assert _batch_rolling(batched, 1) == rolling_expected()


def test_batch_layer_visits_split_by_the_gap_joined_by_an_entry_in_it_and_across_midnight(
    batched: Settings,
) -> None:
    assert _batch_visits(batched, 1) == visits_expected()


def test_a_recompute_of_one_date_reads_the_day_before_for_a_visit_across_midnight(
    batched: Settings,
) -> None:
    """The 6th alone: P4's visit stays the 5th's (its start), not a visit from w9 at
    00:10; b5's window from 23:55 counts w11 only, from 00:00 too."""
    current = read_current(batched.batch_store)
    assert current is not None and current.version == 2
    assert current.recomputed_dates == (date(2026, 1, 6),)
    assert _batch_visits(batched, 2) == visits_expected()
    assert _batch_rolling(batched, 2) == rolling_expected()


# --- merged across the horizon ----------------------------------------------------------


@pytest.fixture(scope="module")
def merged(
    kafka: Settings, spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Settings, TestClient, tuple[list[Any], list[Any]]]]:
    """The batch layer sees the entries before midnight (H = 2026-01-06T00:00), the speed
    layer every entry; the API serves both."""
    settings = windows_settings(kafka, tmp_path_factory.mktemp("merged-windows"))
    send(settings, settings.topics.entries, Windows.BEFORE_MIDNIGHT)
    batch(spark, settings, date(2026, 1, 5), lookback=1)
    # the batch store's own rows, read before the API holds the file open: only the
    # parts before H of the window of 23:50 and of P4's visit
    before_h = (
        [(row["window_start"].isoformat(), row["vehicle_count"])
         for row in batch_rows(settings, "booth_rolling") if row["booth_id"] == "b5"],
        [(row["license_plate"], row["session_end"].isoformat(), row["entry_count"])
         for row in batch_rows(settings, "vehicle_visits") if row["license_plate"] == "P4"],
    )  # fmt: skip
    send(settings, settings.topics.entries, Windows.ENTRIES[len(Windows.BEFORE_MIDNIGHT) :])
    job.run(spark, settings, available_now=True)
    app = create_app(settings)
    with TestClient(app, headers=KEY) as client:
        assert app.state.generations.active.consumer.wait_caught_up(60), (
            app.state.generations.active.consumer.error
        )
        yield settings, client, before_h


AROUND_MIDNIGHT = {"from": "2026-01-05T23:00:00Z", "to": "2026-01-06T01:00:00Z"}


def _served(client: TestClient, path: str) -> tuple[str, list[tuple[Any, ...]]]:
    response = client.get(path, params=AROUND_MIDNIGHT)
    assert response.status_code == 200, response.text
    body = response.json()
    columns = ("window_start", "vehicle_count", "total_toll") if "rolling" in path else (
        "session_start", "session_end", "entry_count", "booths", "total_toll")  # fmt: skip
    return body["horizon"], [(*(row[c] for c in columns), row["source"]) for row in body["rows"]]


def test_a_window_and_a_visit_the_horizon_cuts_come_back_whole_before_and_after_the_next_run(
    merged: tuple[Settings, TestClient, tuple[list[Any], list[Any]]], spark: SparkSession
) -> None:
    settings, client, (rolling_before_h, visits_before_h) = merged
    assert rolling_before_h == [
        ("2026-01-05T23:40:00", 1), ("2026-01-05T23:45:00", 1), ("2026-01-05T23:50:00", 1),
    ]  # fmt: skip
    assert visits_before_h == [("P4", "2026-01-06T00:20:00", 1)]

    # H = 00:00: the window of 23:50-00:05 and P4's visit end after H: the speed store's
    assert _served(client, "/v1/booths/b5/rolling") == ("2026-01-06T00:00:00.000Z", [
        ("2026-01-05T23:40:00.000Z", 1, "2.50", "batch"),
        ("2026-01-05T23:45:00.000Z", 1, "2.50", "batch"),  # ends at H
        ("2026-01-05T23:50:00.000Z", 2, "3.50", "speed"),  # w8 and w11
        ("2026-01-05T23:55:00.000Z", 1, "1.00", "speed"),
        ("2026-01-06T00:00:00.000Z", 1, "1.00", "speed"),
    ])  # fmt: skip
    whole_visit = ("2026-01-05T23:50:00.000Z", "2026-01-06T00:40:00.000Z", 2, ["b5", "b6"], "5.00")
    assert _served(client, "/v1/vehicles/P4/visits") == (
        "2026-01-06T00:00:00.000Z",
        [(*whole_visit, "speed")],
    )

    # the next run sees the 6th too and moves H past both: the batch store's, unchanged
    batch(spark, settings, date(2026, 1, 6), lookback=1)
    deadline = time.monotonic() + 30
    while client.get("/v1/status").json()["horizon"] != "2026-01-07T00:00:00.000Z":
        assert time.monotonic() < deadline, "the API did not attach the next version"
        time.sleep(0.2)
    assert _served(client, "/v1/booths/b5/rolling") == ("2026-01-07T00:00:00.000Z", [
        ("2026-01-05T23:40:00.000Z", 1, "2.50", "batch"),
        ("2026-01-05T23:45:00.000Z", 1, "2.50", "batch"),
        ("2026-01-05T23:50:00.000Z", 2, "3.50", "batch"),
        ("2026-01-05T23:55:00.000Z", 1, "1.00", "batch"),
        ("2026-01-06T00:00:00.000Z", 1, "1.00", "batch"),
    ])  # fmt: skip
    assert _served(client, "/v1/vehicles/P4/visits") == (
        "2026-01-07T00:00:00.000Z",
        [(*whole_visit, "batch")],
    )
