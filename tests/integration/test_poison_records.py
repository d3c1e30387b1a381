"""No poison pill: records the broker accepts but no view can use become bounded dead
letters in both layers, and the speed job goes on past them.

A record just under the broker's limit (``max.message.bytes`` of the entries
topic, read from the broker) and an entry with a plate of 100 characters (over
the 64 a field may hold) come first; ``tests.scenarios.OneDay``'s entries come
after them, so the views prove the job went on.
"""

from __future__ import annotations

import hashlib
import io
import json
from datetime import date

import pytest
from kafka.admin import ConfigResource, ConfigResourceType
from pyspark.sql import SparkSession
from rich.console import Console

from batch_layer.run import run_batch
from shared.platform.kafka_admin import admin_client, kafka_producer
from shared.settings import Settings
from speed_layer import job
from tests.integration.helpers import (
    batch_rows,
    isolated_settings,
    ms,
    read_all,
    send,
    speed_booth_stats,
)
from tests.scenarios import OneDay, entry, entry_value

pytestmark = pytest.mark.integration

SENT = "2026-01-05T09:00:00.000Z"
KEY = b"P9"
LONG_PLATE = "L" * 100


def broker_limit(settings: Settings, topic: str) -> int:
    """The largest record batch the broker takes on this topic (``max.message.bytes``)."""
    admin = admin_client(settings.kafka)
    try:
        resource = ConfigResource(ConfigResourceType.TOPIC, topic, configs=["max.message.bytes"])
        described = admin.describe_configs([resource], config_filter="all")
    finally:
        admin.close()
    return int(described["topic"][topic]["max.message.bytes"]["value"])


def huge_value(size: int) -> bytes:
    """An entry of ``size`` bytes whose plate holds nearly all of it."""
    shell = entry_value("h1", "b1", "", "2026-01-05T08:59:00.000Z", "1.00")
    plate = "P" * (size - len(shell))
    value = shell.replace(b'"license_plate": ""', f'"license_plate": "{plate}"'.encode())
    assert len(value) == size
    return value


@pytest.fixture(scope="module")
def poisoned(
    kafka: Settings, spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Settings, bytes, bytes]:
    """The two poison records, then OneDay's entries; one available-now speed run and one
    batch run over them."""
    settings = isolated_settings(kafka, tmp_path_factory.mktemp("poison"))
    topic = settings.topics.entries
    huge = huge_value(broker_limit(settings, topic) - 4096)  # room for the batch's framing
    long_plate = entry("l1", "b1", LONG_PLATE, "2026-01-05T08:59:30.000Z", "1.00")[1]
    producer = kafka_producer(settings.kafka, "lambdaline-tests", max_request_size=len(huge) * 2)
    producer.send(topic, key=KEY, value=huge, partition=0, timestamp_ms=ms(SENT))
    producer.send(topic, key=KEY, value=long_plate, partition=0, timestamp_ms=ms(SENT))
    producer.flush()
    producer.close()
    send(settings, topic, OneDay.ENTRIES)

    job.run(spark, settings, available_now=True)
    run_batch(spark, settings, date(2026, 1, 5), 2, console=Console(file=io.StringIO()))
    return settings, huge, long_plate


def expected_letters(huge: bytes, long_plate: bytes) -> list[tuple[int, bytes, int, str, str]]:
    """(offset, value kept, full length, SHA-256, detail), written from the records sent."""
    return [
        (0, huge[:4096], len(huge), hashlib.sha256(huge).hexdigest(), "invalid: license_plate"),
        (1, long_plate, len(long_plate), hashlib.sha256(long_plate).hexdigest(),
         "invalid: license_plate"),
    ]  # fmt: skip


def test_the_speed_job_goes_on_past_them(poisoned: tuple[Settings, bytes, bytes]) -> None:
    settings, _, _ = poisoned
    assert speed_booth_stats(settings) == OneDay.BOOTH_STATS


def test_they_are_bounded_dead_letters_of_the_speed_layer(
    poisoned: tuple[Settings, bytes, bytes],
) -> None:
    settings, huge, long_plate = poisoned
    records = read_all(settings, settings.topics.dead_letters)
    assert all(len(record.value) < 3 * 4096 for record in records)
    assert {record.key for record in records} == {KEY}
    letters = sorted((json.loads(record.value) for record in records),
                     key=lambda letter: letter["source_offset"])  # fmt: skip
    assert [
        (letter["source_offset"], letter["value"].encode(), letter["value_length"],
         letter["value_sha256"], letter["detail"])
        for letter in letters
    ] == expected_letters(huge, long_plate)  # fmt: skip
    assert {(letter["reason"], letter["key_length"]) for letter in letters} == {
        ("invalid_value", len(KEY))
    }


def test_they_are_bounded_dead_letters_of_the_batch_layer(
    poisoned: tuple[Settings, bytes, bytes],
) -> None:
    settings, huge, long_plate = poisoned
    rows = batch_rows(settings, "dead_letters")
    assert [
        (row["source_offset"], row["value"], row["value_length"], row["value_sha256"],
         row["detail"])
        for row in rows
    ] == expected_letters(huge, long_plate)  # fmt: skip
    assert {(row["key"], row["key_length"]) for row in rows} == {(KEY, len(KEY))}
