"""What an answer is consistent with: the token, ``after``, ``max_staleness`` and ``version``,
on real DuckDB stores filled by hand (``api_stores``); what the worker has materialised is
set by hand (``CaughtUp``) in place of the speed consumer."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from batch_layer.publish import rollback
from serving.batch_reader import BatchReader
from serving.consistency import ConsistencyToken, InputProgress
from serving.deps import app_settings, speed_consumer
from shared.settings import Settings
from tests.unit.api_stores import DAY, KEY, CaughtUp, app_on_filled_stores, publish_batch

VIEW_PATHS = [
    "/v1/booths/b1/stats", "/v1/stats", "/v1/booths/b1/rolling", "/v1/vehicles/P1/trips",
    "/v1/vehicles/P1/visits", "/v1/alerts/expired-registrations", "/v1/diagnostics",
]  # fmt: skip
BEFORE_H = {"from": "2026-01-05T00:00:00Z", "to": "2026-01-06T00:00:00Z"}
"""Wholly below version 1's horizon: the batch store alone answers."""


@pytest.fixture
def worker() -> CaughtUp:
    return CaughtUp()


@pytest.fixture
def client(tmp_path: Path, worker: CaughtUp) -> Iterator[TestClient]:
    # DuckDB's default threads, as `batch rollback` opens a version with (in this process)
    app = app_on_filled_stores(tmp_path, BatchReader(Settings(state_dir=tmp_path).batch_store))
    settings = Settings(state_dir=tmp_path, api_keys=["test-key"], serving_after_wait="400ms")
    app.dependency_overrides[app_settings] = lambda: settings
    app.dependency_overrides[speed_consumer] = lambda: worker
    with TestClient(app) as test_client:
        yield test_client


def token(document: dict[str, Any]) -> str:
    """A token written by hand, as a client would (base64url of the JSON, no padding)."""
    raw = json.dumps({"v": 1, **document}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decoded(text: str) -> dict[str, Any]:
    """A token's JSON, decoded by hand."""
    return json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def test_every_view_answer_carries_what_it_is_consistent_with(client: TestClient) -> None:
    for path in VIEW_PATHS:
        body = client.get(path, params=DAY, headers=KEY).json()
        assert decoded(body["consistency"]) == {
            "v": 1,
            "generation": 1,
            "batch_version": 1,
            "horizon": "2026-01-06T00:00:00.000Z",
            "speed": {"speed.booth_stats": {"0": 12, "1": 7}},
            "input": {"toll.entries": {"0": 40, "1": 33}},
        }, path


def test_after_answers_at_once_when_the_worker_has_what_the_token_names(
    client: TestClient,
) -> None:
    own = client.get("/v1/stats", params=DAY, headers=KEY).json()["consistency"]
    for asked in (own, token({"input": {"toll.entries": {"1": 33}}}), token({})):
        started = time.monotonic()
        response = client.get("/v1/stats", params={**DAY, "after": asked}, headers=KEY)
        assert response.status_code == 200
        assert time.monotonic() - started < 0.3


def test_after_refuses_with_409_what_is_not_materialised_in_time(client: TestClient) -> None:
    asked = token({"batch_version": 2, "input": {"toll.entries": {"1": 34}},
                   "speed": {"speed.vehicle_trips": {"0": 1}}})  # fmt: skip
    started = time.monotonic()
    response = client.get("/v1/booths/b1/stats", params={**DAY, "after": asked}, headers=KEY)
    assert time.monotonic() - started >= 0.4  # it waited serving_after_wait
    assert response.status_code == 409
    body = response.json()
    assert body["behind"] == [
        "batch version 2 (serving 1)",
        "speed speed.vehicle_trips[0] to 1 (at 0)",
        "input toll.entries[1] to 34 (at 33)",
    ]
    assert body["detail"].startswith("not materialised within 0.4 s: batch version 2")
    assert decoded(body["consistency"])["input"] == {"toll.entries": {"0": 40, "1": 33}}


def test_after_answers_once_the_event_is_materialised(client: TestClient, worker: CaughtUp) -> None:
    produced_at = 33  # a client's record at offset 33 of toll.entries partition 1
    asked = token({"input": {"toll.entries": {"1": produced_at + 1}}})

    def materialise() -> None:
        time.sleep(0.15)
        worker.inputs = {"toll.entries": {0: 40, 1: 35}}

    applier = threading.Thread(target=materialise)
    applier.start()
    response = client.get("/v1/stats", params={**DAY, "after": asked}, headers=KEY)
    applier.join()
    assert response.status_code == 200
    assert decoded(response.json()["consistency"])["input"]["toll.entries"]["1"] == 35


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("not a token!", "not base64url of a JSON object"),
        (token({"v": 2}), "format 2 is not 1"),
        (
            token({"input": {"toll.entries": {"0": -1}}}),
            "input.toll.entries.0: -1 is not an offset",
        ),
        (token({"speed": {"speed.x": {"a": 1}}}), "speed.speed.x: partition 'a' is not a number"),
        (token({"batch_version": "7"}), "batch_version '7' is not a version number"),
    ],
)
def test_a_bad_token_is_a_422_naming_after(client: TestClient, text: str, why: str) -> None:
    response = client.get("/v1/stats", params={**DAY, "after": text}, headers=KEY)
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert error["loc"] == ["query", "after"]
    assert error["msg"] == f"not a consistency token: {why}"


def test_max_staleness_refuses_an_answer_with_speed_rows_older_than_asked(
    client: TestClient,
) -> None:
    response = client.get("/v1/stats", params={**DAY, "max_staleness": 60}, headers=KEY)
    assert response.status_code == 409
    body = response.json()
    watermark = datetime(2026, 1, 6, 0, 58, tzinfo=UTC)  # api_stores' progress report
    age = (datetime.now(UTC) - watermark).total_seconds()
    assert body["speed_watermark"] == "2026-01-06T00:58:00.000Z"
    assert age - 5 < body["staleness_seconds"] <= age
    assert body["detail"].endswith("s old, more than max_staleness 60 s")
    # wholly before the horizon, the answer takes no speed rows: nothing is stale
    below = client.get("/v1/stats", params={**BEFORE_H, "max_staleness": 60}, headers=KEY)
    assert below.status_code == 200
    lenient = client.get("/v1/stats", params={**DAY, "max_staleness": age + 60}, headers=KEY)
    assert lenient.status_code == 200


def b1_counts(client: TestClient, **params: Any) -> tuple[int, int, list[int]]:
    response = client.get("/v1/booths/b1/stats", params={**BEFORE_H, **params}, headers=KEY)
    assert response.status_code == 200, response.text
    body = response.json()
    return (
        body["batch_version"],
        decoded(body["consistency"])["batch_version"],
        [row["vehicle_count"] for row in body["rows"]],
    )


def wait_for_version(client: TestClient, number: int) -> None:
    deadline = time.monotonic() + 10
    while client.get("/v1/status", headers=KEY).json()["batch_version"] != number:
        assert time.monotonic() < deadline, f"version {number} was not attached"
        time.sleep(0.05)


def test_version_serves_a_kept_version_as_it_was_and_refuses_a_rolled_back_one(
    client: TestClient, tmp_path: Path
) -> None:
    store = Settings(state_dir=tmp_path).batch_store
    publish_batch(store, vehicle_count=8)  # version 2: b1's 23:50 window holds 8, not 3
    wait_for_version(client, 2)
    assert b1_counts(client) == (2, 2, [8, 1])
    assert b1_counts(client, version=1) == (1, 1, [3, 1])
    assert b1_counts(client, version=2) == (2, 2, [8, 1])

    rollback(store, 1)
    wait_for_version(client, 1)
    refused = client.get("/v1/booths/b1/stats", params={**BEFORE_H, "version": 2}, headers=KEY)
    assert refused.status_code == 410
    assert refused.json() == {"detail": "batch version 2 was rolled back: not served"}
    unknown = client.get("/v1/stats", params={**BEFORE_H, "version": 9}, headers=KEY)
    assert unknown.status_code == 404
    assert unknown.json() == {"detail": "batch version 9 is not kept (kept: 1, 2)"}


def test_a_token_round_trips_and_orders_pointwise() -> None:
    mine = ConsistencyToken(3, datetime(2026, 1, 6, tzinfo=UTC), {"s": {0: 5}}, {"t": {1: 9}})
    assert ConsistencyToken.decode(mine.encode()) == mine
    assert mine.behind(ConsistencyToken(2, None, {"s": {0: 5}}, {"t": {1: 9}})) == []
    assert mine.behind(ConsistencyToken(None, None, {}, {"t": {0: 1}})) == [
        "input t[0] to 1 (at 0)"
    ]


def test_input_offsets_count_once_the_rows_written_before_their_report_are_read() -> None:
    progress = InputProgress(["toll.entries", "toll.exits"])
    progress.reported("speed.booth_stats", [{"toll.entries": {"0": 10, "1": 5}}])
    progress.reported("speed.lookups", [
        {"toll.entries": {"0": 8}}, {"toll.exits": {"0": 3}},
        {"speed.internal.diagnostic_entries": {"0": 99}},  # not an input topic
    ])  # fmt: skip
    store = ("speed.booth_stats", 0)
    progress.positions_reached({store: 10_000})
    assert progress.offsets == {}  # no end offsets asked for after the reports yet
    progress.ends_asked({store: 100})
    progress.positions_reached({store: 99})
    assert progress.offsets == {}
    progress.positions_reached({store: 100})
    # partition 0 of the entries: the least of the two queries that read it
    assert progress.offsets == {"toll.entries": {0: 8, 1: 5}, "toll.exits": {0: 3}}

    progress.reported("speed.lookups", [{"toll.entries": {"0": 30}}, {"toll.exits": {"0": 4}}])
    progress.reported("speed.booth_stats", [{"toll.entries": {"0": 25, "1": 6}}])
    assert progress.awaiting_ends
    progress.positions_reached({store: 100})  # the reports came after those ends
    assert progress.offsets["toll.entries"] == {0: 8, 1: 5}
    progress.ends_asked({store: 120})
    progress.positions_reached({store: 120})
    assert progress.offsets == {"toll.entries": {0: 25, 1: 6}, "toll.exits": {0: 4}}
    assert not progress.has_reports
    progress.forget()
    assert progress.offsets == {}


def test_input_offsets_never_go_back_when_a_query_reports_later_than_the_others() -> None:
    progress = InputProgress(["toll.entries"])
    store = ("speed.booth_stats", 0)
    progress.reported("speed.booths", [{"toll.entries": {"0": 738}}])
    progress.ends_asked({store: 10})
    progress.positions_reached({store: 10})
    assert progress.offsets == {"toll.entries": {0: 738}}
    # the lookups' first report, behind the booths': the offset handed out stands
    progress.reported("speed.lookups", [{"toll.entries": {"0": 737}}])
    progress.ends_asked({store: 11})
    progress.positions_reached({store: 11})
    assert progress.offsets == {"toll.entries": {0: 738}}
    progress.reported("speed.lookups", [{"toll.entries": {"0": 800}}])
    progress.reported("speed.booths", [{"toll.entries": {"0": 790}}])
    progress.ends_asked({store: 12})
    progress.positions_reached({store: 12})
    assert progress.offsets == {"toll.entries": {0: 790}}
