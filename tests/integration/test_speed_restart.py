"""The speed driver stopped: by SIGTERM, cleanly; by losing its broker, with one line
and a checkpoint that goes on. (kill -9 under load is a case of the fault suite,
``tests/faults/test_speed_driver_kills.py``.)"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from kafka import KafkaConsumer
from pyspark.sql import SparkSession

from lambdaline import kafka_broker
from lambdaline.generator import GeneratorConfig, send_to_kafka
from shared.platform.process_groups import group_is_gone
from shared.platform.topic_admin import create_topics
from shared.settings import Settings
from speed_layer import job
from speed_layer.operator import VIEWS_QUERY
from tests.integration.conftest import broker_settings
from tests.integration.helpers import (
    environment_of,
    isolated_settings,
    speed_view,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def wait_for_batches(settings: Settings, query: str, batches: int, timeout_s: float) -> None:
    """Wait until `query` has reported `batches` micro-batches with input on speed.progress."""
    consumer = KafkaConsumer(
        settings.topics.speed_progress, bootstrap_servers=settings.kafka.bootstrap,
        auto_offset_reset="earliest", group_id=None, consumer_timeout_ms=1000,
    )  # fmt: skip
    seen: set[int] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            for record in consumer:
                progress = json.loads(record.value)
                if progress["query"] == query and progress["num_input_rows"] > 0:
                    seen.add(progress["batch_id"])
            if len(seen) >= batches:
                return
        raise AssertionError(f"{query} reported {len(seen)} batches in {timeout_s} s")
    finally:
        consumer.close()


def test_sigterm_stops_every_query_cleanly(kafka: Settings, tmp_path: Path) -> None:
    settings = isolated_settings(kafka, tmp_path / "stopped")
    send_to_kafka(
        GeneratorConfig(events=200, seed=9, plates=50, start=datetime(2026, 1, 6, 6, tzinfo=UTC)),
        settings,
        workers=1,
    )
    log_path = tmp_path / "speed.log"
    with log_path.open("wb") as log:
        driver = subprocess.Popen(
            [sys.executable, "-m", "lambdaline.cli", "speed", "run"],
            env=environment_of(settings), stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    try:
        wait_for_batches(settings, VIEWS_QUERY, batches=1, timeout_s=240)
        driver.send_signal(signal.SIGTERM)  # to the Python driver only, as a supervisor does
        assert driver.wait(timeout=120) == 0
        # the driver stopped Spark before it exited, so its scratch is gone already
        # (a supervisor SIGKILLs the group now, and a JVM in its exit hooks would leave it);
        # the JVM may still be in those hooks, deleting its spark-* directory as we look:
        # os.walk passes over a directory that goes while it reads
        scratch = settings.state_dir / "spark-local"
        assert scratch.is_dir()  # a local driver's scratch lives under the state dir
        left = [name for _, dirs, _ in os.walk(scratch) for name in dirs]
        assert not [name for name in left if name.startswith(("userFiles-", "blockmgr-"))]
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
    assert group_is_gone(driver.pid, timeout_s=30)

    output = log_path.read_text(errors="replace")
    # the JVM's stderr shares the file: a log line may follow its text on one line
    events = [
        json.loads(line[line.index('{"ts"') :]) for line in output.splitlines() if '{"ts"' in line
    ]
    names = [event["event"] for event in events]
    assert "speed_stopping" in names
    assert names[-1] == "speed_stopped"
    started = {event["id"] for event in events if event["event"] == "query_started"}
    terminated = {event["id"]: event for event in events if event["event"] == "query_terminated"}
    assert len(started) == 2  # the operator's query, the diagnostics count
    assert set(terminated) == started
    assert all(event["exception"] is None for event in terminated.values())
    assert "Traceback" not in output
    # a thread dying on stop (Spark 4.0's stop check overflowed the stack on long
    # Python errors) prints this; nothing may
    assert "Exception in thread" not in output


def test_a_broker_gone_ends_the_job_with_one_line_and_its_checkpoint_goes_on(
    spark: SparkSession, tmp_path: Path
) -> None:
    # a broker of its own, to stop; its clients give up after 5 s rather than 60
    settings = broker_settings(tmp_path / "state").updated(
        **{"kafka_timeout": timedelta(seconds=5)}
    )
    kafka_broker.start(settings)
    log_path = tmp_path / "speed.log"
    driver: subprocess.Popen[bytes] | None = None
    try:
        create_topics(settings)

        def send_entries(start: datetime) -> None:  # 100 entries, all valid and on time
            wave = GeneratorConfig(
                events=100, seed=start.hour, plates=40, late=0.0, duplicate=0.0, malformed=0.0,
                start=start,
            )  # fmt: skip
            send_to_kafka(wave, settings, workers=1)

        send_entries(datetime(2026, 1, 6, 6, tzinfo=UTC))
        with log_path.open("wb") as log:
            driver = subprocess.Popen(
                [sys.executable, "-m", "lambdaline.cli", "speed", "run"],
                env={**environment_of(settings), "LAMBDALINE_KAFKA_TIMEOUT": "5s"},
                stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        wait_for_batches(settings, VIEWS_QUERY, batches=1, timeout_s=240)
        kafka_broker.stop(settings)
        # Spark's Kafka source gives up after kafka_timeout, up to three times
        assert driver.wait(timeout=240) == 1
        output = log_path.read_text(errors="replace")
        # before: the driver's own traceback, ending in the query's error with its plan
        assert not [line for line in output.splitlines() if line.startswith("Traceback")]
        assert "Logical Plan" not in output
        # the JVM's Kafka clients may still log while it exits, after the line
        (error,) = [line for line in output.splitlines() if line.startswith("error:")]
        assert re.fullmatch(
            r"error: query speed\.[a-z._]+ failed: TimeoutException: [^;]+; "
            rf"cannot reach Kafka at {re.escape(settings.kafka.bootstrap)} \(.+\); start the "
            r"embedded broker with `lambdaline kafka start` or set LAMBDALINE_KAFKA_BOOTSTRAP; "
            r"the checkpoint holds every committed micro-batch: run `lambdaline speed run` "
            r"again to go on from there",
            error,
        ), error

        kafka_broker.start(settings)
        send_entries(datetime(2026, 1, 6, 7, tzinfo=UTC))
        job.run(spark, settings, available_now=True)  # on the failed job's checkpoints
        counted = speed_view(settings, "booth_stats").values()
        assert sum(int(row["vehicle_count"]) for row in counted) == 200  # none lost, none twice
    finally:
        if driver is not None and driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
        kafka_broker.stop(settings)
