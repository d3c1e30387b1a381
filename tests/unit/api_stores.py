"""A published batch version and a speed store, filled by hand, for the API's unit tests.

The batch store is a published version (horizon 2026-01-06T00:00Z); the speed
store is SpeedTables fed the JSON records the speed layer writes.
"""

from __future__ import annotations

import functools
import json
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import uvicorn
from fastapi import FastAPI

from batch_layer.publish import empty_store_tables, publish_version
from lambdaline.kafka_broker import free_port
from serving.batch_reader import BatchReader
from serving.deps import app_settings, speed_tables
from serving.limits import BoundedHttpTools
from serving.main import create_app
from shared.platform.speed_tables import SpeedTables
from shared.settings import Settings

KEY = {"X-API-Key": "test-key"}
DAY = {"from": "2026-01-05T00:00:00.000Z", "to": "2026-01-07T00:00:00.000Z"}
VIEW_SETTINGS = {
    "window": "5m",
    "max_trip": "1h",
    "registration_lookback": "400d",
    "rolling_window": "1h",
    "rolling_slide": "5m",
    "session_gap": "30m",
}  # the rows below


def booth_row(booth: str, start: str, count: int, toll: str) -> dict[str, Any]:
    window_start = datetime.fromisoformat(start)
    return {
        "booth_id": booth, "window_start": window_start,
        "window_end": window_start + timedelta(minutes=5),
        "vehicle_count": count, "total_toll": Decimal(toll),
        "first_entry_time": window_start, "last_entry_time": window_start,
    }  # fmt: skip


def rolling_row(start: str, count: int, toll: str) -> dict[str, Any]:
    """A ``booth_rolling`` row of booth b1: an hour from ``start`` (batch-store types)."""
    window_start = datetime.fromisoformat(start)
    return {
        "booth_id": "b1", "window_start": window_start,
        "window_end": window_start + timedelta(hours=1), "vehicle_count": count,
        "total_toll": Decimal(toll),
    }  # fmt: skip


def visit_row(plate: str, start: str, end: str, booths: list[str], toll: str) -> dict[str, Any]:
    """A ``vehicle_visits`` row (batch-store types): one entry per booth listed."""
    return {
        "license_plate": plate, "session_start": datetime.fromisoformat(start),
        "session_end": datetime.fromisoformat(end), "entry_count": len(booths),
        "booths": booths, "total_toll": Decimal(toll),
    }  # fmt: skip


def as_speed_record(row: dict[str, Any]) -> dict[str, Any]:
    """A batch-store row as the speed layer writes it: instants as ISO-8601 UTC, money as
    a number."""
    return {
        name: f"{value.isoformat(timespec='milliseconds')}Z" if isinstance(value, datetime)
        else float(value) if isinstance(value, Decimal) else value
        for name, value in row.items()
    }  # fmt: skip


STRADDLING_WINDOW = rolling_row("2026-01-05T23:05", 4, "9.00")
"""b1's hour from 23:05, which the horizon (00:00) cuts: the speed store's, whole. The
batch store holds only its part before H (:data:`STRADDLING_WINDOW_BEFORE_H`)."""
STRADDLING_WINDOW_BEFORE_H = rolling_row("2026-01-05T23:05", 2, "4.50")
STRADDLING_VISIT = visit_row("P2", "2026-01-05T23:40", "2026-01-06T00:35", ["b1", "b2"], "5.00")
"""P2's visit of entries at 23:40 and 00:05: the speed store's, whole. The batch store
saw only its first entry (:data:`STRADDLING_VISIT_BEFORE_H`), a visit ending after H."""
STRADDLING_VISIT_BEFORE_H = visit_row("P2", "2026-01-05T23:40", "2026-01-06T00:10", ["b1"], "2.50")


def table_of(name: str, rows: list[dict[str, Any]]) -> pa.Table:
    schema = empty_store_tables()[name].schema
    return pa.Table.from_pylist(rows, schema=schema)


def publish_batch(store: Path, vehicle_count: int = 3) -> None:
    """Version 1 (horizon 2026-01-06T00:00) into an empty ``store``, or the next version
    into one that holds some; b1's 23:50 window holds ``vehicle_count`` vehicles."""
    if store.exists() and any(store.iterdir()):
        _publish_first_day(store, vehicle_count)
    else:  # a copy of the one this process published (a version is its files)
        shutil.copytree(_first_version(vehicle_count), store, dirs_exist_ok=True)


@functools.cache
def _first_version(vehicle_count: int) -> Path:
    """A store holding only version 1 of :func:`publish_batch`, published once per process
    into a folder removed as the process exits."""
    store = Path(_PUBLISHED.name) / str(vehicle_count)
    _publish_first_day(store, vehicle_count)
    return store


_PUBLISHED = tempfile.TemporaryDirectory(prefix="lambdaline-api-stores-")


def _publish_first_day(store: Path, vehicle_count: int) -> None:
    fresh = empty_store_tables()
    fresh["booth_stats"] = table_of("booth_stats", [
        booth_row("b1", "2026-01-05T23:50", vehicle_count, "7.50"),
        booth_row("b1", "2026-01-05T23:55", 1, "2.00"),
        booth_row("b2", "2026-01-05T10:00", 4, "10.00"),
    ])  # fmt: skip
    fresh["vehicle_trips"] = table_of("vehicle_trips", [{
        "booth_id": "b1", "license_plate": "P1", "entry_time": datetime(2026, 1, 5, 23, 50),
        "exit_time": datetime(2026, 1, 6, 0, 10), "duration_seconds": 1200.0,
    }])  # fmt: skip
    fresh["expired_registrations"] = table_of("expired_registrations", [{
        "booth_id": "b2", "license_plate": "P2", "entry_time": datetime(2026, 1, 5, 10, 1),
        "registration_id": "R-2",
    }])  # fmt: skip
    fresh["diagnostics"] = table_of("diagnostics", [{
        "booth_id": "b1", "window_start": datetime(2026, 1, 5, 23, 50),
        "reason": "missing_exit", "count": 1,
    }])  # fmt: skip
    fresh["booth_rolling"] = table_of("booth_rolling", [
        rolling_row("2026-01-05T23:00", 3, "7.00"), STRADDLING_WINDOW_BEFORE_H,
    ])  # fmt: skip
    fresh["vehicle_visits"] = table_of("vehicle_visits", [
        visit_row("P1", "2026-01-05T22:00", "2026-01-05T22:40", ["b1", "b1"], "4.00"),
        STRADDLING_VISIT_BEFORE_H,
    ])  # fmt: skip
    publish_version(
        store, fresh, [date(2026, 1, 5)], datetime(2026, 1, 6, tzinfo=UTC), 0, 5,
        view_settings=VIEW_SETTINGS,
    )  # fmt: skip


def publish_next_day(store: Path) -> None:
    """Version 2: the next batch run, horizon 2026-01-07T00:00, which saw every entry of
    the straddling window and visit (and recomputed both days)."""
    fresh = empty_store_tables()
    fresh["booth_rolling"] = table_of("booth_rolling", [
        rolling_row("2026-01-05T23:00", 3, "7.00"), STRADDLING_WINDOW,
    ])  # fmt: skip
    fresh["vehicle_visits"] = table_of("vehicle_visits", [
        visit_row("P1", "2026-01-05T22:00", "2026-01-05T22:40", ["b1", "b1"], "4.00"),
        STRADDLING_VISIT,
    ])  # fmt: skip
    publish_version(
        store, fresh, [date(2026, 1, 5), date(2026, 1, 6)], datetime(2026, 1, 7, tzinfo=UTC),
        0, 5, view_settings=VIEW_SETTINGS,
    )  # fmt: skip


def speed_record(value: dict[str, Any], version: int) -> tuple[bytes, bytes]:
    return b"key-" + json.dumps(sorted(value.items())[:3]).encode(), json.dumps(
        {**value, "version": version}
    ).encode()


def speed_booth(booth: str, start: str, count: int, toll: float) -> dict[str, Any]:
    end = (datetime.fromisoformat(start) + timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M")
    return {
        "booth_id": booth, "window_start": f"{start}:00.000Z",
        "window_end": f"{end}:00.000Z", "vehicle_count": count,
        "total_toll": toll, "first_entry_time": f"{start}:00.000Z",
        "last_entry_time": f"{start}:00.000Z",
    }  # fmt: skip


def registration_candidate(
    plate: str, entry_at: str, registration_id: str, recorded_on: str, expired: bool
) -> dict[str, Any]:
    """An ``expired_registrations`` candidate at booth b4 on 2026-01-06."""
    return {
        "booth_id": "b4", "license_plate": plate, "entry_time": f"2026-01-06T{entry_at}:00.000Z",
        "registration_id": registration_id, "registration_time": f"{recorded_on}T00:00:00.000Z",
        "registration_event_id": registration_id.lower(), "expired": expired,
    }  # fmt: skip


def fill_speed(tables: SpeedTables) -> None:
    tables.apply("booth_stats", [
        speed_record(speed_booth("b1", "2026-01-05T23:55", 99, 99.0), 1),  # below H: ignored
        speed_record(speed_booth("b1", "2026-01-06T00:00", 2, 5.0), 1),
        speed_record(speed_booth("b1", "2026-01-06T00:05", 4, 8.0), 2),
        speed_record(speed_booth("b1", "2026-01-06T00:05", 1, 1.0), 1),  # an older batch: ignored
        speed_record(speed_booth("b3", "2026-01-06T01:00", 5, 12.5), 2),
    ])  # fmt: skip
    tables.apply("vehicle_trips", [speed_record({
        "booth_id": "b1", "license_plate": "P1", "entry_time": "2026-01-06T08:00:00.000Z",
        "exit_time": "2026-01-06T08:05:00.000Z", "duration_seconds": 300.0,
    }, 3)])  # fmt: skip
    # a trip's candidates, one per exit, in three polls: the earliest exit wins
    for exit_time, version in (("09:20", 4), ("09:10", 5), ("09:30", 6)):
        tables.apply("vehicle_trips", [speed_record({
            "booth_id": "b4", "license_plate": "P7", "entry_time": "2026-01-06T09:00:00.000Z",
            "exit_time": f"2026-01-06T{exit_time}:00.000Z",
            "duration_seconds": 60.0 * (int(exit_time[-2:])),
        }, version)])  # fmt: skip
    # registration candidates: P8's only one has expired (an alert); P9's latest has not
    # (the alert its older one raised is withdrawn), whichever arrives first
    tables.apply("expired_registrations", [
        speed_record(registration_candidate("P8", "00:30", "R-8", "2025-01-01", True), 4),
        speed_record(registration_candidate("P9", "02:00", "R-9new", "2026-01-06", False), 4),
    ])  # fmt: skip
    tables.apply("expired_registrations", [
        speed_record(registration_candidate("P9", "02:00", "R-9old", "2025-01-01", True), 5),
    ])  # fmt: skip
    # hopping windows and visits: a row is the speed store's if it ends after H
    tables.apply("booth_rolling", [
        speed_record(as_speed_record(rolling_row("2026-01-05T22:55", 99, "99.00")), 1),  # ends
        speed_record(as_speed_record(STRADDLING_WINDOW), 2),  # before H: ignored
    ])  # fmt: skip
    tables.apply("vehicle_visits", [
        speed_record(as_speed_record(visit_row(  # ends before H: ignored
            "P1", "2026-01-05T22:00", "2026-01-05T22:40", ["b9"], "99.00")), 1),
        speed_record(as_speed_record(STRADDLING_VISIT), 2),
    ])  # fmt: skip
    tables.note_progress(json.dumps({
        "query": "speed.booth_stats", "watermark": "2026-01-06T00:58:00.000Z",
        "view_settings": VIEW_SETTINGS,
        "state_operators": [{"operator": "stateStoreSave", "rows": 4, "memory_bytes": 132184,
                             "disk_bytes": 0, "time_ms": {"commit": 120, "updates": 31}}],
    }).encode())  # fmt: skip


class CaughtUp:
    """In place of the speed consumer (``speed_consumer`` overridden): caught up, no error,
    offsets set by hand."""

    lag = 0
    error = None

    class caught_up:  # noqa: N801 - mimics threading.Event
        @staticmethod
        def is_set() -> bool:
            return True

    def __init__(self) -> None:
        """What it has materialised (``serving.consistency``), for a test to move on."""
        self.speed = {"speed.booth_stats": {0: 12, 1: 7}}
        self.inputs = {"toll.entries": {0: 40, 1: 33}}

    def materialised(self) -> tuple[dict[str, dict[int, int]], dict[str, dict[int, int]]]:
        return self.speed, self.inputs


def app_on_filled_stores(
    state_dir: Path, reader: BatchReader | None = None, **overrides: Any
) -> FastAPI:
    """The app with its settings and speed store replaced through dependency overrides
    (``reader``: the batch reader it polls with, else the app's own; ``overrides``:
    settings by their flat names)."""
    settings = Settings(**{"state_dir": state_dir, "api_keys": ["test-key"], **overrides})
    publish_batch(settings.batch_store)
    tables = SpeedTables()
    fill_speed(tables)
    app = create_app(settings, reader, follow_kafka=False)
    app.dependency_overrides[app_settings] = lambda: settings
    app.dependency_overrides[speed_tables] = lambda: tables
    return app


@contextmanager
def served(app: FastAPI) -> Iterator[str]:
    """``app`` under uvicorn in a thread of this process, on a free port, with the HTTP
    parser ``lambdaline serve`` runs (its URL and header limits); its base URL. For what
    needs a real connection: a never-ending stream, the parser's own refusals."""
    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, http=BoundedHttpTools, log_level="warning",
        timeout_graceful_shutdown=1,
    )  # fmt: skip
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.02)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
