"""``POST /v1/sql`` on real DuckDB stores filled by hand (``api_stores``): the views hold the
endpoints' rows, and the sandbox holds whether or not the check of what a query reads
runs first.

Each attack is tried twice: through the endpoint (400, nothing done), and straight on a
database of the sandbox (:meth:`serving.sql.SqlSandbox.connect`), as if the check before
it had been bypassed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from fastapi.testclient import TestClient

from serving.deps import app_settings
from serving.sql import SqlLimits, SqlRefusedError, SqlSandbox, check_query
from shared.platform.batch_store import read_current
from shared.platform.speed_tables import SpeedTables
from shared.settings import Settings
from tests.unit.api_stores import DAY, KEY, app_on_filled_stores

LIMIT_S = 1.0


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(
        state_dir=tmp_path, api_keys=["test-key"], serving_sql_timeout=f"{LIMIT_S}s",
        serving_sql_rows=100,
    )  # fmt: skip


@pytest.fixture
def client(tmp_path: Path, settings: Settings) -> Iterator[TestClient]:
    app = app_on_filled_stores(tmp_path)
    app.dependency_overrides[app_settings] = lambda: settings
    with TestClient(app) as test_client:
        yield test_client


@pytest.fixture
def sandbox(client: TestClient, settings: Settings) -> SqlSandbox:
    """A sandbox of the published version, as the endpoint builds it."""
    pointer = read_current(settings.batch_store)
    assert pointer is not None
    return SqlSandbox(settings.batch_store / pointer.path, memory_mb=64)


def ask(client: TestClient, query: str, headers: dict[str, str] = KEY) -> Any:
    return client.post("/v1/sql", json={"query": query}, headers=headers)


def as_dicts(body: dict[str, Any]) -> list[dict[str, Any]]:
    names = [column["name"] for column in body["columns"]]
    return [dict(zip(names, row, strict=True)) for row in body["rows"]]


def test_an_aggregate_over_both_stores_is_the_rows_merged_at_the_horizon(
    client: TestClient,
) -> None:
    """Worked out by hand from ``api_stores``: below H (2026-01-06) the batch store's b1
    23:50 (3) and 23:55 (1), b2 10:00 (4); from H the speed store's b1 00:00 (2), 00:05
    (4: batch id 2 beats 1's 1) and b3 01:00 (5). Its b1 23:55 (99) is below H: not a row."""
    response = ask(client, """
        SELECT booth_id, sum(vehicle_count) AS vehicles,
               count(*) FILTER (WHERE source = 'speed') AS from_speed
        FROM booth_stats GROUP BY booth_id ORDER BY booth_id
    """)  # fmt: skip
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["columns"] == [
        {"name": "booth_id", "type": "VARCHAR"},
        {"name": "vehicles", "type": "HUGEINT"},
        {"name": "from_speed", "type": "BIGINT"},
    ]
    assert body["rows"] == [["b1", 10, 2], ["b2", 4, 0], ["b3", 5, 1]]
    assert body["batch_version"] == 1
    assert body["horizon"] == "2026-01-06T00:00:00.000Z"
    assert body["truncated"] is False


@pytest.mark.parametrize(
    ("path", "view", "key"),
    [
        ("/v1/stats", "booth_stats", "booth_id, window_start"),
        ("/v1/booths/b1/rolling", "booth_rolling", "booth_id, window_start"),
        ("/v1/vehicles/P1/trips", "vehicle_trips", "license_plate, entry_time, booth_id"),
        ("/v1/vehicles/P2/visits", "vehicle_visits", "license_plate, session_start"),
        ("/v1/alerts/expired-registrations", "expired_registrations", "entry_time, license_plate"),
        ("/v1/diagnostics", "diagnostics", "booth_id, window_start, reason"),
    ],
)
def test_a_view_holds_its_endpoints_rows(
    client: TestClient, path: str, view: str, key: str
) -> None:
    endpoint = client.get(path, params={**DAY, "limit": 1000}, headers=KEY).json()["rows"]
    where = {
        "booth_rolling": "booth_id = 'b1'",
        "vehicle_trips": "license_plate = 'P1'",
        "vehicle_visits": "license_plate = 'P2'",
    }.get(view, "true")
    time_column = {
        "booth_stats": "window_start", "booth_rolling": "window_start",
        "vehicle_trips": "entry_time", "vehicle_visits": "session_start",
        "expired_registrations": "entry_time", "diagnostics": "window_start",
    }[view]  # fmt: skip
    query = (
        f"SELECT * FROM {view} WHERE {where} AND {time_column} >= TIMESTAMP '2026-01-05' "
        f"AND {time_column} < TIMESTAMP '2026-01-07' ORDER BY {key}"
    )
    response = ask(client, query)
    assert response.status_code == 200, response.text
    body = response.json()
    assert endpoint, f"{path} answers no rows: the comparison would hold for nothing"
    assert not body["truncated"]
    assert as_dicts(body) == endpoint


def test_a_withdrawn_candidate_is_no_row_here_either(client: TestClient) -> None:
    """P9's expired registration was withdrawn (its later registration had not expired):
    the endpoint shows P8 alone on 2026-01-06, and so does the view."""
    body = ask(client, "SELECT license_plate FROM expired_registrations WHERE source = 'speed'")
    assert body.json()["rows"] == [["P8"]]


def test_rows_stop_at_the_limit_and_say_so(client: TestClient) -> None:
    body = ask(client, "SELECT * FROM range(101)").json()
    assert body["rows"] == [[n] for n in range(100)]
    assert body["truncated"] is True


def test_no_key_no_answer(client: TestClient) -> None:
    assert ask(client, "SELECT 1", headers={}).status_code == 401
    assert ask(client, "SELECT 1", headers={"X-API-Key": "wrong"}).status_code == 401


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ("SELEC 1", "Parser Error"),
        ("SELECT nope FROM booth_stats", 'Referenced column "nope" not found'),
        ("SELECT * FROM no_such_table", "no_such_table is not a view"),
        ("INSERT INTO booth_stats SELECT * FROM booth_stats", "this is INSERT"),
        ("DETACH batch", "this is DETACH"),
        ("SELECT 1; SELECT 2", "one statement per request: this holds 2"),
    ],
)
def test_bad_sql_is_answered_400_with_what_is_wrong(
    client: TestClient, query: str, said: str
) -> None:
    response = ask(client, query)
    assert response.status_code == 400
    assert said in response.json()["detail"]


ATTACKS = {
    "copy": ("COPY (SELECT 1) TO '{tmp}/copied.csv'", "this is COPY", "file system operations are disabled"),
    "attach": ("ATTACH '{tmp}/attached.duckdb' AS other", "this is ATTACH", "file system operations are disabled"),
    "read_csv": ("SELECT * FROM read_csv('/etc/passwd')", "table function read_csv is not one", "file system operations are disabled"),
    "read_parquet": ("SELECT * FROM read_parquet('{tmp}/*.parquet')", "table function read_parquet is not one", "file system operations are disabled"),
    "replacement_scan": ("SELECT * FROM '/etc/passwd'", "/etc/passwd is not a view", "does not exist"),
    "install": ("INSTALL httpfs", "this is LOAD", "file system operations are disabled"),
    "load": ("LOAD httpfs", "this is LOAD", "disabled through configuration"),
    "set": ("SET enable_external_access = true", "this is SET", "the configuration has been locked"),
    "set_threads": ("SET threads = 64", "this is SET", "the configuration has been locked"),
    "pragma": ("PRAGMA threads = 64", "this is SET", "the configuration has been locked"),
    "reset": ("RESET lock_configuration", "this is", "the configuration has been locked"),
    "pragma_call": ("PRAGMA enable_profiling", "this is PRAGMA", "the configuration has been locked"),
    "two_statements": ("SELECT 1; COPY (SELECT 1) TO '{tmp}/second.csv'", "holds 2", "file system operations are disabled"),
}  # fmt: skip
"""Each attack: its SQL, what the endpoint's 400 says, what DuckDB says when it reaches the
sandbox's database (None: the same as the endpoint)."""


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_an_attack_fails_through_the_endpoint(
    client: TestClient, tmp_path: Path, name: str
) -> None:
    query, said, _ = ATTACKS[name]
    (tmp_path / "a.parquet").write_bytes(b"PAR1")
    response = ask(client, query.format(tmp=tmp_path))
    assert response.status_code == 400
    assert said in response.json()["detail"]
    assert not [path.name for path in tmp_path.glob("*.csv")]
    assert not (tmp_path / "attached.duckdb").exists()
    # the sandbox is as it was: the views still answer
    assert ask(client, "SELECT count(*) FROM booth_stats").json()["rows"] == [[6]]


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_an_attack_fails_on_the_sandbox_itself(
    sandbox: SqlSandbox, tmp_path: Path, name: str
) -> None:
    query, said, sandbox_said = ATTACKS[name]
    connection = sandbox.connect()
    with pytest.raises(duckdb.Error, match=sandbox_said or said):
        connection.execute(query.format(tmp=tmp_path)).fetchall()
    assert not [path.name for path in tmp_path.glob("*.csv")]
    assert not (tmp_path / "attached.duckdb").exists()
    settings = dict(connection.execute(
        "SELECT name, value FROM duckdb_settings() WHERE name IN "
        "('enable_external_access', 'lock_configuration', 'threads')"
    ).fetchall())  # fmt: skip
    assert settings == {
        "enable_external_access": "false",
        "lock_configuration": "true",
        "threads": "1",
    }
    connection.close()


def test_a_query_cannot_read_a_python_variable_by_its_name(sandbox: SqlSandbox) -> None:
    leaked = pa.table({"secret": ["api key"]})  # noqa: F841 - what a replacement scan would find
    connection = sandbox.connect()
    with pytest.raises(duckdb.CatalogException, match="leaked"):
        connection.execute("SELECT * FROM leaked").fetchall()
    connection.close()


CROSS_JOIN = "SELECT count(*) FROM range(100000) a CROSS JOIN range(100000000000) b"
"""10**16 pairs: a count no sandbox finishes, in little memory (one side is built)."""


def test_a_query_that_would_run_for_ever_is_interrupted_within_the_limit(
    client: TestClient,
) -> None:
    started = time.monotonic()
    response = ask(client, CROSS_JOIN)
    took = time.monotonic() - started
    assert response.status_code == 400
    assert "interrupted after" in response.json()["detail"]
    assert LIMIT_S <= took < LIMIT_S + 3, took


def test_the_sandbox_interrupts_it_too(sandbox: SqlSandbox) -> None:
    started = time.monotonic()
    limits = SqlLimits(
        rows=10, answer_bytes=2**20, timeout=timedelta(seconds=LIMIT_S), memory_mb=64
    )
    with pytest.raises(SqlRefusedError, match="interrupted after"):
        sandbox.run(CROSS_JOIN, SpeedTables(), None, limits, {})
    assert time.monotonic() - started < LIMIT_S + 3


def test_what_one_query_creates_the_next_does_not_see(sandbox: SqlSandbox) -> None:
    """Straight on the sandbox's database, past every check: a macro created in the
    database's own catalog is gone for the next query, which gets a database of its own."""
    first = sandbox.connect()
    first.execute("CREATE MACRO memory.main.planted() AS 42")
    assert first.execute("SELECT planted()").fetchall() == [(42,)]
    first.close()
    second = sandbox.connect()
    with pytest.raises(duckdb.CatalogException, match="planted"):
        second.execute("SELECT planted()").fetchall()
    second.close()


def test_the_check_lets_only_one_select_of_the_views_through() -> None:
    connection = duckdb.connect()
    for query in ("SELECT 1", "FROM booth_stats", "WITH a AS (SELECT 1) SELECT * FROM a",
                  "DESCRIBE booth_stats", "SELECT 1;", "SUMMARIZE SELECT * FROM range(3)",
                  "SELECT * FROM booth_stats b JOIN vehicle_trips t USING (booth_id)",
                  "SELECT (SELECT count(*) FROM diagnostics), unnest([1, 2])"):  # fmt: skip
        check_query(connection, query)
    for query in ("EXPLAIN ANALYZE SELECT 1", "CALL pragma_version()", "CHECKPOINT",
                  "CREATE TABLE x AS SELECT 1", "SELECT 1; SELECT 2", "", "SHOW TABLES",
                  "SELECT * FROM batch.dead_letters", "DESCRIBE batch.booth_stats",
                  "SELECT * FROM information_schema.tables", "FROM duckdb_tables()",
                  "SELECT 1 WHERE EXISTS (FROM speed_booth_stats)", "FROM query('SELECT 1')",
                  "FROM query_table('booth_stats')", "WITH a AS (SELECT 1) FROM b"):  # fmt: skip
        with pytest.raises(SqlRefusedError):
            check_query(connection, query)
    connection.close()
