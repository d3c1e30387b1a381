"""Ending a process group: what the leader left gets to finish, then is killed (real processes)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from lambdaline.processes import Child, Supervisor
from shared.platform.process_groups import end_group, group_is_gone, runs_as


def _leader_leaving(child: str, tmp_path: Path) -> subprocess.Popen[bytes]:
    """A leader of a new group that starts ``child`` in the background and exits at once."""
    leader = subprocess.Popen(
        ["sh", "-c", f"({child}) & exit 0"], cwd=tmp_path, start_new_session=True
    )
    assert leader.wait(timeout=10) == 0
    return leader


def test_what_the_leader_left_may_finish_its_exit_within_the_grace(tmp_path: Path) -> None:
    # like a JVM running its exit hooks after its Python driver has gone
    leader = _leader_leaving("sleep 1; touch finished", tmp_path)
    end_group(leader.pid, grace_s=30)
    assert (tmp_path / "finished").exists()
    assert group_is_gone(leader.pid, timeout_s=0)


def test_what_outlives_the_grace_is_killed(tmp_path: Path) -> None:
    leader = _leader_leaving("sleep 60; touch finished", tmp_path)
    began = time.monotonic()
    end_group(leader.pid, grace_s=0.5)
    assert group_is_gone(leader.pid, timeout_s=10)
    assert time.monotonic() - began < 10
    assert not (tmp_path / "finished").exists()


def test_a_stop_request_kills_at_once(tmp_path: Path) -> None:
    leader = _leader_leaving("sleep 60", tmp_path)
    stop = threading.Event()
    stop.set()
    began = time.monotonic()
    end_group(leader.pid, grace_s=60, stop=stop)
    assert group_is_gone(leader.pid, timeout_s=10)
    assert time.monotonic() - began < 10


def test_the_supervisor_lets_a_stopped_part_s_group_finish_its_exit(tmp_path: Path) -> None:
    # a part that stops on SIGTERM while something it started (its JVM) still exits
    leader = subprocess.Popen(
        ["sh", "-c", "trap 'exit 0' TERM; (sleep 1; touch exit-hooks-ran) & while :; do sleep 0.1; done"],
        cwd=tmp_path, start_new_session=True,
    )  # fmt: skip
    supervisor = Supervisor(env={}, logs=tmp_path)
    child = Child("part", leader, tmp_path / "part.log")
    supervisor.children.append(child)
    time.sleep(0.3)  # the trap is set
    supervisor.stop(child, grace=10)
    assert leader.returncode == 0  # it stopped on SIGTERM, not by the group's SIGKILL
    assert (tmp_path / "exit-hooks-ran").exists()
    assert group_is_gone(leader.pid, timeout_s=0)


def test_sigterm_runs_the_clean_up_to_its_end_even_when_signalled_again(tmp_path: Path) -> None:
    """Python's default would end the process on the spot; a second signal, its clean-up."""
    script = (
        "import sys, time\n"
        "from lambdaline.processes import exit_on_signals\n"
        "exit_on_signals()\n"
        "try:\n"
        "    print('ready', flush=True)\n"
        "    time.sleep(60)\n"
        "finally:\n"
        "    time.sleep(1)  # stopping what it started\n"
        "    open('cleaned-up', 'w').close()\n"
    )
    process = subprocess.Popen([sys.executable, "-c", script], cwd=tmp_path, stdout=subprocess.PIPE)
    try:
        assert process.stdout is not None and process.stdout.readline() == b"ready\n"
        process.send_signal(signal.SIGTERM)
        time.sleep(0.3)  # inside the clean-up
        process.send_signal(signal.SIGTERM)
        process.send_signal(signal.SIGHUP)
        assert process.wait(timeout=30) == 128 + signal.SIGTERM
        assert (tmp_path / "cleaned-up").exists()
    finally:
        process.kill()
        process.wait()


def test_a_pid_runs_as_ours_while_it_lives_with_our_arguments_and_a_zombie_is_reaped() -> None:
    program = "import time; print('started', flush=True); time.sleep(60)"
    child = subprocess.Popen(
        [sys.executable, "-c", program, "marker-of-ours"], stdout=subprocess.PIPE
    )
    assert child.stdout is not None
    assert child.stdout.readline() == b"started\n"  # past its exec: its own command line
    try:
        assert runs_as(child.pid, sys.executable, "marker-of-ours")
        assert not runs_as(child.pid, sys.executable, "marker-of-another")
        assert not runs_as(child.pid, "marker")  # whole arguments, not parts of them
        child.kill()
        deadline = time.monotonic() + 10
        while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline, "the killed child never became a zombie"
            time.sleep(0.05)
        # a zombie: gone, and reaped
        assert not runs_as(child.pid, sys.executable, "marker-of-ours")
        assert not Path(f"/proc/{child.pid}").exists()
    finally:
        child.kill()
        child.wait(timeout=10)
        child.stdout.close()
