"""A CPU profile of a running JVM over a window, per thread: ``lambdaline bench soak
--profile-at``.

Two views of the same window:

- **per thread**, from the kernel (``/proc/<pid>/task/*/stat``): every thread's CPU,
  the JVM's native ones too (RocksDB's background threads, G1's, the JIT compilers),
  which a Java profiler does not sample; grouped by what the thread does
  (:data:`THREAD_GROUPS`);
- **per method**, from a Java Flight Recording (``jcmd <pid> JFR.start``, the JDK's
  ``profile`` settings): the Java threads' execution samples, counted by the method on
  top of the stack (self) and by every method on it (inclusive), overall and per
  thread group.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

THREAD_GROUPS = (
    ("tasks", re.compile(r"^Executor task|^Executor task launch")),
    ("micro-batch drivers", re.compile(r"^stream execution|^stream executio")),
    ("rocksdb background", re.compile(r"^rocksdb", re.IGNORECASE)),
    ("state maintenance", re.compile(r"maintenance|StateStore", re.IGNORECASE)),
    ("gc", re.compile(r"^G1|^GC |^VM Thread|^GC Thread")),
    ("jit", re.compile(r"^C[12] Compiler|^C[12] CompilerThre|^Sweeper")),
    ("kafka clients", re.compile(r"kafka|^producer-network|^kafka-producer", re.IGNORECASE)),
    ("listener bus", re.compile(r"^spark-listener|^spark-listene")),
    ("rpc and block manager", re.compile(r"^dispatcher|^rpc|^netty|^shuffle|^block-manager")),
)
"""What each JVM thread does, by its name (the kernel's keeps its first 15 characters)."""

TOP = 20


def group_of(thread_name: str) -> str:
    for group, pattern in THREAD_GROUPS:
        if pattern.search(thread_name):
            return group
    return "other"


def thread_cpu_seconds(pid: int) -> dict[int, tuple[str, float]]:
    """Each thread of ``pid``: (its name, its user + system CPU seconds so far)."""
    ticks = os.sysconf("SC_CLK_TCK")
    threads: dict[int, tuple[str, float]] = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        # the name is in parentheses and may hold spaces or parentheses itself
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        threads[int(task.name)] = (name, (int(fields[11]) + int(fields[12])) / ticks)
    return threads


def cpu_by_group(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]
) -> dict[str, float]:
    """CPU seconds each thread group spent between two :func:`thread_cpu_seconds`."""
    spent: dict[str, float] = {}
    for tid, (name, cpu) in after.items():
        group = group_of(name)
        spent[group] = spent.get(group, 0.0) + cpu - before.get(tid, (name, 0.0))[1]
    ranked = sorted(spent.items(), key=lambda item: -item[1])
    return {group: round(seconds, 2) for group, seconds in ranked}


def _frame(frame: dict[str, Any]) -> str:
    method = frame.get("method") or {}
    owner = (method.get("type") or {}).get("name", "?")
    return f"{owner}.{method.get('name', '?')}"


def method_samples(recording: Path, jfr: str = "jfr") -> dict[str, Any]:
    """The execution samples of a recording: how many, and the top methods by self and
    inclusive count, overall and per thread group (shares of the samples, in %)."""
    printed = subprocess.run(
        [jfr, "print", "--json", "--stack-depth", "64", "--events", "jdk.ExecutionSample",
         str(recording)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    events = json.loads(printed.stdout)["recording"]["events"]
    total = len(events)
    self_count: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    by_group: dict[str, Counter[str]] = {}
    group_samples: Counter[str] = Counter()
    for event in events:
        values = event["values"]
        thread = (values.get("sampledThread") or {}).get("javaName") or ""
        frames = [_frame(f) for f in (values.get("stackTrace") or {}).get("frames") or []]
        if not frames:
            continue
        group = group_of(thread)
        group_samples[group] += 1
        self_count[frames[0]] += 1
        by_group.setdefault(group, Counter())[frames[0]] += 1
        for method in set(frames):
            inclusive[method] += 1

    def shares(counter: Counter[str], of: int, top: int = TOP) -> list[list[Any]]:
        if not of:
            return []
        return [[name, round(100 * n / of, 1)] for name, n in counter.most_common(top)]

    return {
        "samples": total,
        "threads_pct": {g: round(100 * n / total, 1) for g, n in group_samples.most_common()}
        if total
        else {},
        "self_pct": shares(self_count, total),
        "inclusive_pct": shares(inclusive, total, 40),
        "self_pct_by_group": {
            group: shares(counter, group_samples[group], 10) for group, counter in by_group.items()
        },
    }


def profile(pid: int, seconds: float, recording: Path) -> dict[str, Any]:
    """Profile the JVM ``pid`` for ``seconds``: per-thread CPU from the kernel, and a JFR
    recording at ``recording`` summarised by :func:`method_samples`."""
    name = f"lambdaline-{recording.stem}"
    before, began = thread_cpu_seconds(pid), time.monotonic()
    subprocess.run(
        ["jcmd", str(pid), "JFR.start", f"name={name}", "settings=profile",
         f"filename={recording}"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    time.sleep(seconds)
    subprocess.run(
        ["jcmd", str(pid), "JFR.stop", f"name={name}"], check=True, capture_output=True, text=True
    )
    after, elapsed = thread_cpu_seconds(pid), time.monotonic() - began
    groups = cpu_by_group(before, after)
    return {
        "seconds": round(elapsed, 1),
        "cores": round(sum(groups.values()) / elapsed, 3),
        "cpu_s_by_thread_group": groups,
        "recording": str(recording),
        **method_samples(recording),
    }
