"""`lambdaline serve --workers 2`: /metrics counts every worker's requests, whichever answers.

A scrape reaches one worker; before the multiprocess mode each showed only the
requests it had served itself. No Kafka listens (the API serves without it),
and no batch version is published.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from lambdaline.kafka_broker import free_port
from lambdaline.processes import wait_until_answers

pytestmark = [pytest.mark.e2e]

REQUESTS = 30


@pytest.fixture
def two_workers(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    port = free_port()
    env = {
        **os.environ,
        "LAMBDALINE_STATE_DIR": str(tmp_path / "state"),
        "LAMBDALINE_KAFKA_BOOTSTRAP": f"127.0.0.1:{free_port()}",  # nothing listens
        "LAMBDALINE_API_KEYS": "workers-key",
        "TMPDIR": str(tmp_path),  # where the server keeps its metrics directory
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "lambdaline.cli", "serve", "--port", str(port), "--workers", "2"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        yield process, f"http://127.0.0.1:{port}"
    finally:
        if process.poll() is None:  # the test failed before it stopped the server
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def live_gauge_pids(directory: Path) -> set[int]:
    """The processes whose live gauges the metrics directory holds (gauge_livemin_<pid>.db)."""
    return {int(path.stem.rsplit("_", 1)[1]) for path in directory.glob("gauge_live*_*.db")}


def samples(text: str) -> dict[str, float]:
    """``name{labels} value`` lines of a Prometheus text page."""
    found = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            found[name] = float(value)
    return found


def test_metrics_count_the_requests_of_every_worker(
    two_workers: tuple[subprocess.Popen[bytes], str], tmp_path: Path
) -> None:
    server, base_url = two_workers
    with httpx2.Client(base_url=base_url) as client:
        assert wait_until_answers(client, 60, path="/healthz", process=server)
    time.sleep(2)  # both workers up, each with its gauges written once
    for _ in range(REQUESTS - 1):  # a connection each, so both workers take some
        assert httpx2.get(f"{base_url}/healthz").status_code == 200
    healthz = (
        'lambdaline_http_request_duration_seconds_count{method="GET",route="/healthz",status="200"}'
    )
    for _ in range(8):
        page = samples(httpx2.get(f"{base_url}/metrics").text)
        assert page[healthz] == REQUESTS
        assert page["lambdaline_batch_version"] == -1  # none published, in either worker
        assert page["lambdaline_speed_consumer_up"] == 0  # no Kafka
    [directory] = tmp_path.glob("lambdaline-metrics-*")  # the server's own

    # a worker killed outright (the OOM killer, kill -9) cannot take its gauges out
    # itself: the other does, and uvicorn starts a new worker in its place
    workers = live_gauge_pids(directory)
    assert len(workers) == 2
    killed = min(workers)
    os.kill(killed, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while killed in (pids := live_gauge_pids(directory)) or len(pids) < 2:
        assert time.monotonic() < deadline, f"live gauges of {sorted(pids)}, {killed} killed"
        time.sleep(0.2)
    assert httpx2.get(f"{base_url}/metrics").status_code == 200

    os.killpg(server.pid, signal.SIGTERM)  # as Ctrl-C or a service manager stops it
    assert server.wait(timeout=30) == 0
    assert not list(tmp_path.glob("lambdaline-metrics-*")), "left behind"
