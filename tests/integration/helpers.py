"""Helpers for integration tests: isolated topics, sending records, reading the stores."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from shared.kafka_admin import kafka_consumer, kafka_producer
from shared.kafka_security import security_environment
from shared.settings import Settings, TopicSettings
from shared.topic_admin import create_topics
from shared.topics import speed_topic


def isolated_settings(kafka: Settings, state_dir: Path) -> Settings:
    """Settings on the shared broker with topics and checkpoints of this test's own."""
    prefix = f"t{uuid.uuid4().hex[:8]}."
    topics = TopicSettings(
        entries=f"{prefix}toll.entries",
        exits=f"{prefix}toll.exits",
        registrations=f"{prefix}vehicle.registrations",
        dead_letters=f"{prefix}dead.letters",
        speed_prefix=f"{prefix}speed.",
        speed_progress=f"{prefix}speed.progress",
    )
    settings = kafka.model_copy(update={"topics": topics, "state_dir": state_dir})
    create_topics(settings)
    return settings


def environment_of(settings: Settings) -> dict[str, str]:
    """The LAMBDALINE_* variables that make a subprocess use these settings."""
    topics = settings.topics
    return {
        **os.environ,
        "LAMBDALINE_STATE_DIR": str(settings.state_dir),
        "LAMBDALINE_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "LAMBDALINE_SPARK_MASTER": "local[2]",
        "LAMBDALINE_TOPICS__ENTRIES": topics.entries,
        "LAMBDALINE_TOPICS__EXITS": topics.exits,
        "LAMBDALINE_TOPICS__REGISTRATIONS": topics.registrations,
        "LAMBDALINE_TOPICS__DEAD_LETTERS": topics.dead_letters,
        "LAMBDALINE_TOPICS__SPEED_PREFIX": topics.speed_prefix,
        "LAMBDALINE_TOPICS__SPEED_PROGRESS": topics.speed_progress,
        **security_environment(settings),
    }


def run_cli(
    settings: Settings, *args: str, timeout_s: float = 120
) -> subprocess.CompletedProcess[str]:
    """``lambdaline ARGS`` in a subprocess with these settings, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "lambdaline.cli", *args],
        env={**environment_of(settings), "COLUMNS": "300"},
        capture_output=True, text=True, timeout=timeout_s,
    )  # fmt: skip


def ms(instant: str) -> int:
    return int(
        datetime.fromisoformat(instant.replace("Z", "+00:00")).astimezone(UTC).timestamp() * 1000
    )


def send(settings: Settings, topic: str, records: list[tuple[bytes, bytes, str]]) -> None:
    """Send (key, value, record timestamp) records, all to partition 0, in order."""
    producer = kafka_producer(settings, "lambdaline-tests")
    for key, value, sent_at in records:
        producer.send(topic, key=key, value=value, partition=0, timestamp_ms=ms(sent_at))
    producer.flush()
    producer.close()


def read_all(settings: Settings, *topics: str) -> list[Any]:
    """Every record of the topics, from the beginning (no consumer group)."""
    consumer = kafka_consumer(
        settings,
        "lambdaline-tests",
        auto_offset_reset="earliest",
        consumer_timeout_ms=3000,
        group_id=None,
    )
    consumer.subscribe(list(topics))
    records = list(consumer)
    consumer.close()
    return records


def speed_view(settings: Settings, view: str) -> dict[str, dict[str, Any]]:
    """The speed store of a view as the serving layer will see it: latest value per key."""
    latest: dict[str, dict[str, Any]] = {}
    for record in read_all(settings, speed_topic(settings, view)):
        value = json.loads(record.value, parse_float=Decimal)
        held = latest.get(record.key.decode())
        if held is None or held["batch_id"] <= value["batch_id"]:
            latest[record.key.decode()] = value
    return latest


def entry_value(event_id: str, booth: str, plate: str, entry_time: str, toll: str) -> bytes:
    entry = {
        "event_id": event_id, "booth_id": booth, "entry_time": entry_time,
        "license_plate": plate, "state": "NY", "make": "Ford", "model": "F-150",
        "vehicle_type": 1, "weight_kg": 1500.0, "toll": float(toll), "tag": "",
    }  # fmt: skip
    return json.dumps(entry).encode()


def exit_value(event_id: str, booth: str, plate: str, exit_time: str) -> bytes:
    exit_ = {
        "event_id": event_id,
        "booth_id": booth,
        "exit_time": exit_time,
        "license_plate": plate,
    }
    return json.dumps(exit_).encode()


def registration_value(
    event_id: str, registration_id: str, plate: str, expired: bool, at: str
) -> bytes:
    registration = {
        "event_id": event_id, "registration_id": registration_id, "license_plate": plate,
        "expired": expired, "registration_time": at,
    }  # fmt: skip
    return json.dumps(registration).encode()


CLOSING_BOOTH = "closing"


def close_the_day(settings: Settings) -> None:
    """A registered vehicle at a booth of its own, a day later, with its exit.

    It pushes every watermark a day past the data, so all of the data's rows
    become final; tests leave the closing booth's own rows out.
    """
    plate, at = b"CLOSE-1", "2026-01-06T12:00:00.000Z"
    send(
        settings,
        settings.topics.registrations,
        [
            (
                plate,
                registration_value("c-r", "C-R", "CLOSE-1", False, "2026-01-06T11:00:00.000Z"),
                "2026-01-06T11:00:00.100Z",
            )
        ],
    )
    send(
        settings,
        settings.topics.entries,
        [(plate, entry_value("c-e", CLOSING_BOOTH, "CLOSE-1", at, "1.00"), at)],
    )
    send(
        settings,
        settings.topics.exits,
        [
            (
                plate,
                exit_value("c-x", CLOSING_BOOTH, "CLOSE-1", "2026-01-06T12:01:00.000Z"),
                "2026-01-06T12:01:00.100Z",
            )
        ],
    )
