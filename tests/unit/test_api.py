"""The HTTP API on real DuckDB stores filled by hand (no Kafka, no Spark; ``api_stores``)."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from batch_layer.publish import rollback
from lambdaline.kafka_broker import free_port
from serving.batch_reader import BatchReader
from serving.deps import app_settings, speed_consumer, speed_tables
from serving.main import create_app
from serving.models import response_model
from shared.domain.views.booth_rolling import SPEC as BOOTH_ROLLING
from shared.domain.views.booth_stats import SPEC as BOOTH_STATS
from shared.domain.views.vehicle_visits import SPEC as VEHICLE_VISITS
from shared.platform.batch_store import version_file
from shared.platform.speed_tables import SpeedTables
from shared.settings import Settings
from tests.unit.api_stores import (
    DAY,
    KEY,
    CaughtUp,
    app_on_filled_stores,
    publish_batch,
    publish_next_day,
    speed_booth,
    speed_record,
)

OTHER_LABELS = "max_trip=1h, registration_lookback=400d, rolling_slide=5m, rolling_window=1h, session_gap=30m, "
"""The default view settings before ``window``, as /v1/status names them."""


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(app_on_filled_stores(tmp_path)) as test_client:
        yield test_client


def test_v1_needs_an_api_key(client: TestClient) -> None:
    for headers in ({}, {"X-API-Key": "wrong"}):
        response = client.get("/v1/stats", params=DAY, headers=headers)
        assert response.status_code == 401
        assert response.json() == {"detail": "missing or unknown X-API-Key"}


def test_booth_stats_merge_batch_below_the_horizon_with_speed_from_it(client: TestClient) -> None:
    response = client.get("/v1/booths/b1/stats", params=DAY, headers=KEY)
    assert response.status_code == 200
    body = response.json()
    assert body["horizon"] == "2026-01-06T00:00:00.000Z"
    assert body["batch_version"] == 1
    assert body["speed_watermark"] == "2026-01-06T00:58:00.000Z"
    assert body["granularity"] == "5m"
    assert body["truncated"] is False
    response_model(BOOTH_STATS).model_validate_json(response.text)  # the body is what /docs says
    assert [(r["window_start"], r["vehicle_count"], r["total_toll"], r["source"]) for r in body["rows"]] == [
        ("2026-01-05T23:50:00.000Z", 3, "7.50", "batch"),
        ("2026-01-05T23:55:00.000Z", 1, "2.00", "batch"),
        ("2026-01-06T00:00:00.000Z", 2, "5.00", "speed"),
        ("2026-01-06T00:05:00.000Z", 4, "8.00", "speed"),
    ]  # fmt: skip


def test_hourly_and_daily_roll_ups_come_after_the_merge(client: TestClient) -> None:
    hourly = client.get("/v1/booths/b1/stats", params={**DAY, "granularity": "1h"}, headers=KEY)
    assert [(r["window_start"], r["window_end"], r["vehicle_count"], r["source"]) for r in hourly.json()["rows"]] == [
        ("2026-01-05T23:00:00.000Z", "2026-01-06T00:00:00.000Z", 4, "batch"),
        ("2026-01-06T00:00:00.000Z", "2026-01-06T01:00:00.000Z", 6, "speed"),
    ]  # fmt: skip
    daily = client.get("/v1/stats", params={**DAY, "granularity": "1d"}, headers=KEY)
    assert [(r["booth_id"], r["window_start"], r["vehicle_count"], r["source"]) for r in daily.json()["rows"]] == [
        ("b1", "2026-01-05T00:00:00.000Z", 4, "batch"), ("b1", "2026-01-06T00:00:00.000Z", 6, "speed"),
        ("b2", "2026-01-05T00:00:00.000Z", 4, "batch"), ("b3", "2026-01-06T00:00:00.000Z", 5, "speed"),
    ]  # fmt: skip


def test_all_booths_with_a_limit_say_whether_it_cut_rows_off(client: TestClient) -> None:
    response = client.get("/v1/stats", params={**DAY, "limit": 2}, headers=KEY)
    assert [(r["booth_id"], r["window_start"]) for r in response.json()["rows"]] == [
        ("b1", "2026-01-05T23:50:00.000Z"), ("b1", "2026-01-05T23:55:00.000Z"),
    ]  # fmt: skip
    assert response.json()["truncated"] is True
    # six rows in the range: three batch rows below the horizon, three speed rows from it
    for limit, truncated in ((5, True), (6, False)):
        body = client.get("/v1/stats", params={**DAY, "limit": limit}, headers=KEY).json()
        assert (len(body["rows"]), body["truncated"]) == (min(limit, 6), truncated)
    daily = {**DAY, "granularity": "1d", "limit": 3}  # four daily buckets (see the test above)
    assert client.get("/v1/stats", params=daily, headers=KEY).json()["truncated"] is True


def test_a_hopping_window_and_a_visit_the_horizon_cuts_come_back_whole_before_and_after_the_next_run(
    tmp_path: Path,
) -> None:
    """``api_stores``: the batch store holds the parts before H; the speed store the whole."""
    reader = BatchReader(Settings(state_dir=tmp_path).batch_store, poll_s=0.01)
    app = app_on_filled_stores(tmp_path, reader)

    def answers() -> tuple[int, list[tuple[str, str, int, str]], list[tuple[object, ...]]]:
        rolling = client.get("/v1/booths/b1/rolling", params=DAY, headers=KEY)
        visits = client.get("/v1/vehicles/P2/visits", params=DAY, headers=KEY)
        assert rolling.status_code == visits.status_code == 200, (rolling.text, visits.text)
        response_model(BOOTH_ROLLING).model_validate_json(rolling.text)
        response_model(VEHICLE_VISITS).model_validate_json(visits.text)
        return (
            rolling.json()["batch_version"],
            [(r["window_start"], r["window_end"], r["vehicle_count"], r["source"])
             for r in rolling.json()["rows"]],
            [(r["session_start"], r["session_end"], r["entry_count"], r["booths"], r["total_toll"],
              r["source"]) for r in visits.json()["rows"]],
        )  # fmt: skip

    whole_visit = ("2026-01-05T23:40:00.000Z", "2026-01-06T00:35:00.000Z", 2, ["b1", "b2"], "5.00")
    with TestClient(app) as client:
        assert answers() == (
            1,
            [
                ("2026-01-05T23:00:00.000Z", "2026-01-06T00:00:00.000Z", 3, "batch"),  # ends at H
                ("2026-01-05T23:05:00.000Z", "2026-01-06T00:05:00.000Z", 4, "speed"),
            ],
            [(*whole_visit, "speed")],
        )
        publish_next_day(Settings(state_dir=tmp_path).batch_store)  # H moves past both
        deadline = time.monotonic() + 10
        while reader.version is None or reader.version.version != 2:
            assert time.monotonic() < deadline, "version 2 was not attached"
            time.sleep(0.01)
        assert answers() == (
            2,
            [
                ("2026-01-05T23:00:00.000Z", "2026-01-06T00:00:00.000Z", 3, "batch"),
                ("2026-01-05T23:05:00.000Z", "2026-01-06T00:05:00.000Z", 4, "batch"),
            ],
            [(*whole_visit, "batch")],
        )


def test_a_visit_wholly_before_the_horizon_is_the_batch_stores(client: TestClient) -> None:
    body = client.get("/v1/vehicles/P1/visits", params=DAY, headers=KEY).json()
    assert [(r["session_start"], r["entry_count"], r["booths"], r["source"]) for r in body["rows"]] == [
        ("2026-01-05T22:00:00.000Z", 2, ["b1", "b1"], "batch"),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("path", "detail"),
    [
        ("/v1/booths/nope/rolling", "booth not found"),
        ("/v1/vehicles/NOPE/visits", "vehicle not found"),
    ],
)
def test_the_new_endpoints_answer_401_404_and_422_like_the_others(
    client: TestClient, path: str, detail: str
) -> None:
    assert client.get(path, params=DAY).status_code == 401
    unknown = client.get(path, params=DAY, headers=KEY)
    assert (unknown.status_code, unknown.json()) == (404, {"detail": detail})
    backwards = {"from": DAY["to"], "to": DAY["from"]}
    assert client.get(path, params=backwards, headers=KEY).status_code == 422
    assert client.get(path, params={**DAY, "limit": 0}, headers=KEY).status_code == 422


def test_an_unknown_booth_is_404(client: TestClient) -> None:
    response = client.get("/v1/booths/nope/stats", params=DAY, headers=KEY)
    assert response.status_code == 404
    assert response.json() == {"detail": "booth not found"}


def test_an_unknown_vehicle_is_404_and_a_known_one_without_trips_is_not(
    client: TestClient,
) -> None:
    unknown = client.get("/v1/vehicles/NOPE/trips", params=DAY, headers=KEY)
    assert unknown.status_code == 404
    assert unknown.json() == {"detail": "vehicle not found"}
    # P2 has an expired-registration alert and no trip; P1 has trips, none on 2026-01-04
    alerted = client.get("/v1/vehicles/P2/trips", params=DAY, headers=KEY)
    quiet_day = {"from": "2026-01-04T00:00:00Z", "to": "2026-01-05T00:00:00Z"}
    travelled = client.get("/v1/vehicles/P1/trips", params=quiet_day, headers=KEY)
    for response in (alerted, travelled):
        assert response.status_code == 200
        assert response.json()["rows"] == []


@pytest.mark.parametrize(
    ("params", "field", "message"),
    [
        ({"from": "yesterday", "to": "2026-01-07T00:00:00.000Z"}, "from", "datetime"),
        (
            {"from": "2026-01-05T00:00:00", "to": "2026-01-07T00:00:00.000Z"},
            "from",
            "must carry a time zone",
        ),
        (
            {"from": "2026-01-07T00:00:00.000Z", "to": "2026-01-05T00:00:00.000Z"},
            "to",
            "must not be before from",
        ),
        # instants pydantic accepts whose UTC falls outside the years 1 to 9999 (were 500s)
        (
            {"from": "0001-01-01T00:00:00+00:01", "to": "2026-01-07T00:00:00.000Z"},
            "from",
            "must lie in the years 1 to 9999 in UTC",
        ),
        (
            {"from": "2026-01-05T00:00:00.000Z", "to": "9999-12-31T23:59:00-00:01"},
            "to",
            "must lie in the years 1 to 9999 in UTC",
        ),
        ({**DAY, "granularity": "2h"}, "granularity", "'5m', '1h' or '1d'"),
        ({**DAY, "limit": "0"}, "limit", "greater than or equal to 1"),
        ({"to": "2026-01-07T00:00:00.000Z"}, "from", "Field required"),
    ],
)
def test_bad_parameters_are_422_in_the_shape_openapi_documents(
    client: TestClient, params: dict[str, str], field: str, message: str
) -> None:
    response = client.get("/v1/booths/b1/stats", params=params, headers=KEY)
    assert response.status_code == 422
    # FastAPI's HTTPValidationError, whether pydantic or one of our rules found the fault
    [error] = response.json()["detail"]
    assert error["loc"] == ["query", field]
    assert message in error["msg"]
    assert error["type"]


def test_with_another_window_the_default_granularity_is_the_window(
    client: TestClient, tmp_path: Path
) -> None:
    settings = Settings(state_dir=tmp_path, api_keys=["test-key"], window=timedelta(minutes=10))
    client.app.dependency_overrides[app_settings] = lambda: settings  # type: ignore[attr-defined]
    # no granularity: the view's own rows, whatever its window (was a 422 about "5m")
    response = client.get("/v1/booths/b1/stats", params=DAY, headers=KEY)
    assert response.status_code == 200
    assert response.json()["granularity"] == "10m"
    assert [row["window_start"] for row in response.json()["rows"]] == [
        "2026-01-05T23:50:00.000Z", "2026-01-05T23:55:00.000Z",
        "2026-01-06T00:00:00.000Z", "2026-01-06T00:05:00.000Z",
    ]  # fmt: skip
    finer = client.get("/v1/stats", params={**DAY, "granularity": "5m"}, headers=KEY)
    assert finer.status_code == 422
    assert finer.json()["detail"] == [{
        "type": "value_error", "loc": ["query", "granularity"], "input": "5m",
        "msg": "must be a multiple of the window, 10m (leave it out for the window's own rows)",
    }]  # fmt: skip
    hourly = client.get("/v1/stats", params={**DAY, "granularity": "1h"}, headers=KEY)
    assert hourly.is_success and hourly.json()["granularity"] == "1h"


def test_both_stores_run_duckdb_with_the_threads_setting(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path, serving_duckdb_threads=3)  # neither 1 nor the cores
    publish_batch(settings.batch_store)
    app = create_app(settings, follow_kafka=False)
    with TestClient(app):
        with app.state.generations.active.reader.snapshot() as snapshot:
            batch = snapshot.cursor().execute("SELECT current_setting('threads')").fetchone()
        speed = app.state.generations.active.tables.cursor().execute(
            "SELECT current_setting('threads')"
        )
        assert (batch, speed.fetchone()) == ((3,), (3,))


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_docs_pages_load_nothing_from_another_host(client: TestClient, page: str) -> None:
    html = client.get(page).text
    # FastAPI's own pages load Swagger UI and ReDoc from cdn.jsdelivr.net
    assert "http://" not in html and "https://" not in html
    assets = re.findall(r"""(?:src|href|url)\s*[=:]\s*["']([^"']+)["']""", html)
    assert "/openapi.json" in assets and len(assets) >= 3
    for asset in assets:
        response = client.get(asset)
        assert response.status_code == 200, asset
        assert len(response.content) > 1000, asset


def test_openapi_documents_the_key_and_error_responses(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    v1 = [operation for path, item in paths.items() if path.startswith("/v1/") for operation in item.values()]  # fmt: skip
    assert len(v1) == 13  # the views, any view, status, versions, corrections, sql, stream
    for operation in v1:
        assert operation["responses"]["401"]["description"] == "X-API-Key missing or unknown"
    views = [path for path in paths if path.startswith("/v1/") and "status" not in path
             and "versions" not in path and path not in ("/v1/sql", "/v1/stream")]  # fmt: skip
    assert len(views) == 8  # the seven typed endpoints and /v1/views/{view}
    for keyed in views:
        responses = paths[keyed]["get"]["responses"]
        assert set(responses) == {"200", "401", "404", "409", "410", "422", "429"}, keyed
        assert responses["409"]["content"]["application/json"]["schema"]["$ref"].endswith(
            "/Conflict"
        )
        assert responses["422"]["content"]["application/json"]["schema"]["$ref"].endswith(
            "/HTTPValidationError"
        )
    for public in ("/healthz", "/readyz", "/metrics"):
        assert "401" not in paths[public]["get"]["responses"]
    # the limits' answers: a body too large, too many queries or requests, too many streams
    sql = paths["/v1/sql"]["post"]["responses"]
    assert {"413", "429"} <= set(sql) and "Retry-After" in sql["429"]["headers"]
    stream = paths["/v1/stream"]["get"]["responses"]
    assert {"429", "503"} <= set(stream) and "Retry-After" in stream["503"]["headers"]


def test_vehicle_trips_alerts_and_diagnostics(client: TestClient) -> None:
    trips = client.get("/v1/vehicles/P1/trips", params=DAY, headers=KEY).json()["rows"]
    assert [(r["entry_time"], r["duration_seconds"], r["source"]) for r in trips] == [
        ("2026-01-05T23:50:00.000Z", 1200.0, "batch"), ("2026-01-06T08:00:00.000Z", 300.0, "speed"),
    ]  # fmt: skip
    alerts = client.get(
        "/v1/alerts/expired-registrations", params={**DAY, "booth_id": "b2"}, headers=KEY
    )
    assert [
        (r["license_plate"], r["registration_id"], r["source"]) for r in alerts.json()["rows"]
    ] == [("P2", "R-2", "batch")]
    none_here = client.get(
        "/v1/alerts/expired-registrations", params={**DAY, "booth_id": "b1"}, headers=KEY
    )
    assert none_here.json()["rows"] == []
    diagnostics = client.get("/v1/diagnostics", params=DAY, headers=KEY).json()["rows"]
    assert diagnostics == [{
        "booth_id": "b1", "window_start": "2026-01-05T23:50:00.000Z", "reason": "missing_exit",
        "count": 1, "final": True, "source": "batch",
    }]  # fmt: skip


def test_a_speed_trip_is_its_earliest_exit_and_provisional_until_the_watermark_passes_max_trip(
    client: TestClient,
) -> None:
    body = client.get("/v1/vehicles/P7/trips", params=DAY, headers=KEY).json()
    assert body["speed_watermark"] == "2026-01-06T00:58:00.000Z"
    assert body["rows"] == [{
        "booth_id": "b4", "license_plate": "P7", "entry_time": "2026-01-06T09:00:00.000Z",
        "exit_time": "2026-01-06T09:10:00.000Z", "duration_seconds": 600.0,
        "final": False, "source": "speed",
    }]  # fmt: skip


def test_a_speed_alert_stands_only_if_its_latest_registration_expired(
    client: TestClient,
) -> None:
    body = client.get(
        "/v1/alerts/expired-registrations", params={**DAY, "booth_id": "b4"}, headers=KEY
    ).json()
    # P8's entry (00:30) is before the watermark (00:58): final; P9's alert was withdrawn
    assert body["rows"] == [{
        "booth_id": "b4", "license_plate": "P8", "entry_time": "2026-01-06T00:30:00.000Z",
        "registration_id": "R-8", "final": True, "source": "speed",
    }]  # fmt: skip


def test_speed_windows_are_final_once_the_watermark_passes_their_end(client: TestClient) -> None:
    rows = client.get("/v1/stats", params=DAY, headers=KEY).json()["rows"]
    assert [(r["booth_id"], r["window_start"][11:16], r["final"], r["source"]) for r in rows] == [
        ("b1", "23:50", True, "batch"), ("b1", "23:55", True, "batch"),
        ("b1", "00:00", True, "speed"), ("b1", "00:05", True, "speed"),
        ("b2", "10:00", True, "batch"), ("b3", "01:00", False, "speed"),
    ]  # fmt: skip
    hourly = client.get("/v1/stats", params={**DAY, "granularity": "1h"}, headers=KEY).json()
    assert [(r["booth_id"], r["window_start"][11:16], r["final"]) for r in hourly["rows"]] == [
        ("b1", "23:00", True), ("b1", "00:00", True), ("b2", "10:00", True), ("b3", "01:00", False),
    ]  # fmt: skip


def test_status_health_and_metrics(client: TestClient) -> None:
    status = client.get("/v1/status", headers=KEY).json()
    assert status["batch_version"] == 1 and status["horizon"] == "2026-01-06T00:00:00.000Z"
    assert status["batch_row_counts"]["booth_stats"] == 3
    assert status["speed_row_counts"]["booth_stats"] == 4
    assert status["speed_records_rejected"] == 0
    assert status["speed_state"] == {
        "speed.booth_stats": [
            {
                "operator": "stateStoreSave",
                "rows": 4,
                "memory_bytes": 132184,
                "disk_bytes": 0,
                "time_ms": {"commit": 120, "updates": 31},
            }
        ]
    }
    assert client.get("/healthz").json() == {"status": "ok"}
    not_ready = client.get("/readyz")  # no consumer in this app: never caught up
    assert not_ready.status_code == 503
    assert not_ready.json()["waiting_for"] == ["speed store not caught up"]
    client.app.dependency_overrides[speed_consumer] = CaughtUp  # type: ignore[attr-defined]
    assert client.get("/readyz").json() == {"status": "ready"}
    metrics = client.get("/metrics").text
    assert "lambdaline_batch_version 1.0" in metrics
    assert "lambdaline_speed_records_rejected 0.0" in metrics
    assert (
        'lambdaline_http_request_duration_seconds_count{method="GET",route="/v1/status",status="200"} 1.0'
        in metrics
    )


def test_openapi_documents_the_endpoints(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    for path in ("/v1/booths/{booth_id}/stats", "/v1/stats", "/v1/vehicles/{license_plate}/trips",
                 "/v1/booths/{booth_id}/rolling", "/v1/vehicles/{license_plate}/visits",
                 "/v1/alerts/expired-registrations", "/v1/diagnostics", "/v1/status",
                 "/healthz", "/readyz", "/metrics"):  # fmt: skip
        assert path in paths


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("/v1/booths/b1/stats", {"from": "2026-01-05T00:00:00Z", "to": "2026-01-06T00:00:00Z"}),
        ("/v1/stats", DAY),
    ],
    ids=["a-booth-day-on-the-event-loop", "every-booth-in-the-thread-pool"],
)
def test_versions_swap_under_concurrent_requests_without_errors_or_mixed_responses(
    tmp_path: Path, path: str, params: dict[str, str]
) -> None:
    """Both ways a read runs (``serving.responses.reads_on_event_loop``); the first row,
    b1's at 23:50 in key order, holds the version's vehicle count either way."""
    settings = Settings(state_dir=tmp_path, api_keys=["test-key"])
    publish_batch(settings.batch_store, vehicle_count=3)  # version n holds n + 2 vehicles
    app = create_app(settings, BatchReader(settings.batch_store, poll_s=0.01), SpeedTables(), False)
    seen: list[tuple[int, int]] = []
    failures: list[str] = []
    done = threading.Event()

    def ask(client: TestClient) -> None:
        while not done.is_set():
            response = client.get(path, params=params, headers=KEY)
            if response.status_code != 200:
                failures.append(f"{response.status_code}: {response.text}")
                continue
            body = response.json()
            first = body["rows"][0]
            seen.append((body["batch_version"], first["vehicle_count"]))

    with TestClient(app) as client:
        askers = [threading.Thread(target=ask, args=(client,)) for _ in range(4)]
        for asker in askers:
            asker.start()
        for version in range(2, 12):
            publish_batch(settings.batch_store, vehicle_count=version + 2)
            time.sleep(0.05)
        done.set()
        for asker in askers:
            asker.join(timeout=30)
    assert failures == []
    assert len({version for version, _ in seen}) >= 5  # the swaps happened while requests ran
    assert all(count == version + 2 for version, count in seen)  # no response mixes versions


def test_batch_only_answers_come_from_the_version_cache_until_the_version_changes(
    tmp_path: Path,
) -> None:
    settings = Settings(state_dir=tmp_path, api_keys=["test-key"])
    publish_batch(settings.batch_store, vehicle_count=3)
    reader = BatchReader(settings.batch_store, poll_s=0.01, cache_bytes=2**20)
    app = create_app(settings, reader, SpeedTables(), False)
    below = {"from": "2026-01-05T00:00:00.000Z", "to": "2026-01-06T00:00:00.000Z"}  # to = H

    def stats(params: dict[str, str]) -> tuple[str, list[tuple[str, int, str]], int]:
        response = client.get("/v1/booths/b1/stats", params=params, headers=KEY)
        assert response.status_code == 200
        body = response.json()
        rows = [(r["window_start"], r["vehicle_count"], r["source"]) for r in body["rows"]]
        return response.headers["X-Cache"], rows, body["batch_version"]

    version_1 = [("2026-01-05T23:50:00.000Z", 3, "batch"), ("2026-01-05T23:55:00.000Z", 1, "batch")]
    with TestClient(app) as client:
        assert stats(below) == ("miss", version_1, 1)
        assert stats(below) == ("hit", version_1, 1)
        hourly = {**below, "granularity": "1h"}  # another query, another entry
        assert stats(hourly) == ("miss", [("2026-01-05T23:00:00.000Z", 4, "batch")], 1)
        assert stats(DAY)[0] == "bypass"  # reaches past H: the speed store takes part
        publish_batch(settings.batch_store, vehicle_count=7)
        deadline = time.monotonic() + 10
        while reader.version is None or reader.version.version != 2:
            assert time.monotonic() < deadline, "version 2 was not attached"
            time.sleep(0.01)
        version_2 = [("2026-01-05T23:50:00.000Z", 7, "batch"), version_1[1]]
        assert stats(below) == ("miss", version_2, 2)  # a new version starts with an empty cache
        assert stats(below) == ("hit", version_2, 2)
        metrics = client.get("/metrics").text
    assert 'lambdaline_batch_cache_responses_total{result="hit"} 2.0' in metrics
    assert 'lambdaline_batch_cache_responses_total{result="miss"} 3.0' in metrics
    assert 'lambdaline_batch_cache_responses_total{result="bypass"} 1.0' in metrics


def test_status_names_both_stores_when_the_api_runs_with_other_view_settings(
    tmp_path: Path,
) -> None:
    app = app_on_filled_stores(tmp_path)  # both stores: 5-minute windows
    ten_minutes = Settings(state_dir=tmp_path, api_keys=["test-key"], window=timedelta(minutes=10))
    app.dependency_overrides[app_settings] = lambda: ten_minutes
    with TestClient(app) as client:
        status = client.get("/v1/status", headers=KEY).json()
    assert status["errors"] == [
        f"batch version 1 was computed with {OTHER_LABELS}window=5m; this API runs with "
        f"{OTHER_LABELS}window=10m: give it the batch layer's settings",
        f"the speed store was written with {OTHER_LABELS}window=5m; this API runs with "
        f"{OTHER_LABELS}window=10m: give it the speed layer's settings",
    ]


def test_status_names_a_speed_store_of_other_view_settings(tmp_path: Path) -> None:
    app = app_on_filled_stores(tmp_path)
    tables = app.dependency_overrides[speed_tables]()
    with TestClient(app) as client:
        assert client.get("/v1/status", headers=KEY).json()["errors"] == []
        # a job started with window=10m after `speed reset`, this API not restarted
        tables.forget_progress()
        tables.note_progress(json.dumps({
            "query": "speed.booth_stats", "watermark": "2026-01-06T01:58:00.000Z",
            "view_settings": {"window": "10m", "max_trip": "1h", "registration_lookback": "400d"},
        }).encode())  # fmt: skip
        status = client.get("/v1/status", headers=KEY).json()
    assert status["errors"] == [
        "the speed store was written with max_trip=1h, registration_lookback=400d, window=10m; this API runs with "
        f"{OTHER_LABELS}window=5m: give it the speed layer's settings"
    ]


def test_status_names_an_unreachable_kafka_readyz_the_store_and_batch_answers_go_on(
    tmp_path: Path,
) -> None:
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    settings = Settings(state_dir=tmp_path, api_keys=["test-key"], kafka_bootstrap=address)
    publish_batch(settings.batch_store)
    with TestClient(create_app(settings)) as client:  # the real consumer, started by the app
        deadline = time.monotonic() + 30  # one attempt waits BOOTSTRAP_TIMEOUT_MS (5 s)
        while time.monotonic() < deadline:
            ready = client.get("/readyz")
            errors = client.get("/v1/status", headers=KEY).json()["errors"]
            if any("Unable to bootstrap" in error for error in errors):
                break
            time.sleep(0.2)
        # kafka-python says only that it gave up; lambdaline adds its attempts' reason, to
        # those with a key: /readyz, open to all, names the store and no exception text
        assert (
            f"KafkaBootstrapError: Unable to bootstrap from {address}; the last attempt "
            "failed: KafkaConnectionError: 111 ECONNREFUSED"
        ) in errors
        ready = client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["waiting_for"] == ["speed store not caught up"]
        rows = client.get("/v1/booths/b1/stats", params=DAY, headers=KEY).json()["rows"]
        # the batch store's two rows of b1 (publish_batch); the speed store is empty
        assert [(row["window_start"], row["source"]) for row in rows] == [
            ("2026-01-05T23:50:00.000Z", "batch"), ("2026-01-05T23:55:00.000Z", "batch"),
        ]  # fmt: skip
    # each failed attempt's network thread was closed, and the app's stop ended the last one
    assert not [t for t in threading.enumerate() if t.name == "kafka-io-lambdaline-serving"]


def test_a_version_that_cannot_be_opened_keeps_the_held_one_and_says_why_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = tmp_path / "batch"
    publish_batch(store, vehicle_count=3)
    reader = BatchReader(store)
    reader.refresh()
    publish_batch(store, vehicle_count=5)
    version_file(store, 2).unlink()  # CURRENT names a file that is gone

    with caplog.at_level("INFO", logger="lambdaline.serving"):
        for _ in range(3):  # what the poll does every second
            reader.refresh()
    assert reader.version is not None and reader.version.version == 1  # still serving
    assert reader.error is not None and reader.error.startswith("cannot open batch version 2")
    assert sum("batch_version_error" in r.getMessage() for r in caplog.records) == 1

    rollback(store, 1)  # back to the version held
    reader.refresh()
    assert reader.error is None
    assert reader.version.version == 1
    reader.stop()


def test_the_api_deletes_speed_rows_older_than_the_horizon_less_the_speed_retention(
    tmp_path: Path,
) -> None:
    settings = Settings(state_dir=tmp_path, api_keys=["test-key"])  # speed_retention: 3 days
    publish_batch(settings.batch_store)  # horizon 2026-01-06T00:00Z
    tables = SpeedTables()
    tables.apply("booth_stats", [
        speed_record(speed_booth("b1", "2026-01-02T23:55", 1, 1.0), 1),  # before H - 3 days
        speed_record(speed_booth("b1", "2026-01-03T00:00", 2, 2.0), 1),
        speed_record(speed_booth("b1", "2026-01-06T00:00", 3, 3.0), 1),
    ])  # fmt: skip

    def starts() -> list[datetime]:
        cursor = tables.cursor()
        try:
            found = cursor.execute("SELECT window_start FROM booth_stats ORDER BY 1").fetchall()
        finally:
            cursor.close()
        return [start for (start,) in found]

    app = create_app(settings, BatchReader(settings.batch_store, poll_s=0.01), tables, False)
    with TestClient(app):
        deadline = time.monotonic() + 10
        while len(starts()) == 3 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert starts() == [datetime(2026, 1, 3), datetime(2026, 1, 6)]


@pytest.mark.parametrize(
    ("path", "view", "filters"),
    [
        ("/v1/booths/b1/stats", "booth_stats", {"booth_id": "b1"}),
        ("/v1/stats", "booth_stats", {}),
        ("/v1/booths/b1/rolling", "booth_rolling", {"booth_id": "b1"}),
        ("/v1/vehicles/P1/trips", "vehicle_trips", {"license_plate": "P1"}),
        ("/v1/vehicles/P2/visits", "vehicle_visits", {"license_plate": "P2"}),
        ("/v1/alerts/expired-registrations", "expired_registrations", {}),
        ("/v1/alerts/expired-registrations", "expired_registrations", {"booth_id": "b2"}),
        ("/v1/diagnostics", "diagnostics", {}),
    ],
)
def test_any_view_by_name_answers_as_its_typed_endpoint(
    client: TestClient, path: str, view: str, filters: dict[str, str]
) -> None:
    params = {**DAY, "limit": 1000}
    typed = client.get(path, params={**params, **filters}, headers=KEY)
    by_name = client.get(f"/v1/views/{view}", params={**params, **filters}, headers=KEY)
    assert typed.status_code == by_name.status_code == 200, by_name.text
    assert typed.json()["rows"], f"{path} answers no rows: the comparison would hold for nothing"
    answer = typed.json()
    answer.pop("granularity", None)  # booth_stats' typed endpoints name the window; this one
    assert by_name.json() == answer  # never rolls up


def test_any_view_refuses_a_filter_its_key_does_not_have(client: TestClient) -> None:
    response = client.get(
        "/v1/views/diagnostics", params={**DAY, "license_plate": "P1"}, headers=KEY
    )
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert error["loc"] == ["query", "license_plate"]
    assert error["msg"] == (
        "diagnostics has no key column license_plate; its text key columns are booth_id, reason"
    )
    unknown = client.get("/v1/views/heavy_vehicles", params=DAY, headers=KEY)
    assert unknown.status_code == 422 and unknown.json()["detail"][0]["loc"] == ["path", "view"]
