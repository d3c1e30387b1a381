"""What a version corrected: its rows of the days it newly covers against the speed
layer's final rows, on real DuckDB files and a speed store filled by hand."""

from __future__ import annotations

import json
import time
from datetime import UTC, date, datetime
from pathlib import Path

import duckdb
from fastapi.testclient import TestClient

from batch_layer.corrections import SpeedSide
from batch_layer.publish import empty_store_tables, publish_version
from serving.batch_reader import BatchReader
from shared.platform.batch_store import version_file
from shared.platform.speed_tables import SpeedTables
from shared.settings import Settings
from tests.unit.api_stores import (
    KEY,
    VIEW_SETTINGS,
    app_on_filled_stores,
    booth_row,
    publish_batch,
    speed_booth,
    speed_record,
    table_of,
)


def speed_store(watermark: str) -> SpeedTables:
    """booth_stats of 2026-01-06 as the speed layer served them, and its progress."""
    tables = SpeedTables()
    tables.apply("booth_stats", [
        speed_record(speed_booth("b1", "2026-01-06T08:00", 2, 5.0), 1),
        speed_record(speed_booth("b1", "2026-01-06T08:05", 1, 2.5), 1),
        speed_record(speed_booth("b2", "2026-01-06T09:00", 4, 8.0), 2),
        speed_record(speed_booth("b1", "2026-01-07T00:10", 6, 9.0), 3),  # after the new H
    ])  # fmt: skip
    tables.note_progress(json.dumps({
        "query": "speed.booth_stats", "watermark": watermark, "late_rows_total": 3,
        "view_settings": VIEW_SETTINGS,
    }).encode())  # fmt: skip
    return tables


def publish_next_day(store: Path, speed: SpeedTables) -> dict[str, object]:
    """Version 2 (H 2026-01-07): the batch's booth_stats of 2026-01-06."""
    fresh = empty_store_tables()
    fresh["booth_stats"] = table_of("booth_stats", [
        booth_row("b1", "2026-01-06T08:00", 3, "7.25"),  # a late entry the speed layer dropped
        booth_row("b1", "2026-01-06T08:05", 1, "2.50"),
        booth_row("b3", "2026-01-06T10:00", 1, "1.00"),
    ])  # fmt: skip
    version = publish_version(
        store, fresh, [date(2026, 1, 6)], datetime(2026, 1, 7, tzinfo=UTC), 1, 5,
        view_settings=VIEW_SETTINGS, speed=SpeedSide(speed),
    )  # fmt: skip
    assert version.corrections is not None
    return dict(version.corrections)


def test_a_version_counts_and_keeps_what_it_corrected_of_the_days_it_newly_covers(
    tmp_path: Path,
) -> None:
    publish_batch(tmp_path)  # version 1, H 2026-01-06: compared with nothing
    summary = publish_next_day(tmp_path, speed_store("2026-01-07T02:00:00.000Z"))

    assert summary["compared_from"] == "2026-01-06T00:00:00.000Z"
    assert summary["compared_to"] == "2026-01-07T00:00:00.000Z"
    assert summary["speed_watermark"] == "2026-01-07T02:00:00.000Z"
    views = summary["views"]
    assert isinstance(views, dict)
    assert views["booth_stats"] == {
        "equal": 1, "corrected": 1, "only_in_batch": 1, "only_in_speed": 1,
        "largest_difference": {"vehicle_count": 1.0, "total_toll": 2.25}, "rows_kept": 3,
    }  # fmt: skip
    for other in ("vehicle_trips", "expired_registrations", "diagnostics", "vehicle_visits"):
        assert views[other]["equal"] + views[other]["corrected"] == 0, other
    assert summary["late_rows_total"] == {"speed.booth_stats": 3}
    assert summary["late_rows_since_previous"] == {"speed.booth_stats": 3}

    with duckdb.connect(str(version_file(tmp_path, 2)), read_only=True) as connection:
        kept = connection.execute(
            "SELECT kind, key, batch, speed FROM corrections WHERE view = 'booth_stats'"
        ).fetchall()
    rows = [(kind, json.loads(key), json.loads(b or "null"), json.loads(s or "null"))
            for kind, key, b, s in kept]  # fmt: skip
    b1 = {"booth_id": "b1", "window_start": "2026-01-06T08:00:00.000Z"}
    assert [(kind, key) for kind, key, _, _ in rows] == [
        ("corrected", b1),
        ("only_in_speed", {"booth_id": "b2", "window_start": "2026-01-06T09:00:00.000Z"}),
        ("only_in_batch", {"booth_id": "b3", "window_start": "2026-01-06T10:00:00.000Z"}),
    ]
    _, _, batch, speed = rows[0]
    assert (batch["vehicle_count"], batch["total_toll"]) == (3, "7.25")
    assert (speed["vehicle_count"], speed["total_toll"]) == (2, "5.00")
    assert batch["window_end"] == speed["window_end"] == "2026-01-06T08:05:00.000Z"
    assert rows[1][2] is None and rows[2][3] is None  # the side that has no row


def late_rows_since_previous(store: Path, late_rows_total: int) -> object:
    """Publish a version against a speed store whose booth_stats query reports this total."""
    tables = speed_store("2026-01-07T02:00:00.000Z")
    tables.note_progress(json.dumps({
        "query": "speed.booth_stats", "watermark": "2026-01-07T02:00:00.000Z",
        "late_rows_total": late_rows_total, "view_settings": VIEW_SETTINGS,
    }).encode())  # fmt: skip
    version = publish_version(
        store, empty_store_tables(), [], datetime(2026, 1, 7, tzinfo=UTC), 2, 5,
        view_settings=VIEW_SETTINGS, speed=SpeedSide(tables),
    )  # fmt: skip
    assert version.corrections is not None
    return version.corrections["late_rows_since_previous"]


def test_late_rows_since_the_previous_version_start_over_with_the_speed_store(
    tmp_path: Path,
) -> None:
    publish_batch(tmp_path)
    publish_next_day(tmp_path, speed_store("2026-01-07T02:00:00.000Z"))  # 3 late rows so far
    assert late_rows_since_previous(tmp_path, 5) == {"speed.booth_stats": 2}
    # after `speed reset` the store's counts began again: 1 since then
    assert late_rows_since_previous(tmp_path, 1) == {"speed.booth_stats": 1}


def test_speed_rows_not_final_yet_are_not_compared(tmp_path: Path) -> None:
    publish_batch(tmp_path)
    # the watermark has passed 08:05 (b1's 08:00 window is final) but not 08:10
    summary = publish_next_day(tmp_path, speed_store("2026-01-06T08:07:00.000Z"))
    views = summary["views"]
    assert isinstance(views, dict)
    counts = {
        kind: views["booth_stats"][kind]
        for kind in ("equal", "corrected", "only_in_batch", "only_in_speed")
    }
    assert counts == {"equal": 0, "corrected": 1, "only_in_batch": 2, "only_in_speed": 0}


def test_a_speed_store_that_could_not_be_read_is_named_and_the_version_published(
    tmp_path: Path,
) -> None:
    publish_batch(tmp_path)
    fresh = empty_store_tables()
    version = publish_version(
        tmp_path, fresh, [date(2026, 1, 6)], datetime(2026, 1, 7, tzinfo=UTC), 1, 5,
        view_settings=VIEW_SETTINGS, speed=SpeedSide(None, "KafkaNotReadyError: no broker"),
    )  # fmt: skip
    assert version.version == 2
    assert version.corrections is not None
    assert version.corrections["error"] == "KafkaNotReadyError: no broker"


def test_the_api_lists_the_versions_and_serves_the_corrected_rows(tmp_path: Path) -> None:
    store = Settings(state_dir=tmp_path).batch_store
    app = app_on_filled_stores(tmp_path, BatchReader(store))  # version 1
    with TestClient(app) as api:
        publish_next_day(store, speed_store("2026-01-07T02:00:00.000Z"))
        deadline = time.monotonic() + 10
        while api.get("/v1/status", headers=KEY).json()["batch_version"] != 2:
            assert time.monotonic() < deadline, "version 2 was not attached"
            time.sleep(0.05)

        listed = api.get("/v1/versions", headers=KEY).json()["versions"]
        assert [(v["version"], v["current"], v["rolled_back"]) for v in listed] == [
            (1, False, False), (2, True, False)
        ]  # fmt: skip
        assert listed[0]["corrections"] is None  # published without a speed store to compare
        booths = listed[1]["corrections"]["views"]["booth_stats"]
        assert (booths["corrected"], booths["only_in_batch"], booths["only_in_speed"]) == (1, 1, 1)

        body = api.get(
            "/v1/versions/2/corrections", params={"view": "booth_stats"}, headers=KEY
        ).json()
        assert body["truncated"] is False
        assert [(r["kind"], r["key"]["booth_id"]) for r in body["rows"]] == [
            ("corrected", "b1"), ("only_in_speed", "b2"), ("only_in_batch", "b3")
        ]  # fmt: skip
        corrected = body["rows"][0]
        assert (corrected["batch"]["vehicle_count"], corrected["speed"]["vehicle_count"]) == (3, 2)
        one = api.get("/v1/versions/2/corrections", params={"limit": 1}, headers=KEY).json()
        assert (len(one["rows"]), one["truncated"]) == (1, True)

        assert api.get("/v1/versions/1/corrections", headers=KEY).json() == {
            "detail": "batch version 1 was published without comparing the speed store"
        }
        assert api.get("/v1/versions/7/corrections", headers=KEY).status_code == 404
        bad = api.get("/v1/versions/2/corrections", params={"view": "nope"}, headers=KEY)
        assert bad.status_code == 422

        metrics = api.get("/metrics").text
        assert (
            'lambdaline_batch_corrections_rows{kind="corrected",view="booth_stats"} 1.0' in metrics
        )
        assert 'lambdaline_batch_speed_late_rows{query="speed.booth_stats"} 3.0' in metrics
