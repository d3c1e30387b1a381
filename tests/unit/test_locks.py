"""shared.platform.locks: one holder at a time, named when refused, freed when its holder dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from shared.platform.locks import LockHeldError, exclusive_lock

HOLD_FOREVER = """
import sys, time
from pathlib import Path
from shared.platform.locks import exclusive_lock
with exclusive_lock(Path(sys.argv[1]), "a test holder", "-"):
    print("held", flush=True)
    time.sleep(600)
"""


def test_a_second_holder_is_refused_naming_the_first_and_the_lock_is_freed_after(
    tmp_path: Path,
) -> None:
    path = tmp_path / "sub" / "job.lock"  # its folder is made
    with exclusive_lock(path, "another job", "wait for it"):
        assert path.read_text() == str(os.getpid())
        with (
            pytest.raises(LockHeldError) as refused,
            exclusive_lock(path, "another job", "wait for it"),
        ):
            pass
    assert str(refused.value) == f"another job holds {path} (pid {os.getpid()}); wait for it"
    assert path.read_text() == ""  # no stale pid left behind
    with exclusive_lock(path, "another job", "wait for it"):
        pass


def test_a_holder_killed_with_sigkill_leaves_no_lock_behind(tmp_path: Path) -> None:
    path = tmp_path / "job.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_FOREVER, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with (
            pytest.raises(LockHeldError, match=rf"\(pid {holder.pid}\)"),
            exclusive_lock(path, "a test holder", "-"),
        ):
            pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    with exclusive_lock(path, "a test holder", "-"):  # the pid left in the file is no lock
        assert path.read_text() == str(os.getpid())
