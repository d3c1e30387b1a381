"""`lambdaline demo` as a new user runs it, shortened by settings.

The demo runs with a simulated day per real minute and light traffic, on free
ports and a state folder of its own. The test waits until the API serves a
batch version and merged rows holding both `batch` and `speed` rows, then
presses Ctrl-C twice (SIGINT to the demo's process group, as a terminal does;
the second during the shutdown) and checks that every process the demo started
has gone and no port it used is still open.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx2
import pytest

from lambdaline.bench.measure import process_tree
from lambdaline.kafka_broker import free_port
from shared.domain.events import format_instant, parse_instant
from shared.platform.kafka_admin import port_open

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

KEY = "e2e-demo-key"


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rindex(")") + 2] != "Z"


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], dict[str, int], Path]]:
    ports = {"api": free_port(), "kafka": free_port(), "controller": free_port()}
    env = {
        **os.environ,
        "LAMBDALINE_STATE_DIR": str(tmp_path / "state"),
        "LAMBDALINE_KAFKA_BOOTSTRAP": f"127.0.0.1:{ports['kafka']}",
        "LAMBDALINE_KAFKA_CONTROLLER_PORT": str(ports["controller"]),
        "LAMBDALINE_KAFKA_HEAP": "512m",
        "LAMBDALINE_API_KEYS": KEY,
        "LAMBDALINE_DEMO_SPEEDUP": "1440",  # a simulated day per minute
        "LAMBDALINE_DEMO_TRAFFIC": "0.02",
    }
    output = tmp_path / "demo.out"
    started_in = tmp_path / "started-in"
    started_in.mkdir()
    with output.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "lambdaline.cli", "demo", "--port", str(ports["api"])],
            env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
            cwd=started_in,
        )  # fmt: skip
    try:
        yield process, ports, output
    finally:
        if process.poll() is None:  # the test failed before its own Ctrl-C
            os.killpg(process.pid, signal.SIGINT)
            try:
                process.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def test_demo_serves_merged_rows_and_ctrl_c_leaves_nothing_behind(
    demo: tuple[subprocess.Popen[bytes], dict[str, int], Path], tmp_path: Path
) -> None:
    process, ports, output = demo
    api = httpx2.Client(
        base_url=f"http://127.0.0.1:{ports['api']}", headers={"X-API-Key": KEY}, timeout=10
    )
    sources: set[str] = set()
    status: dict[str, object] = {}
    deadline = time.monotonic() + 480
    while sources != {"batch", "speed"}:
        assert process.poll() is None, output.read_text()
        assert time.monotonic() < deadline, (
            f"no merged rows in time: {status}\n{output.read_text()}"
        )
        time.sleep(3)
        try:
            status = api.get("/v1/status").json()
        except httpx2.TransportError:
            continue
        if status.get("batch_version") is None:
            continue
        horizon = parse_instant(str(status["horizon"]))
        window = {
            "from": format_instant(horizon - timedelta(days=1)),
            "to": format_instant(horizon + timedelta(days=1)),
            "granularity": "1h",
        }
        rows = api.get("/v1/stats", params=window).json()["rows"]
        sources = {row["source"] for row in rows}
        assert all(
            (row["source"] == "batch") == (parse_instant(row["window_start"]) < horizon)
            for row in rows
        )
    # the hopping windows merge by their end: one that H cuts is the speed store's
    span = {"from": window["from"], "to": window["to"]}
    rolling = api.get("/v1/booths/booth-01/rolling", params=span).json()["rows"]
    assert {row["source"] for row in rolling} == {"batch", "speed"}
    assert all(
        (row["source"] == "batch") == (parse_instant(row["window_end"]) <= horizon)
        for row in rolling
    )
    api.close()
    banner = output.read_text()
    assert f"X-API-Key: {KEY}" in banner and f"127.0.0.1:{ports['api']}/docs" in banner

    started = set(process_tree(process.pid)) - {process.pid}
    assert len(started) >= 4  # broker, speed job, generator, API (and their children)
    os.killpg(process.pid, signal.SIGINT)
    time.sleep(2)
    os.killpg(process.pid, signal.SIGINT)  # a second Ctrl-C while it shuts down
    assert process.wait(timeout=90) == 0, output.read_text()
    assert [pid for pid in started if alive(pid)] == []
    for name, port in ports.items():
        assert not port_open("127.0.0.1", port), f"{name} port {port} is still open"
    assert "stopped kafka" in output.read_text()
    # every process it ran kept its files under the state directory, none where it started
    assert list((tmp_path / "started-in").iterdir()) == []


def test_a_broker_that_dies_ends_the_demo_at_once_naming_it(
    demo: tuple[subprocess.Popen[bytes], dict[str, int], Path], tmp_path: Path
) -> None:
    process, ports, output = demo
    deadline = time.monotonic() + 240
    while f"X-API-Key: {KEY}" not in output.read_text():  # every part has been started
        assert process.poll() is None, output.read_text()
        assert time.monotonic() < deadline, output.read_text()
        time.sleep(1)
    started = set(process_tree(process.pid)) - {process.pid}
    broker = int((tmp_path / "state" / "kafka" / "node-1" / "broker.pid").read_text())
    os.kill(broker, signal.SIGKILL)  # as the kernel's OOM killer would

    # before: the demo went on until the speed job gave up on Kafka, minutes later
    assert process.wait(timeout=120) == 1, output.read_text()
    text = output.read_text()
    assert f"error: the Kafka broker (node 1, pid {broker}) exited; last lines of " in text, text
    assert "stopped kafka" not in text  # it was not running to stop
    assert [pid for pid in started if alive(pid)] == []
    for name, port in ports.items():
        assert not port_open("127.0.0.1", port), f"{name} port {port} is still open"
