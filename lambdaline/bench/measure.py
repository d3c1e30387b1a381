"""Measuring instruments: CPU seconds from /proc and getrusage, percentiles, the machine."""

from __future__ import annotations

import os
import platform
import resource
import subprocess
import threading
import time
from datetime import datetime, timedelta
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shared.platform.jvm import jdk_tool

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

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


def machine_cpu_seconds() -> tuple[float, float]:
    """Busy and elapsed CPU seconds of the whole machine since boot, every core summed
    (``/proc/stat``; idle and I/O wait are not busy)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    total = sum(values)  # user nice system idle iowait irq softirq steal
    return (total - values[3] - values[4]) / CLOCK_TICKS, total / CLOCK_TICKS


def cpu_seconds_of_tree(root: int) -> float:
    """CPU seconds of a process and its descendants (live ones, and the reaped ones)."""
    return sum(seconds for _, seconds in cpu_seconds_by_process(root).values())


def own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def stop_spark_and_its_jvm(spark: SparkSession, timeout_s: float = 60.0) -> float | None:
    """Stop the session and end the driver's JVM that pyspark started; return the
    seconds the JVM took to exit, or None when this Python process did not start it.

    ``spark.stop()`` alone leaves that JVM running until this Python process
    ends, and a measurement that follows on the same cores (the DuckDB peer) would
    share them with whatever it still does. The JVM exits when its standard input
    closes (Spark's ``PythonGatewayServer``); the next session starts a new one.
    Under ``spark-submit`` the JVM is this process's parent, not its child: then
    the session is only stopped, and the JVM lives on as ``spark-submit`` wants.
    """
    from pyspark import SparkContext

    process = getattr(spark.sparkContext._gateway, "proc", None)
    spark.stop()
    if process is None:
        return None
    SparkContext._gateway = None
    SparkContext._jvm = None
    started = time.monotonic()
    process.stdin.close()
    process.wait(timeout=timeout_s)
    return time.monotonic() - started


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


def microbatch_span_s(progress: list[dict[str, Any]]) -> float | None:
    """Seconds from the start of the first micro-batch that read rows to the end of the
    last one, over every query: a run's processing without the JVM's start-up and the
    queries' planning before their first trigger, or None if no micro-batch read a row.

    ``progress``: the speed store's ``speed.progress`` records (``timestamp``, the
    trigger's start in ISO-8601 UTC, and ``batch_duration_ms``).
    """
    spans = []
    for record in progress:
        if record["num_input_rows"]:
            began = datetime.fromisoformat(record["timestamp"])
            spans.append((began, began + timedelta(milliseconds=record["batch_duration_ms"])))
    if not spans:
        return None
    return (max(end for _, end in spans) - min(began for began, _ in spans)).total_seconds()


def machine() -> dict[str, Any]:
    """Cores, memory and the versions that decide the figures."""
    memory_kb = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            memory_kb = int(line.split()[1])
    # the JDK that Spark's and the broker's JVMs run on: JAVA_HOME's, else the PATH's
    java = subprocess.run(
        [jdk_tool("java"), "-version"], capture_output=True, text=True, check=False
    )
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
