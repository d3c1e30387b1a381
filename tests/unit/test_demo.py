"""The demo's simulated clock, its kept state and its answers to bad input (no processes)."""

from __future__ import annotations

import json
import socket
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lambdaline.cli import app
from lambdaline.demo import DemoError, DemoState, SimClock, first_origin, status_line
from shared.settings import Settings


def test_a_fresh_simulation_starts_at_20h_the_day_before() -> None:
    now = datetime(2026, 11, 22, 9, 30, tzinfo=UTC)
    assert first_origin(now) == datetime(2026, 11, 21, 20, 0, tzinfo=UTC)


def test_the_simulated_clock_runs_speedup_times_faster_and_not_before_its_origin() -> None:
    origin = datetime(2026, 1, 1, tzinfo=UTC)
    clock = SimClock(origin, wall_origin=time.time() - 10, speedup=288)
    assert abs((clock.now() - origin).total_seconds() - 2880) < 288  # within a real second
    assert SimClock(origin, time.time() + 5, 288).now() == origin
    assert clock.real_seconds(timedelta(days=1)) == 300


def test_state_round_trips_and_a_restart_continues_the_simulation(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path)
    first = DemoState.load(settings, datetime(2026, 11, 22, 9, tzinfo=UTC))
    assert first.sim_time == datetime(2026, 11, 21, 20, tzinfo=UTC) and first.runs == 0
    first.sim_time, first.runs = datetime(2026, 11, 25, 3, 15, tzinfo=UTC), 1
    first.save()
    assert (tmp_path / "demo" / "demo.json").stat().st_mode & 0o077 == 0  # holds the API key
    again = DemoState.load(settings, datetime(2026, 12, 1, tzinfo=UTC))
    assert (again.sim_time, again.api_key, again.runs) == (
        datetime(2026, 11, 25, 3, 15, tzinfo=UTC), first.api_key, 1,
    )  # fmt: skip


def test_a_broken_state_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "demo.json").write_text(json.dumps({"sim_time": "yesterday"}))
    with pytest.raises(DemoError, match=r"demo\.json is not a demo state file.*--fresh"):
        DemoState.load(Settings(state_dir=tmp_path), datetime.now(UTC))


def test_the_status_line_says_how_far_behind_the_speed_layer_is() -> None:
    origin = datetime(2026, 11, 22, 6, tzinfo=UTC)
    clock = SimClock(origin, wall_origin=time.time() + 60, speedup=288)  # stays at origin
    status = {
        "speed_watermark": "2026-11-22T04:30:00.000Z", "speed_lag_records": 0,
        "batch_version": 3, "horizon": "2026-11-22T00:00:00.000Z",
    }  # fmt: skip
    line = status_line(clock, 12345, status, "batch running")
    assert line == (
        "sim 2026-11-22 06:00 | records in Kafka 12,345 | speed watermark 2026-11-22 04:30 "
        "(1.5 simulated h behind) | batch v3 horizon 2026-11-22 00:00 | batch running"
    )
    assert "API starting" in status_line(clock, None, None, "next batch in 5 s")


def test_demo_refuses_a_port_in_use(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LAMBDALINE_STATE_DIR", str(tmp_path))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(app, ["demo", "--port", str(port)])
    assert result.exit_code == 1
    assert f"127.0.0.1:{port} is already in use" in result.output
    assert not (tmp_path / "kafka").exists()  # nothing was started
