"""The API under abuse: health checks while slow SQL and many streams hold one worker (a
load check, not a test).

    .venv/bin/python benchmarks/serving_abuse.py [--sql 45] [--streams 200] [--seconds 30]

Starts its own broker, the populated batch store of ``serving_load.py`` and
``lambdaline serve`` with one worker (default settings: ``serving_sql_concurrency``
4, ``serving_sql_timeout`` 10 s, ``serving_stream_clients`` 500). Then, at once and
for ``--seconds``: ``--streams`` clients hold ``GET /v1/stream`` open and read it;
``--sql`` clients each send a query that runs until its timeout, again as soon as
it is answered; and a probe asks ``/healthz`` and ``/readyz`` every 100 ms. It
reports the probes' latency (p50, p99, most), what the SQL clients were answered
(a query admitted runs out its timeout: 400; the others get 429 at once), the
streams opened and the bytes they read, and the server's CPU. Everything it
starts it stops, by pid.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import time

import httpx2
from serving_load import API_KEY, populated_store, start_server, wait_ready

from lambdaline.bench.measure import cpu_seconds_of_tree, percentile
from lambdaline.processes import exit_on_signals, stop_process

SLOW_QUERY = "SELECT count(*) FROM range(100000) a CROSS JOIN range(100000000000) b"
"""Runs until ``serving_sql_timeout`` interrupts it."""
KEY = {"X-API-Key": API_KEY}


async def slow_sql(
    client: httpx2.AsyncClient, until: float, answers: collections.Counter[int]
) -> None:
    while time.monotonic() < until:
        response = await client.post("/v1/sql", json={"query": SLOW_QUERY}, headers=KEY)
        answers[response.status_code] += 1
        if response.status_code == 429:
            await asyncio.sleep(float(response.headers.get("Retry-After", "1")))


async def stream(
    client: httpx2.AsyncClient, until: float, opened: list[int], read: list[int]
) -> None:
    async with client.stream("GET", "/v1/stream", headers=KEY) as response:
        opened.append(response.status_code)
        async for chunk in response.aiter_raw():
            read.append(len(chunk))
            if time.monotonic() >= until:
                return


async def probe(client: httpx2.AsyncClient, until: float, took: dict[str, list[float]]) -> None:
    while time.monotonic() < until:
        for path in ("/healthz", "/readyz"):
            started = time.monotonic()
            await client.get(path)
            took[path].append(time.monotonic() - started)
        await asyncio.sleep(0.1)


async def abuse(port: int, sql: int, streams: int, seconds: float) -> None:
    limits = httpx2.Limits(max_connections=sql + streams + 10)
    timeout = httpx2.Timeout(seconds + 30)
    async with (
        httpx2.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", limits=limits, timeout=timeout
        ) as client,
        httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as prober,
    ):
        until = time.monotonic() + seconds
        answers: collections.Counter[int] = collections.Counter()
        opened: list[int] = []
        read: list[int] = []
        took: dict[str, list[float]] = {"/healthz": [], "/readyz": []}
        tasks = [asyncio.create_task(stream(client, until, opened, read)) for _ in range(streams)]
        tasks += [asyncio.create_task(slow_sql(client, until, answers)) for _ in range(sql)]
        await asyncio.sleep(1)  # every client connected before the probe starts
        await probe(prober, until, took)
        # a stream that has read nothing since the deadline ends at its next heartbeat
        await asyncio.wait(tasks, timeout=40)
    for path, latencies in took.items():
        print(
            f"{path}: {len(latencies)} probes, p50 {percentile(latencies, 0.5) * 1000:.1f} ms, "
            f"p99 {percentile(latencies, 0.99) * 1000:.1f} ms, most {max(latencies) * 1000:.1f} ms"
        )
    print(f"SQL answers: {dict(sorted(answers.items()))}")
    print(
        f"streams: {opened.count(200)} of {streams} opened ({len(opened) - opened.count(200)} "
        f"refused), {sum(read):,} bytes read"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sql", type=int, default=45, help="slow SQL clients")
    parser.add_argument("--streams", type=int, default=200, help="stream clients")
    parser.add_argument("--seconds", type=float, default=30)
    args = parser.parse_args()
    exit_on_signals()
    with populated_store(None) as (_, environment):
        port, server = start_server(environment, 1)
        try:
            wait_ready(port, server)
            cpu_before, started = cpu_seconds_of_tree(server.pid), time.monotonic()
            asyncio.run(abuse(port, args.sql, args.streams, args.seconds))
            cpu = cpu_seconds_of_tree(server.pid) - cpu_before
            print(f"server CPU: {cpu / (time.monotonic() - started):.2f} cores")
        finally:
            stop_process(server, grace=30)


if __name__ == "__main__":
    main()
