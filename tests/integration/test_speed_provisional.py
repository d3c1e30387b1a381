"""Provisional speed rows on the real broker and real Spark, read through the API.

A trip is served as soon as an exit matches its entry and an alert as soon as
the entry meets a registration, both ``final: false`` until the speed
watermark passes what their view's rule says; then ``final: true``. Each step
is an available-now run of the speed job over what was sent so far; every
expected row is written by hand. The watermark is 2 minutes behind the latest
event time (the default), so an event is late only if it is older than that.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType
from pyspark.sql import SparkSession

from serving.main import create_app
from shared.settings import Settings
from speed_layer import job
from speed_layer.operator import VIEWS_QUERY
from tests.integration.helpers import (
    close_the_day,
    isolated_settings,
    read_all,
    send,
)
from tests.scenarios import OneDay, entry, exit_, registration

pytestmark = pytest.mark.integration

KEY = {"X-API-Key": "provisional-test-key"}
DAY = {"from": "2026-01-05T00:00:00Z", "to": "2026-01-06T00:00:00Z"}


def served(settings: Settings, path: str, **params: str) -> dict[str, Any]:
    """One answer of a fresh API process that has read the whole speed store."""
    with TestClient(create_app(settings)) as client:
        deadline = time.monotonic() + 60
        while client.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline, client.get("/readyz").json()
            time.sleep(0.2)
        response = client.get(path, params={**DAY, **params}, headers=KEY)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body


def trips(settings: Settings) -> list[tuple[str, str, str, bool]]:
    """P1's trips: (booth, entry time, exit time, final)."""
    rows = served(settings, "/v1/vehicles/P1/trips")["rows"]
    assert {row["source"] for row in rows} <= {"speed"}
    return [
        (r["booth_id"], r["entry_time"][11:19], r["exit_time"][11:19], r["final"]) for r in rows
    ]


def alerts(settings: Settings) -> list[tuple[str, str, str, bool]]:
    """Booth b1's alerts: (plate, entry time, registration, final)."""
    rows = served(settings, "/v1/alerts/expired-registrations", booth_id="b1")["rows"]
    return [
        (r["license_plate"], r["entry_time"][11:19], r["registration_id"], r["final"]) for r in rows
    ]


def compact(settings: Settings, topic: str, key: bytes) -> None:
    """Have the broker compact ``topic`` and wait until it has: the record keyed ``key``
    is written once more, so a compaction leaves one of its copies."""
    admin = KafkaAdminClient(bootstrap_servers=settings.kafka.bootstrap)
    try:  # every segment closes at once and the cleaner takes any dirty share
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={
            "cleanup.policy": "compact", "segment.ms": "100",
            "min.cleanable.dirty.ratio": "0.0001", "min.compaction.lag.ms": "0",
        })])  # fmt: skip
    finally:
        admin.close()
    [original] = [record for record in read_all(settings, topic) if record.key == key]
    producer = KafkaProducer(bootstrap_servers=settings.kafka.bootstrap)
    try:
        producer.send(topic, key=key, value=original.value, partition=original.partition)
        producer.flush()
        time.sleep(0.5)  # past segment.ms: the next record rolls the segment
        producer.send(topic, key=b"roll", value=None, partition=original.partition)
        producer.flush()
    finally:
        producer.close()
    deadline = time.monotonic() + 90
    while len([r for r in read_all(settings, topic) if r.key == key]) > 1:
        assert time.monotonic() < deadline, f"{topic} was not compacted within 90 s"
        time.sleep(2)


def test_a_trip_is_served_at_once_an_earlier_exit_replaces_it_and_it_turns_final(
    kafka: Settings, spark: SparkSession, tmp_path: Path
) -> None:
    settings = isolated_settings(kafka, tmp_path).updated(api_keys=[KEY["X-API-Key"]])
    # e1 (b1, 10:00:10) leaves at 10:20, e4 (b2, 10:01) at 10:31; the watermark stays
    # at 09:59, 2 minutes behind the latest entry
    send(settings, settings.topics.entries, [OneDay.E1, OneDay.E4])
    send(settings, settings.topics.exits, [OneDay.X1B, OneDay.X4])
    job.run(spark, settings, available_now=True)
    assert trips(settings) == [
        ("b1", "10:00:10", "10:20:00", False),
        ("b2", "10:01:00", "10:31:00", False),
    ]

    # e1's earlier exit (10:12) arrives later and wins; e4's later one (10:40) does not,
    # though it is written after the winner
    send(settings, settings.topics.exits, [
        OneDay.X1, exit_("x4b", "b2", "P1", "2026-01-05T10:40:00.000Z"),
    ])  # fmt: skip
    job.run(spark, settings, available_now=True)
    assert trips(settings) == [
        ("b1", "10:00:10", "10:12:00", False),
        ("b2", "10:01:00", "10:31:00", False),
    ]

    close_the_day(settings)  # the watermark passes entry_time + max_trip of both
    job.run(spark, settings, available_now=True)
    final = [("b1", "10:00:10", "10:12:00", True), ("b2", "10:01:00", "10:31:00", True)]
    assert trips(settings) == final

    # compacted, the topic still holds each candidate that can win (x4 was written
    # before x4b: kept by the view key alone, the compaction would keep x4b)
    topic = settings.topics.speed("vehicle_trips")
    [x4] = [r for r in read_all(settings, topic) if b'"exit_time":"2026-01-05T10:31' in r.key]
    compact(settings, topic, x4.key)
    assert trips(settings) == final


def test_an_alert_is_served_at_once_withdrawn_by_a_later_registration_then_final(
    kafka: Settings, spark: SparkSession, tmp_path: Path
) -> None:
    settings = isolated_settings(kafka, tmp_path).updated(api_keys=[KEY["X-API-Key"]])
    expired_p5 = registration("r5", "R5", "P5", True, "2025-11-01T00:00:00.000Z")
    send(settings, settings.topics.registrations, [OneDay.R2, expired_p5])
    # P2's registration (R2) and P5's (R5) had expired; the watermark stays at 10:02
    send(settings, settings.topics.entries, [
        OneDay.E2, entry("e5", "b1", "P5", "2026-01-05T10:04:00.000Z", "3.00"),
    ])  # fmt: skip
    send(settings, settings.topics.exits, [exit_("x5", "b1", "P5", "2026-01-05T10:04:30.000Z")])
    job.run(spark, settings, available_now=True)
    assert alerts(settings) == [("P2", "10:03:00", "R2", False), ("P5", "10:04:00", "R5", False)]

    # P2 was registered again at 10:02:30, before its entry (not late: the watermark
    # is 10:02): its alert is withdrawn
    renewed = registration("r2new", "R2new", "P2", False, "2026-01-05T10:02:30.000Z")
    send(settings, settings.topics.registrations, [renewed])
    job.run(spark, settings, available_now=True)
    assert alerts(settings) == [("P5", "10:04:00", "R5", False)]

    close_the_day(settings)  # the watermark passes both entries
    job.run(spark, settings, available_now=True)
    assert alerts(settings) == [("P5", "10:04:00", "R5", True)]


def test_available_now_leaves_every_row_final_under_its_last_watermark_written(
    kafka: Settings, spark: SparkSession, tmp_path: Path
) -> None:
    """The last entry moves the watermark just past e1's entry_time + max_trip: e1's
    missing exit and e3's missing registration are decided in that same run."""
    settings = isolated_settings(kafka, tmp_path)
    send(settings, settings.topics.registrations, [OneDay.R1])
    send(settings, settings.topics.entries, [
        OneDay.E1, OneDay.E3,
        # the watermark becomes 11:00:20 (2 minutes behind): past 10:00:10 + 1 h
        entry("e9", "b9", "P1", "2026-01-05T11:02:20.000Z", "1.00"),
    ])  # fmt: skip
    send(settings, settings.topics.exits, [exit_("x9", "b9", "P1", "2026-01-05T11:02:30.000Z")])
    job.run(spark, settings, available_now=True)

    progress = [json.loads(r.value) for r in read_all(settings, settings.topics.speed_progress)]
    marks = [p["watermark"] for p in progress if p["query"] == VIEWS_QUERY]
    assert max(marks) == "2026-01-05T11:00:20.000Z"
    counts = served(settings.updated(api_keys=[KEY["X-API-Key"]]), "/v1/diagnostics")["rows"]
    # e3's exit may still come (10:05 + 1 h is after 11:00:20); e9 is undecided
    assert [(r["booth_id"], r["window_start"][11:16], r["reason"], r["count"]) for r in counts] == [
        ("b1", "10:00", "missing_exit", 1),
        ("b1", "10:05", "missing_registration", 1),
    ]
