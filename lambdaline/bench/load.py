"""An open-loop HTTP load generator: requests start on schedule, late or not.

Request i is due at start + i/rate and goes out on keep-alive connection
i mod ``connections`` (one thread each, plain http.client: the client must cost
far less CPU than the server it measures). Latency counts from when the request
was due, so queueing behind a slow server shows instead of hiding.
"""

from __future__ import annotations

import http.client
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlencode

Request = Callable[[random.Random], tuple[str, dict[str, str]]]
"""Draws one request: (path, query parameters)."""


@dataclass(frozen=True)
class LoadResult:
    latencies_s: list[float]
    errors: int
    wall_s: float
    cache_hits: int = 0
    """Responses whose ``X-Cache`` header said ``hit``."""

    @property
    def served_per_s(self) -> float:
        return len(self.latencies_s) / self.wall_s


def open_loop(
    port: int,
    api_key: str,
    request: Request,
    rate: float,
    seconds: float,
    ok: Callable[[int, bytes], bool] = lambda status, body: status == 200,
    connections: int = 32,
) -> LoadResult:
    """``rate`` requests/s for ``seconds`` against 127.0.0.1:``port``."""
    total = int(rate * seconds)
    latencies: list[float] = []
    errors, hits = [0], [0]
    lock = threading.Lock()
    started = time.perf_counter() + 0.2

    def worker(offset: int) -> None:
        rng = random.Random(offset)
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        mine, failed, hit = [], 0, 0
        for n in range(offset, total, connections):
            due = started + n / rate
            wait = due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            path, params = request(rng)
            try:
                connection.request(
                    "GET", f"{path}?{urlencode(params)}", headers={"X-API-Key": api_key}
                )
                response = connection.getresponse()
                if not ok(response.status, response.read()):
                    failed += 1
                hit += response.getheader("X-Cache") == "hit"
            except (OSError, http.client.HTTPException):
                failed += 1
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            mine.append(time.perf_counter() - due)
        connection.close()
        with lock:
            latencies.extend(mine)
            errors[0] += failed
            hits[0] += hit

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return LoadResult(latencies, errors[0], time.perf_counter() - started, hits[0])
