"""kill -9 the speed driver N times at random moments while the generator sends, on a
cluster of three brokers, restarting it on its checkpoint each time.

The input has no lateness beyond the watermark, so an interrupted run must end where
an uninterrupted one does: after the kills, the day is closed (every row turns
final) and the driver runs once more to the end of its input; a second job reads
the same input topics in one go into speed topics of its own. The API, over each
job's speed topics, must serve the same rows, and the dead letters must name the
same source records.

Spark's Kafka sink writes at least once: a micro-batch the kill cut short is run
again and writes its rows and dead letters again. The speed store keeps the row of
the latest micro-batch per key, and a dead letter is known by its source record's
coordinates (topic, partition, offset), so copies change neither.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import random
import signal
import subprocess
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pyspark.sql import SparkSession

from lambdaline.processes import log_tail, stop_process
from serving.main import create_app
from shared.platform.process_groups import group_is_gone
from shared.platform.topic_admin import create_topics
from shared.settings import Settings
from speed_layer import job
from speed_layer.operator import VIEWS_QUERY
from tests.faults.conftest import Results, times
from tests.integration.helpers import (
    close_the_day,
    environment_of,
    isolated_settings,
    progress_reports,
    read_all,
    spawn_cli,
    speed_view,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.faults]

KEY = "faults-key"
EVERYTHING = {"from": "2026-01-01T00:00:00Z", "to": "2026-01-08T00:00:00Z", "limit": 100000}
START = datetime(2026, 1, 5, 6, tzinfo=UTC)
KILLS = times(reduced=2, full=10)
RATE = 40  # records/s: about 18 entries/s, sent throughout the kills
TRAFFIC = 1  # entries per simulated second: the clock runs ~18x, so trips end (median 12
# simulated minutes) however quickly the kills come


def test_speed_driver_killed_at_random_moments_serves_what_an_uninterrupted_run_serves(
    kafka_cluster: Settings,
    spark: SparkSession,
    tmp_path: Path,
    rng: random.Random,
    results: Results,
) -> None:
    interrupted = isolated_settings(kafka_cluster, tmp_path / "interrupted").updated(api_keys=[KEY])
    env = environment_of(interrupted)
    logs = tmp_path / "logs"
    logs.mkdir()
    generator = spawn_cli(
        ["generate", "--events", "1000000", "--rate", str(RATE), "--seed", "4",
         "--traffic", str(TRAFFIC), "--plates", "150", "--late", "0", "--start", START.isoformat(), "--workers", "1"],
        env, logs / "generator.log",
    )  # fmt: skip
    driver = spawn_cli(["speed", "run"], env, logs / "speed.log")
    try:
        for kill in range(1, KILLS + 1):
            before = _batches_with_input(interrupted)
            wait_until(
                lambda: _exited(driver, logs) or _batches_with_input(interrupted) > before,  # noqa: B023 (called at once)
                240, f"a micro-batch of driver {kill}",
            )  # fmt: skip
            _kill_9(driver, rng.uniform(0.0, 6.0))
            assert generator.poll() is None, "the generator stopped: the kills were not under load"
            if kill < KILLS:
                driver = spawn_cli(["speed", "run"], env, logs / "speed.log")
    finally:
        stop_process(generator)
        stop_process(driver)
    assert "Traceback" not in (logs / "speed.log").read_text(errors="replace"), log_tail(
        logs / "speed.log", 40
    )

    close_the_day(interrupted)
    job.run(spark, interrupted, available_now=True)  # the last restart, to the input's end

    uninterrupted = _reference(interrupted, tmp_path / "uninterrupted")
    job.run(spark, uninterrupted, available_now=True)

    served, expected = _served(interrupted), _served(uninterrupted)
    kinds = Counter(path.rsplit("/", 1)[-1] for path, rows in expected.items() if rows)
    assert {kind: n > 0 for kind, n in kinds.items()} == dict.fromkeys(
        ("stats", "expired-registrations", "diagnostics", "trips", "visits", "rolling"), True
    )
    wrong = sum(_differ(served.get(path, []), rows) for path, rows in expected.items())
    assert served == expected, f"{wrong} rows differ"

    letters, reference_letters = _dead_letters(interrupted), _dead_letters(uninterrupted)
    assert reference_letters and set(reference_letters.values()) == {1}
    assert set(letters) == set(reference_letters)  # each source record's letter, none missing
    copies = sum(letters.values()) - len(letters)
    dropped = sum(r["rows_dropped_by_watermark"] or 0 for r in progress_reports(interrupted))
    assert dropped == 0  # no record came later than the watermark allows
    results.add(
        "kill -9 the speed driver at random moments, under load",
        KILLS,
        f"served rows equal an uninterrupted run's; {len(letters)} dead letters, "
        f"each source record's present ({copies} copies written again by replayed micro-batches)",
    )


def _batches_with_input(settings: Settings) -> int:
    return sum(1 for r in progress_reports(settings, VIEWS_QUERY) if (r["num_input_rows"] or 0) > 0)


def _exited(driver: subprocess.Popen[bytes], logs: Path) -> bool:
    """False while the driver runs; fails the test, with its log, if it exited."""
    assert driver.poll() is None, log_tail(logs / "speed.log", 30)
    return False


def _kill_9(driver: subprocess.Popen[bytes], after_s: float) -> None:
    """SIGKILL the driver's process group (the Python driver and its JVM) ``after_s`` later."""
    with contextlib.suppress(subprocess.TimeoutExpired):  # it must not exit meanwhile
        driver.wait(timeout=after_s)
    assert driver.poll() is None, f"the driver exited by itself with {driver.returncode}"
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait(timeout=30)
    assert group_is_gone(driver.pid, timeout_s=30)  # the JVM went with the Python driver


def _reference(interrupted: Settings, state_dir: Path) -> Settings:
    """The same input topics, into speed topics and a checkpoint of its own."""
    topics = interrupted.topics
    settings = interrupted.updated(
        state_dir=state_dir,
        topics=dataclasses.replace(
            topics,
            speed_prefix=topics.speed_prefix + "ref.",
            speed_progress=topics.speed_progress + ".ref",
            dead_letters=topics.dead_letters + ".ref",
        ),
    )
    create_topics(settings)
    return settings


def _served(settings: Settings) -> dict[str, list[dict[str, Any]]]:
    """Every row the API serves over these speed topics: each range view over the whole
    data, each vehicle's trips and visits, each booth's rolling windows."""
    plates = sorted(
        json.loads(key)["license_plate"] for key in speed_view(settings, "vehicle_visits")
    )
    booths = sorted({row["booth_id"] for row in speed_view(settings, "booth_stats").values()})
    paths = [
        "/v1/stats", "/v1/alerts/expired-registrations", "/v1/diagnostics",
        *(f"/v1/vehicles/{plate}/trips" for plate in plates),
        *(f"/v1/vehicles/{plate}/visits" for plate in plates),
        *(f"/v1/booths/{booth}/rolling" for booth in booths),
    ]  # fmt: skip
    app = create_app(settings)
    answers: dict[str, list[dict[str, Any]]] = {}
    with TestClient(app, headers={"X-API-Key": KEY}) as client:
        consumer = app.state.generations.active.consumer
        assert consumer.wait_caught_up(120), consumer.error
        for path in paths:
            response = client.get(path, params=EVERYTHING)
            assert response.status_code == 200, (path, response.text)
            body = response.json()
            assert body["truncated"] is False, path
            answers[path] = body["rows"]
    return answers


def _differ(served: list[dict[str, Any]], expected: list[dict[str, Any]]) -> int:
    """Rows one answer has more times than the other, counted."""
    have = Counter(json.dumps(row, sort_keys=True) for row in served)
    want = Counter(json.dumps(row, sort_keys=True) for row in expected)
    return sum(((have - want) + (want - have)).values())


def _dead_letters(settings: Settings) -> Counter[tuple[str, int, int]]:
    """How many dead letters name each source record (topic, partition, offset)."""
    letters = [json.loads(r.value) for r in read_all(settings, settings.topics.dead_letters)]
    return Counter(
        (letter["source_topic"], letter["source_partition"], letter["source_offset"])
        for letter in letters
    )
