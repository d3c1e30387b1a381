"""Generated event streams through both layers, the merged answer held to an oracle.

Hypothesis writes streams of entries, exits and registrations around a midnight:
times on window and day boundaries (and a millisecond before them), duplicates,
records sent late within the speed watermark and far beyond it, trips across
midnight and at exactly ``max_trip``, a registration that changes a plate's
state. Each stream goes to topics of its own, through the speed job
(available-now, a few records per micro-batch so the watermark moves between
them) and a batch run for its first day, so the horizon H (its midnight) falls
inside the data. The API's merged rows are then compared with
``tests.integration.oracle``, plain SQL over the raw events:

- rows the batch store answers (before H) must equal the oracle's;
- from H on (the speed store's), a row may differ only as lost input can make
  it, and only if the query that writes it counted rows dropped as late.

``GENERATED_EXAMPLES`` sets how many streams (default 2, plus the one written by
hand below; 0: that one only). Each costs two speed runs and a batch run (about
80 s on 2 cores: each speed run's queries start in about 30 s), so a
failing stream is not shrunk unless ``GENERATED_SHRINK=1``; either way it stays
in the Hypothesis database (``.hypothesis/``) and runs first next time.
"""

from __future__ import annotations

import io
import os
import time
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

import duckdb
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession
from rich.console import Console

from batch_layer.run import run_batch
from serving.main import create_app
from shared.domain.events import format_instant
from shared.domain.views.view import ViewSizes
from shared.settings import Settings
from speed_layer import job
from speed_layer.operator import VIEWS_QUERY
from tests.integration.helpers import (
    CLOSING_BOOTH,
    CLOSING_PLATE,
    close_the_day,
    isolated_settings,
    send,
)
from tests.integration.oracle import ENTRY_COLUMNS, create_event_tables, oracle_views
from tests.scenarios import entry_value, exit_value, registration_value

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.timeout(300 + 120 * int(os.environ.get("GENERATED_EXAMPLES", "2"))),
]

KEY = {"X-API-Key": "generated-key"}
H = datetime(2026, 1, 6, tzinfo=UTC)
"""The horizon: the batch run is for 2026-01-05."""
START = H - timedelta(hours=3)
"""The first minute events may fall on (the data spans three hours either side of H)."""
BOOTHS, PLATES = ("B1", "B2"), ("P1", "P2", "P3")
EXAMPLES = int(os.environ.get("GENERATED_EXAMPLES", "2"))
PHASES = (
    (Phase.explicit, Phase.reuse)
    + ((Phase.generate,) if EXAMPLES else ())
    + ((Phase.shrink,) if os.environ.get("GENERATED_SHRINK") == "1" else ())
)


@dataclass(frozen=True)
class Event:
    kind: str  # entry, exit, registration
    event_id: str
    at: datetime  # event time
    delay: timedelta  # sent this long after its event time
    plate: str
    booth: str = ""
    toll: str = "1.00"
    registration_id: str = ""
    expired: bool = False
    copies: int = 1

    @property
    def sent(self) -> datetime:
        return self.at + self.delay


OFFSETS = st.sampled_from([timedelta(0), timedelta(0), timedelta(milliseconds=59_999)])
"""A minute's start (a window's, when the minute is one) or a millisecond before the next."""
DELAYS = st.sampled_from([timedelta(0)] * 6 + [timedelta(seconds=70), timedelta(minutes=50)])
"""On time, late within the 2-minute watermark, or far beyond it."""
TRIPS = st.sampled_from([timedelta(minutes=m) for m in (1, 7, 30, 60, 61)])
"""An exit after its entry: at exactly max_trip (a trip) and one minute past it (none)."""


@st.composite
def streams(draw: st.DrawFn) -> list[Event]:
    events: list[Event] = []
    for plate in PLATES:  # each plate's state: expired or not, maybe changing mid-stream
        expired = draw(st.booleans())
        events.append(Event("registration", f"r-{plate}", START - timedelta(days=3),
                            timedelta(0), plate, registration_id=f"R-{plate}", expired=expired))  # fmt: skip
        if draw(st.booleans()):
            change = START + timedelta(minutes=draw(st.integers(0, 360)))
            events.append(Event("registration", f"r2-{plate}", change, draw(DELAYS), plate,
                                registration_id=f"R2-{plate}", expired=not expired))  # fmt: skip
    minutes = draw(st.lists(
        st.tuples(st.sampled_from(PLATES), st.integers(0, 360)), min_size=4, max_size=14,
        unique=True,  # a plate enters once a minute at most: its view keys stay distinct
    ))  # fmt: skip
    for number, (plate, minute) in enumerate(minutes):
        at = START + timedelta(minutes=minute) + draw(OFFSETS)
        booth, toll = draw(st.sampled_from(BOOTHS)), draw(st.sampled_from(["1.00", "2.50"]))
        copies = draw(st.sampled_from([1, 1, 1, 2]))
        events.append(
            Event("entry", f"e{number}", at, draw(DELAYS), plate, booth, toll, copies=copies)
        )
        if draw(st.integers(0, 4)):  # most entries have an exit
            events.append(Event("exit", f"x{number}", at + draw(TRIPS), draw(DELAYS), plate, booth,
                                copies=draw(st.sampled_from([1, 1, 2]))))  # fmt: skip
    return events


HAND_WRITTEN = [
    Event("registration", "r-P1", START - timedelta(days=3), timedelta(0), "P1",
          registration_id="R-P1", expired=True),
    Event("registration", "r-P2", START - timedelta(days=3), timedelta(0), "P2",
          registration_id="R-P2"),
    Event("entry", "e-mid", H, timedelta(0), "P1", "B1", "2.50"),  # exactly at H
    Event("exit", "x-mid", H + timedelta(minutes=60), timedelta(0), "P1", "B1"),  # at max_trip
    Event("entry", "e-eve", H - timedelta(milliseconds=1), timedelta(0), "P2", "B1", copies=2),
    Event("exit", "x-eve", H + timedelta(minutes=7), timedelta(0), "P2", "B1"),  # across midnight
    Event("entry", "e-late", H - timedelta(minutes=20), timedelta(seconds=70), "P2", "B2"),
    Event("entry", "e-after", H + timedelta(minutes=40), timedelta(0), "P1", "B2"),
]  # fmt: skip
"""Boundaries every run covers: an entry at H and one a millisecond before, a trip of
exactly max_trip and one across midnight, a copy, an entry late within the watermark.
Nothing is dropped as late, so every row must equal the oracle's."""


def produce(settings: Settings, events: list[Event]) -> None:
    """Every record in the order it is sent (its record timestamp: when)."""
    records: dict[str, list[tuple[datetime, int, bytes, bytes]]] = {}
    for order, event in enumerate(events):
        at = format_instant(event.at)
        if event.kind == "entry":
            topic = settings.topics.entries
            value = entry_value(event.event_id, event.booth, event.plate, at, event.toll)
        elif event.kind == "exit":
            topic = settings.topics.exits
            value = exit_value(event.event_id, event.booth, event.plate, at)
        else:
            topic = settings.topics.registrations
            value = registration_value(event.event_id, event.registration_id, event.plate,
                                       event.expired, at)  # fmt: skip
        for copy in range(event.copies):
            sent = event.sent + timedelta(seconds=copy)
            records.setdefault(topic, []).append((sent, order, event.plate.encode(), value))
    for topic, rows in records.items():
        rows.sort()
        send(settings, topic, [(key, value, format_instant(sent)) for sent, _, key, value in rows])


def oracle(events: list[Event], sizes: ViewSizes) -> dict[str, list[dict[str, Any]]]:
    with duckdb.connect() as connection:
        create_event_tables(connection, sent_type="TIMESTAMP")
        naive = {event.event_id: event.at.replace(tzinfo=None) for event in events}
        for event in events:
            for copy in range(event.copies):
                if event.kind == "entry":
                    connection.execute(f"INSERT INTO entries {ENTRY_COLUMNS} VALUES (?, ?, ?, ?, ?, ?)", [
                        event.event_id, event.booth, event.plate, naive[event.event_id],
                        event.toll, (event.sent + timedelta(seconds=copy)).replace(tzinfo=None),
                    ])  # fmt: skip
                elif event.kind == "exit":
                    connection.execute("INSERT INTO exits VALUES (?, ?, ?, ?)", [
                        event.event_id, event.booth, event.plate, naive[event.event_id]])  # fmt: skip
                else:
                    connection.execute("INSERT INTO registrations (event_id, registration_id, "
                                       "license_plate, expired, registration_time) VALUES (?, ?, ?, ?, ?)", [
                        event.event_id, event.registration_id, event.plate, event.expired,
                        naive[event.event_id]])  # fmt: skip
        return oracle_views(connection, sizes)


RANGE = {"from": "2026-01-05T00:00:00Z", "to": "2026-01-07T00:00:00Z", "limit": 100_000}
CLOSED_BY_END = {"booth_rolling": "window_end", "vehicle_visits": "session_end"}
"""Rows that span time are the batch store's when they end at or before H; others when
their time column lies before it."""
TIME_COLUMN = {
    "booth_stats": "window_start", "booth_rolling": "window_start",
    "vehicle_trips": "entry_time", "expired_registrations": "entry_time",
    "diagnostics": "window_start", "vehicle_visits": "session_start",
}  # fmt: skip
KEYS = {
    "booth_stats": ("booth_id", "window_start"), "booth_rolling": ("booth_id", "window_start"),
    "vehicle_trips": ("booth_id", "license_plate", "entry_time"),
    "expired_registrations": ("booth_id", "license_plate", "entry_time"),
    "diagnostics": ("booth_id", "window_start", "reason"),
    "vehicle_visits": ("license_plate", "session_start"),
}  # fmt: skip
WRITTEN_BY = {
    "booth_stats": VIEWS_QUERY, "booth_rolling": VIEWS_QUERY,
    "vehicle_trips": VIEWS_QUERY, "expired_registrations": VIEWS_QUERY,
    "diagnostics": VIEWS_QUERY, "vehicle_visits": VIEWS_QUERY,
}  # fmt: skip
"""The query whose late drops explain a view's differences (diagnostics: its entries
come from the operator)."""


def closed(view: str, row: dict[str, Any]) -> bool:
    h = format_instant(H)
    if view in CLOSED_BY_END:
        return bool(row[CLOSED_BY_END[view]] <= h)
    return bool(row[TIME_COLUMN[view]] < h)


def served(api: TestClient) -> dict[str, list[dict[str, Any]]]:
    paths = {
        "booth_stats": ["/v1/stats"],
        "booth_rolling": [f"/v1/booths/{b}/rolling" for b in BOOTHS],
        "vehicle_trips": [f"/v1/vehicles/{p}/trips" for p in PLATES],
        "vehicle_visits": [f"/v1/vehicles/{p}/visits" for p in PLATES],
        "expired_registrations": ["/v1/alerts/expired-registrations"],
        "diagnostics": ["/v1/diagnostics"],
    }
    views: dict[str, list[dict[str, Any]]] = {}
    for view, urls in paths.items():
        rows = views.setdefault(view, [])
        for url in urls:
            response = api.get(url, params=RANGE, headers=KEY)
            if response.status_code == 404:  # a booth or plate no store holds
                continue
            assert response.status_code == 200, response.text
            for row in response.json()["rows"]:
                row = {k: v for k, v in row.items() if k not in ("final", "source")}
                closing = (row.get("booth_id"), row.get("license_plate"))
                if CLOSING_BOOTH in closing or CLOSING_PLATE in closing:
                    continue  # the closing vehicle: it only moves the watermarks on
                rows.append(row)
    return views


def by_key(view: str, rows: list[dict[str, Any]]) -> dict[tuple[Any, ...], dict[str, Any]]:
    return {tuple(row[k] for k in KEYS[view]): row for row in rows}


def in_key_order(view: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows in key order (the API answers a plate or a booth at a time)."""
    return sorted(rows, key=lambda row: tuple(row[k] for k in KEYS[view]))


def explained(view: str, oracle_rows: list[dict[str, Any]], api_rows: list[dict[str, Any]],
              dropped: int) -> None:  # fmt: skip
    """From H on: equal, unless the writing query dropped rows as late, and then only as
    lost input can make a row differ."""
    want, got = by_key(view, oracle_rows), by_key(view, api_rows)
    assert len(got) == len(api_rows), f"{view}: a key served twice"
    if dropped == 0:
        assert api_rows == oracle_rows, f"{view} from H differs with no late rows dropped"
        return
    if view in ("booth_stats", "booth_rolling"):  # lost entries: fewer, never more
        assert set(got) <= set(want), view
        for key, row in got.items():
            assert row["vehicle_count"] <= want[key]["vehicle_count"], (view, key)
        deficit = sum(r["vehicle_count"] for r in oracle_rows) - sum(
            r["vehicle_count"] for r in api_rows
        )
        windows_per_entry = 12 if view == "booth_rolling" else 1
        late_entries = dropped / 2  # an entry is two operator rows: its booth's, its plate's
        assert deficit <= late_entries * windows_per_entry, (view, deficit, dropped)
    elif view == "vehicle_trips":  # a lost entry: no trip; a lost exit: a later one, or none
        assert set(got) <= set(want), view
        for key, row in got.items():
            assert row["exit_time"] >= want[key]["exit_time"], (view, key)
    elif view == "vehicle_visits":  # lost entries: visits of fewer entries
        assert sum(r["entry_count"] for r in api_rows) <= sum(r["entry_count"] for r in oracle_rows)


def through_both_layers(spark: SparkSession, settings: Settings, events: list[Event]) -> None:
    """The plates' first registrations, days before the stream, reach the speed layer
    before it (as a registry's would), then the stream, then the batch run."""
    first = [e for e in events if e.kind == "registration" and e.at < START]
    started = time.monotonic()
    produce(settings, first)
    job.run(spark, settings, available_now=True)
    registered = time.monotonic()
    produce(settings, [e for e in events if e not in first])
    close_the_day(settings)  # the watermark passes the data: every speed row is final
    job.run(spark, settings, available_now=True)
    streamed = time.monotonic()
    run_batch(spark, settings, date(2026, 1, 5), 0, console=Console(file=io.StringIO()))
    print(f"speed runs {registered - started:.1f} s + {streamed - registered:.1f} s, "
          f"batch run {time.monotonic() - streamed:.1f} s")  # fmt: skip


@settings(
    max_examples=max(EXAMPLES, 1), deadline=None, phases=PHASES, report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)  # fmt: skip
@example(events=HAND_WRITTEN)
@given(events=streams())
def test_the_merged_answer_equals_an_oracle_over_the_raw_events(
    kafka: Settings, spark: SparkSession, tmp_path_factory: pytest.TempPathFactory,
    events: list[Event],
) -> None:  # fmt: skip
    base = isolated_settings(kafka, tmp_path_factory.mktemp("generated"))
    settings_ = base.updated(api_keys=[KEY["X-API-Key"]], speed_max_offsets_per_trigger=4)
    through_both_layers(spark, settings_, events)
    truth = oracle(events, settings_.views.sizes)
    with TestClient(create_app(settings_)) as api:
        consumer = api.app.state.generations.active.consumer  # type: ignore[attr-defined]
        assert consumer.wait_caught_up(60), consumer.error
        got = served(api)
        reports = api.app.state.generations.active.tables.reports  # type: ignore[attr-defined]
        dropped = {query: int(r.get("late_rows_total") or 0) for query, r in reports.items()}
    for view, rows in truth.items():
        served_rows = in_key_order(view, got[view])
        before = [row for row in in_key_order(view, rows) if closed(view, row)]
        assert [r for r in served_rows if closed(view, r)] == before, f"{view} before H"
        after = [row for row in in_key_order(view, rows) if not closed(view, row)]
        explained(view, after, [r for r in served_rows if not closed(view, r)],
                  dropped.get(WRITTEN_BY[view], 0))  # fmt: skip
