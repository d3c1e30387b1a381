"""Ending a child's process group by its id, without cutting a JVM's exit short.

lambdaline starts each long-running part (the speed job, a batch run, the API)
in a session of its own, so the part and everything it starts share one process
group whose id is the part's pid. A PySpark driver's JVM is such a child: when
the driver exits, the JVM sees its standard input close and exits too, running
its shutdown hooks on the way (they delete its temporary directories, such as
``/tmp/spark-*``). A SIGKILL to the group the moment the driver has gone would
cut those hooks short and leave the directories behind, so :func:`end_group`
first gives the group a few seconds to empty on its own.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from pathlib import Path

GROUP_EXIT_GRACE_S = 10.0
"""How long a group may take to exit once its leader has: a JVM's exit hooks take 1-3 s."""


def group_is_gone(group: int, timeout_s: float, stop: threading.Event | None = None) -> bool:
    """True once no process of the group remains (not even an unreaped one), within
    ``timeout_s``; False at the timeout or as soon as ``stop`` is set."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() >= deadline or (stop is not None and stop.is_set()):
            return False
        time.sleep(0.1)


def end_group(
    group: int, grace_s: float = GROUP_EXIT_GRACE_S, stop: threading.Event | None = None
) -> None:
    """SIGKILL what is left of a process group after ``grace_s`` (at once if ``stop`` is set).

    Call it once the group's leader has exited (or must go now, with ``grace_s``
    0): whatever it started then has the grace to exit by itself. A container
    whose init does not reap orphans keeps them as zombies, which count as
    present until the grace is over; the SIGKILL does them no harm.
    """
    if group_is_gone(group, grace_s, stop):
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGKILL)


def runs_as(pid: int, *arguments: str) -> bool:
    """True if ``pid`` is alive and each of ``arguments`` is one of its command line's,
    so a pid the kernel gave to another process since is not taken for ours.

    An exited child of ours (a zombie, its command line already empty) is reaped
    here and counts as gone.
    """
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    if state == "Z":
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        return False
    return all(argument.encode() in cmdline for argument in arguments)
