"""An entry for a closed day, sent after the speed watermark passed it: the speed layer
drops it as late, and the next batch version's corrections list exactly the rows it
changes, both values shown (real broker, real Spark, real DuckDB files)."""

from __future__ import annotations

import io
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pyspark.sql import SparkSession
from rich.console import Console

from batch_layer.run import run_batch
from serving.main import create_app
from shared.settings import Settings
from speed_layer import job
from speed_layer.operator import VIEWS_QUERY
from tests.integration.helpers import close_the_day, isolated_settings, send
from tests.scenarios import entry_value, exit_value, registration_value

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KEY = {"X-API-Key": "corrections-key"}
DAY = "2026-01-05"


def batch(spark: SparkSession, settings: Settings, run_date: date) -> None:
    run_batch(spark, settings, run_date, 0, console=Console(file=io.StringIO()))


def entries(settings: Settings, *rows: tuple[str, str, str, str]) -> None:
    """(plate, entry time, toll, exit time) at booth B1 on DAY, each with its exit."""
    send(settings, settings.topics.entries, [
        (plate.encode(), entry_value(f"e-{plate}", "B1", plate, f"{DAY}T{at}:00.000Z", toll),
         f"{DAY}T{at}:00.100Z")
        for plate, at, toll, _ in rows
    ])  # fmt: skip
    send(settings, settings.topics.exits, [
        (plate.encode(), exit_value(f"x-{plate}", "B1", plate, f"{DAY}T{out}:00.000Z"),
         f"{DAY}T{out}:00.100Z")
        for plate, _, _, out in rows
    ])  # fmt: skip


def test_a_late_entry_for_a_closed_day_is_listed_in_the_next_versions_corrections(
    kafka: Settings, spark: SparkSession, tmp_path: Path
) -> None:
    settings = isolated_settings(kafka, tmp_path).updated(api_keys=[KEY["X-API-Key"]])
    send(settings, settings.topics.registrations, [
        (plate.encode(), registration_value(f"r-{plate}", f"R-{plate}", plate, False,
                                            "2025-12-20T09:00:00.000Z"),
         "2025-12-20T09:00:00.100Z")
        for plate in ("P1", "P2", "P9")
    ])  # fmt: skip
    entries(settings, ("P1", "10:01", "2.00", "10:20"), ("P2", "10:03", "3.00", "10:25"))
    batch(spark, settings, date(2026, 1, 4))  # version 1, horizon DAY: DAY is the speed layer's
    close_the_day(settings)  # the watermark passes DAY by a day: its speed rows are final
    job.run(spark, settings, available_now=True)

    entries(settings, ("P9", "10:02", "4.00", "10:30"))  # too late for the speed layer
    job.run(spark, settings, available_now=True)
    batch(spark, settings, date(2026, 1, 5))  # version 2, horizon 2026-01-06: covers DAY

    with TestClient(create_app(settings, follow_kafka=False)) as api:
        [_, second] = api.get("/v1/versions", headers=KEY).json()["versions"]
        summary = second["corrections"]
        assert (summary["compared_from"], summary["compared_to"]) == (
            "2026-01-05T00:00:00.000Z", "2026-01-06T00:00:00.000Z"
        )  # fmt: skip
        counts = {
            view: (c["equal"], c["corrected"], c["only_in_batch"], c["only_in_speed"])
            for view, c in summary["views"].items()
        }
        assert counts == {  # (equal, corrected, only in batch, only in speed), by hand
            "booth_stats": (0, 1, 0, 0),  # B1's 10:00 window: 2 entries, now 3
            "booth_rolling": (0, 12, 0, 0),  # each hour from 09:05 to 10:00 holds all three
            "vehicle_trips": (2, 0, 1, 0),  # P9's trip
            "vehicle_visits": (2, 0, 1, 0),  # P9's visit
            "expired_registrations": (0, 0, 0, 0),
            "diagnostics": (0, 0, 0, 0),
        }
        assert summary["views"]["booth_stats"]["largest_difference"] == {
            "vehicle_count": 1.0, "total_toll": 4.0
        }  # fmt: skip
        # Spark's count of the operator's input rows: P9's entry is its booth's and its plate's
        assert summary["late_rows_since_previous"][VIEWS_QUERY] == 2

        rows = api.get("/v1/versions/2/corrections", headers=KEY).json()["rows"]
        by_view: dict[str, list[dict[str, Any]]] = {}
        for row in rows:
            by_view.setdefault(row["view"], []).append(row)
        assert sorted(by_view) == [
            "booth_rolling",
            "booth_stats",
            "vehicle_trips",
            "vehicle_visits",
        ]
        [window] = by_view["booth_stats"]
        assert window["kind"] == "corrected"
        assert window["key"] == {"booth_id": "B1", "window_start": f"{DAY}T10:00:00.000Z"}
        assert (window["batch"]["vehicle_count"], window["batch"]["total_toll"]) == (3, "9.00")
        assert (window["speed"]["vehicle_count"], window["speed"]["total_toll"]) == (2, "5.00")
        hours = by_view["booth_rolling"]
        assert [r["key"]["window_start"] for r in hours] == [
            f"{DAY}T{hour}:{minute:02d}:00.000Z"
            for hour, minutes in (("09", range(5, 60, 5)), ("10", [0]))
            for minute in minutes
        ]
        assert {(r["batch"]["vehicle_count"], r["speed"]["vehicle_count"]) for r in hours} == {
            (3, 2)
        }
        [trip] = by_view["vehicle_trips"]
        assert (trip["kind"], trip["speed"]) == ("only_in_batch", None)
        assert trip["batch"]["license_plate"] == "P9"
        assert trip["batch"]["exit_time"] == f"{DAY}T10:30:00.000Z"
        [visit] = by_view["vehicle_visits"]
        assert (visit["kind"], visit["key"], visit["speed"]) == (
            "only_in_batch", {"license_plate": "P9", "session_start": f"{DAY}T10:02:00.000Z"}, None
        )  # fmt: skip
