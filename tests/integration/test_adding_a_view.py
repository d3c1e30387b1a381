"""Views added without touching the project, registered by ``LAMBDALINE_VIEW_MODULES``
only, run through every layer as the six do: ``tests.views.heavy_vehicles`` (a Spark
function, a query of its own in the speed job) and the two declarations of
``tests.views.declared`` (a roll-up and a best match, which join the speed operator's
booth and plate states: no query of their own).

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
from speed_layer.checkpoint import checkpoint_dir
from tests.integration.helpers import isolated_settings, read_all, run_cli, send, spawn_api
from tests.integration.oracle import ENTRY_COLUMNS, create_event_tables, oracle_views
from tests.scenarios import entry_value
from tests.views import declared, heavy_vehicles

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MODULE = "tests.views.heavy_vehicles, tests.views.declared"
KEY = "adding-a-view-key"
DAY_1, DAY_2 = "2026-01-05", "2026-01-06"

PLATES = {"h1": "P-A", "h4": "P-A", "h5": "P-A", "h6": "P-B", "h9": "P-B"}
"""The plates entered more than once (the others: ``P-<event id>``)."""

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
NEXT_BY_HAND = {  # entry: (the plate's next entry's time, its booth), within 2 h
    ("b1", "P-A", f"{DAY_1}T10:01:00.000Z"): (f"{DAY_1}T10:02:00.000Z", "b2"),
    ("b2", "P-A", f"{DAY_1}T10:02:00.000Z"): (f"{DAY_1}T10:07:00.000Z", "b1"),
    ("b1", "P-B", f"{DAY_2}T09:00:00.000Z"): (f"{DAY_2}T09:20:00.000Z", "b2"),
}


def plate(event_id: str) -> str:
    return PLATES.get(event_id, f"P-{event_id}")


def records() -> list[tuple[bytes, bytes, str]]:
    sent = []
    for event_id, booth, at, kind in ENTRIES:
        value = json.loads(entry_value(event_id, booth, plate(event_id), f"{at}.000Z", "2.50"))
        value["vehicle_type"] = kind
        sent.append((b"P", json.dumps(value).encode(), f"{at}.100Z"))
    # a late-day entry well past the others: the speed watermark passes every window above
    sent.append((b"P", entry_value("h0", "b9", "P-h0", f"{DAY_2}T12:00:00.000Z", "1.00"),
                 f"{DAY_2}T12:00:00.100Z"))  # fmt: skip
    return sent


def reference(settings: Settings, view: str = "heavy_vehicles") -> list[dict[str, Any]]:
    """A view's reference SQL over the entries as sent."""
    with duckdb.connect() as connection:
        create_event_tables(connection)
        for sent, (event_id, booth, at, kind) in enumerate(
            [*ENTRIES, ("h0", "b9", f"{DAY_2}T12:00:00", 1)]
        ):
            connection.execute(
                f"INSERT INTO entries {ENTRY_COLUMNS[:-1]}, vehicle_type) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    event_id,
                    booth,
                    plate(event_id),
                    datetime.fromisoformat(at),
                    "1.00" if event_id == "h0" else "2.50",
                    sent,
                    kind,
                ],  # as records() sends
            )
        # this process registered none of them: the sizes they add at their defaults
        added = {size.name: size.default for view in declared.VIEWS for size in view.sizes}
        sizes = {**added, **settings.views.sizes}
        views = oracle_views(connection, sizes, [heavy_vehicles.VIEW, *declared.VIEWS])
    return views[view]


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


def _served(base: str, view: str) -> list[dict[str, Any]]:
    answer = httpx2.get(
        f"{base}/v1/views/{view}",
        params={"from": f"{DAY_1}T00:00:00Z", "to": f"{DAY_2}T23:59:59Z"},
        headers={"X-API-Key": KEY}, timeout=30,
    )  # fmt: skip
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["horizon"].startswith(DAY_2)  # the batch layer holds the first day
    return list(body["rows"])


def test_the_declared_best_match_is_what_was_worked_out_by_hand(deployed: Any) -> None:
    settings, _ = deployed
    rows = reference(settings, "next_entries")
    assert {
        (r["booth_id"], r["license_plate"], r["entry_time"]): (
            r["next_entry_time"],
            r["next_booth_id"],
        )
        for r in rows
    } == NEXT_BY_HAND


@pytest.mark.parametrize(
    "view", [spec.name for spec in (declared.TOLLS_BY_TYPE, declared.NEXT_ENTRIES)]
)
def test_the_declared_views_are_served_merged_as_their_reference_says(
    deployed: Any, view: str
) -> None:
    settings, base = deployed
    rows = _served(base, view)
    spec = next(v.spec for v in declared.VIEWS if v.name == view)
    assert [{name: row[name] for name in spec.column_names} for row in rows] == reference(
        settings, view
    )
    assert {row["source"] for row in rows} == {"batch", "speed"}
    assert all(row["final"] for row in rows if row["source"] == "batch")


def test_the_declared_views_join_the_operator_and_add_no_query(deployed: Any) -> None:
    settings, _ = deployed
    queries = {path.name for path in checkpoint_dir(settings).iterdir() if path.is_dir()}
    assert "views" in queries and "heavy_vehicles" in queries  # the operator's, the own query's
    assert not queries & {"tolls_by_type", "next_entries"}
    for view in ("tolls_by_type", "next_entries"):
        assert list(read_all(settings, settings.topics.speed(view))), f"no speed records of {view}"
