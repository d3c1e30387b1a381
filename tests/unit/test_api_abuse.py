"""The API tried as an attacker would: one client must not stop or exhaust a worker, read
more than the views, or get a 500.

Each test is one finding of a probe of the API (docs/reliability.md, "Security"), on the
stores of ``api_stores``: in process, or, where the HTTP parser or a never-ending stream
is part of it, on a uvicorn server in this process with the parser ``lambdaline serve``
runs (:class:`serving.limits.BoundedHttpTools`).
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from fastapi.testclient import TestClient

import serving.sql
from tests.unit.api_stores import DAY, KEY, app_on_filled_stores, served

CROSS_JOIN = "SELECT count(*) FROM range(100000) a CROSS JOIN range(100000000000) b"
"""A query no sandbox finishes: it runs until its timeout."""


@pytest.fixture
def make_client(tmp_path: Path) -> Iterator[Callable[..., TestClient]]:
    """An in-process client of the app on the filled stores, with settings by their flat
    names; a 500 comes back as a response, as a client would see it."""
    with ExitStack() as stack:

        def make(**overrides: Any) -> TestClient:
            app = app_on_filled_stores(tmp_path, **overrides)
            return stack.enter_context(TestClient(app, raise_server_exceptions=False))

        yield make


@pytest.fixture
def client(make_client: Callable[..., TestClient]) -> TestClient:
    return make_client()


@pytest.fixture
def make_server(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """A uvicorn server of the app on the filled stores, with settings by their flat names
    (``api_stores.served``): its base URL; stopped after the test."""
    with ExitStack() as stack:

        def make(**overrides: Any) -> str:
            return stack.enter_context(served(app_on_filled_stores(tmp_path, **overrides)))

        yield make


def ask(client: TestClient, query: str, headers: dict[str, str] = KEY) -> httpx.Response:
    return client.post("/v1/sql", json={"query": query}, headers=headers)


def token(document: Any) -> str:
    text = document if isinstance(document, str) else json.dumps(document)
    return base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode()


# 1. SQL answers have no byte bound


def test_an_sql_answer_stops_at_its_byte_budget(make_client: Callable[..., TestClient]) -> None:
    client = make_client(serving_sql_answer_mb=1)
    response = ask(client, "SELECT repeat('x', 400000) AS x FROM range(50)")
    assert response.status_code == 200, response.text
    body = response.json()
    # two rows of 400,000 characters fit in 1 MiB, a third does not
    assert [len(x) for [x] in body["rows"]] == [400_000, 400_000]
    assert body["truncated"] is True
    assert len(response.content) < 2**20 + 4096
    one_too_large = ask(client, "SELECT repeat('x', 2000000) AS x").json()
    assert (one_too_large["rows"], one_too_large["truncated"]) == ([], True)


def test_an_sql_answer_is_parsed_and_encoded_off_the_event_loop(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[bool] = []
    check, encode = serving.sql.check_query, serving.sql._encoded_rows

    def on_loop() -> bool:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return False
        return True

    def checked(*args: Any) -> None:
        seen.append(on_loop())
        check(*args)

    def encoded(*args: Any) -> Any:
        seen.append(on_loop())
        return encode(*args)

    monkeypatch.setattr(serving.sql, "check_query", checked)
    monkeypatch.setattr(serving.sql, "_encoded_rows", encoded)
    assert ask(client, "SELECT count(*) FROM booth_stats").json()["rows"] == [[6]]
    assert seen == [False, False]


# 2. SQL reads raw tables


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ("SELECT * FROM batch.dead_letters", "batch.dead_letters is not a view"),
        ("SELECT * FROM batch.booth_stats", "batch.booth_stats is not a view"),
        ("SELECT (SELECT count(*) FROM batch.dead_letters)", "batch.dead_letters is not a view"),
        ("SELECT table_name FROM information_schema.tables", "information_schema.tables is not"),
        ("SELECT * FROM duckdb_tables()", "table function duckdb_tables is not one of"),
        ("SELECT path FROM duckdb_databases()", "table function duckdb_databases is not one"),
        ("SHOW ALL TABLES", "SHOW lists the catalog"),
        ("SELECT * FROM speed_booth_stats", "speed_booth_stats is not a view"),
        ("FROM query('SELECT * FROM batch.dead_letters')", "table function query is not one"),
    ],
)
def test_sql_reads_the_views_and_nothing_else(client: TestClient, query: str, said: str) -> None:
    response = ask(client, query)
    assert response.status_code == 400, response.text
    assert said in response.json()["detail"]


# 3. Slow SQL starves the health checks


def test_health_answers_within_a_second_while_slow_queries_hold_the_worker(
    make_client: Callable[..., TestClient],
) -> None:
    client = make_client(serving_sql_timeout="3s", serving_sql_concurrency=2)
    with ThreadPoolExecutor(40) as pool:
        queries = [pool.submit(ask, client, CROSS_JOIN) for _ in range(40)]
        time.sleep(0.5)  # the two admitted run, the others are answered
        took = []
        for _ in range(10):
            for path in ("/healthz", "/readyz"):
                started = time.monotonic()
                assert client.get(path).status_code in (200, 503)  # readyz: no consumer
                took.append(time.monotonic() - started)
            time.sleep(0.1)
        answers = [query.result() for query in queries]
    assert max(took) < 1.0, took
    statuses = sorted(answer.status_code for answer in answers)
    assert statuses == [400] * 2 + [429] * 38
    refused = next(answer for answer in answers if answer.status_code == 429)
    assert refused.headers["Retry-After"] == "1"
    assert "serving_sql_concurrency" in refused.json()["detail"]


# 4. Request bodies are read before the key is checked, with no size limit


def test_a_body_past_the_limit_is_refused_before_it_is_read_and_before_the_key(
    make_client: Callable[..., TestClient],
) -> None:
    client = make_client(serving_max_body_bytes=4096)
    large = json.dumps({"query": "SELECT 1 -- " + "x" * 10_000})
    without_key = client.post(
        "/v1/sql", content=large, headers={"Content-Type": "application/json"}
    )
    assert without_key.status_code == 413
    assert "serving_max_body_bytes" in without_key.json()["detail"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it is read
        for _ in range(10):
            yield b" " * 1000
        yield b'{"query": "SELECT 1"}'

    chunked = client.post(
        "/v1/sql", content=chunks(), headers={**KEY, "Content-Type": "application/json"}
    )
    assert chunked.status_code == 413
    assert ask(client, "SELECT 1").status_code == 200  # a body within the limit


# 5. A junk Last-Event-ID multiplies a stream's cost; the parser takes any header


def test_a_long_or_forged_last_event_id_is_a_422_naming_it(
    make_server: Callable[..., str],
) -> None:
    base = make_server(serving_token_partitions=100)
    for last_event_id, said in (
        ("booth_stats.0:1," * 1100, "characters; at most 8192"),
        (",".join(f"booth_stats.{n}:0" for n in range(150)), "names 150 partitions"),
        ("not-an-id", "is not <view>.<partition>:<offset>"),
    ):
        with httpx.stream(
            "GET", f"{base}/v1/stream", headers={**KEY, "Last-Event-ID": last_event_id},
            timeout=5,
        ) as response:  # fmt: skip
            assert response.status_code == 422
            [error] = json.loads(response.read())["detail"]
        assert error["loc"] == ["header", "last-event-id"]
        assert said in error["msg"]


def test_a_head_past_the_limits_is_refused_by_the_parser(make_server: Callable[..., str]) -> None:
    base = make_server()
    huge = httpx.get(f"{base}/healthz", headers={"X-Junk": "x" * 2_000_000}, timeout=10)
    assert huge.status_code == 431
    assert "serving_max_header_bytes" in huge.json()["detail"]
    long_url = httpx.get(f"{base}/healthz?x={'y' * 20_000}", timeout=10)
    assert long_url.status_code == 414
    assert httpx.get(f"{base}/healthz", timeout=10).status_code == 200  # the server goes on


def test_the_app_refuses_a_long_url_or_large_headers_under_any_server(
    client: TestClient,
) -> None:
    assert client.get("/healthz", params={"x": "y" * 20_000}).status_code == 414
    assert client.get("/healthz", headers={"X-Junk": "x" * 40_000}).status_code == 431


# 6. Stream clients are not capped (the resume's place: tests/unit/test_stream_hub.py)


def test_a_stream_past_the_client_limit_is_a_503_with_retry_after(
    make_server: Callable[..., str],
) -> None:
    base = make_server(serving_stream_clients=2)
    with ExitStack() as streams:
        for _ in range(2):
            opened = streams.enter_context(
                httpx.stream("GET", f"{base}/v1/stream", headers=KEY, timeout=5)
            )
            assert opened.status_code == 200
        with httpx.stream("GET", f"{base}/v1/stream", headers=KEY, timeout=5) as third:
            assert third.status_code == 503
            assert third.headers["Retry-After"] == "5"
            assert "serving_stream_clients" in json.loads(third.read())["detail"]


# 7. Forged tokens give 500s


DEEP = '{"v": 1, "speed": ' + "[" * 2000 + "]" * 2000 + "}"
FORGED_TOKENS = {
    "nested 2,000 deep": (token(DEEP), "not base64url of a JSON object"),
    "a partition written ²": (token({"v": 1, "speed": {"t": {"\u00b2": 1}}}), "is not a number"),
    "a 4,400-digit partition": (token({"v": 1, "speed": {"t": {"9" * 4400: 1}}}), "is not a number"),
    "a horizon in year 0 in UTC": (
        token({"v": 1, "horizon": "0001-01-01T00:00:00+01:00"}), "is not an ISO-8601 instant",
    ),
    "the horizon 5": (token({"v": 1, "horizon": 5}), "is not an ISO-8601 instant"),
    "a huge offset": (token({"v": 1, "input": {"t": {"0": 10**30}}}), "is not an offset"),
    "150 partitions, 100 allowed": (
        token({"v": 1, "input": {"t": {str(n): 1 for n in range(150)}}}),
        "names more partitions than serving_token_partitions",
    ),
    "a token past 8 KB": (token({"v": 1, "input": {"t" * 9000: {}}}), "at most 8192 are read"),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(FORGED_TOKENS))
def test_a_forged_token_is_a_422_naming_after(
    make_client: Callable[..., TestClient], name: str
) -> None:
    client = make_client(serving_token_partitions=100)
    forged, said = FORGED_TOKENS[name]
    response = client.get("/v1/stats", params={**DAY, "after": forged}, headers=KEY)
    assert response.status_code == 422, response.text
    [error] = response.json()["detail"]
    assert error["loc"] == ["query", "after"]
    assert said in error["msg"]


# 8. A non-ASCII key gives a 500; no rate limit


def test_a_non_ascii_key_is_a_401(client: TestClient) -> None:
    response = client.get("/v1/status", headers=[(b"X-API-Key", "clé-ключ".encode())])
    assert response.status_code == 401


def test_a_key_past_its_rate_gets_429_with_retry_after(
    make_client: Callable[..., TestClient],
) -> None:
    client = make_client(serving_rate_per_key=5)
    answers = [client.get("/v1/stats", params=DAY, headers=KEY) for _ in range(12)]
    statuses = [answer.status_code for answer in answers]
    # a burst of one second's worth (5), then about 5 a second: 12 requests well within a
    # second leave at least 5 refused
    assert statuses[:5] == [200] * 5 and statuses.count(429) >= 5, statuses
    refused = next(answer for answer in answers if answer.status_code == 429)
    assert refused.headers["Retry-After"] == "1"
    assert "serving_rate_per_key" in refused.json()["detail"]
    assert client.get("/healthz").status_code == 200  # no key, no bucket


# 9. Smaller leaks and gaps (/readyz: test_api's test of an unreachable Kafka; a query's
# creations: test_api_sql's test_what_one_query_creates_the_next_does_not_see)


def test_sql_errors_carry_no_path_of_the_host(
    make_client: Callable[..., TestClient], tmp_path: Path
) -> None:
    client = make_client(serving_sql_memory_mb=16)
    for query in (
        "SELECT database_name, path FROM duckdb_databases()",
        "SELECT list(range) FROM range(10000000)",  # out of memory: DuckDB's advice names paths
        "SELECT * FROM booth_stats WHERE nope",
    ):
        response = ask(client, query)
        assert response.status_code == 400, response.text
        assert str(tmp_path) not in response.text and "/tmp/" not in response.text, response.text


@pytest.mark.parametrize("path", ["/", "/dashboard/app.js", "/dashboard/app.css"])
def test_the_dashboard_is_served_with_security_headers(client: TestClient, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 200
    policy = response.headers["Content-Security-Policy"]
    assert "default-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert response.headers["X-Frame-Options"] == "DENY"
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Referrer-Policy"] == "no-referrer"
