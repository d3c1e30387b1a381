"""Child processes of lambdaline's own commands, each in a session of its own, stopped by pid.

``lambdaline demo`` and ``lambdaline bench`` start the speed job, the generator
and the API this way: the terminal's Ctrl-C reaches only the parent, which
stops each child with SIGTERM to the child itself (the speed job stops its
queries, uvicorn drains), waits, gives the rest of the child's process group
(its JVM, exiting by itself) a few seconds, and then SIGKILLs what is left of
the group, so no JVM or worker process outlives it.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import httpx2

from shared.platform.logs import log_event
from shared.platform.process_groups import GROUP_EXIT_GRACE_S, end_group

logger = logging.getLogger("lambdaline.processes")

CLI: tuple[str, ...] = (sys.executable, "-m", "lambdaline.cli")
STOP_GRACE_S = 20.0


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]
    log: Path
    stopped: bool = False


@dataclass
class Supervisor:
    """Starts lambdaline commands as processes of their own and stops them by pid."""

    env: dict[str, str]
    logs: Path
    prefix: str = ""
    children: list[Child] = field(default_factory=list)

    def spawn(self, name: str, *args: str, env: dict[str, str] | None = None) -> Child:
        log = self.logs / f"{self.prefix}{name}.log"
        with log.open("ab") as sink:
            process = subprocess.Popen(
                [*CLI, *args], stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
                env={**self.env, **(env or {})}, start_new_session=True,
            )  # fmt: skip
        child = Child(name, process, log)
        self.children.append(child)
        log_event(logger, "process_started", part=name, pid=process.pid, command=args)
        return child

    def died(self) -> Child | None:
        """A child that exited without being stopped, if any."""
        return next(
            (c for c in self.children if not c.stopped and c.process.poll() is not None), None
        )

    def stop(
        self, child: Child, force: threading.Event | None = None, grace: float = STOP_GRACE_S
    ) -> None:
        """Stop the child and its group (:func:`stop_process`), once."""
        if child.stopped:  # its group id may belong to someone else by now
            return
        stop_process(child.process, grace, force)
        child.stopped = True
        log_event(logger, "process_stopped", part=child.name, pid=child.process.pid)

    def stop_all(self) -> None:
        """Stop every child, the last started first."""
        for child in reversed(self.children):
            self.stop(child)


def stop_process(
    process: subprocess.Popen[bytes],
    grace: float = STOP_GRACE_S,
    force: threading.Event | None = None,
) -> None:
    """Stop a process started in a session of its own, and everything it started.

    SIGTERM the leader and wait up to ``grace`` (less if ``force`` is set); then
    whatever is left of its group (a JVM, workers) gets a moment to exit by itself,
    unless the leader did not stop in time or ``force`` is set, and is SIGKILLed
    (``shared.platform.process_groups.end_group``). Call it once per process: after it, the
    group id may belong to someone else.
    """
    force = force or threading.Event()
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while process.poll() is None and time.monotonic() < deadline and not force.is_set():
            time.sleep(0.1)
    end_group(process.pid, GROUP_EXIT_GRACE_S if process.poll() is not None else 0.0, force)
    process.wait()


EXIT_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def exit_on_signals() -> None:
    """Make SIGTERM and SIGHUP end this process as ``sys.exit(128 + signal)``, once.

    Python's default for both ends the process on the spot, skipping every
    ``finally``: under ``timeout``, a service manager or a closed terminal, the
    generator's producer processes would go on sending and the benchmark's broker
    and jobs would go on running. As SystemExit the clean-up runs. Further signals are
    then ignored, or they would cut that clean-up short; they come in pairs
    (``timeout`` signals the process, then its process group), and ``stop_process``
    bounds every wait anyway.
    """

    def exit_once(signum: int, frame: FrameType | None) -> None:
        for ignored in EXIT_SIGNALS:
            signal.signal(ignored, signal.SIG_IGN)
        sys.exit(128 + signum)  # as a shell reports a process ended by the signal

    for signum in EXIT_SIGNALS:
        signal.signal(signum, exit_once)


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def wait_until_answers(
    client: httpx2.Client,
    seconds: float,
    path: str = "/readyz",
    process: subprocess.Popen[bytes] | None = None,
) -> bool:
    """Ask ``path`` until it answers 200 (True), ``seconds`` pass or ``process`` exits (False).

    A server that is still starting refuses the connection; that is retried too.
    """
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and (process is None or process.poll() is None):
        try:
            if client.get(path).status_code == 200:
                return True
        except httpx2.TransportError:
            pass
        time.sleep(0.3)
    return False
