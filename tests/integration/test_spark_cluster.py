"""Both layers as a user runs them on a cluster, on a real Spark standalone cluster: a
master and a worker started here (each its own JVM, on free ports), with executors
the worker launches. The batch run goes through deploy/spark/submit-batch.sh; the
speed job is ``lambdaline speed run`` with ``LAMBDALINE_SPARK_MASTER=spark://…``.

The executors are told to run a Python that does not exist: every view is Spark
SQL, so no task starts a Python worker, and a cluster's executors need only the
JVM (a Python UDF added to a view would fail these tests, and would need Python
and the project's packages on every executor). Same hand-written inputs and
expected rows as ``test_batch_layer`` and ``test_speed_layer``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyspark
import pytest

from lambdaline.kafka_broker import free_port
from lambdaline.processes import log_tail, stop_process
from shared.settings import Settings
from tests.integration.helpers import (
    batch_rows,
    environment_of,
    isolated_settings,
    read_all,
    send,
    send_three_days,
    speed_booth_stats,
)
from tests.scenarios import OneDay, ThreeDays

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PROJECT = Path(__file__).resolve().parents[2]
SUBMIT_BATCH = PROJECT / "deploy" / "spark" / "submit-batch.sh"
SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"
LOOPBACK = {"SPARK_LOCAL_IP": "127.0.0.1"}
"""Every JVM of the test (daemons, executors, drivers) on loopback, whatever this host's
name resolves to."""


@dataclass(frozen=True)
class Cluster:
    master_url: str
    web_ui: str

    def state(self) -> dict[str, Any]:
        """The master's own account of workers and applications (its web UI's JSON)."""
        with urllib.request.urlopen(f"{self.web_ui}/json/", timeout=5) as response:
            state: dict[str, Any] = json.load(response)
            return state


def _daemon(name: str, args: list[str], folder: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ, **LOOPBACK, "SPARK_DAEMON_MEMORY": "512m",
        "SPARK_LOCAL_DIRS": str(folder / "local"),
    }  # fmt: skip
    with (folder / f"{name}.log").open("ab") as log:
        return subprocess.Popen(
            [str(SPARK_CLASS), *args], stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )  # fmt: skip


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    folder = tmp_path_factory.mktemp("spark-cluster")
    port, master_ui, worker_ui = free_port(), free_port(), free_port()
    master = _daemon("master", [
        "org.apache.spark.deploy.master.Master",
        "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(master_ui),
    ], folder)  # fmt: skip
    started = [master]
    try:
        cluster = Cluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{master_ui}")
        deadline = time.monotonic() + 90
        while True:
            if master.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the master did not start:\n{log_tail(folder / 'master.log')}")
            try:
                cluster.state()
                break
            except OSError:
                time.sleep(0.5)
        worker = _daemon("worker", [
            "org.apache.spark.deploy.worker.Worker",
            "--host", "127.0.0.1", "--cores", "2", "--memory", "2g",
            "--webui-port", str(worker_ui), "--work-dir", str(folder / "work"),
            cluster.master_url,
        ], folder)  # fmt: skip
        started.append(worker)
        while cluster.state()["aliveworkers"] != 1:
            if worker.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"no worker registered:\n{log_tail(folder / 'worker.log')}")
            time.sleep(0.5)
        yield cluster
    finally:
        for process in reversed(started):
            stop_process(process)  # a worker kills its executors; the group goes too


def test_submit_batch_on_a_standalone_cluster_gives_the_hand_computed_rows(
    kafka: Settings, cluster: Cluster, tmp_path: Path
) -> None:
    settings = isolated_settings(kafka, tmp_path / "state")
    send_three_days(settings)
    env = {
        **environment_of(settings),
        **LOOPBACK,
        "PYTHON": sys.executable,  # the driver's Python (client mode: it runs here)
        "SPARK_MASTER_URL": cluster.master_url,
        "SPARK_DRIVER_MEMORY": "1g",
        # the executors' Python (the driver's is spark.pyspark.driver.python): none
        "PYSPARK_PYTHON": "/nonexistent/python3",
    }
    result = subprocess.run(
        ["bash", str(SUBMIT_BATCH), "--date", ThreeDays.D.isoformat()],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-5000:]

    assert batch_rows(settings, "booth_stats") == ThreeDays.BOOTH_STATS
    assert batch_rows(settings, "vehicle_trips") == ThreeDays.VEHICLE_TRIPS
    assert batch_rows(settings, "expired_registrations") == ThreeDays.EXPIRED_REGISTRATIONS
    assert batch_rows(settings, "diagnostics") == ThreeDays.DIAGNOSTICS
    assert [row["reason"] for row in batch_rows(settings, "dead_letters")] == [
        "invalid_json", "missing_field", "invalid_value",
    ]  # fmt: skip
    # the master ran it: an application of the cluster's, its tasks on the worker's executor
    assert finished_application(cluster, "lambdaline-batch")["cores"] == 2


def test_the_speed_job_on_a_standalone_cluster_gives_the_hand_computed_rows(
    kafka: Settings, cluster: Cluster, tmp_path: Path
) -> None:
    settings = isolated_settings(kafka, tmp_path / "state")
    send(settings, settings.topics.entries, OneDay.ENTRIES + OneDay.MALFORMED)
    env = {
        **environment_of(settings),
        **LOOPBACK,
        "LAMBDALINE_SPARK_MASTER": cluster.master_url,
        "PYSPARK_PYTHON": "/nonexistent/python3",  # the executors' Python: none
    }
    result = subprocess.run(
        [sys.executable, "-m", "lambdaline.cli", "speed", "run", "--available-now"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert result.returncode == 0, (result.stdout + result.stderr)[-5000:]

    assert speed_booth_stats(settings) == OneDay.BOOTH_STATS
    letters = [json.loads(record.value) for record in read_all(settings, settings.topics.dead_letters)]  # fmt: skip
    assert sorted(letter["reason"] for letter in letters) == [
        "future_event_time", "invalid_json", "invalid_value", "missing_field",
    ]  # fmt: skip
    assert finished_application(cluster, "lambdaline-speed")["cores"] == 2


def finished_application(cluster: Cluster, name: str) -> dict[str, Any]:
    """The master's record of the application: it ran on the cluster and finished."""
    [application] = [app for app in cluster.state()["completedapps"] if app["name"] == name]
    assert application["state"] == "FINISHED"
    return application
