"""``lambdaline batch schedule``: run the batch on a cron schedule, one run at a time.

Each run is its own process (``lambdaline batch run``, in a process group of
its own so its Spark JVM goes with it): a failed run cannot take the scheduler
down, and every run starts with fresh memory, as under cron or Airflow. Runs
never overlap: the scheduler waits for one to finish before it looks for the
next time, skipping (and logging) the times a long run has overtaken, and the
batch store's run lock keeps out runs started elsewhere.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from types import FrameType

from croniter import croniter

from shared.logs import log_event

logger = logging.getLogger("lambdaline.batch")

BATCH_RUN_COMMAND: tuple[str, ...] = (sys.executable, "-m", "lambdaline.cli", "batch", "run")


def next_run_after(cron: str, moment: datetime) -> datetime:
    """The first time after ``moment`` that the cron expression names (UTC)."""
    return croniter(cron, moment.astimezone(UTC)).get_next(datetime)


class Scheduler:
    """Runs a command at each time of a cron expression until stopped."""

    def __init__(
        self,
        cron: str,
        command: Sequence[str] = BATCH_RUN_COMMAND,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ):
        self.cron = cron
        self.command = list(command)
        self.clock = clock
        self.stopped = threading.Event()
        self.running: subprocess.Popen[bytes] | None = None
        self.runs = 0

    def stop(self) -> None:
        """Stop waiting, and stop the run in progress (its whole process group)."""
        self.stopped.set()
        child = self.running
        if child is not None and child.poll() is None:
            os.killpg(child.pid, signal.SIGTERM)

    def run_once(self) -> int:
        started = time.monotonic()
        log_event(logger, "batch_schedule_run", command=self.command)
        self.running = subprocess.Popen(self.command, start_new_session=True)
        try:
            code = self.running.wait()
        finally:
            if self.running.poll() is None:
                os.killpg(self.running.pid, signal.SIGKILL)
                self.running.wait()
            self.running = None
        self.runs += 1
        log_event(
            logger, "batch_schedule_run_finished", exit_code=code,
            seconds=round(time.monotonic() - started, 3),
        )  # fmt: skip
        return code

    def serve(self, max_runs: int | None = None) -> None:
        """Wait for each scheduled time and run; return when stopped or after max_runs."""
        while not self.stopped.is_set() and (max_runs is None or self.runs < max_runs):
            now = self.clock()
            due = next_run_after(self.cron, now)
            log_event(logger, "batch_schedule_next", cron=self.cron, at=due.isoformat())
            if self.stopped.wait(max(0.0, (due - now).total_seconds())):
                break
            self.run_once()
            missed = next_run_after(self.cron, due)
            if missed < self.clock():
                log_event(logger, "batch_schedule_skipped", overtaken_from=missed.isoformat())


def serve_until_signalled(scheduler: Scheduler) -> None:
    """Run the scheduler in the foreground; SIGINT or SIGTERM stop it and its run."""

    def stop(signum: int, frame: FrameType | None) -> None:
        log_event(logger, "batch_schedule_stopping", signal=signal.Signals(signum).name)
        scheduler.stop()

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        scheduler.serve()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
