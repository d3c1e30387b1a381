"""Measuring instruments: CPU seconds from /proc and getrusage, percentiles, the machine."""

from __future__ import annotations

import os
import platform
import resource
import subprocess
import threading
import time
from importlib import metadata
from pathlib import Path
from typing import Any

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def process_tree(root: int) -> list[int]:
    """``root`` and every live process below it, from /proc's parent links."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    tree, pending = [], [root]
    while pending:
        pid = pending.pop()
        tree.append(pid)
        pending += children.get(pid, [])
    return tree


def cpu_seconds_by_process(root: int) -> dict[int, tuple[str, float]]:
    """Command line and CPU seconds of a process and each live descendant.

    A process's seconds include its reaped children's, so a short-lived helper
    counts towards whoever started it and nothing is counted twice.
    """
    found = {}
    for pid in process_tree(root):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        ticks = sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
        found[pid] = (command, ticks / CLOCK_TICKS)
    return found


def cpu_seconds_of_tree(root: int) -> float:
    """CPU seconds of a process and its descendants (live ones, and the reaped ones)."""
    return sum(seconds for _, seconds in cpu_seconds_by_process(root).values())


def own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class TreeCpu:
    """Samples a child process tree's CPU seconds until it exits (the last sample stays).

    A process's counters vanish when it exits, so the tree is read every
    ``interval`` seconds while it runs: at most one interval's CPU is missed.
    """

    def __init__(self, process: subprocess.Popen[bytes], interval: float = 0.25):
        self.process = process
        self.seconds = 0.0
        self._thread = threading.Thread(target=self._sample, args=(interval,), daemon=True)
        self._thread.start()

    def _sample(self, interval: float) -> None:
        while self.process.poll() is None:
            self.seconds = max(self.seconds, cpu_seconds_of_tree(self.process.pid))
            time.sleep(interval)

    def wait(self) -> float:
        self._thread.join()
        return self.seconds


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (0..1); NaN for no values."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def speed_verdict(
    steps: list[dict[str, Any]], trigger_s: float, lookup_trigger_s: float
) -> dict[str, dict[str, int] | None]:
    """The highest steps the speed job kept up with, from the benchmark's steps.

    A step kept up when, after the benchmark's drain pause, booth_stats had less
    than one second's worth of the entries sent unread and the lookups query
    (which reads every input topic, on its longer trigger) less than one lookup
    trigger's worth of the records sent: the lag did not grow. It was
    sustainable in the issue's strict sense when each query also kept its
    micro-batch time p99 within its trigger. Each verdict names the step (the
    rate it offered) and the records per second it actually sent, which the
    generator keeps below the offered rate; ``None``: no step did.
    """

    def sent(step: dict[str, Any], topic: str = "all") -> int:
        return int(step["sent_records_per_s"][topic])

    def kept_up(step: dict[str, Any]) -> bool:
        return bool(
            step["entries_backlog_at_end"] < sent(step, "toll.entries")
            and step["lookups"]["records_backlog_at_end"] < sent(step) * lookup_trigger_s
        )

    def within_triggers(step: dict[str, Any]) -> bool:
        return bool(
            step["microbatch_s"]["p99"] <= trigger_s
            and step["lookups"]["microbatch_s"]["p99"] <= lookup_trigger_s
        )

    def highest(candidates: list[dict[str, Any]]) -> dict[str, int] | None:
        if not candidates:
            return None
        top = max(candidates, key=sent)
        return {
            "offered_records_per_s": top["offered_records_per_s"],
            "sent_records_per_s": sent(top),
        }

    keeping_up = [step for step in steps if kept_up(step)]
    return {
        "kept_up": highest(keeping_up),
        "sustainable": highest([step for step in keeping_up if within_triggers(step)]),
    }


def machine() -> dict[str, Any]:
    """Cores, memory and the versions that decide the figures."""
    memory_kb = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            memory_kb = int(line.split()[1])
    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False)
    versions = {
        name: metadata.version(name)
        for name in ("pyspark", "kafka-python", "duckdb", "fastapi", "uvicorn", "pyarrow")
    }
    return {
        "cores": os.cpu_count(),
        "memory_gib": round(memory_kb / 1024 / 1024, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "java": (java.stderr.splitlines() or ["?"])[0],
        "versions": versions,
    }
