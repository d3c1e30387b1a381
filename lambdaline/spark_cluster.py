"""A Spark standalone cluster on this machine: a master and workers, run by Spark's own daemons.

``lambdaline spark start`` runs ``org.apache.spark.deploy.master.Master`` and
``spark_workers`` times ``org.apache.spark.deploy.worker.Worker`` through the
installed pyspark's ``bin/spark-class``: the classes Spark's ``sbin/start-master.sh``
and ``start-worker.sh`` run (pyspark's wheel ships ``bin/``, not those scripts).
Each is a JVM of its own, in a session of its own, with a capped daemon heap, on
the loopback. Under ``<state_dir>/spark-cluster``: ``<daemon>.pid``, the workers'
``work-<i>/`` (each application's executor output and files) and ``local/``
(executors' scratch); each daemon's output goes to ``<state_dir>/logs/spark-<daemon>.log``.

Both layers then run on it with ``LAMBDALINE_SPARK_MASTER=spark://127.0.0.1:<port>``:
the driver here (client mode), the executors under the workers. On one machine
every executor reaches the state folder (checkpoints, master dataset); across
hosts those paths must be shared (see deploy/README.md).

The master gives an application that does not say how many cores it wants
(``spark.cores.max``) half of the cluster's (``spark.deploy.defaultCores``):
standalone mode would otherwise give the first application every core, and a
batch run would wait behind the speed job, which never ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyspark

from shared.platform.kafka_admin import port_open
from shared.platform.process_groups import end_group, runs_as
from shared.settings import Settings

SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
HOST = "127.0.0.1"
DAEMON_MEMORY = "512m"
"""Each daemon's heap: they only schedule; executors get their own JVMs."""
_STOP_GRACE_S = 30.0


class SparkClusterError(RuntimeError):
    """The cluster could not be started or stopped; the message says why."""


@dataclass(frozen=True)
class Daemon:
    name: str
    """``master`` or ``worker-<i>``."""
    main_class: str
    pid_file: Path
    log_file: Path


@dataclass(frozen=True)
class DaemonStatus:
    daemon: Daemon
    pid: int | None
    """Its pid while it runs, else None."""

    @property
    def running(self) -> bool:
        return self.pid is not None


@dataclass(frozen=True)
class ClusterStatus:
    master_url: str
    web_ui: str
    daemons: list[DaemonStatus]
    state: dict[str, Any] | None
    """The master's own account (its web UI's JSON: workers, applications), or None if it
    does not answer."""

    @property
    def running(self) -> bool:
        """True if the master and every worker run."""
        return all(daemon.running for daemon in self.daemons)

    @property
    def pids(self) -> list[int]:
        return [daemon.pid for daemon in self.daemons if daemon.pid is not None]

    @property
    def alive_workers(self) -> int:
        return 0 if self.state is None else int(self.state.get("aliveworkers", 0))


def master_url(settings: Settings) -> str:
    return f"spark://{HOST}:{settings.spark.cluster_port}"


def web_ui(settings: Settings) -> str:
    return f"http://{HOST}:{settings.spark.cluster_ui_port}"


def default_cores(settings: Settings) -> int:
    """Cores an application gets unless it sets ``spark.cores.max``: half the cluster's,
    so the speed job and a batch run both have some."""
    return max(1, settings.spark.workers * settings.spark.worker_cores // 2)


def daemons(settings: Settings) -> list[Daemon]:
    root, logs = settings.spark_cluster_dir, settings.logs_dir
    names = [("master", MASTER_CLASS)]
    names += [(f"worker-{i}", WORKER_CLASS) for i in range(1, settings.spark.workers + 1)]
    return [
        Daemon(name, main_class, root / f"{name}.pid", logs / f"spark-{name}.log")
        for name, main_class in names
    ]


def _identity(settings: Settings) -> str:
    """The system property that marks a daemon as this state folder's (checked by pid)."""
    return f"-Dlambdaline.spark.cluster={settings.spark_cluster_dir.resolve()}"


def _running_pid(settings: Settings, daemon: Daemon) -> int | None:
    """The daemon's pid if it runs as this state folder's daemon (not a reused pid)."""
    try:
        pid = int(daemon.pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    return pid if runs_as(pid, daemon.main_class, _identity(settings)) else None


def master_state(settings: Settings, timeout: float = 5.0) -> dict[str, Any] | None:
    """The master's JSON (workers, cores, applications), or None if it does not answer."""
    try:
        with urllib.request.urlopen(f"{web_ui(settings)}/json/", timeout=timeout) as response:
            state: dict[str, Any] = json.load(response)
            return state
    except (OSError, ValueError):
        return None


def status(settings: Settings) -> ClusterStatus:
    return ClusterStatus(
        master_url=master_url(settings),
        web_ui=web_ui(settings),
        daemons=[DaemonStatus(d, _running_pid(settings, d)) for d in daemons(settings)],
        state=master_state(settings),
    )


def _environment(settings: Settings) -> dict[str, str]:
    root = settings.spark_cluster_dir.resolve()
    return {
        **os.environ,
        "SPARK_LOCAL_IP": HOST,
        "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
        "SPARK_LOCAL_DIRS": str(root / "local"),
        "SPARK_DAEMON_JAVA_OPTS": _identity(settings),
        "SPARK_MASTER_OPTS": f"-Dspark.deploy.defaultCores={default_cores(settings)}",
        # a stopped application's files under work-<i> go after a day
        "SPARK_WORKER_OPTS": "-Dspark.worker.cleanup.enabled=true "
        "-Dspark.worker.cleanup.appDataTtl=86400",
    }


def _arguments(settings: Settings, daemon: Daemon) -> list[str]:
    spark = settings.spark
    if daemon.main_class == MASTER_CLASS:
        return ["--host", HOST, "--port", str(spark.cluster_port),
                "--webui-port", str(spark.cluster_ui_port)]  # fmt: skip
    index = int(daemon.name.removeprefix("worker-"))
    work = settings.spark_cluster_dir.resolve() / f"work-{index}"
    return [
        "--host", HOST, "--cores", str(spark.worker_cores), "--memory", spark.worker_memory,
        "--webui-port", str(spark.cluster_ui_port + index), "--work-dir", str(work),
        master_url(settings),
    ]  # fmt: skip


def _launch(settings: Settings, daemon: Daemon) -> subprocess.Popen[bytes]:
    daemon.log_file.parent.mkdir(parents=True, exist_ok=True)
    with daemon.log_file.open("ab") as log:
        process = subprocess.Popen(
            [str(SPARK_CLASS), daemon.main_class, *_arguments(settings, daemon)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            env=_environment(settings),
            start_new_session=True,  # a Ctrl-C in the caller's terminal must not reach it
        )  # fmt: skip
    daemon.pid_file.write_text(f"{process.pid}\n")
    return process


def _log_tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def start(settings: Settings, timeout_s: float = 120.0) -> ClusterStatus:
    """Start the master and the workers that do not run; return once every worker has
    registered with the master. Idempotent: it restarts a daemon that died."""
    if not SPARK_CLASS.exists():
        raise SparkClusterError(f"{SPARK_CLASS} is missing: is pyspark installed whole?")
    settings.spark_cluster_dir.mkdir(parents=True, exist_ok=True)
    master, *workers = daemons(settings)
    launched: dict[str, tuple[Daemon, subprocess.Popen[bytes]]] = {}
    deadline = time.monotonic() + timeout_s
    try:
        if _running_pid(settings, master) is None:
            spark = settings.spark
            for port in (spark.cluster_port, spark.cluster_ui_port):
                if port_open(HOST, port):
                    raise SparkClusterError(
                        f"{HOST}:{port} is already in use by another process; stop it or set "
                        "LAMBDALINE_SPARK_CLUSTER_PORT / LAMBDALINE_SPARK_CLUSTER_UI_PORT"
                    )
            launched[master.name] = (master, _launch(settings, master))
        _wait(settings, launched, deadline, lambda state: state.get("status") == "ALIVE")
        for worker in workers:
            if _running_pid(settings, worker) is None:
                launched[worker.name] = (worker, _launch(settings, worker))
        _wait(settings, launched, deadline, lambda state: _alive(state) >= len(workers))
    except BaseException:
        for daemon, process in reversed(launched.values()):
            _stop_daemon(process.pid, settings, daemon, grace_s=10)
        raise
    return status(settings)


def _alive(state: dict[str, Any]) -> int:
    return int(state.get("aliveworkers", 0))


def _wait(
    settings: Settings,
    launched: dict[str, tuple[Daemon, subprocess.Popen[bytes]]],
    deadline: float,
    ready: Any,
) -> None:
    while True:
        for daemon, process in launched.values():
            if process.poll() is not None:
                daemon.pid_file.unlink(missing_ok=True)
                raise SparkClusterError(
                    f"the Spark {daemon.name} exited with code {process.returncode} during "
                    f"start-up; last lines of {daemon.log_file}:\n{_log_tail(daemon.log_file)}"
                )
        state = master_state(settings, timeout=2.0)
        if state is not None and ready(state):
            return
        if time.monotonic() > deadline:
            master = daemons(settings)[0]
            said = "the master does not answer" if state is None else (
                f"{_alive(state)} of {settings.spark.workers} workers registered"
            )  # fmt: skip
            raise SparkClusterError(
                f"the Spark cluster did not come up ({said}); last lines of "
                f"{master.log_file}:\n{_log_tail(master.log_file)}"
            )
        time.sleep(0.5)


def _stop_daemon(pid: int, settings: Settings, daemon: Daemon, grace_s: float) -> None:
    """SIGTERM the daemon, wait, then SIGKILL what is left of its process group (a
    worker's executors are in it)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while _running_pid(settings, daemon) == pid and time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.1)
    # the daemon is its group's leader (its own session): the group is its executors too
    end_group(pid, grace_s=5.0 if _running_pid(settings, daemon) != pid else 0.0)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
    daemon.pid_file.unlink(missing_ok=True)


def stop(settings: Settings, grace_s: float = _STOP_GRACE_S) -> list[int]:
    """Stop the workers (and so their executors), then the master, each by its pid; return
    the pids stopped. Daemons of a larger cluster started before (more workers) go too."""
    present = sorted(settings.spark_cluster_dir.glob("worker-*.pid"))
    more = max((int(p.stem.removeprefix("worker-")) for p in present if p.stem[7:].isdigit()),
               default=0)  # fmt: skip
    wider = settings.updated(spark_workers=max(more, settings.spark.workers))
    master, *workers = daemons(wider)
    stopped = []
    for daemon in [*workers, master]:
        pid = _running_pid(wider, daemon)
        if pid is None:
            daemon.pid_file.unlink(missing_ok=True)
            continue
        _stop_daemon(pid, wider, daemon, grace_s)
        stopped.append(pid)
    return stopped
