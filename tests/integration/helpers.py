"""Helpers for integration tests: isolated topics, sending records, reading the stores."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
from kafka import TopicPartition
from pyspark.sql import SparkSession

from batch_layer import hadoop_files
from batch_layer.master import (
    MASTER_DEAD_LETTER_SCHEMA,
    MasterDataset,
    master_schema,
)
from lambdaline.kafka_broker import free_port
from shared.domain.events import EVENT_TYPES
from shared.domain.merge import best_candidates
from shared.domain.topics import Topics
from shared.platform.batch_store import STORE_TABLE_BY_NAME, read_current, version_file
from shared.platform.kafka_admin import kafka_consumer, kafka_producer, records_to_end
from shared.platform.kafka_security import security_environment
from shared.platform.topic_admin import create_topics
from shared.settings import Settings
from shared.settings.views import VIEW_BY_NAME
from speed_layer.operator import VIEWS_QUERY
from tests.scenarios import Lookback, ThreeDays, entry_value, exit_value, registration_value
from tests.spark_conf import TEST_SPARK_ENVIRONMENT


def isolated_settings(kafka: Settings, state_dir: Path) -> Settings:
    """Settings on the shared broker with topics and checkpoints of this test's own."""
    prefix = f"t{uuid.uuid4().hex[:8]}."
    topics = Topics(
        entries=f"{prefix}toll.entries",
        exits=f"{prefix}toll.exits",
        registrations=f"{prefix}vehicle.registrations",
        dead_letters=f"{prefix}dead.letters",
        speed_prefix=f"{prefix}speed.",
        speed_progress=f"{prefix}speed.progress",
    )
    settings = kafka.updated(topics=topics, state_dir=state_dir)
    create_topics(settings)
    return settings


def environment_of(settings: Settings) -> dict[str, str]:
    """The LAMBDALINE_* variables that make a subprocess use these settings."""
    topics = settings.topics
    return {
        **os.environ,
        "LAMBDALINE_STATE_DIR": str(settings.state_dir),
        "LAMBDALINE_KAFKA_BOOTSTRAP": settings.kafka.bootstrap,
        "LAMBDALINE_SPARK_MASTER": "local[2]",
        "LAMBDALINE_TOPICS__ENTRIES": topics.entries,
        "LAMBDALINE_TOPICS__EXITS": topics.exits,
        "LAMBDALINE_TOPICS__REGISTRATIONS": topics.registrations,
        "LAMBDALINE_TOPICS__DEAD_LETTERS": topics.dead_letters,
        "LAMBDALINE_TOPICS__SPEED_PREFIX": topics.speed_prefix,
        "LAMBDALINE_TOPICS__SPEED_PROGRESS": topics.speed_progress,
        **security_environment(settings.kafka),
        **TEST_SPARK_ENVIRONMENT,
    }


LOOPBACK = {"SPARK_LOCAL_IP": "127.0.0.1"}
"""Every JVM of a test on a Spark standalone cluster (daemons, executors, drivers) on
loopback, whatever this host's name resolves to."""
NO_PYTHON = {"PYSPARK_PYTHON": "/nonexistent/python3"}
"""The executors' Python (the driver's is spark.pyspark.driver.python): none. Every view
is Spark SQL, so no task starts a Python worker."""


def run_cli(
    settings: Settings, *args: str, timeout_s: float = 120
) -> subprocess.CompletedProcess[str]:
    """``lambdaline ARGS`` in a subprocess with these settings, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "lambdaline.cli", *args],
        env={**environment_of(settings), "COLUMNS": "300"},
        capture_output=True, text=True, timeout=timeout_s,
    )  # fmt: skip


def spawn_cli(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """``lambdaline ARGS`` started in a session of its own (stop it with
    ``lambdaline.processes.stop_process``), its output appended to ``log``."""
    with log.open("ab") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "lambdaline.cli", *args], env=env, stdin=subprocess.DEVNULL,
            stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip


def spawn_api(
    settings: Settings, key: str, log: Path, **env: str
) -> tuple[subprocess.Popen[bytes], str]:
    """``lambdaline serve`` on a free port with these settings and API ``key`` (and the
    extra ``LAMBDALINE_*`` variables ``env``); its process and base URL."""
    port = free_port()
    environment = {**environment_of(settings), "LAMBDALINE_API_KEYS": key, **env}
    return spawn_cli(["serve", "--port", str(port)], environment, log), f"http://127.0.0.1:{port}"


def wait_until(done: Callable[[], bool], seconds: float, what: str) -> None:
    """Poll ``done`` every second; fail the test naming ``what`` after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {seconds:g} s for {what}")
        time.sleep(1)


def progress_reports(settings: Settings, query: str | None = None) -> list[dict[str, Any]]:
    """The speed job's progress reports (``speed.progress``), of one query or all."""
    reports = [json.loads(r.value) for r in read_all(settings, settings.topics.speed_progress)]
    return [report for report in reports if query is None or report["query"] == query]


def read_to(settings: Settings, query: str = VIEWS_QUERY) -> dict[tuple[str, int], int]:
    """Where a speed query has read each partition to, by its progress reports (the
    operator's query reads every input topic)."""
    read: dict[tuple[str, int], int] = {}
    for report in progress_reports(settings, query):
        for source in report["source_end_offsets"]:
            for topic, partitions in source.items():
                for partition, offset in partitions.items():
                    key = (topic, int(partition))
                    read[key] = max(read.get(key, 0), int(offset))
    return read


def ms(instant: str) -> int:
    return int(
        datetime.fromisoformat(instant.replace("Z", "+00:00")).astimezone(UTC).timestamp() * 1000
    )


def send(settings: Settings, topic: str, records: list[tuple[bytes, bytes, str]]) -> None:
    """Send (key, value, record timestamp) records, all to partition 0, in order."""
    producer = kafka_producer(settings.kafka, "lambdaline-tests")
    for key, value, sent_at in records:
        producer.send(topic, key=key, value=value, partition=0, timestamp_ms=ms(sent_at))
    producer.flush()
    producer.close()


def read_all(settings: Settings, *topics: str, timeout_s: float = 60.0) -> list[Any]:
    """Every record of the topics, from the beginning (no consumer group) to their end
    offsets when called (a topic a running job writes to never falls quiet); a topic
    that does not exist has none."""
    consumer = kafka_consumer(settings.kafka, "lambdaline-tests", group_id=None)
    try:
        partitions = [
            TopicPartition(topic, number)
            for topic in topics
            for number in sorted(consumer.partitions_for_topic(topic) or ())
        ]
        return [
            record
            for records in records_to_end(consumer, partitions, timeout_s)
            for record in records
        ]
    finally:
        consumer.close()


def speed_view(settings: Settings, view: str) -> dict[str, dict[str, Any]]:
    """The speed store of a view as the serving layer will see it, keyed by the view key's
    JSON: the latest value per key, or, for a view of candidates, the best candidate shown
    (``shared.domain.merge.best_candidates``)."""
    records = read_all(settings, settings.topics.speed(view))
    spec = VIEW_BY_NAME[view]
    if spec.candidates is not None:
        rows = best_candidates(
            spec, [json.loads(record.value, parse_float=Decimal) for record in records]
        )
        key = [name for name in spec.key]
        return {
            json.dumps({n: row[n] for n in key}, separators=(",", ":"), ensure_ascii=False): row
            for row in rows
        }
    latest: dict[str, dict[str, Any]] = {}
    for record in records:
        value = json.loads(record.value, parse_float=Decimal)
        held = latest.get(record.key.decode())
        if held is None or held["version"] <= value["version"]:
            latest[record.key.decode()] = value
    return latest


SPEED_COLUMNS = {
    "booth_stats": ("booth_id", "window_start", "vehicle_count", "total_toll"),
    "vehicle_trips": ("booth_id", "license_plate", "entry_time", "exit_time", "duration_seconds"),
    "expired_registrations": ("booth_id", "license_plate", "entry_time", "registration_id"),
    "diagnostics": ("booth_id", "window_start", "reason", "count"),
    "booth_rolling": ("booth_id", "window_start", "vehicle_count", "total_toll"),
    "vehicle_visits": (
        "license_plate", "session_start", "session_end", "entry_count", "booths", "total_toll",
    ),
}  # fmt: skip
"""The columns of each view that ``tests.scenarios`` writes expected speed rows with."""


def speed_rows(settings: Settings, view: str) -> list[tuple[Any, ...]]:
    """A view's speed store as sorted tuples of :data:`SPEED_COLUMNS`: times as
    ``YYYY-MM-DDTHH:MM:SS`` (whole seconds), numbers as Decimal."""

    def plain(value: Any) -> Any:
        if isinstance(value, str) and value.endswith(".000Z"):
            return value.removesuffix(".000Z")
        return value

    columns = SPEED_COLUMNS[view]
    return sorted(
        tuple(plain(row[column]) for column in columns)
        for row in speed_view(settings, view).values()
    )


def hand_rows(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Expected rows of ``tests.scenarios`` as :func:`speed_rows` gives them: a text of
    digits with a decimal point is a number."""

    def number(value: Any) -> Any:
        if isinstance(value, str) and value.replace(".", "", 1).isdigit() and "." in value:
            return Decimal(value)
        return value

    return sorted(tuple(number(value) for value in row) for row in rows)


CLOSING_BOOTH, CLOSING_PLATE = "closing", "CLOSE-1"


def close_the_day(settings: Settings) -> None:
    """A registered vehicle at a booth of its own, a day later, with its exit.

    It pushes every watermark a day past the data, so all of the data's rows
    become final; tests leave the closing booth's own rows out.
    """
    plate, at = CLOSING_PLATE.encode(), "2026-01-06T12:00:00.000Z"
    send(
        settings,
        settings.topics.registrations,
        [
            (
                plate,
                registration_value("c-r", "C-R", CLOSING_PLATE, False, "2026-01-06T11:00:00.000Z"),
                "2026-01-06T11:00:00.100Z",
            )
        ],
    )
    send(
        settings,
        settings.topics.entries,
        [(plate, entry_value("c-e", CLOSING_BOOTH, CLOSING_PLATE, at, "1.00"), at)],
    )
    send(
        settings,
        settings.topics.exits,
        [
            (
                plate,
                exit_value("c-x", CLOSING_BOOTH, CLOSING_PLATE, "2026-01-06T12:01:00.000Z"),
                "2026-01-06T12:01:00.100Z",
            )
        ],
    )


def lookback_scenario(kafka: Settings, state_dir: Path) -> Settings:
    """Isolated settings with ``tests.scenarios.Lookback``'s lookback, its input sent."""
    settings = isolated_settings(kafka, state_dir).updated(registration_lookback=Lookback.LOOKBACK)
    send(settings, settings.topics.registrations, Lookback.REGISTRATIONS)
    send(settings, settings.topics.entries, Lookback.ENTRIES)
    send(settings, settings.topics.exits, Lookback.EXITS)
    return settings


def send_three_days(settings: Settings) -> None:
    """The batch layer's scenario (``tests.scenarios.ThreeDays``) to these settings' topics."""
    send(settings, settings.topics.registrations, ThreeDays.REGISTRATIONS)
    send(settings, settings.topics.entries, ThreeDays.ENTRIES + ThreeDays.MALFORMED)
    send(settings, settings.topics.exits, ThreeDays.EXITS)


def master_coordinates(spark: SparkSession, settings: Settings) -> Counter[tuple[str, int, int]]:
    """The source record (topic, partition, offset) of every valid event and dead letter
    in the master dataset, counted."""
    dataset = MasterDataset.of(settings)
    kinds = [(dataset.events(t), master_schema(t)) for t in EVENT_TYPES]
    kinds.append((dataset.dead_letters, MASTER_DEAD_LETTER_SCHEMA))
    rows = []
    for location, schema in kinds:
        if not hadoop_files.glob(spark, location):  # nothing of that kind stored yet
            continue
        frame = spark.read.schema(schema).parquet(location)  # a folder of no files reads empty
        rows += frame.select("source_topic", "source_partition", "source_offset").collect()
    return Counter((row[0], int(row[1]), int(row[2])) for row in rows)


def batch_rows(settings: Settings, table: str, version: int | None = None) -> list[dict[str, Any]]:
    """A table of a published version (default: the current one), in key order."""
    if version is None:
        current = read_current(settings.batch_store)
        assert current is not None
        version = current.version
    spec = STORE_TABLE_BY_NAME[table]
    order = ", ".join(f'"{name}"' for name in spec.key)
    path = version_file(settings.batch_store, version)
    with duckdb.connect(str(path), read_only=True) as connection:
        cursor = connection.execute(f'SELECT * FROM "{table}" ORDER BY {order}')
        names = [column[0] for column in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def without_version(row: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in row.items() if name != "version"}


def speed_booth_stats(settings: Settings) -> list[dict[str, Any]]:
    """The speed store's booth_stats rows, in key order, without their batch ids."""
    return sorted(
        (without_version(row) for row in speed_view(settings, "booth_stats").values()),
        key=lambda row: (str(row["booth_id"]), str(row["window_start"])),
    )
