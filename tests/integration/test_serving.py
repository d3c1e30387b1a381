"""Across the layers, through HTTP: merge(batch below H, speed from H) == batch over everything.

One generated dataset without lateness (about 28 simulated hours from
2026-01-05T06:00Z) goes through the real speed job (available-now) and a real
batch run for 2026-01-05, so the horizon H is 2026-01-06T00:00Z. A real
`lambdaline serve` process answers; its merged rows must equal a second batch
run over all the data (its own master dataset and store), row for row, on every
view. The closing booth (which only pushes the watermarks past the data) is
left out.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import httpx2
import pytest
from fastapi.testclient import TestClient
from kafka import KafkaProducer
from pyspark.sql import SparkSession
from rich.console import Console

from batch_layer.run import run_batch
from lambdaline import kafka_broker
from lambdaline.generator import GeneratorConfig, send_to_kafka
from lambdaline.kafka_broker import free_port
from lambdaline.processes import wait_until_answers
from serving.main import create_app
from serving.speed_consumer import SpeedConsumer
from shared.platform.batch_store import STORE_TABLE_BY_NAME, read_current, version_file
from shared.platform.speed_tables import SpeedTables
from shared.platform.topic_admin import create_topics
from shared.settings import Settings
from speed_layer import job
from tests.integration.conftest import broker_settings
from tests.integration.helpers import (
    CLOSING_BOOTH,
    CLOSING_PLATE,
    close_the_day,
    environment_of,
    isolated_settings,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KEY = {"X-API-Key": "serving-test-key"}
EVERYTHING = {"from": "2026-01-01T00:00:00Z", "to": "2026-01-08T00:00:00Z", "limit": 100000}


def batch(spark: SparkSession, settings: Settings, run_date: date) -> None:
    run_batch(spark, settings, run_date, 2, console=Console(file=io.StringIO()))


@pytest.fixture(scope="module")
def layers(
    kafka: Settings, spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Settings, Settings]:
    """(served settings with H = 2026-01-06, settings whose batch covers all the data)."""
    served = isolated_settings(kafka, tmp_path_factory.mktemp("served"))
    served = served.updated(api_keys=[KEY["X-API-Key"]])
    config = GeneratorConfig(
        events=2500, seed=11, plates=400, traffic=0.025, late=0.0,
        start=datetime(2026, 1, 5, 6, tzinfo=UTC),
    )  # fmt: skip
    send_to_kafka(config, served, workers=1)
    close_the_day(served)
    job.run(spark, served, available_now=True)
    batch(spark, served, date(2026, 1, 5))
    truth = served.updated(state_dir=tmp_path_factory.mktemp("truth"))
    batch(spark, truth, date(2026, 1, 7))
    return served, truth


@pytest.fixture(scope="module")
def api(layers: tuple[Settings, Settings]) -> Iterator[httpx2.Client]:
    served, _ = layers
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "lambdaline.cli", "serve", "--port", str(port)],
        env={**environment_of(served), "LAMBDALINE_API_KEYS": KEY["X-API-Key"]},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        with httpx2.Client(base_url=f"http://127.0.0.1:{port}", headers=KEY, timeout=30) as client:
            assert wait_until_answers(client, 60, process=server), "the server never became ready"
            yield client
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def truth_rows(settings: Settings, view: str) -> list[dict[str, Any]]:
    """The full batch's rows of a view in key order, shaped as the API writes them."""
    current = read_current(settings.batch_store)
    assert current is not None
    table = STORE_TABLE_BY_NAME[view]
    order = ", ".join(f'"{name}"' for name in table.key)
    with duckdb.connect(
        str(version_file(settings.batch_store, current.version)), read_only=True
    ) as db:
        cursor = db.execute(f'SELECT * FROM "{view}" ORDER BY {order}')
        names = [column[0] for column in cursor.description]
        rows = [dict(zip(names, values, strict=True)) for values in cursor.fetchall()]
    shaped = []
    for row in rows:
        if row.get("booth_id") == CLOSING_BOOTH or row.get("license_plate") == CLOSING_PLATE:
            continue
        shaped.append({
            name: (
                value.replace(tzinfo=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
                if isinstance(value, datetime) else str(value) if isinstance(value, Decimal) else value
            )
            for name, value in row.items()
        })  # fmt: skip
    return shaped


def served_rows(
    api: httpx2.Client, path: str, final: bool = True
) -> tuple[list[dict[str, Any]], set[str]]:
    """The rows of a view answer without their ``source`` and ``final`` (which
    ``final`` says each must be: the closing booth pushed the speed watermark past
    every trip's and alert's rule), and the sources seen."""
    response = api.get(path, params=EVERYTHING)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["horizon"] == "2026-01-06T00:00:00.000Z"
    assert body["truncated"] is False  # every row of the range, or the comparison means nothing
    rows = [
        row
        for row in body["rows"]
        if row.get("booth_id") != CLOSING_BOOTH and row.get("license_plate") != CLOSING_PLATE
    ]
    if final:
        assert [row for row in rows if not row["final"]] == []
    return [{k: v for k, v in row.items() if k not in ("source", "final")} for row in rows], {
        row["source"] for row in rows
    }


@pytest.mark.parametrize(
    ("view", "path"),
    [
        ("booth_stats", "/v1/stats"),
        ("expired_registrations", "/v1/alerts/expired-registrations"),
        ("diagnostics", "/v1/diagnostics"),
    ],
)
def test_merged_views_equal_the_batch_over_everything(
    layers: tuple[Settings, Settings], api: httpx2.Client, view: str, path: str
) -> None:
    _, truth = layers
    # a diagnostics count is final by its own query's watermark, which trails the
    # lookups' by max_trip and the watermark
    rows, sources = served_rows(api, path, final=view != "diagnostics")
    expected = truth_rows(truth, view)
    assert len(expected) > 10
    assert rows == expected
    assert sources == {"batch", "speed"}  # both layers answered


def test_merged_trips_of_every_vehicle_equal_the_batch(
    layers: tuple[Settings, Settings], api: httpx2.Client
) -> None:
    _, truth = layers
    expected = truth_rows(truth, "vehicle_trips")
    plates = sorted({row["license_plate"] for row in expected})
    assert len(plates) > 50
    served: list[dict[str, Any]] = []
    sources: set[str] = set()
    for plate in plates:
        rows, seen = served_rows(api, f"/v1/vehicles/{plate}/trips")
        served += rows
        sources |= seen
    key = STORE_TABLE_BY_NAME["vehicle_trips"].key
    assert sorted(served, key=lambda r: tuple(r[k] for k in key)) == expected
    assert sources == {"batch", "speed"}


@pytest.mark.parametrize(
    ("view", "key", "path"),
    [
        ("booth_rolling", "booth_id", "/v1/booths/{}/rolling"),
        ("vehicle_visits", "license_plate", "/v1/vehicles/{}/visits"),
    ],
)
def test_merged_windows_and_visits_of_every_key_equal_the_batch(
    layers: tuple[Settings, Settings], api: httpx2.Client, view: str, key: str, path: str
) -> None:
    """Rows that span time: a window or a visit across H comes whole from the speed store."""
    _, truth = layers
    expected = truth_rows(truth, view)
    keys = sorted({row[key] for row in expected})
    assert len(keys) > 5
    served: list[dict[str, Any]] = []
    sources: set[str] = set()
    for value in keys:
        rows, seen = served_rows(api, path.format(value))
        served += rows
        sources |= seen
    table_key = STORE_TABLE_BY_NAME[view].key
    assert sorted(served, key=lambda r: tuple(r[k] for k in table_key)) == expected
    assert sources == {"batch", "speed"}
    horizon = "2026-01-06T00:00:00.000Z"
    end = "window_end" if view == "booth_rolling" else "session_end"
    assert any(row[end] > horizon > row[end.replace("end", "start")] for row in expected), (
        "no row across the horizon: the test would not show the merge of one"
    )


def test_status_names_the_served_version(
    layers: tuple[Settings, Settings], api: httpx2.Client
) -> None:
    status = api.get("/v1/status").json()
    assert status["batch_version"] == 1
    assert status["horizon"] == "2026-01-06T00:00:00.000Z"
    assert status["speed_caught_up"] is True
    assert status["speed_watermark"] is not None
    assert status["speed_row_counts"]["booth_stats"] > 0


def test_the_api_waits_for_missing_speed_topics_and_follows_them_once_created(
    kafka: Settings, tmp_path_factory: pytest.TempPathFactory
) -> None:
    settings = isolated_settings(kafka, tmp_path_factory.mktemp("no-topics"))
    prefix = settings.topics.entries.removesuffix("toll.entries")
    missing = {  # on the same broker, speed topics nobody created
        "speed_prefix": f"{prefix}missing.speed.",
        "speed_progress": f"{prefix}missing.progress",
    }
    settings = settings.updated(topics=dataclasses.replace(settings.topics, **missing))
    consumer = SpeedConsumer(settings, SpeedTables())
    consumer.start()
    try:
        deadline = time.monotonic() + 30
        while "topics not found" not in (consumer.error or "") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert consumer.error is not None and "topics not found" in consumer.error
        assert f"{prefix}missing.speed.booth_stats" in consumer.error
        assert not consumer.caught_up.is_set()  # never "caught up" with nothing

        create_topics(settings)
        assert consumer.wait_caught_up(30)
        assert consumer.error is None
    finally:
        consumer.stop()


def test_a_record_that_is_not_a_row_is_skipped_and_the_store_goes_on(
    kafka: Settings, tmp_path_factory: pytest.TempPathFactory
) -> None:
    settings = isolated_settings(kafka, tmp_path_factory.mktemp("poison"))
    row = {
        "booth_id": "b1", "window_start": "2026-01-05T06:00:00.000Z",
        "window_end": "2026-01-05T06:05:00.000Z", "vehicle_count": 3, "total_toll": 7.5,
        "first_entry_time": "2026-01-05T06:00:01.000Z",
        "last_entry_time": "2026-01-05T06:04:00.000Z", "version": 1,
    }  # fmt: skip
    topic = f"{settings.topics.speed_prefix}booth_stats"
    producer = KafkaProducer(bootstrap_servers=settings.kafka.bootstrap)
    try:  # one partition (the key's), so the bad record comes first
        producer.send(topic, key=b"b1|06:00", value=b"not json")
        producer.send(topic, key=b"b1|06:00", value=json.dumps(row).encode())
        producer.send(settings.topics.speed_progress, key=b"x", value=b"{}")
        producer.flush()
    finally:
        producer.close()
    tables = SpeedTables()
    consumer = SpeedConsumer(settings, tables)
    consumer.start()
    try:
        assert consumer.wait_caught_up(30), consumer.error
        assert consumer.error is None
        assert tables.rejected == 2
        cursor = tables.cursor()
        stored = cursor.execute("SELECT booth_id, vehicle_count FROM booth_stats").fetchall()
        cursor.close()
        assert stored == [("b1", 3)]
    finally:
        consumer.stop()


def test_a_lost_broker_shows_and_the_consumer_resumes_where_it_was(tmp_path: Path) -> None:
    """After catching up, the broker stops: /v1/status and /metrics say so within seconds;
    once it is back, the consumer goes on from its positions (nothing read twice)."""
    settings = broker_settings(tmp_path).updated(api_keys=[KEY["X-API-Key"]])
    topic = f"{settings.topics.speed_prefix}booth_stats"

    def send(booth: str) -> None:
        row = {
            "booth_id": booth, "window_start": "2026-01-05T06:00:00.000Z",
            "window_end": "2026-01-05T06:05:00.000Z", "vehicle_count": 1, "total_toll": 2.5,
            "first_entry_time": "2026-01-05T06:00:01.000Z",
            "last_entry_time": "2026-01-05T06:00:01.000Z", "version": 1,
        }  # fmt: skip
        producer = KafkaProducer(bootstrap_servers=settings.kafka.bootstrap)
        try:
            producer.send(topic, key=booth.encode(), value=json.dumps(row).encode())
            producer.flush()
        finally:
            producer.close()

    def until(what: Callable[[], bool], seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while not what():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)
        return True

    def metric(client: TestClient, name: str) -> float:
        lines = client.get("/metrics").text.splitlines()
        return float(next(line.split()[1] for line in lines if line.startswith(f"{name} ")))

    kafka_broker.start(settings)
    try:
        create_topics(settings)
        send("b1")
        app = create_app(settings)
        with TestClient(app, headers=KEY) as client:
            consumer: SpeedConsumer = app.state.generations.active.consumer
            assert consumer.wait_caught_up(30), consumer.error
            assert consumer.records_read == 1
            assert metric(client, "lambdaline_speed_consumer_up") == 1

            kafka_broker.stop(settings)
            assert until(lambda: consumer.error is not None, 20)
            status = client.get("/v1/status").json()
            assert status["errors"] == [consumer.error]
            assert "stopped answering" in (consumer.error or ""), consumer.error
            assert metric(client, "lambdaline_speed_consumer_up") == 0
            assert client.get("/readyz").status_code == 200  # the rows read are still served
            assert status["speed_row_counts"]["booth_stats"] == 1

            kafka_broker.start(settings)
            assert until(lambda: consumer.error is None, 60), consumer.error
            send("b2")
            assert until(lambda: client.get("/v1/status").json()["speed_row_counts"][
                "booth_stats"] == 2, 30)  # fmt: skip
            assert consumer.records_read == 2  # b1 was not read again
            assert until(lambda: client.get("/v1/status").json()["speed_lag_records"] == 0, 10)
            assert metric(client, "lambdaline_speed_consumer_up") == 1
    finally:
        kafka_broker.stop(settings)
