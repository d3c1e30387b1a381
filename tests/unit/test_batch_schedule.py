"""The batch scheduler: cron times and one run at a time (real subprocesses, no Spark)."""

from __future__ import annotations

import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from batch_layer.schedule import Scheduler, next_run_after


def test_next_run_after_follows_the_cron_expression_in_utc() -> None:
    moment = datetime(2026, 1, 5, 1, 59, tzinfo=UTC)
    assert next_run_after("0 2 * * *", moment) == datetime(2026, 1, 5, 2, 0, tzinfo=UTC)
    assert next_run_after("0 2 * * *", datetime(2026, 1, 5, 2, 0, tzinfo=UTC)) == datetime(
        2026, 1, 6, 2, 0, tzinfo=UTC
    )


def test_runs_never_overlap_and_each_waits_for_its_time() -> None:
    # every second, a run that takes 1.5 s: the runs must follow one another
    command = [sys.executable, "-c", "import time; print(time.time()); time.sleep(1.5)"]
    scheduler = Scheduler("* * * * * *", command=command)
    started: list[float] = []
    original = scheduler.run_once

    def recorded(due: datetime | None = None) -> int:
        started.append(time.monotonic())
        assert scheduler.running is None  # the previous run has finished
        return original(due)

    scheduler.run_once = recorded  # type: ignore[method-assign]
    scheduler.serve(max_runs=2)
    assert scheduler.runs == 2
    assert started[1] - started[0] >= 1.5


def test_stop_ends_the_run_in_progress() -> None:
    scheduler = Scheduler(
        "* * * * * *", command=[sys.executable, "-c", "import time; time.sleep(60)"]
    )
    worker = threading.Thread(target=scheduler.serve)
    worker.start()
    deadline = time.monotonic() + 10
    while scheduler.running is None and time.monotonic() < deadline:
        time.sleep(0.05)
    child = scheduler.running
    assert child is not None
    scheduler.stop()
    worker.join(timeout=10)
    assert not worker.is_alive()
    assert child.returncode is not None and child.returncode != 0


def test_a_simulated_clock_paces_the_runs_and_names_their_time(tmp_path: Path) -> None:
    # an hour of simulated time per real second; an hourly cron runs about once a second,
    # and each run's command is built from the simulated time that was due
    origin, began = datetime(2026, 3, 1, 22, 59, 30, tzinfo=UTC), time.monotonic()
    output = tmp_path / "runs.log"
    scheduler = Scheduler(
        "0 * * * *",
        command=lambda due: [sys.executable, "-c", f"print({due.isoformat()!r})"],
        clock=lambda: origin + timedelta(seconds=(time.monotonic() - began) * 3600),
        speedup=3600,
        output=output,
    )
    scheduler.serve(max_runs=2)
    assert output.read_text().split() == ["2026-03-01T23:00:00+00:00", "2026-03-02T00:00:00+00:00"]
    assert scheduler.last_exit_code == 0
    assert time.monotonic() - began < 10


def test_a_finished_run_s_children_may_finish_their_exit(tmp_path: Path) -> None:
    # a batch run's JVM exits after its Python driver, deleting its temporary
    # directories on the way: the scheduler must not SIGKILL it mid-exit
    marker = tmp_path / "exit-hooks-ran"
    command = ["sh", "-c", f"(sleep 1; touch {marker}) & exit 0"]
    scheduler = Scheduler("* * * * * *", command=command)
    assert scheduler.run_once() == 0
    assert marker.exists()
