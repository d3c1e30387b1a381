"""Reading one's own write through the real broker, speed job and API consumer: ``after=``
with a token naming the offset a producer got back, and ``max_staleness`` once the
speed job has stopped."""

from __future__ import annotations

import base64
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pyspark.sql import SparkSession

from serving.main import create_app
from shared.domain.events import format_instant
from shared.platform.kafka_admin import kafka_producer
from shared.settings import Settings
from speed_layer import job
from tests.integration.helpers import isolated_settings
from tests.scenarios import entry_value

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KEY = {"X-API-Key": "consistency-key"}


def token_after(topic: str, partition: int, offset: int) -> str:
    """The token a client writes by hand to read its record at ``offset`` back."""
    document = {"v": 1, "input": {topic: {str(partition): offset + 1}}}
    return base64.urlsafe_b64encode(json.dumps(document).encode()).decode().rstrip("=")


def test_a_written_entry_is_read_back_with_after_and_a_stopped_job_goes_stale(
    kafka: Settings, spark: SparkSession, tmp_path: Path
) -> None:
    settings = isolated_settings(kafka, tmp_path).updated(
        api_keys=[KEY["X-API-Key"]], serving_after_wait="1s"
    )
    now = datetime.now(UTC)
    entered = format_instant(now - timedelta(seconds=5))
    producer = kafka_producer(settings.kafka, "consistency-test")
    try:
        written = producer.send(
            settings.topics.entries,
            key=b"P-ME",
            value=entry_value("e-me", "B-ME", "P-ME", entered, "3.25"),
        ).get(timeout=30)
    finally:
        producer.close()
    after = token_after(written.topic, written.partition, written.offset)
    window = now - timedelta(seconds=5)
    params = {
        "from": format_instant(window - timedelta(hours=1)),
        "to": format_instant(window + timedelta(hours=1)),
    }

    with TestClient(create_app(settings)) as api:
        consumer = api.app.state.generations.active.consumer  # type: ignore[attr-defined]
        assert consumer.wait_caught_up(30), consumer.error
        before = api.get("/v1/booths/B-ME/stats", params={**params, "after": after}, headers=KEY)
        assert before.status_code == 409, before.text
        assert before.json()["behind"] == [
            f"input {written.topic}[{written.partition}] to {written.offset + 1} (at 0)"
        ]

        job.run(spark, settings, available_now=True)  # the speed layer processes the entry

        settings_wait = {**params, "after": after}
        read = api.get("/v1/booths/B-ME/stats", params=settings_wait, headers=KEY)
        assert read.status_code == 200, read.text
        rows = read.json()["rows"]
        assert [(r["vehicle_count"], r["total_toll"], r["source"]) for r in rows] == [
            (1, "3.25", "speed")
        ]
        materialised = json.loads(base64.urlsafe_b64decode(read.json()["consistency"] + "==="))[
            "input"
        ][written.topic][str(written.partition)]
        assert materialised > written.offset

        # the job has stopped: its watermark stays where it was while the wall clock moves on
        stale = api.get("/v1/stats", params={**params, "max_staleness": 0}, headers=KEY)
        assert stale.status_code == 409
        staleness = stale.json()["staleness_seconds"]
        allowed = {**params, "max_staleness": staleness + 3}
        assert api.get("/v1/stats", params=allowed, headers=KEY).status_code == 200
        time.sleep(4)
        refused = api.get("/v1/stats", params=allowed, headers=KEY)
        assert refused.status_code == 409
        assert refused.json()["staleness_seconds"] > staleness + 3
