"""``lambdaline demo``: the whole Lambda system on one machine, in simulated time.

One command starts, each as a process of its own (its own session, so the
terminal's Ctrl-C reaches only the demo, which then stops them in order):

* the embedded Kafka broker (unless one already runs) and the topics; with
  ``--cluster``, a Kafka cluster of three nodes and a Spark standalone cluster (a
  master and ``spark_workers`` workers), on which both layers then run;
* the speed job (``lambdaline speed run``, continuous), one per live generation of the
  views: a line such as ``window=10m`` typed at the demo starts a new one beside the
  served one and switches to it once it has caught up (:mod:`lambdaline.view_change`);
* the generator (``lambdaline generate --speedup``): ``demo_speedup`` simulated
  seconds per real second, so a simulated day passes in minutes;
* the batch scheduler: the batch layer's own :class:`Scheduler`, driven by the
  simulated clock, runs ``lambdaline batch run --date <the simulated day before>``
  at ``demo_batch_cron`` simulated time (01:00: an hour after midnight, so the
  last exits of the day are in);
* the API (``lambdaline serve``), with the key from ``LAMBDALINE_API_KEYS`` or one
  generated and kept in the demo's state.

The simulated clock, the generated key and the seed live in
``<state_dir>/demo/demo.json``; a restart continues the simulation where it
stopped, on the same checkpoints, master dataset and batch versions, unless
``--fresh``. Every child is stopped by its pid (SIGTERM to the leader, which
stops cleanly, then SIGKILL to its process group so no JVM or worker outlives
it); a second Ctrl-C skips the grace periods but still stops everything.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shutil
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType
from typing import Any

from kafka import KafkaConsumer, TopicPartition
from rich.console import Console
from rich.live import Live
from rich.text import Text

from batch_layer.schedule import Scheduler, next_run_after
from lambdaline import kafka_broker, spark_cluster
from lambdaline.generator import GeneratorConfig, plate_pool
from lambdaline.processes import CLI, STOP_GRACE_S, Supervisor, log_tail
from lambdaline.view_change import ViewChange, parse_change
from shared.domain.events import format_instant, parse_instant
from shared.platform.environment import temporary_environment
from shared.platform.generations import live, read_generations
from shared.platform.kafka_admin import kafka_consumer, port_open
from shared.platform.locks import exclusive_lock
from shared.platform.logs import configure_logging, log_event
from shared.platform.topic_admin import create_topics
from shared.settings import Settings

logger = logging.getLogger("lambdaline.demo")

DEMO_PLATES = 2000
GENERATOR_WARM_UP_S = 2.0
"""About how long the generator takes from spawn to its first paced send."""


class DemoError(RuntimeError):
    """The demo cannot start or a part of it died; the message says which and where to look."""


# --- simulated time and the demo's own state ------------------------------------


@dataclass(frozen=True)
class SimClock:
    """Simulated time: ``origin`` at wall time ``wall_origin``, ``speedup`` times faster."""

    origin: datetime
    wall_origin: float
    speedup: float

    def now(self) -> datetime:
        elapsed = max(0.0, time.time() - self.wall_origin)
        return self.origin + timedelta(seconds=elapsed * self.speedup)

    def real_seconds(self, simulated: timedelta) -> float:
        return simulated.total_seconds() / self.speedup


def first_origin(today: datetime) -> datetime:
    """Where a fresh simulation starts: 20:00 UTC the day before, so a day completes soon."""
    midnight = today.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return midnight - timedelta(hours=4)


@dataclass
class DemoState:
    """What a restarted demo continues from, kept in ``<state_dir>/demo/demo.json``."""

    path: Path
    sim_time: datetime
    api_key: str
    runs: int = 0

    @classmethod
    def load(cls, settings: Settings, now: datetime) -> DemoState:
        path = settings.state_dir / "demo" / "demo.json"
        if not path.exists():
            return cls(path, first_origin(now), secrets.token_urlsafe(18))
        try:
            raw = json.loads(path.read_text())
            return cls(path, parse_instant(raw["sim_time"]), str(raw["api_key"]), int(raw["runs"]))
        except (ValueError, KeyError, TypeError) as error:
            raise DemoError(
                f"{path} is not a demo state file ({error}); start with --fresh to begin anew"
            ) from None

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        body = {
            "sim_time": format_instant(self.sim_time), "api_key": self.api_key, "runs": self.runs,
        }  # fmt: skip
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(body, indent=2) + "\n")
        temporary.chmod(0o600)  # it holds an API key
        temporary.replace(self.path)


def reset_state(settings: Settings) -> list[Path]:
    """Delete what the demo keeps between runs (broker data, checkpoints, master, versions).

    Only lambdaline's own folders under the state directory (and the configured
    batch store) go; a master dataset at a URL is left alone.
    """
    if kafka_broker.status(kafka_broker.cluster_settings(settings)).pids:
        raise DemoError(
            "--fresh deletes the broker's data, but the embedded broker is running; "
            "stop it first with `lambdaline kafka stop`"
        )
    if spark_cluster.status(settings).pids:
        raise DemoError(
            "--fresh deletes the Spark cluster's work folders, but it is running; "
            "stop it first with `lambdaline spark stop`"
        )
    folders = [
        settings.kafka_dir,
        settings.spark_cluster_dir,
        settings.checkpoints_dir,
        settings.batch_store,
        settings.state_dir / "demo",
    ]
    if settings.batch.master_dir is None:
        folders.append(Path(settings.master_location))
    removed = [folder for folder in folders if folder.exists()]
    for folder in removed:
        shutil.rmtree(folder)
    return removed


# --- what the user sees -----------------------------------------------------------


@dataclass
class Observer:
    """Reads the live figures: records in Kafka and the API's own /v1/status."""

    settings: Settings
    api: str
    api_key: str
    consumer: KafkaConsumer | None = None

    def records_in_kafka(self) -> int | None:
        topics = self.settings.topics
        try:
            if self.consumer is None:
                self.consumer = kafka_consumer(
                    self.settings.kafka, "lambdaline-demo", group_id=None, request_timeout_ms=5000
                )
            partitions = [
                TopicPartition(topic, partition)
                for topic in (topics.entries, topics.exits, topics.registrations)
                for partition in self.consumer.partitions_for_topic(topic) or ()
            ]
            return int(sum(self.consumer.end_offsets(partitions).values()))
        except Exception:  # a status line never stops the demo
            return None

    def status(self) -> dict[str, Any] | None:
        request = urllib.request.Request(
            f"{self.api}/v1/status", headers={"X-API-Key": self.api_key}
        )
        try:
            with urllib.request.urlopen(request, timeout=1.0) as response:
                body: dict[str, Any] = json.load(response)
                return body
        except (OSError, urllib.error.URLError, ValueError):
            return None

    def close(self) -> None:
        if self.consumer is not None:
            self.consumer.close()


def _short(instant: str | None) -> str:
    return "-" if not instant else instant[:16].replace("T", " ")


def status_line(
    clock: SimClock, records: int | None, status: dict[str, Any] | None, batch: str
) -> str:
    now = clock.now()
    parts = [f"sim {now:%Y-%m-%d %H:%M}"]
    parts.append(f"records in Kafka {records:,}" if records is not None else "records in Kafka ?")
    if status is None:
        parts.append("API starting")
    else:
        watermark = status.get("speed_watermark")
        behind = ""
        if watermark:
            hours = (now - parse_instant(watermark)).total_seconds() / 3600
            behind = f" ({hours:.1f} simulated h behind)"
        parts.append(f"speed watermark {_short(watermark)}{behind}")
        lag = status.get("speed_lag_records")
        if isinstance(lag, int) and lag > 0:
            parts.append(f"API reading {lag:,} speed records")
        version = status.get("batch_version")
        parts.append(
            f"batch v{version} horizon {_short(status.get('horizon'))}"
            if version is not None
            else "batch: no version yet"
        )
    parts.append(batch)
    return " | ".join(parts)


def batch_activity(scheduler: Scheduler, clock: SimClock) -> str:
    if scheduler.running is not None:
        return "batch running"
    failed = scheduler.last_exit_code not in (None, 0)
    due = next_run_after(scheduler.cron, clock.now())
    wait = clock.real_seconds(due - clock.now())
    text = f"next batch in {wait:.0f} s"
    return text + f" (last run failed: exit {scheduler.last_exit_code})" if failed else text


def demo_plate() -> str:
    """A plate the demo's generator sends (its plates are seeded)."""
    return plate_pool(GeneratorConfig(events=0, plates=DEMO_PLATES))[0]


def banner(settings: Settings, api: str, key: str, clock: SimClock) -> list[str]:
    day = clock.origin.replace(hour=0, minute=0, second=0, microsecond=0)
    since, until = format_instant(day), format_instant(day + timedelta(days=3))
    header = f"-H 'X-API-Key: {key}'"
    minutes_per_day = clock.real_seconds(timedelta(days=1)) / 60
    return [
        "lambdaline demo: the Lambda architecture on this machine (Ctrl-C stops it all)",
        f"  open     {api}/   the dashboard (it asks for the key: {key})",
        f"  API      {api}   OpenAPI {api}/docs",
        f"  status   curl -s {header} {api}/v1/status",
        f"  sql      curl -s {header} -H 'Content-Type: application/json' "
        f'-d \'{{"query": "SELECT booth_id, sum(vehicle_count) '
        f"FROM booth_stats GROUP BY 1\"}}' {api}/v1/sql",
        f"  stream   curl -sN {header} '{api}/v1/stream?views=booth_stats'",
        f"  query    curl -s {header} '{api}/v1/booths/booth-01/stats"
        f"?from={since}&to={until}&granularity=1h'",
        f"  rolling  curl -s {header} '{api}/v1/booths/booth-01/rolling?from={since}&to={until}'",
        f"  visits   curl -s {header} '{api}/v1/vehicles/{demo_plate()}/visits"
        f"?from={since}&to={until}'",
        f"  kafka    {settings.kafka.bootstrap} ({settings.kafka.brokers} "
        f"broker{'s' if settings.kafka.brokers > 1 else ''})",
        f"  spark    {settings.spark.master}"
        + (f"   web UI {spark_cluster.web_ui(settings)}" if _on_standalone(settings) else ""),
        f"  logs     {settings.logs_dir}/demo-*.log",
        "  change   type view settings and Enter, e.g. window=10m session_gap=20m: a new "
        "generation of the views runs beside the served one, and the API and the dashboard "
        "switch to it once it has caught up",
        f"  time     {clock.speedup:g} simulated s per real s (a simulated day every "
        f"{minutes_per_day:.1f} min), from {format_instant(clock.origin)}; the batch runs at "
        f"{settings.demo.batch_cron!r} simulated time for the day before",
    ]


def _on_standalone(settings: Settings) -> bool:
    return settings.spark.master == spark_cluster.master_url(settings)


# --- the demo ---------------------------------------------------------------------------


@contextlib.contextmanager
def _signals(handler: Callable[[int, FrameType | None], None]) -> Iterator[None]:
    watched = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, handler) for sig in watched}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


CLUSTER_BROKERS = 3


def on_clusters(settings: Settings) -> dict[str, str]:
    """The settings (as environment variables) that put the demo on its clusters: every
    part's clients bootstrap from three brokers, and both layers run on the Spark master.
    Every JVM binds the loopback, where the clusters listen."""
    return {
        "LAMBDALINE_KAFKA_BROKERS": str(max(CLUSTER_BROKERS, settings.kafka.brokers)),
        "LAMBDALINE_SPARK_MASTER": spark_cluster.master_url(settings),
        "SPARK_LOCAL_IP": spark_cluster.HOST,
    }


def run(
    settings: Settings, host: str, port: int, fresh: bool, console: Console, cluster: bool = False
) -> int:
    """Run the demo until a signal; return the exit code (0 after Ctrl-C, 1 if a part died).

    Raises :class:`shared.platform.locks.LockHeldError` if another demo runs on the same
    state folder.
    """
    stopping, force = threading.Event(), threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if stopping.is_set():
            force.set()
            console.print("stopping now, without waiting for clean shutdowns")
        else:
            stopping.set()
            console.print(f"{signal.Signals(signum).name}: stopping every part of the demo")

    # one demo per state folder: a second would share the first one's broker, feed it a
    # second stream, and its speed job would be refused the checkpoint (or --fresh delete it)
    with (
        exclusive_lock(
            settings.state_dir / "demo.lock",
            "another demo",
            "stop it (Ctrl-C where it runs), or give this one another LAMBDALINE_STATE_DIR",
        ),
        _signals(on_signal),
        temporary_environment(on_clusters(settings) if cluster else {}),
    ):
        if cluster:
            settings = settings.updated(
                kafka_brokers=max(CLUSTER_BROKERS, settings.kafka.brokers),
                spark_master=spark_cluster.master_url(settings),
            )
        return _run(settings, host, port, fresh, console, stopping, force, cluster)


def _run(
    settings: Settings,
    host: str,
    port: int,
    fresh: bool,
    console: Console,
    stopping: threading.Event,
    force: threading.Event,
    cluster: bool,
) -> int:
    if port_open(host, port):
        raise DemoError(f"{host}:{port} is already in use; pass a free one with --port")
    if fresh:
        for folder in reset_state(settings):
            console.print(f"--fresh: removed {folder}")
    state = DemoState.load(settings, datetime.now(UTC))
    settings.logs_dir.mkdir(parents=True, exist_ok=True)
    log_file = (settings.logs_dir / "demo.log").open("a", buffering=1)
    configure_logging(stream=log_file)
    state.runs += 1
    api_key = settings.serving.api_keys[0] if settings.serving.api_keys else state.api_key
    api = f"http://{host}:{port}"
    supervisor = Supervisor(env={**os.environ}, logs=settings.logs_dir, prefix="demo-")
    started = Started()
    scheduler: Scheduler | None = None
    worker: threading.Thread | None = None
    observer = Observer(settings, api, api_key)
    code = 0
    try:
        with console.status(f"starting Kafka on {settings.kafka.bootstrap}"):
            started.broker = not kafka_broker.status(settings).pids
            broker = kafka_broker.start(settings)
            create_topics(settings)
        spark_pids: list[int] = []
        if cluster and not stopping.is_set():
            with console.status(f"starting Spark at {settings.spark.master}"):
                started.spark = not spark_cluster.status(settings).pids
                spark_pids = spark_cluster.start(settings).pids
        if stopping.is_set():
            return 0
        for number in _live_generations(settings):
            name = "speed" if number == 1 else f"speed.g{number}"
            supervisor.spawn(name, "speed", "run", "--generation", str(number))
        clock = SimClock(state.sim_time, time.time() + GENERATOR_WARM_UP_S, settings.demo.speedup)
        supervisor.spawn(
            "generator", "generate", "--events", str(10**12), "--workers", "1",
            "--start", format_instant(clock.origin), "--speedup", f"{clock.speedup:g}",
            "--traffic", f"{settings.demo.traffic:g}", "--plates", str(DEMO_PLATES),
        )  # fmt: skip
        server_env = {} if settings.serving.api_keys else {"LAMBDALINE_API_KEYS": api_key}
        supervisor.spawn("api", "serve", "--host", host, "--port", str(port), env=server_env)
        scheduler = Scheduler(
            settings.demo.batch_cron,
            command=lambda due: [
                *CLI,
                "batch",
                "run",
                "--date",
                (due - timedelta(days=1)).date().isoformat(),
                "--allow-open-day",  # the simulated clock runs ahead of the real one
            ],
            clock=clock.now,
            speedup=clock.speedup,
            output=settings.logs_dir / "demo-batch.log",
        )
        worker = threading.Thread(target=scheduler.serve, name="demo-batch-scheduler")
        worker.start()
        for line in banner(settings, api, api_key, clock):
            console.print(line, highlight=False, soft_wrap=True)
        parts = Parts(supervisor, settings, broker.nodes, spark_pids)
        changes = Changes(settings, supervisor, clock, console)
        changes.listen()
        code = _watch(clock, state, scheduler, parts, observer, console, stopping, changes)
    finally:
        stopping.set()
        _shut_down(settings, supervisor, scheduler, worker, started, console, force)
        observer.close()
        if scheduler is not None:
            state.save()
        log_file.close()
    return code


@dataclass
class Started:
    """Which clusters this demo started (and so stops); ones already running keep running."""

    broker: bool = False
    spark: bool = False


class Parts:
    """The demo's processes, and the clusters they all need, to ask which one has died."""

    def __init__(
        self,
        supervisor: Supervisor,
        settings: Settings,
        brokers: list[kafka_broker.NodeStatus],
        spark_pids: list[int] | None = None,
    ):
        self.supervisor = supervisor
        self.settings = settings
        self.brokers = [node for node in brokers if node.pid is not None]  # none: not ours
        self.spark_pids = spark_pids or []

    def died(self) -> str | None:
        """What to say about the first part that has exited, or None while all run.

        The clusters first: without them every other part fails too, a minute or
        two later (the speed job once Spark's Kafka clients give up), and names
        them only as a Kafka or a master it cannot reach. One broker of three may
        die without stopping anything, but the demo runs all or nothing.
        """
        for node in self.brokers:
            assert node.pid is not None
            if not kafka_broker.is_running(self.settings, node.pid):
                log = node.paths.log_file
                return (
                    f"the Kafka broker (node {node.node.id}, pid {node.pid}) exited; last lines "
                    f"of {log}:\n{log_tail(log)}"
                )
        if self.spark_pids:
            cluster = spark_cluster.status(self.settings)
            for daemon in cluster.daemons:
                if daemon.pid is None:
                    log = daemon.daemon.log_file
                    return f"the Spark {daemon.daemon.name} exited; last lines of {log}:\n" + (
                        log_tail(log)
                    )
        dead = self.supervisor.died()
        if dead is None:
            return None
        return (
            f"the {dead.name} process (pid {dead.process.pid}) exited with code "
            f"{dead.process.returncode}; last lines of {dead.log}:\n{log_tail(dead.log)}"
        )


def _live_generations(settings: Settings) -> list[int]:
    """The generations whose speed jobs the demo runs: every live one (1 if none recorded)."""
    recorded = live(read_generations(settings.batch_store_root))
    return [generation.number for generation in recorded] or [1]


class Changes:
    """Lines typed at the demo that change view settings (``window=10m``), one at a time
    (:class:`lambdaline.view_change.ViewChange`)."""

    def __init__(
        self, settings: Settings, supervisor: Supervisor, clock: SimClock, console: Console
    ):
        self.settings, self.supervisor, self.clock, self.console = (
            settings, supervisor, clock, console,
        )  # fmt: skip
        self.current: ViewChange | None = None

    def listen(self) -> None:
        """Read standard input in the background (a closed one ends at once)."""
        threading.Thread(target=self._read, name="demo-stdin", daemon=True).start()

    def _read(self) -> None:
        for line in sys.stdin:
            if not line.strip():
                continue
            if self.current is not None and not self.current.finished.is_set():
                self.console.print(f"a change is under way: {self.current.stage}")
                continue
            try:
                changes = parse_change(self.settings, line)
            except ValueError as error:
                self.console.print(f"[red]not changed:[/red] {error}", highlight=False)
                continue
            self.current = ViewChange(self.settings, self.supervisor, changes, self.clock.now)
            self.current.start()
            log_event(logger, "demo_view_change", changes=changes)

    def shown(self) -> str:
        return f" | {self.current.stage}" if self.current is not None else ""


def _watch(
    clock: SimClock,
    state: DemoState,
    scheduler: Scheduler,
    parts: Parts,
    observer: Observer,
    console: Console,
    stopping: threading.Event,
    changes: Changes | None = None,
) -> int:
    """Refresh the status line every second until stopped; 1 if a part died."""
    last_printed = 0.0
    live = Live(console=console, auto_refresh=False) if console.is_terminal else None
    with live or contextlib.nullcontext():
        while not stopping.wait(1.0):
            state.sim_time = clock.now()
            state.save()
            if (dead := parts.died()) is not None:
                console.print(f"[red]error:[/red] {dead}", highlight=False)
                return 1
            line = status_line(
                clock, observer.records_in_kafka(), observer.status(),
                batch_activity(scheduler, clock),
            ) + (changes.shown() if changes is not None else "")  # fmt: skip
            if live is not None:
                live.update(Text(line), refresh=True)
            elif time.monotonic() - last_printed >= 15:
                console.print(line, highlight=False, soft_wrap=True)
                last_printed = time.monotonic()
    return 0


def _shut_down(
    settings: Settings,
    supervisor: Supervisor,
    scheduler: Scheduler | None,
    worker: threading.Thread | None,
    started: Started,
    console: Console,
    force: threading.Event,
) -> None:
    """Stop every part, data producers first, then Spark's daemons, the brokers last, each
    by its pid."""
    by_name = {child.name: child for child in supervisor.children}
    if "generator" in by_name:
        supervisor.stop(by_name["generator"], force, grace=2)
    if scheduler is not None and worker is not None:
        scheduler.stop()
        deadline = time.monotonic() + STOP_GRACE_S
        while worker.is_alive() and time.monotonic() < deadline and not force.is_set():
            worker.join(timeout=0.2)
        running = scheduler.running
        if running is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(running.pid, signal.SIGKILL)
        worker.join()
        console.print("stopped the batch scheduler")
    for child in supervisor.children:
        if child.name == "api" or child.name.startswith("speed"):
            supervisor.stop(child, force)
    for child in supervisor.children:
        console.print(f"stopped {child.name} (pid {child.process.pid})")
    if started.spark:
        with console.status("stopping Spark"):
            pids = spark_cluster.stop(settings, grace_s=2 if force.is_set() else 30)
        console.print(f"stopped spark ({', '.join(f'pid {pid}' for pid in pids) or 'none left'})")
    elif spark_cluster.status(settings).pids:
        console.print("the Spark cluster was already running before the demo and keeps running")
    if started.broker:
        with console.status("stopping Kafka"):
            pids = kafka_broker.stop(settings, grace_seconds=2 if force.is_set() else 30)
        if pids:  # none: they had exited already
            console.print(f"stopped kafka ({', '.join(f'pid {pid}' for pid in pids)})")
    elif kafka_broker.status(settings).pids:
        console.print("kafka was already running before the demo and keeps running")
