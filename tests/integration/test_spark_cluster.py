"""Both layers as a user runs them on a cluster, on a real Spark standalone cluster
started by ``lambdaline.spark_cluster`` (a master and two workers, each its own JVM, on
free ports), with executors the workers launch. The batch run goes through
deploy/spark/submit-batch.sh; the speed job is ``lambdaline speed run`` with
``LAMBDALINE_SPARK_MASTER=spark://…``. Every view of each layer is checked against
rows written by hand (``tests.scenarios.ThreeDays`` and ``Lookups``).

The executors are told to run a Python that does not exist: every view is Spark
SQL, so no task starts a Python worker, and a cluster's executors need only the
JVM (a Python UDF added to a view would fail these tests, and would need Python
and the project's packages on every executor).
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from lambdaline import spark_cluster
from shared.settings import Settings
from tests.integration.helpers import (
    LOOPBACK,
    NO_PYTHON,
    batch_rows,
    environment_of,
    hand_rows,
    isolated_settings,
    read_all,
    send,
    send_three_days,
    speed_rows,
)
from tests.scenarios import Lookups, OneDay, ThreeDays, t

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PROJECT = Path(__file__).resolve().parents[2]
SUBMIT_BATCH = PROJECT / "deploy" / "spark" / "submit-batch.sh"


def test_submit_batch_on_a_standalone_cluster_gives_the_hand_computed_rows(
    kafka: Settings, spark_standalone: Settings, tmp_path: Path
) -> None:
    settings = isolated_settings(kafka, tmp_path / "state")
    send_three_days(settings)
    env = {
        **environment_of(settings),
        **LOOPBACK,
        **NO_PYTHON,
        "PYTHON": sys.executable,  # the driver's Python (client mode: it runs here)
        "SPARK_MASTER_URL": spark_cluster.master_url(spark_standalone),
        "SPARK_DRIVER_MEMORY": "1g",
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
    rolling = [
        (row["booth_id"], row["window_start"], row["window_end"], row["vehicle_count"],
         row["total_toll"])
        for row in batch_rows(settings, "booth_rolling")
    ]  # fmt: skip
    assert rolling == three_days_rolling()
    visits = [
        (row["license_plate"], row["session_start"], row["session_end"], row["entry_count"],
         row["booths"], row["total_toll"])
        for row in batch_rows(settings, "vehicle_visits")
    ]  # fmt: skip
    assert visits == ThreeDays.VISITS
    assert [row["reason"] for row in batch_rows(settings, "dead_letters")] == [
        "invalid_json", "missing_field", "invalid_value",
    ]  # fmt: skip
    # the master ran it: an application of the cluster's, on half its cores
    assert finished_application(spark_standalone, "lambdaline-batch")["cores"] == 2


def three_days_rolling() -> list[tuple[Any, ...]]:
    """ThreeDays.ROLLING_STARTS spelt out: twelve one-hour windows, five minutes apart."""
    rows = []
    for booth, first, count, toll in ThreeDays.ROLLING_STARTS:
        for k in range(12):
            start = t(first) + timedelta(minutes=5 * k)
            rows.append((booth, start, start + timedelta(hours=1), count, Decimal(toll)))
    return sorted(rows)


def test_the_speed_job_on_a_standalone_cluster_gives_the_hand_computed_rows(
    kafka: Settings, spark_standalone: Settings, tmp_path: Path
) -> None:
    settings = isolated_settings(kafka, tmp_path / "state").updated(
        rolling_window=Lookups.ROLLING_WINDOW,
        rolling_slide=Lookups.ROLLING_SLIDE,
        session_gap=Lookups.GAP,
    )
    send(settings, settings.topics.registrations, Lookups.REGISTRATIONS)
    send(settings, settings.topics.entries, Lookups.ENTRIES + OneDay.MALFORMED)
    send(settings, settings.topics.exits, Lookups.EXITS)
    env = {
        **environment_of(settings),
        **LOOPBACK,
        **NO_PYTHON,
        "LAMBDALINE_SPARK_MASTER": spark_cluster.master_url(spark_standalone),
        "LAMBDALINE_ROLLING_WINDOW": "15m",
        "LAMBDALINE_ROLLING_SLIDE": "5m",
        "LAMBDALINE_SESSION_GAP": "30m",
    }
    result = subprocess.run(
        [sys.executable, "-m", "lambdaline.cli", "speed", "run", "--available-now"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert result.returncode == 0, (result.stdout + result.stderr)[-5000:]

    assert speed_rows(settings, "booth_stats") == hand_rows(Lookups.BOOTH_STATS)
    assert speed_rows(settings, "vehicle_trips") == hand_rows(Lookups.TRIPS)
    assert speed_rows(settings, "expired_registrations") == hand_rows(Lookups.EXPIRED)
    assert speed_rows(settings, "diagnostics") == hand_rows(Lookups.DIAGNOSTICS)
    assert speed_rows(settings, "booth_rolling") == hand_rows(Lookups.BOOTH_ROLLING)
    assert speed_rows(settings, "vehicle_visits") == hand_rows(Lookups.VISITS)
    letters = [json.loads(record.value) for record in read_all(settings, settings.topics.dead_letters)]  # fmt: skip
    assert sorted(letter["reason"] for letter in letters) == [
        "future_event_time", "invalid_json", "invalid_value", "missing_field",
    ]  # fmt: skip
    assert finished_application(spark_standalone, "lambdaline-speed")["cores"] == 2


def finished_application(cluster: Settings, name: str) -> dict[str, Any]:
    """The master's record of the newest application of that name (the cluster is the
    run's): it ran on the cluster and finished."""
    state = spark_cluster.master_state(cluster)
    assert state is not None
    named = [app for app in state["completedapps"] if app["name"] == name]
    application = max(named, key=lambda app: app["starttime"])
    assert application["state"] == "FINISHED"
    return dict(application)
