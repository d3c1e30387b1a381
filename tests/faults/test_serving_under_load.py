"""The API (``lambdaline serve``, a process) under 200 concurrent clients through
version swaps and a bounce of the Kafka cluster its speed store reads.

Each version is published by the batch layer's own ``publish_version`` (a new DuckDB
file, then ``CURRENT`` renamed), with booth_stats rows whose ``vehicle_count`` is the
version's number: an answer mixes two versions if a row's count differs from the
``batch_version`` it names. Every range asked for lies below the horizon, so the
batch store answers it all. The brokers stop (all three) and start again while the
clients ask: as docs/architecture.md says, a broker lost after the speed store caught
up leaves the API ready, serving what it has read, with the error in ``/v1/status``.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import duckdb
import httpx2
import pytest

from batch_layer.publish import empty_store_tables, publish_version
from lambdaline import kafka_broker
from lambdaline.processes import log_tail, stop_process, wait_until_answers
from shared.platform.batch_store import STORE_TABLE_BY_NAME, read_current
from shared.settings import Settings
from tests.faults.conftest import Results, times
from tests.integration.helpers import isolated_settings, spawn_api, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.faults]

KEY = "faults-load-key"
CLIENTS = 200
SWAPS = times(reduced=5, full=20)
DAY = date(2026, 1, 5)
BOOTHS = [f"b{number}" for number in range(1, 21)]


@dataclass
class Tally:
    """What the clients saw."""

    answers: Counter[int] = field(default_factory=Counter)  # by status code
    versions: Counter[int] = field(default_factory=Counter)  # by batch_version answered
    mixed: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # requests that got no answer


def test_two_hundred_clients_through_version_swaps_and_a_broker_bounce(
    kafka_cluster: Settings, tmp_path: Path, rng: random.Random, results: Results
) -> None:
    # one key for every client, a test of swaps and bounces, not of the per-key rate limit
    settings = isolated_settings(kafka_cluster, tmp_path / "state").updated(
        api_keys=[KEY], serving_rate_per_key=1e6
    )
    _publish(settings, 1)
    log = tmp_path / "serve.log"
    server, url = spawn_api(settings, KEY, log)
    headers = {"X-API-Key": KEY}
    try:
        with httpx2.Client(base_url=url, headers=headers, timeout=30) as api:
            assert wait_until_answers(api, 90, process=server), log_tail(log, 30)
            tally = Tally()
            stop = threading.Event()
            load = threading.Thread(
                target=asyncio.run, args=(_clients(url, tally, stop, rng.random()),)
            )
            load.start()
            try:
                degraded = _swaps_and_bounce(settings, kafka_cluster, api, tally)
            finally:
                stop.set()
                load.join(timeout=120)
            assert not load.is_alive()
        assert server.poll() is None, log_tail(log, 30)
    finally:
        stop_process(server)
        kafka_broker.start(kafka_cluster)  # whole again for the next case, whatever failed

    five_hundreds = sum(n for code, n in tally.answers.items() if code >= 500)
    assert tally.failures == [], tally.failures[:5]
    assert five_hundreds == 0, tally.answers
    assert set(tally.answers) == {200}, tally.answers
    assert tally.mixed == [], tally.mixed[:5]
    assert set(tally.versions) == set(range(1, SWAPS + 2)), tally.versions  # each one served
    requests = sum(tally.answers.values())
    assert requests > 20 * CLIENTS  # the load was real
    results.add(
        f"{CLIENTS} concurrent API clients through {SWAPS} version swaps and a bounce of "
        "every broker",
        SWAPS + 1,
        f"{requests:,} answers, no 5xx, none mixing versions; during the bounce {degraded}",
    )


def _swaps_and_bounce(
    settings: Settings, kafka_cluster: Settings, api: httpx2.Client, tally: Tally
) -> str:
    """Publish versions 2..SWAPS+1 while the clients ask, stopping every broker and
    starting them again halfway; what /readyz and /v1/status said meanwhile."""
    bounce_after = SWAPS // 2 + 1
    said = ""
    for version in range(2, SWAPS + 2):
        _wait_for_answers(tally, 5 * CLIENTS)
        _publish(settings, version)
        wait_until(lambda: tally.versions[version] > 0, 30, f"version {version} served")  # noqa: B023
        if version == bounce_after:
            kafka_broker.stop(kafka_cluster)

            def degraded() -> bool:
                return bool(api.get("/v1/status").json()["errors"])

            wait_until(degraded, 60, "/v1/status to name the lost brokers")
            errors = api.get("/v1/status").json()["errors"]
            ready = api.get("/readyz")
            assert ready.status_code == 200, ready.text  # serving what it has read
            said = f"/readyz 200 and /v1/status errors {errors}"
            kafka_broker.start(kafka_cluster)
            wait_until(lambda: not api.get("/v1/status").json()["errors"], 90, "errors to clear")
    _wait_for_answers(tally, 5 * CLIENTS)
    return said


def _wait_for_answers(tally: Tally, more: int) -> None:
    """Let the clients make ``more`` requests first."""
    target = sum(tally.answers.values()) + more
    wait_until(lambda: sum(tally.answers.values()) >= target, 60, f"{more} more answers")


async def _clients(url: str, tally: Tally, stop: threading.Event, seed: float) -> None:
    # a connection idle past uvicorn's keep-alive (5 s) is closed by the server; one the pool
    # reuses at that moment is lost without an answer (httpx's default expiry is also 5 s).
    # Clients drop idle connections first, as a client of any HTTP/1.1 server should.
    limits = httpx2.Limits(
        max_connections=CLIENTS, max_keepalive_connections=CLIENTS, keepalive_expiry=2.0
    )
    async with httpx2.AsyncClient(
        base_url=url, headers={"X-API-Key": KEY}, timeout=60,
        limits=limits,
    ) as client:  # fmt: skip
        await asyncio.gather(
            *(_client(client, tally, stop, random.Random(f"{seed}:{n}")) for n in range(CLIENTS))
        )


async def _client(
    client: httpx2.AsyncClient, tally: Tally, stop: threading.Event, rng: random.Random
) -> None:
    """Ask one booth's stats over an hour of the day, again and again, until stopped."""
    while not stop.is_set():
        booth = rng.choice(BOOTHS)
        start = datetime(2026, 1, 5, tzinfo=UTC) + timedelta(hours=rng.randrange(23))
        params = {
            "from": start.isoformat().replace("+00:00", "Z"),
            "to": (start + timedelta(hours=1)).isoformat().replace("+00:00", "Z"),
        }
        path = f"/v1/booths/{booth}/stats"
        try:
            response = await client.get(path, params=params)
        except httpx2.HTTPError as error:
            tally.failures.append(f"{path}: {error!r}")
            continue
        tally.answers[response.status_code] += 1
        if response.status_code != 200:
            continue
        body = response.json()
        version = body["batch_version"]
        tally.versions[version] += 1
        counts = {row["vehicle_count"] for row in body["rows"]}
        if counts != {version} or len(body["rows"]) != 12:
            tally.mixed.append(
                f"version {version}: counts {sorted(counts)}, {len(body['rows'])} rows"
            )


def _publish(settings: Settings, version: int) -> None:
    """Publish the next version: every booth's 5-minute windows of DAY, each with
    ``version`` vehicles and a toll of ``version``."""
    fresh = empty_store_tables()
    spec = STORE_TABLE_BY_NAME["booth_stats"]
    with duckdb.connect() as db:
        db.execute(spec.ddl())
        db.execute(
            """
            INSERT INTO booth_stats
            SELECT booth, w, w + INTERVAL 5 MINUTE, ?, ?, w, w + INTERVAL 4 MINUTE
            FROM unnest(?) AS b(booth),
                 generate_series(TIMESTAMP '2026-01-05', TIMESTAMP '2026-01-05 23:55',
                                 INTERVAL 5 MINUTE) AS s(w)
            """,
            [version, version, BOOTHS],
        )
        fresh["booth_stats"] = db.sql("SELECT * FROM booth_stats").to_arrow_table()
    published = publish_version(
        settings.batch_store, fresh, [DAY], datetime(2026, 1, 6, tzinfo=UTC), None,
        settings.batch.keep_versions, view_settings=settings.views.labels,
    )  # fmt: skip
    assert published.version == version
    current = read_current(settings.batch_store)
    assert current is not None and current.version == version
