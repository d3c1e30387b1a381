"""A view added without touching the project: ``tests.views.heavy_vehicles``, registered
by ``LAMBDALINE_VIEW_MODULES`` only, runs through every layer as the six do.

The commands run as their own processes (as a deployment runs them), each reading
the variable: ``topics create``, ``batch run`` (the first day), ``speed run
--available-now`` (both days) and ``serve``. The expected rows are the view's
reference SQL over the events as sent, counted by hand as well.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime
from typing import Any

import duckdb
import httpx2
import pytest

from lambdaline.processes import stop_process, wait_until_answers
from shared.settings import Settings
from tests.integration.helpers import isolated_settings, read_all, run_cli, send, spawn_api
from tests.integration.oracle import ENTRY_COLUMNS, create_event_tables, oracle_views
from tests.scenarios import entry_value
from tests.views import heavy_vehicles

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MODULE = "tests.views.heavy_vehicles"
KEY = "adding-a-view-key"
DAY_1, DAY_2 = "2026-01-05", "2026-01-06"

ENTRIES = [  # event_id, booth, entry_time, vehicle_type
    ("h1", "b1", f"{DAY_1}T10:01:00", 2),
    ("h2", "b1", f"{DAY_1}T10:03:00", 3),
    ("h3", "b1", f"{DAY_1}T10:04:00", 1),  # light: not counted
    ("h4", "b2", f"{DAY_1}T10:02:00", 2),
    ("h5", "b1", f"{DAY_1}T10:07:00", 2),
    ("h6", "b1", f"{DAY_2}T09:00:00", 3),
    ("h7", "b1", f"{DAY_2}T09:04:59", 2),
    ("h8", "b2", f"{DAY_2}T09:01:00", 1),  # light
    ("h9", "b2", f"{DAY_2}T09:20:00", 2),
]
BY_HAND = {  # (booth, window start): heavy entries, 5-minute windows
    ("b1", f"{DAY_1}T10:00:00.000Z"): 2,
    ("b2", f"{DAY_1}T10:00:00.000Z"): 1,
    ("b1", f"{DAY_1}T10:05:00.000Z"): 1,
    ("b1", f"{DAY_2}T09:00:00.000Z"): 2,
    ("b2", f"{DAY_2}T09:20:00.000Z"): 1,
}


def records() -> list[tuple[bytes, bytes, str]]:
    sent = []
    for event_id, booth, at, kind in ENTRIES:
        value = json.loads(entry_value(event_id, booth, f"P-{event_id}", f"{at}.000Z", "2.50"))
        value["vehicle_type"] = kind
        sent.append((b"P", json.dumps(value).encode(), f"{at}.100Z"))
    # a late-day entry well past the others: the speed watermark passes every window above
    sent.append((b"P", entry_value("h0", "b9", "P-h0", f"{DAY_2}T12:00:00.000Z", "1.00"),
                 f"{DAY_2}T12:00:00.100Z"))  # fmt: skip
    return sent


def reference(settings: Settings) -> list[dict[str, Any]]:
    """The view's reference SQL over the entries as sent."""
    with duckdb.connect() as connection:
        create_event_tables(connection)
        for sent, (event_id, booth, at, kind) in enumerate(
            [*ENTRIES, ("h0", "b9", f"{DAY_2}T12:00:00", 1)]
        ):
            connection.execute(
                f"INSERT INTO entries {ENTRY_COLUMNS[:-1]}, vehicle_type) "
                "VALUES (?, ?, ?, ?, 2.50, ?, ?)",
                [event_id, booth, f"P-{event_id}", datetime.fromisoformat(at), sent, kind],
            )
        views = oracle_views(connection, settings.views.sizes, [heavy_vehicles.VIEW])
    return views["heavy_vehicles"]


@pytest.fixture(scope="module")
def deployed(kafka: Settings, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The view registered in every process; the API's base URL and the settings."""
    state = tmp_path_factory.mktemp("adding-a-view")
    settings = isolated_settings(kafka, state)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LAMBDALINE_VIEW_MODULES", MODULE)
        created = run_cli(settings, "topics", "create")
        assert created.returncode == 0, created.stderr[-2000:]
        send(settings, settings.topics.entries, records())
        batch = run_cli(settings, "batch", "run", "--date", DAY_1, timeout_s=600)
        assert batch.returncode == 0, batch.stderr[-3000:]
        speed = run_cli(settings, "speed", "run", "--available-now", timeout_s=600)
        assert speed.returncode == 0, speed.stderr[-3000:]
        api, base = spawn_api(settings, KEY, state / "api.log")
    try:
        with httpx2.Client(base_url=base, timeout=10) as client:
            assert wait_until_answers(client, 120, "/readyz", api), (state / "api.log").read_text()
        yield settings, base
    finally:
        stop_process(api)


def test_the_reference_sql_counts_what_was_counted_by_hand(deployed: Any) -> None:
    settings, _ = deployed
    rows = reference(settings)
    assert {(row["booth_id"], row["window_start"]): row["heavy_count"] for row in rows} == BY_HAND


def test_the_batch_layer_publishes_it(deployed: Any) -> None:
    settings, _ = deployed
    [version] = sorted((settings.batch_store / "versions").glob("*.duckdb"))
    with duckdb.connect(str(version), read_only=True) as connection:
        rows = connection.execute(
            "SELECT booth_id, strftime(window_start, '%Y-%m-%dT%H:%M:%S.%gZ'), heavy_count "
            "FROM heavy_vehicles ORDER BY ALL"
        ).fetchall()
    assert {(b, s): n for b, s, n in rows} == {k: n for k, n in BY_HAND.items() if DAY_1 in k[1]}


def test_the_speed_layer_writes_it_to_its_own_topic(deployed: Any) -> None:
    settings, _ = deployed
    latest: dict[bytes, dict[str, Any]] = {}
    for record in read_all(settings, settings.topics.speed("heavy_vehicles")):
        value = json.loads(record.value)
        if record.key not in latest or latest[record.key]["version"] <= value["version"]:
            latest[record.key] = value
    assert {(v["booth_id"], v["window_start"]): v["heavy_count"] for v in latest.values()} == (
        BY_HAND
    )


def test_the_api_serves_it_merged_across_the_horizon_as_its_reference_says(deployed: Any) -> None:
    settings, base = deployed
    answer = httpx2.get(
        f"{base}/v1/views/heavy_vehicles",
        params={"from": f"{DAY_1}T00:00:00Z", "to": f"{DAY_2}T23:59:59Z"},
        headers={"X-API-Key": KEY}, timeout=30,
    )  # fmt: skip
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["horizon"].startswith(DAY_2)  # the batch layer holds the first day
    served = [
        {name: row[name] for name in heavy_vehicles.SPEC.column_names} for row in body["rows"]
    ]
    assert served == reference(settings)
    sources = Counter((row["window_start"][:10], row["source"]) for row in body["rows"])
    assert sources == {(DAY_1, "batch"): 3, (DAY_2, "speed"): 2}
    assert all(row["final"] for row in body["rows"])


def test_sql_reads_it(deployed: Any) -> None:
    _, base = deployed
    answer = httpx2.post(
        f"{base}/v1/sql",
        json={"query": "SELECT source, sum(heavy_count) FROM heavy_vehicles GROUP BY ALL ORDER BY 1"},
        headers={"X-API-Key": KEY}, timeout=30,
    )  # fmt: skip
    assert answer.status_code == 200, answer.text
    assert answer.json()["rows"] == [["batch", 4], ["speed", 3]]
