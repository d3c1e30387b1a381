"""Measuring instruments: CPU seconds from /proc and getrusage, percentiles, the machine."""

from __future__ import annotations

import os
import platform
import resource
import statistics
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


def _sent(step: dict[str, Any], topic: str = "all") -> int:
    return int(step["sent_records_per_s"][topic])


def kept_up(step: dict[str, Any], lookup_trigger_s: float) -> bool:
    """After the step's drain pause, booth_stats had less than one second's worth of the
    entries sent unread, and the lookups less than one lookup trigger's worth of the
    records sent: the lag did not grow. (An idle step, which sent nothing, never kept up.)"""
    return bool(
        step["entries_backlog_at_end"] < _sent(step, "toll.entries")
        and step["lookups"]["records_backlog_at_end"] < _sent(step) * lookup_trigger_s
    )


def speed_verdict(
    steps: list[dict[str, Any]], trigger_s: float, lookup_trigger_s: float
) -> dict[str, dict[str, int] | None]:
    """The highest steps the speed job kept up with, from the benchmark's steps.

    A step kept up as :func:`kept_up` says (the lookups query reads every input
    topic, on its longer trigger). It was sustainable in the issue's strict
    sense when each query also kept its micro-batch time p99 within its trigger.
    Each verdict names the step (the rate it offered) and the records per second
    it actually sent, which the generator keeps below the offered rate;
    ``None``: no step did.
    """

    def within_triggers(step: dict[str, Any]) -> bool:
        return bool(
            step["microbatch_s"]["p99"] <= trigger_s
            and step["lookups"]["microbatch_s"]["p99"] <= lookup_trigger_s
        )

    def highest(candidates: list[dict[str, Any]]) -> dict[str, int] | None:
        if not candidates:
            return None
        top = max(candidates, key=_sent)
        return {
            "offered_records_per_s": top["offered_records_per_s"],
            "sent_records_per_s": _sent(top),
        }

    keeping_up = [step for step in steps if kept_up(step, lookup_trigger_s)]
    return {
        "kept_up": highest(keeping_up),
        "sustainable": highest([step for step in keeping_up if within_triggers(step)]),
    }


SPEED_PARTS: dict[str, tuple[str, ...]] = {
    "speed_job": ("spark_jvm", "python_workers", "speed_driver"),
    "broker": ("broker",),
    "generator": ("generator",),
}
"""The speed benchmark's CPU roles, grouped into the parts of a run."""


def speed_cpu_model(
    steps: list[dict[str, Any]], lookup_trigger_s: float, target_records_per_s: int
) -> dict[str, Any] | None:
    """Each part's cores as a fixed cost while data flows plus a cost per record sent,
    fitted over the steps the job kept up with, and what a target rate would need.

    A least-squares line (``statistics.linear_regression``) through (records/s
    sent, cores) per part (the speed job, the broker, the generator), over the
    steps after the first that the job kept up with (:func:`kept_up`: all it
    was sent, it processed). The first step is
    left out: it pays the JIT's warm-up. The line's intercept is what the part
    pays whatever the rate once data flows (for the speed job: planning, state
    commits and progress of every micro-batch its triggers start), its slope the
    CPU milliseconds per record. (With no input at all Spark starts no
    micro-batch: the idle job costs next to nothing, so that is not the fixed
    cost.) The cores needed at ``target_records_per_s``: the intercepts plus the
    target times the slopes. A linear model read off a few steps on a noisy VM: a
    rough scale, and state that grows with the input (the lookups' joins) makes
    records cost more at higher rates. None with fewer than two such steps.
    """
    busy = [step for step in steps[1:] if kept_up(step, lookup_trigger_s)]
    rates = [float(_sent(step)) for step in busy]
    if len(set(rates)) < 2:
        return None
    fixed, per_record_ms = {}, {}
    for part, roles in SPEED_PARTS.items():
        used = [sum(float(step["cpu_cores"][role]) for role in roles) for step in busy]
        slope, intercept = statistics.linear_regression(rates, used)
        fixed[part] = intercept
        per_record_ms[part] = slope * 1000
    needed = sum(fixed.values()) + sum(per_record_ms.values()) * target_records_per_s / 1000
    return {
        "from_steps_sent_records_per_s": [int(rate) for rate in rates],
        "fixed_cores": {part: round(cores, 2) for part, cores in fixed.items()},
        "cpu_ms_per_record": {part: round(ms, 3) for part, ms in per_record_ms.items()},
        "target_records_per_s": target_records_per_s,
        "cores_needed_at_target": round(needed, 1),
    }


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
