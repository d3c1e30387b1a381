"""``lambdaline batch schedule``: run the batch on a cron schedule, one run at a time.

Each run is its own process (``lambdaline batch run``, in a process group of
its own so its Spark JVM goes with it): a failed run cannot take the scheduler
down, and every run starts with fresh memory, as under cron or Airflow. Runs
never overlap: the scheduler waits for one to finish before it looks for the
next time, skipping (and logging) the times a long run has overtaken, and the
batch store's run lock keeps out runs started elsewhere.

The clock is pluggable: ``lambdaline demo`` drives the same scheduler from its
simulated clock (``speedup`` simulated seconds per real second) and names the
run's ``--date`` from the simulated time that is due.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType

from croniter import croniter

from shared.platform.logs import log_event
from shared.platform.process_groups import end_group

logger = logging.getLogger("lambdaline.batch")

BATCH_RUN_COMMAND: tuple[str, ...] = (sys.executable, "-m", "lambdaline.cli", "batch", "run")

Command = Sequence[str] | Callable[[datetime], Sequence[str]]
"""A fixed command, or one built from the scheduled time that is due."""


def next_run_after(cron: str, moment: datetime) -> datetime:
    """The first time after ``moment`` that the cron expression names (UTC)."""
    return croniter(cron, moment.astimezone(UTC)).get_next(datetime)


class Scheduler:
    """Runs a command at each time of a cron expression until stopped."""

    def __init__(
        self,
        cron: str,
        command: Command = BATCH_RUN_COMMAND,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        speedup: float = 1.0,
        output: Path | None = None,
    ):
        """``speedup``: clock seconds per real second; ``output``: where runs write (append)."""
        self.cron = cron
        self.command = command
        self.clock = clock
        self.speedup = speedup
        self.output = output
        self.stopped = threading.Event()
        self.running: subprocess.Popen[bytes] | None = None
        self.runs = 0
        self.last_exit_code: int | None = None

    def stop(self) -> None:
        """Stop waiting, and stop the run in progress (its whole process group)."""
        self.stopped.set()
        child = self.running
        if child is not None and child.poll() is None:
            os.killpg(child.pid, signal.SIGTERM)

    def command_for(self, due: datetime) -> list[str]:
        return list(self.command(due) if callable(self.command) else self.command)

    def run_once(self, due: datetime | None = None) -> int:
        command = self.command_for(due or self.clock())
        started = time.monotonic()
        log_event(logger, "batch_schedule_run", command=command)
        with contextlib.ExitStack() as stack:
            sink = None
            if self.output is not None:
                sink = stack.enter_context(self.output.open("ab"))
            self.running = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=sink, stderr=sink,
                start_new_session=True,
            )  # fmt: skip
            if self.stopped.is_set():  # stop() came while the run was starting
                os.killpg(self.running.pid, signal.SIGTERM)
            try:
                code = self.running.wait()
            finally:
                end_group(self.running.pid)  # anything the run left behind (its JVM, exiting)
                self.running.wait()
                self.running = None
        self.runs += 1
        self.last_exit_code = code
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
            if self.stopped.wait(max(0.0, (due - now).total_seconds() / self.speedup)):
                break
            self.run_once(due)
            missed = next_run_after(self.cron, due)
            if missed < self.clock():
                log_event(logger, "batch_schedule_skipped", overtaken_from=missed.isoformat())


def serve_until_signalled(scheduler: Scheduler) -> None:
    """Run the scheduler in the foreground; SIGINT, SIGTERM or SIGHUP stop it and its run."""

    def stop(signum: int, frame: FrameType | None) -> None:
        log_event(logger, "batch_schedule_stopping", signal=signal.Signals(signum).name)
        scheduler.stop()

    watched = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, stop) for sig in watched}
    try:
        scheduler.serve()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
