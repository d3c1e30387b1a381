"""Serving-layer load: a booth-day query at increasing request rates (a measurement, not a test).

    .venv/bin/python benchmarks/serving_load.py [--rates 100,250,500,1000] [--seconds 10]
        [--workers N] [--cache-mb MB] [--cold] [--shapes]

Builds a populated batch store (one published version: 50 booths x 60 days of
5-minute booth_stats = 864,000 rows, plus 1,000,000 vehicle_trips), starts its
own broker (the API follows the speed store there) and `lambdaline serve` in a
process group of its own, then sends `GET /v1/booths/{booth}/stats` for a random
booth and day (288 rows) open-loop: at each rate, requests start on a fixed
schedule whether or not earlier ones finished, and latency counts from the
scheduled start (so a slow server cannot hide its queueing). It reports
requests/s served, p50/p99 latency, errors, the share of answers from the
version's result cache (``X-Cache: hit``) and the server's CPU per request
served (all its worker processes, from /proc) per rate, and the server's own
query (its SQL text and parameters, which write the rows' JSON) run directly in
DuckDB on the version file, with its latency and CPU, so the server's own
overhead (HTTP, routing, dependencies, the response) is the difference in CPU
per request. ``--cache-mb 0`` turns the cache
off (every request reads DuckDB). The days are drawn at random from 3,000
booth-days. With the cache on, every booth-day is first requested once (the
"priming" pass, closed loop, which also measures what a miss costs), so the
rates measure a warm cache; ``--cold`` skips that pass, and the hit rate then
grows as the run goes on.

``--shapes`` first times other query shapes one request at a time (a booth's
days rolled up, every booth's hours and days, every booth's 5-minute rows up to
the default limit), 20 requests each; with the cache on, all but the first of
them are hits, so run it with ``--cache-mb 0`` to time reading the stores.

The load generator runs on the same 2 cores as the server. Everything it starts
it stops, by pid.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import duckdb
import httpx2
import pyarrow as pa

from batch_layer.publish import empty_store_tables, publish_version
from lambdaline.bench.load import open_loop
from lambdaline.bench.measure import cpu_seconds_of_tree, own_cpu_seconds, percentile
from lambdaline.kafka_broker import ephemeral_broker, free_port
from lambdaline.processes import exit_on_signals, stop_process, wait_until_answers
from serving.queries import ViewQuery
from shared.domain.merge import Source
from shared.domain.views.booth_stats import SPEC as BOOTH_STATS
from shared.platform.batch_store import read_current
from shared.platform.topic_admin import create_topics
from shared.settings import Settings

BOOTHS, DAYS, FIRST_DAY = 50, 60, date(2026, 1, 1)
API_KEY = "bench-key"


def populate(store: Path) -> None:
    """One published version with realistic table sizes (synthetic, seeded rows)."""
    rng = random.Random(5)
    windows = [
        datetime.combine(FIRST_DAY, datetime.min.time()) + timedelta(minutes=5 * n)
        for n in range(DAYS * 288)
    ]
    booths = [f"booth-{n:02d}" for n in range(BOOTHS)]
    starts = [start for _ in booths for start in windows]
    counts = [rng.randint(0, 40) for _ in starts]
    stats = {
        "booth_id": [booth for booth in booths for _ in windows],
        "window_start": starts,
        "window_end": [start + timedelta(minutes=5) for start in starts],
        "vehicle_count": counts,
        "total_toll": [None] * len(starts),
        "first_entry_time": starts,
        "last_entry_time": [start + timedelta(minutes=4) for start in starts],
    }
    fresh = empty_store_tables()
    schema = fresh["booth_stats"].schema
    stats["total_toll"] = pa.array([f"{c * 4.25:.2f}" for c in counts]).cast(
        schema.field("total_toll").type
    )
    fresh["booth_stats"] = pa.Table.from_pydict(stats, schema=schema)
    trips = 1_000_000
    entry = [
        windows[rng.randrange(len(windows))] + timedelta(seconds=rng.randrange(300))
        for _ in range(trips)
    ]
    fresh["vehicle_trips"] = pa.Table.from_pydict(
        {
            "booth_id": [booths[rng.randrange(BOOTHS)] for _ in range(trips)],
            "license_plate": [f"P{rng.randrange(200_000):06d}" for _ in range(trips)],
            "entry_time": entry,
            "exit_time": [t + timedelta(minutes=20) for t in entry],
            "duration_seconds": [1200.0] * trips,
        },
        schema=fresh["vehicle_trips"].schema,
    )
    dates = [FIRST_DAY + timedelta(days=n) for n in range(DAYS)]
    horizon = datetime.combine(dates[-1] + timedelta(days=1), datetime.min.time(), UTC)
    publish_version(
        store, fresh, dates, horizon, ingest_batch=None, keep_versions=5,
        view_settings={"window": "5m", "max_trip": "1h"},  # the rows above: 5-min windows
    )  # fmt: skip


def booth_day_request(booth: int, day_number: int) -> tuple[str, dict[str, str]]:
    """One booth's stats for one whole day: (path, query parameters)."""
    day = FIRST_DAY + timedelta(days=day_number)
    return f"/v1/booths/booth-{booth:02d}/stats", {
        "from": f"{day.isoformat()}T00:00:00Z",
        "to": f"{(day + timedelta(days=1)).isoformat()}T00:00:00Z",
    }


def booth_day(rng: random.Random) -> tuple[str, dict[str, str]]:
    day_number = rng.randrange(DAYS)  # drawn first, as before, so a seed asks the same
    return booth_day_request(rng.randrange(BOOTHS), day_number)


def every_booth_day() -> list[tuple[str, dict[str, str]]]:
    return [booth_day_request(booth, n) for booth in range(BOOTHS) for n in range(DAYS)]


def day_range(first: int, days: int) -> dict[str, str]:
    start = FIRST_DAY + timedelta(days=first)
    return {"from": f"{start}T00:00:00Z", "to": f"{start + timedelta(days=days)}T00:00:00Z"}


SHAPES: list[tuple[str, str, dict[str, str]]] = [
    ("one booth, a day at 5m", "/v1/booths/booth-03/stats", day_range(0, 1)),
    ("one booth, a day at 1h", "/v1/booths/booth-03/stats",
     {**day_range(0, 1), "granularity": "1h"}),
    ("one booth, 59 days at 1d", "/v1/booths/booth-03/stats",
     {**day_range(0, DAYS - 1), "granularity": "1d"}),
    ("every booth, a day at 1h", "/v1/stats", {**day_range(0, 1), "granularity": "1h"}),
    ("every booth, a week at 1d", "/v1/stats", {**day_range(0, 7), "granularity": "1d"}),
    ("every booth, 59 days at 1d", "/v1/stats", {**day_range(0, DAYS - 1), "granularity": "1d"}),
    ("every booth, a day at 5m", "/v1/stats", day_range(0, 1)),
]  # fmt: skip
"""(name, path, query parameters) of the shapes ``--shapes`` times."""


def time_shapes(base_url: str, repeats: int = 20) -> None:
    """Each shape ``repeats`` times, one request at a time: rows, size, p50/p99 latency."""
    print(f"{'query shape':<30}{'rows':>7}{'KB':>8}{'p50 ms':>9}{'p99 ms':>9}{'X-Cache':>9}")
    with httpx2.Client(base_url=base_url, headers={"X-API-Key": API_KEY}, timeout=60) as client:
        for name, path, params in SHAPES:
            timings = []
            for _ in range(repeats):
                started = time.perf_counter()
                response = client.get(path, params=params)
                timings.append(time.perf_counter() - started)
                if response.status_code != 200:
                    raise SystemExit(f"{name}: HTTP {response.status_code} {response.text[:200]}")
            rows = len(response.json()["rows"])
            print(
                f"{name:<30}{rows:>7,}{len(response.content) / 1024:>8,.0f}"
                f"{percentile(timings, 0.5) * 1000:>9.1f}{percentile(timings, 0.99) * 1000:>9.1f}"
                f"{response.headers.get('X-Cache', ''):>9}",
                flush=True,
            )


def prime(base_url: str) -> tuple[int, float]:
    """Ask for every booth-day once, one request at a time: (misses, seconds)."""
    misses, started = 0, time.perf_counter()
    with httpx2.Client(base_url=base_url, headers={"X-API-Key": API_KEY}) as client:
        for path, params in every_booth_day():
            response = client.get(path, params=params)
            if not full_day(response.status_code, response.content):
                raise SystemExit(f"priming {path} {params}: HTTP {response.status_code}")
            misses += response.headers.get("X-Cache") == "miss"
    return misses, time.perf_counter() - started


def full_day(status: int, body: bytes) -> bool:
    return status == 200 and body.count(b'"booth_id"') == 288


def raw_duckdb(store: Path, threads: int, repeats: int = 2000) -> tuple[list[float], float]:
    """The server's booth-day query (``ViewQuery.sql``, the batch side: the same text
    and parameters) straight on the current version file, on ``threads`` DuckDB
    threads, fetched as ``serving.queries.encoded_rows`` fetches it: each query's
    wall time, and the CPU seconds per query (this process's, DuckDB's included)."""
    version = read_current(store)
    assert version is not None
    rng = random.Random(9)
    timings = []
    cpu_before = time.process_time()
    with duckdb.connect(
        str(store / version.path), read_only=True, config={"threads": threads}
    ) as connection:
        for _ in range(repeats):
            day = datetime.combine(
                FIRST_DAY + timedelta(days=rng.randrange(DAYS)), datetime.min.time(), UTC
            )
            filters = {"booth_id": f"booth-{rng.randrange(BOOTHS):02d}"}
            query = ViewQuery(BOOTH_STATS, day, day + timedelta(days=1), filters, 10_000)
            text, params = query.sql(Source.BATCH, version.horizon)
            cursor = connection.cursor()
            started = time.perf_counter()
            cursor.execute(text, params).fetchall()
            timings.append(time.perf_counter() - started)
            cursor.close()
    return timings, (time.process_time() - cpu_before) / repeats


@contextmanager
def populated_store(cache_mb: int | None) -> Iterator[tuple[Settings, dict[str, str]]]:
    """A broker of its own and the populated batch store in a temporary state folder,
    with the environment that points ``lambdaline serve`` at them."""
    with (
        tempfile.TemporaryDirectory(prefix="lambdaline-bench-serving-") as state,
        ephemeral_broker(Path(state)) as settings,
    ):
        create_topics(settings)
        print("populating the batch store ...", flush=True)
        populate(settings.batch_store)
        environment = {
            **os.environ, "LAMBDALINE_STATE_DIR": str(settings.state_dir),
            "LAMBDALINE_KAFKA_BOOTSTRAP": settings.kafka.bootstrap, "LAMBDALINE_API_KEYS": API_KEY,
            "LAMBDALINE_SERVING_RATE_PER_KEY": "1000000",  # capacity, not the key's limit
        }  # fmt: skip
        if cache_mb is not None:
            environment["LAMBDALINE_SERVING_CACHE_MB"] = str(cache_mb)
        yield settings, environment


def start_server(
    environment: dict[str, str], workers: int, cwd: Path | None = None
) -> tuple[int, subprocess.Popen[bytes]]:
    """``lambdaline serve`` on a free port, in a process group of its own: (port, process)."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "lambdaline.cli", "serve", "--port", str(port),
         "--workers", str(workers)],
        env=environment, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    return port, server


def wait_ready(port: int, server: subprocess.Popen[bytes], name: str = "the server") -> None:
    """Until ``/readyz`` answers 200 (at most 60 s), then a short warm-up load."""
    with httpx2.Client(base_url=f"http://127.0.0.1:{port}") as client:
        if not wait_until_answers(client, 60, process=server):
            raise SystemExit(f"{name} did not become ready in 60 s")
    open_loop(port, API_KEY, booth_day, 50, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="100,250,500,1000")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    parser.add_argument(
        "--cache-mb", type=int, default=None, help="LAMBDALINE_SERVING_CACHE_MB (default: 256)"
    )
    parser.add_argument(
        "--cold", action="store_true", help="skip the priming pass (the cache fills during the run)"
    )
    parser.add_argument(
        "--shapes", action="store_true", help="first time other query shapes (roll-ups, all booths)"
    )
    args = parser.parse_args()
    exit_on_signals()  # SIGTERM (`timeout`) runs the clean-up: the broker and jobs stop

    with populated_store(args.cache_mb) as (settings, environment):
        port, server = start_server(environment, args.workers)
        try:
            base_url = f"http://127.0.0.1:{port}"
            wait_ready(port, server)
            if args.shapes:
                time_shapes(base_url)
            if args.cache_mb != 0 and not args.cold:
                misses, seconds = prime(base_url)
                print(
                    f"primed the cache: {misses:,} booth-days answered once, one at a time, "
                    f"in {seconds:.1f} s ({seconds / max(misses, 1) * 1000:.2f} ms per miss, "
                    "client included)",
                    flush=True,
                )
            print(
                f"{'offered req/s':>14}{'served req/s':>14}{'p50 ms':>9}{'p99 ms':>9}"
                f"{'errors':>8}{'cache hits':>12}{'server CPU ms/req':>19}"
                f"{'client CPU ms/req':>19}"
            )
            for rate in (float(r) for r in args.rates.split(",")):
                cpu_before, client_before = cpu_seconds_of_tree(server.pid), own_cpu_seconds()
                result = open_loop(port, API_KEY, booth_day, rate, args.seconds, ok=full_day)
                server_cpu = cpu_seconds_of_tree(server.pid) - cpu_before
                client_cpu = own_cpu_seconds() - client_before
                latencies, errors, wall = result.latencies_s, result.errors, result.wall_s
                p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
                print(
                    f"{rate:>14,.0f}{len(latencies) / wall:>14,.0f}"
                    f"{p50 * 1000:>9.1f}{p99 * 1000:>9.1f}{errors:>8}"
                    f"{result.cache_hits / max(len(latencies), 1):>12.0%}"
                    f"{server_cpu / max(len(latencies), 1) * 1000:>19.2f}"
                    f"{client_cpu / max(len(latencies), 1) * 1000:>19.2f}",
                    flush=True,
                )
        finally:
            stop_process(server, grace=30)
        raw, cpu = raw_duckdb(settings.batch_store, settings.serving.duckdb_threads)
        p50, p99 = percentile(raw, 0.5) * 1000, percentile(raw, 0.99) * 1000
        print(
            f"raw DuckDB booth-day query (the server's SQL): p50 {p50:.2f} ms, p99 {p99:.2f} ms, "
            f"{cpu * 1000:.2f} ms of CPU per query (the server's CPU per request less this is "
            "its own overhead)"
        )


if __name__ == "__main__":
    main()
