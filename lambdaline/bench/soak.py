"""``lambdaline bench soak``: the continuous speed job at a steady rate for a long time.

On a broker of its own (free ports, a temporary state folder), with the batch
schedule off, it runs the continuous speed job, the API, and the generator
sending ``--rate`` events per second in real time (event time = wall time), and
every :data:`SAMPLE_S` seconds samples:

- the input rate (the input topics' end offsets) and the processed rate (what
  the operator's query, which reads every input topic, had read by its latest
  micro-batch);
- the consumer lag of each query: records on the broker it had not read;
- the speed JVM's heap after GC (the least its GC log shows after any
  collection in the sample's 10 s: nothing is forced, so the run is not
  disturbed; G1's old garbage not yet marked is in it, so it saw-tooths with
  G1's marking cycles and rises only with what stays live), its longest GC
  pause, and its RSS (``/proc``; RocksDB's memory is off the heap, so RSS is
  where a leak of it shows);
- state rows and bytes of every stateful operator (``speed.progress``);
- the speed job's CPU (its process tree, from ``/proc``);
- per-view freshness: probes (``lambdaline.bench.freshness``) every
  ``probe_every_s``, each from send() until the API shows it.

Over the last :data:`TREND_WINDOW` of the soak, a least-squares line through
each of lag, heap after GC, RSS and state rows says whether it trends upward,
within the limits :data:`TREND_LIMITS` states. Then optional ramp steps
(``--ramp``), each ``--step-minutes`` at a higher rate: the run reports the
highest rate at which the lag stayed flat for a whole step. Then an outage
(``--outage-minutes``, 0: none): the speed job's driver killed with SIGKILL
(its Python process and JVM, the group) with its state full, left down while
the input flows, started again on its checkpoint; the run reports how long
until its lag was back within 10 s of input and the rate it caught up at
(:func:`recovery`). Last, the floor job (``lambdaline.bench.floor``) at the
soak's rate: the CPU per event of each.

Writes results.json, report.md and time-series PNGs to a new folder. Everything
it starts it stops, by pid.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx2
from rich.console import Console

from lambdaline.bench.floor import FLOOR_PROGRESS_TOPIC, FLOOR_QUERY, FLOOR_TOPIC
from lambdaline.bench.freshness import PROBED_VIEWS, VISITS, FreshnessProbes, Probe
from lambdaline.bench.measure import (
    cpu_seconds_by_process,
    cpu_seconds_of_tree,
    machine,
    machine_cpu_seconds,
    percentile,
)
from lambdaline.bench.profile import profile
from lambdaline.kafka_broker import ephemeral_broker, free_port
from lambdaline.kafka_broker import status as broker_status
from lambdaline.processes import Child, Supervisor, log_tail, wait_until_answers
from shared.domain.events import format_instant
from shared.platform.kafka_admin import kafka_consumer, kafka_producer, offset_bounds
from shared.platform.kafka_security import security_environment
from shared.platform.topic_admin import TopicSpec, create_topics
from shared.settings import Settings
from speed_layer.job import SPEED_SPARK_CONF
from speed_layer.operator import VIEWS_QUERY

SAMPLE_S = 10.0
DRIVER_OPTIONS = "spark.driver.extraJavaOptions"
MICRO_BATCH_FIELDS = ("batch_id", "batch_duration_ms", "phases_ms", "num_input_rows")
"""What a sample keeps of each query's latest progress report besides its state."""
RECORDS_PER_ENTRY = 2.06
PLATE_REVISIT = timedelta(minutes=10)
"""How often, on average, a plate of the soak's traffic enters a booth: its plate pool
grows with the rate. The generator's default pool (5,000 plates) at 500 entries/s has
each plate entering every 10 s, so a join key (booth, plate) holds ~36 entries of the
last max_trip and the joins' cost per record grows with their state."""
"""Records the generator sends per entry with its default fractions (measured)."""
TREND_WINDOW = timedelta(minutes=30)
PROFILE_S = 60.0
STEP_FLAT_LAG_S = 10.0
"""A phase's lag is flat if its fitted growth over the phase's last :data:`FLAT_WINDOW`
is under this many seconds of input (the phase's rate times it)."""
FLAT_WINDOW = timedelta(minutes=15)
TREND_LIMITS = {
    "lag_records": "fitted growth over the window below 10 s of input (rate x 10 s)",
    "heap_after_gc_mb": "fitted growth over the window below 10 % of its mean, or 64 MB",
    "rss_mb": "fitted growth over the window below 10 % of its mean, or 64 MB",
    "state_rows": "fitted growth over the window below 5 % of its mean",
    "state_bytes": "fitted growth over the window below 10 % of its mean, or 64 MB",
}
"""``state_bytes`` stands in for ``state_rows`` where the state stores count no rows
(``trackTotalNumberOfRows`` off): RocksDB's live SST bytes, which compaction moves in
steps, so its limit is a heap's."""


class SoakError(RuntimeError):
    """A part of the soak failed; the message names it and its log."""


@dataclass(frozen=True)
class SoakOptions:
    rate: float = 2000.0
    minutes: float = 95.0
    out: Path = Path("bench-results")
    seed: int = 11
    ramp: tuple[float, ...] = ()
    step_minutes: float = 15.0
    outage_minutes: float = 5.0
    recovery_minutes: float = 15.0
    floor_minutes: float = 5.0
    probe_every_s: float = 30.0
    profile_at: tuple[float, ...] = ()
    """Minutes into the soak at which to profile the speed JVM for :data:`PROFILE_S`
    (``lambdaline.bench.profile``)."""


# --- pure parts (unit-tested) -------------------------------------------------------------

_PAUSE = re.compile(r"GC\(\d+\) Pause .* \d+[KMG]->(\d+)([KMG])\(\d+[KMG]\) ([\d.]+)ms")
_UNIT_MB = {"K": 1 / 1024, "M": 1.0, "G": 1024.0}


def collections(lines: list[str]) -> list[tuple[float, float]]:
    """(heap in use after it in MB, its pause in ms) of each collection a unified GC log
    (``-Xlog:gc``) names: young, mixed, remark, full."""
    found = []
    for line in lines:
        match = _PAUSE.search(line)
        if match:
            found.append((int(match.group(1)) * _UNIT_MB[match.group(2)], float(match.group(3))))
    return found


def fitted_growth(points: list[tuple[float, float]]) -> float | None:
    """How much a least-squares line through (t, value) rises from the first t to the last."""
    if len(points) < 3:
        return None
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    spread = sum((t - mean_t) ** 2 for t, _ in points)
    if spread == 0:
        return None
    slope = sum((t - mean_t) * (v - mean_v) for t, v in points) / spread
    return slope * (points[-1][0] - points[0][0])


def trend(points: list[tuple[float, float]], limit: float) -> dict[str, Any]:
    """The fitted growth of a series over its span, against a limit: flat if under it."""
    growth = fitted_growth(points)
    values = [v for _, v in points]
    return {
        "first": values[0] if values else None,
        "last": values[-1] if values else None,
        "mean": round(sum(values) / len(values), 1) if values else None,
        "fitted_growth": None if growth is None else round(growth, 1),
        "limit": round(limit, 1),
        "flat": growth is not None and growth < limit,
    }


def read_offsets(progress: dict[str, Any], topics: list[str]) -> int:
    """Records of ``topics`` a query had read by the micro-batch of this progress record."""
    return sum(
        sum(int(offset) for offset in parts.values())
        for source in progress.get("source_end_offsets", [])
        for topic, parts in source.items()
        if topic in topics
    )


# --- the run ------------------------------------------------------------------------------


class ProgressFollower:
    """Reads progress topics from their start, in a thread, keeping each query's latest."""

    def __init__(self, settings: Settings, topics: list[str]):
        self.consumer = kafka_consumer(
            settings.kafka, "lambdaline-soak", auto_offset_reset="earliest", group_id=None
        )
        self.consumer.subscribe(topics)
        self.latest: dict[str, dict[str, Any]] = {}
        self.batches: dict[str, list[tuple[float, float, int, dict[str, int]]]] = {}
        """Per query, each micro-batch with input: (when seen, seconds, input rows, the
        milliseconds of its phases)."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="progress", daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        while not self._stop.is_set():
            for records in self.consumer.poll(timeout_ms=500).values():
                for record in records:
                    progress = json.loads(record.value)
                    query = str(progress.get("query"))
                    self.latest[query] = progress
                    if progress.get("num_input_rows"):
                        self.batches.setdefault(query, []).append(
                            (
                                time.monotonic(),
                                progress["batch_duration_ms"] / 1000,
                                int(progress["num_input_rows"]),
                                progress.get("phases_ms") or {},
                            )
                        )

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.consumer.close()


SOAK_VIEWS = (*PROBED_VIEWS, VISITS)
"""The views the soak's probes are timed in."""


def _newly_seen(probes: list[Probe], reported: set[tuple[int, str]]) -> dict[str, list[float]]:
    """Per view, the seconds to visible of the probes first seen since the last call."""
    found: dict[str, list[float]] = {view: [] for view in SOAK_VIEWS}
    for probe in probes:
        for view, at in probe.seen.items():
            if (id(probe), view) not in reported:
                reported.add((id(probe), view))
                found[view].append(round(at - probe.sent[view], 3))
    return found


def _java_pids(root: int) -> list[int]:
    return [
        pid
        for pid, (command, _) in cpu_seconds_by_process(root).items()
        if command.split(" ", 1)[0].endswith("/java")
    ]


def _rss_mb(pids: list[int]) -> float:
    total_kb = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total_kb += int(line.split()[1])
        except OSError:
            continue
    return round(total_kb / 1024, 1)


@dataclass
class Phase:
    """One stretch of the run at one rate, and its samples."""

    name: str
    rate: float
    began: float = field(default_factory=time.monotonic)
    samples: list[dict[str, Any]] = field(default_factory=list)


class Soak:
    def __init__(self, settings: Settings, options: SoakOptions, folder: Path, console: Console):
        self.settings, self.options, self.folder, self.console = settings, options, folder, console
        self.api_key = secrets.token_urlsafe(12)
        self.gc_log = folder / "gc-speed.log"
        # the user's Spark conf, with the GC log added to the driver JVM's options (the
        # user's, else the speed job's own)
        spark_conf = dict(settings.spark.conf)
        java_options = spark_conf.get(DRIVER_OPTIONS, SPEED_SPARK_CONF[DRIVER_OPTIONS])
        spark_conf[DRIVER_OPTIONS] = f"{java_options} -Xlog:gc:file={self.gc_log}:uptime".strip()
        self.env = {
            **os.environ,
            "LAMBDALINE_STATE_DIR": str(settings.state_dir),
            "LAMBDALINE_KAFKA_BOOTSTRAP": settings.kafka.bootstrap,
            "LAMBDALINE_KAFKA_CONTROLLER_PORT": str(settings.kafka.controller_port),
            "LAMBDALINE_API_KEYS": self.api_key,
            "LAMBDALINE_SPARK_CONF": json.dumps(spark_conf),
            **security_environment(settings.kafka),
        }
        self.children = Supervisor(env=self.env, logs=folder, prefix="log-")
        self.inputs = settings.topics.inputs()
        self.phases: list[Phase] = []
        self.traffic: Child | None = None
        self.broker_pid = broker_status(settings).pid
        self.profiles: dict[str, dict[str, Any]] = {}
        self._profiling: list[threading.Thread] = []

    def _profile(self, job: Child, minute: float) -> None:
        """Profile the speed JVM now, in a thread, into ``profiles`` and the folder."""
        java = _java_pids(job.process.pid)
        if not java:
            return
        label = f"speed-{minute:g}min"
        self.step(f"profiling the speed JVM for {PROFILE_S:g} s ({label})")

        def run() -> None:
            try:
                self.profiles[label] = profile(java[0], PROFILE_S, self.folder / f"{label}.jfr")
            except (OSError, subprocess.SubprocessError, ValueError) as error:
                self.profiles[label] = {"error": f"{type(error).__name__}: {error}"}

        thread = threading.Thread(target=run, name=f"profile-{label}", daemon=True)
        thread.start()
        self._profiling.append(thread)

    def step(self, text: str) -> None:
        self.console.print(f"[bold]soak[/bold] {text}", highlight=False)

    def _end_offsets(self, topics: list[str] | None = None) -> int:
        topics = self.inputs if topics is None else topics
        return sum(bounds.end for bounds in offset_bounds(self.settings.kafka, topics).values())

    def _send_at(self, rate: float) -> None:
        """(Re)start the generator at ``rate`` events per second, in real time."""
        if self.traffic is not None:
            self.children.stop(self.traffic)
        entries_per_s = rate / RECORDS_PER_ENTRY
        plates = max(5000, round(entries_per_s * PLATE_REVISIT.total_seconds()))
        self.traffic = self.children.spawn(
            f"traffic-{rate:g}", "generate", "--events", str(10**12), "--start", "now",
            "--speedup", "1", "--traffic", f"{entries_per_s:g}", "--plates", str(plates),
            "--seed", str(self.options.seed + len(self.phases)), "--workers", "1",
        )  # fmt: skip

    def _watch(
        self,
        phase: Phase,
        seconds: float,
        job: Child,
        follower: ProgressFollower,
        probes: FreshnessProbes | None,
        query: str,
    ) -> None:
        """Sample every SAMPLE_S for ``seconds``, sending a probe every probe_every_s."""
        self.phases.append(phase)
        speed_store = self.settings.speed_topics.speed_store()
        last = {"t": time.monotonic(), "end": self._end_offsets(), "cpu": self._cpu(job)}
        last["written"] = self._end_offsets(speed_store)
        last["read"] = read_offsets(follower.latest.get(query, {}), self.inputs)
        stack, machine_busy = self._stack_cpu(), machine_cpu_seconds()
        gc_seen = 0
        sent: list[Probe] = []
        reported: set[tuple[int, str]] = set()
        next_probe = time.monotonic()
        deadline = time.monotonic() + seconds
        profile_at = sorted(self.options.profile_at) if phase.name == "soak" else []
        while time.monotonic() < deadline:
            if profile_at and time.monotonic() - phase.began >= profile_at[0] * 60:
                self._profile(job, profile_at.pop(0))
            if died := self.children.died():
                raise SoakError(f"{died.name} exited early:\n{log_tail(died.log)}")
            if probes is not None and time.monotonic() >= next_probe:
                sent.append(probes.send())
                next_probe += self.options.probe_every_s
            time.sleep(max(0.0, last["t"] + SAMPLE_S - time.monotonic()))
            now = time.monotonic()
            end, cpu = self._end_offsets(), self._cpu(job)
            written = self._end_offsets(speed_store)
            latest = follower.latest.get(query, {})
            read = read_offsets(latest, self.inputs)
            gc_lines = self.gc_log.read_text().splitlines() if self.gc_log.exists() else []
            if len(gc_lines) < gc_seen:  # a restarted JVM begins the log anew
                gc_seen = 0
            collected = collections(gc_lines[gc_seen:])
            gc_seen = len(gc_lines)
            elapsed = now - last["t"]
            java = _java_pids(job.process.pid)
            stack_now, busy_now = self._stack_cpu(), machine_cpu_seconds()
            sample: dict[str, Any] = {
                "t_s": round(now - phase.began, 1),
                "input_per_s": round((end - last["end"]) / elapsed, 1),
                "processed_per_s": round((read - last["read"]) / elapsed, 1),
                "lag_records": max(0, end - read),
                "cpu_cores": round((cpu - last["cpu"]) / elapsed, 3),
                # every part on the machine, and the machine: what the job competes with
                "stack_cores": {
                    part: round((seconds - stack[part]) / elapsed, 3)
                    for part, seconds in stack_now.items()
                    if part in stack
                },
                "machine_busy_cores": round(
                    (busy_now[0] - machine_busy[0])
                    / (busy_now[1] - machine_busy[1])
                    * (os.cpu_count() or 1),
                    3,
                ),
                "cpu_s": round(cpu, 2),
                "speed_records_per_s": round((written - last["written"]) / elapsed, 1),
                "read_records": read,
                "heap_after_gc_mb": (
                    round(min(after for after, _ in collected), 1) if collected else None
                ),
                "gc_pause_max_ms": max((pause for _, pause in collected), default=None),
                "rss_mb": _rss_mb(java) if java else None,
                "state": {
                    name: p.get("state_operators", [])
                    for name, p in sorted(follower.latest.items())
                },
                # each query's latest micro-batch: how long it took for how many rows
                "micro_batches": {
                    name: {key: p.get(key) for key in MICRO_BATCH_FIELDS}
                    for name, p in sorted(follower.latest.items())
                },
            }
            if probes is not None:
                sample["freshness_s"] = _newly_seen(sent, reported)
                sent = [p for p in sent if not p.done]
            phase.samples.append(sample)
            self.console.print(
                f"  {phase.name} {sample['t_s']:>7.0f} s | in {sample['input_per_s']:>7.0f}/s "
                f"| done {sample['processed_per_s']:>7.0f}/s | lag {sample['lag_records']:>8,} "
                f"| cpu {sample['cpu_cores']:.2f} | heap {sample['heap_after_gc_mb']} MB "
                f"| rss {sample['rss_mb']} MB | machine {sample['machine_busy_cores']:.2f} cores",
                highlight=False,
            )
            last = {"t": now, "end": end, "cpu": cpu, "read": read, "written": written}
            stack, machine_busy = stack_now, busy_now

    def _outage(self, job: Child, follower: ProgressFollower, probes: FreshnessProbes) -> Child:
        """Kill the speed driver's group with SIGKILL, keep it down for outage_minutes
        while the input flows, start it again on its checkpoint and watch it recover."""
        options = self.options
        self.step(
            f"outage: the speed driver killed (SIGKILL), down {options.outage_minutes:g} min, "
            f"then {options.recovery_minutes:g} min to recover"
        )
        os.killpg(job.process.pid, signal.SIGKILL)
        job.process.wait()
        job.stopped = True  # on purpose: not a child that died
        self._watch(
            Phase("outage", options.rate), options.outage_minutes * 60, job, follower, None,
            VIEWS_QUERY,
        )  # fmt: skip
        restarted = self.children.spawn("speed-restarted", "speed", "run")
        self._watch(
            Phase("recovery", options.rate), options.recovery_minutes * 60, restarted, follower,
            probes, VIEWS_QUERY,
        )  # fmt: skip
        return restarted

    def _stack_cpu(self) -> dict[str, float]:
        """CPU seconds so far of each running part: the broker and every child."""
        parts = {
            child.name.split("-")[0]: cpu_seconds_of_tree(child.process.pid)
            for child in self.children.children
            if not child.stopped
        }
        if self.broker_pid is not None:
            parts["broker"] = cpu_seconds_of_tree(self.broker_pid)
        # this process: the probes and their watcher, the sampling, the progress follower
        parts["probes"] = sum(os.times()[:2])
        return parts

    @staticmethod
    def _cpu(job: Child) -> float:
        return cpu_seconds_of_tree(job.process.pid)

    def run(self) -> dict[str, Any]:
        options = self.options
        create_topics(
            self.settings, [TopicSpec(FLOOR_TOPIC, 1), TopicSpec(FLOOR_PROGRESS_TOPIC, 1)]
        )
        port = free_port()
        self.step(
            f"continuous speed job, the API on port {port}, the generator at {options.rate:g}/s"
        )
        job = self.children.spawn("speed", "speed", "run")
        api = self.children.spawn("api", "serve", "--port", str(port))
        self._send_at(options.rate)
        client = httpx2.Client(
            base_url=f"http://127.0.0.1:{port}", headers={"X-API-Key": self.api_key}, timeout=10
        )
        follower = ProgressFollower(self.settings, [self.settings.speed_topics.speed_progress])
        producer = kafka_producer(self.settings.kafka, "lambdaline-soak", linger_ms=0)
        results: dict[str, Any] = {}
        try:
            if not wait_until_answers(client, 180):
                raise SoakError(f"the API did not become ready:\n{log_tail(api.log)}")
            with FreshnessProbes(self.settings, client, producer, visits=True) as probes:
                soak = Phase("soak", options.rate)
                self._watch(soak, options.minutes * 60, job, follower, probes, VIEWS_QUERY)
                # the soak's trend window (its last 30 min): each query's micro-batches in it
                window = (time.monotonic() - TREND_WINDOW.total_seconds(), time.monotonic())
                for rate in options.ramp:
                    self.step(f"ramp: {rate:g} events/s for {options.step_minutes:g} min")
                    self._send_at(rate)
                    step = Phase(f"ramp-{rate:g}", rate)
                    self._watch(step, options.step_minutes * 60, job, follower, probes, VIEWS_QUERY)
                if options.outage_minutes > 0:
                    if options.ramp:
                        self._send_at(options.rate)
                    job = self._outage(job, follower, probes)
            for thread in self._profiling:
                thread.join(timeout=PROFILE_S * 3)
            self.children.stop(job)
            self.children.stop(api)
            results["profiles"] = self.profiles
            results["microbatches"] = {
                query: micro_batch_figures(
                    [(d, n, ms) for at, d, n, ms in batches if window[0] <= at <= window[1]]
                )
                for query, batches in sorted(follower.batches.items())
            }
        finally:
            follower.close()
            producer.close()
            client.close()

        if options.floor_minutes > 0:
            self.step(f"floor job at {options.rate:g}/s for {options.floor_minutes:g} min")
            self._send_at(options.rate)
            floor = self.children.spawn("floor", "bench", "floor-job")
            floor_follower = ProgressFollower(self.settings, [FLOOR_PROGRESS_TOPIC])
            try:
                time.sleep(60)  # start-up and the JIT's warm-up
                phase = Phase("floor", options.rate)
                self._watch(
                    phase, options.floor_minutes * 60, floor, floor_follower, None, FLOOR_QUERY
                )
            finally:
                floor_follower.close()
                self.children.stop(floor)
        self.children.stop_all()
        return {**results, **summarise(self.phases, options, self.settings)}


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _quantiles(values: list[float]) -> dict[str, float | None]:
    return {
        name: (round(percentile(values, q), 3) if values else None)
        for name, q in (("p50", 0.5), ("p99", 0.99))
    }


def _series(
    samples: list[dict[str, Any]], value: Callable[[dict[str, Any]], float | None]
) -> list[tuple[float, float]]:
    return [(s["t_s"], v) for s in samples if (v := value(s)) is not None]


def _state_rows(sample: dict[str, Any]) -> float:
    return float(sum(op.get("rows") or 0 for ops in sample["state"].values() for op in ops))


def _state_mb(sample: dict[str, Any]) -> float:
    disk = sum(op.get("disk_bytes") or 0 for ops in sample["state"].values() for op in ops)
    return disk / 2**20


def micro_batch_figures(batches: list[tuple[float, int, dict[str, int]]]) -> dict[str, Any]:
    """A query's micro-batches (seconds, input rows, Spark's ``durationMs``): how many,
    their time's p50 and p99, their input rows' p50, and each phase's mean seconds (where
    a micro-batch's time goes: planning, the batch itself, the logs' writes)."""
    rows = [float(n) for _, n, _ in batches]
    phases = sorted({name for _, _, ms in batches for name in ms} - {"triggerExecution"})
    return {
        "count": len(batches),
        "seconds": _quantiles([d for d, _, _ in batches]),
        "rows_p50": round(percentile(rows, 0.5)) if rows else None,
        "phases_mean_s": {
            name: round(_mean([ms.get(name, 0) / 1000 for _, _, ms in batches]), 3)
            for name in phases
        },
    }


def cpu_per_event_us(samples: list[dict[str, Any]]) -> float | None:
    """CPU microseconds per record read over the samples (first to last)."""
    if len(samples) < 2:
        return None
    events = samples[-1]["read_records"] - samples[0]["read_records"]
    cpu = samples[-1]["cpu_s"] - samples[0]["cpu_s"]
    return round(cpu / events * 1e6, 1) if events > 0 else None


def recovery(
    outage: list[dict[str, Any]], after: list[dict[str, Any]], rate: float
) -> dict[str, Any]:
    """How the speed job came back from an outage: the lag the outage left, the seconds
    from its restart until its lag was back within :data:`STEP_FLAT_LAG_S` of input
    (None: not within the phase), the input rows it processed per second until then, and
    the freshness of the probes sent after the restart."""
    left = outage[-1]["lag_records"] if outage else None
    bound = rate * STEP_FLAT_LAG_S
    back = next((s for s in after if s["lag_records"] <= bound), None)
    catching_up = [s for s in after if back is None or s["t_s"] <= back["t_s"]]
    freshness: dict[str, list[float]] = {view: [] for view in SOAK_VIEWS}
    for sample in after:
        for view, seen in sample.get("freshness_s", {}).items():
            freshness[view] += seen
    return {
        "lag_left_records": left,
        "back_within_s": back["t_s"] if back is not None else None,
        "catch_up_per_s": (
            round(_mean([s["processed_per_s"] for s in catching_up]), 1) if catching_up else None
        ),
        "freshness_s": {view: _quantiles(seen) for view, seen in freshness.items()},
    }


def summarise(phases: list[Phase], options: SoakOptions, settings: Settings) -> dict[str, Any]:
    """The verdicts of a run's phases: trends over the soak's last window, the highest flat
    rate, CPU per event of the speed job and the floor job, freshness per view."""
    by_name = {phase.name: phase for phase in phases}
    soak = by_name["soak"]
    window_s = TREND_WINDOW.total_seconds()
    end_s = soak.samples[-1]["t_s"] if soak.samples else 0.0
    tail = [s for s in soak.samples if s["t_s"] >= end_s - window_s]

    def limited(series: list[tuple[float, float]], share: float, floor: float) -> float:
        values = [v for _, v in series]
        return max(share * (sum(values) / len(values)), floor) if values else floor

    lag = _series(tail, lambda s: s["lag_records"])
    heap = _series(tail, lambda s: s["heap_after_gc_mb"])
    rss = _series(tail, lambda s: s["rss_mb"])
    rows = _series(tail, _state_rows)
    trends = {
        "lag_records": trend(lag, options.rate * STEP_FLAT_LAG_S),
        "heap_after_gc_mb": trend(heap, limited(heap, 0.10, 64.0)),
        "rss_mb": trend(rss, limited(rss, 0.10, 64.0)),
    }
    if any(v > 0 for _, v in rows):
        trends["state_rows"] = trend(rows, limited(rows, 0.05, 1.0))
    else:  # no rows counted: the state's bytes on disk
        state_mb = _series(tail, _state_mb)
        trends["state_bytes"] = trend(state_mb, limited(state_mb, 0.10, 64.0))
    flat_rates: list[dict[str, Any]] = []
    for phase in phases:
        if phase.name in ("floor", "outage", "recovery"):
            continue
        last_s = phase.samples[-1]["t_s"] if phase.samples else 0.0
        window = [s for s in phase.samples if s["t_s"] >= last_s - FLAT_WINDOW.total_seconds()]
        step_lag = trend(_series(window, lambda s: s["lag_records"]), phase.rate * STEP_FLAT_LAG_S)
        if step_lag["flat"] and last_s >= FLAT_WINDOW.total_seconds() - SAMPLE_S:
            flat_rates.append(
                {
                    "phase": phase.name,
                    "offered_per_s": phase.rate,
                    "input_per_s": round(_mean([s["input_per_s"] for s in window]), 1),
                    "processed_per_s": round(_mean([s["processed_per_s"] for s in window]), 1),
                }
            )
    freshness: dict[str, list[float]] = {view: [] for view in SOAK_VIEWS}
    for sample in tail:
        for view, seen in sample.get("freshness_s", {}).items():
            freshness[view] += seen
    highest = max(flat_rates, key=lambda r: r["input_per_s"]) if flat_rates else None
    fresh = {view: {**_quantiles(seen), "samples": len(seen)} for view, seen in freshness.items()}
    speed_cpu = cpu_per_event_us(tail)
    parts = sorted({part for s in tail for part in s.get("stack_cores", {})})
    stack_cores = {
        part: round(
            _mean([s["stack_cores"][part] for s in tail if part in s.get("stack_cores", {})]), 2
        )
        for part in parts
    }
    busy = [s["machine_busy_cores"] for s in tail if "machine_busy_cores" in s]
    input_per_s = _mean([s["input_per_s"] for s in tail]) if tail else 0.0
    written = [s["speed_records_per_s"] for s in tail if "speed_records_per_s" in s]
    floor = by_name.get("floor")
    floor_cpu = cpu_per_event_us(floor.samples) if floor else None
    outage = by_name.get("outage")
    after = by_name.get("recovery")
    state_fills_after = settings.views.sizes["max_trip"] + settings.views.watermark
    return {
        "options": {
            "rate": options.rate, "minutes": options.minutes, "ramp": list(options.ramp),
            "step_minutes": options.step_minutes, "floor_minutes": options.floor_minutes,
            "outage_minutes": options.outage_minutes,
            "recovery_minutes": options.recovery_minutes,
            "probe_every_s": options.probe_every_s, "sample_s": SAMPLE_S,
        },
        "state_fills_after_s": state_fills_after.total_seconds(),
        "trend_window_s": window_s,
        "trend_limits": {name: TREND_LIMITS[name] for name in trends},
        "window_rates_per_s": {
            name: round(sum(s[f"{name}_per_s"] for s in tail) / len(tail), 1) if tail else 0.0
            for name in ("input", "processed")
        },
        "trends": trends,
        "no_upward_trend": all(t["flat"] for t in trends.values()),
        "highest_flat_rate": highest,
        "flat_rates": flat_rates,
        "freshness_s": fresh,
        "cpu_us_per_event": {
            "speed_job": speed_cpu, "floor_job": floor_cpu,
            "ratio": round(speed_cpu / floor_cpu, 2) if speed_cpu and floor_cpu else None,
        },
        "cpu_s_per_1000_events": {
            part: round(cores / input_per_s * 1000, 3) if input_per_s else None
            for part, cores in stack_cores.items()
        },
        "speed_records_per_event": (
            round(_mean(written) / input_per_s, 3) if written and input_per_s else None
        ),
        "recovery": (
            recovery(outage.samples, after.samples, options.rate) if outage and after else None
        ),
        "cpu_cores": {
            "parts": stack_cores,
            "machine_busy": round(_mean(busy), 2) if busy else None,
            "machine": os.cpu_count(),
        },
        "phases": [
            {"name": p.name, "rate": p.rate, "samples": p.samples} for p in phases
        ],
    }  # fmt: skip


def run(base: Settings, options: SoakOptions, console: Console) -> Path:
    """Run the soak; return the folder holding results.json, report.md and the charts."""
    from lambdaline.bench.soak_report import write_soak_charts, write_soak_report

    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    folder = options.out / f"{stamp}-soak-{options.rate:g}"
    folder.mkdir(parents=True, exist_ok=False)
    with (
        tempfile.TemporaryDirectory(prefix="lambdaline-soak-") as state,
        ephemeral_broker(Path(state), kafka_heap=base.kafka.heap) as broker,
    ):
        create_topics(broker)
        # the broker's settings with the user's views, speed job and Spark (the soak adds
        # its GC log): the children read the same from the environment they inherit
        settings = broker.updated(views=base.views, speed=base.speed, spark=base.spark)
        soak = Soak(settings, options, folder.resolve(), console)
        began = time.monotonic()
        try:
            results = soak.run()
        finally:
            soak.children.stop_all()
    results = {
        "started_at": format_instant(
            datetime.now(UTC) - timedelta(seconds=time.monotonic() - began)
        ),
        **results,
        "machine": machine(),
    }
    (folder / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    charts = write_soak_charts(results, folder)
    write_soak_report(results, folder, charts)
    return folder
