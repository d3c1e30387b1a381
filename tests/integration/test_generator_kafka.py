"""Generate to the real broker, read everything back, and validate it with Spark."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from lambdaline.bench.measure import process_tree
from lambdaline.generator import KIND_HEADER, GeneratorConfig, send_to_kafka
from shared.domain.validation import decode_records
from shared.settings import Settings
from tests.integration.helpers import read_all
from tests.scenarios import RAW_SCHEMA

pytestmark = pytest.mark.integration


def test_generated_stream_round_trips_and_malformed_records_fail_validation(
    kafka: Settings, spark: SparkSession
) -> None:
    config = GeneratorConfig(
        events=3000, seed=11, plates=400, malformed=0.05, duplicate=0.05,
        start=datetime(2026, 2, 1, 8, tzinfo=UTC),
    )  # fmt: skip
    summary = send_to_kafka(config, kafka, workers=2)
    assert summary.by_kind["entry"] == 3000

    records = read_all(kafka, *kafka.topics.inputs())

    kind_of = [dict(record.headers)[KIND_HEADER].decode() for record in records]
    assert len(records) == summary.records
    assert Counter(kind_of) == summary.by_kind
    assert Counter(record.topic for record in records) == summary.by_topic
    # 5 % of 3,000 entries are malformed and 5 % of records duplicated: both clearly present
    assert sum(1 for k in kind_of if k.startswith("malformed:")) > 75
    assert summary.by_kind["duplicate"] > 150

    rows = [
        (
            r.key,
            r.value,
            r.topic,
            r.partition,
            r.offset,
            datetime.fromtimestamp(r.timestamp / 1000, UTC),
        )
        for r in records
    ]
    decoded = decode_records(
        spark.createDataFrame(rows, RAW_SCHEMA),
        kafka.topics,
        kafka.views.max_future_skew,
        kafka.views.dead_letter_bytes,
    )
    expected_reason = {
        (r.topic, r.partition, r.offset): kind.removeprefix("malformed:")
        for r, kind in zip(records, kind_of, strict=True)
        if kind.startswith("malformed:")
    }
    dead = {
        (row.source_topic, row.source_partition, row.source_offset): row.reason
        for row in decoded.dead_letters.collect()
    }
    assert dead == expected_reason  # every malformed record, with its reason, and nothing else
    valid = sum(frame.count() for frame in decoded.events.values())
    assert valid + len(dead) == len(records)


def test_sigterm_stops_the_generator_and_its_producer_processes(
    kafka: Settings, tmp_path: Path
) -> None:
    """Python's default SIGTERM skipped the clean-up: the workers went on sending, orphaned."""
    env = {
        **os.environ,
        "LAMBDALINE_STATE_DIR": str(tmp_path),
        "LAMBDALINE_KAFKA_BOOTSTRAP": kafka.kafka.bootstrap,
        # topics of its own: the other tests read the default ones to the end
        "LAMBDALINE_TOPICS__ENTRIES": "sigterm.entries",
        "LAMBDALINE_TOPICS__EXITS": "sigterm.exits",
        "LAMBDALINE_TOPICS__REGISTRATIONS": "sigterm.registrations",
    }
    lambdaline = str(Path(sys.executable).with_name("lambdaline"))
    subprocess.run([lambdaline, "topics", "create"], env=env, check=True, capture_output=True)
    generator = subprocess.Popen(
        [lambdaline, "generate", "--events", "100000", "--rate", "200"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while len(workers := producer_processes(generator.pid)) < 2:
            assert generator.poll() is None and time.monotonic() < deadline, "no workers"
            time.sleep(0.2)
        time.sleep(2)  # sending now
        generator.send_signal(signal.SIGTERM)
        assert generator.wait(timeout=30) == 128 + signal.SIGTERM
        left = [pid for pid in workers if Path(f"/proc/{pid}").exists()]
        assert left == [], f"still running after the generator: {left}"
    finally:
        for pid in {*process_tree(generator.pid), *workers}:  # left only if the test failed
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        generator.wait()


def producer_processes(parent: int) -> list[int]:
    """The generator's workers (multiprocessing's spawn), not its resource tracker."""
    found = []
    for pid in process_tree(parent)[1:]:
        with contextlib.suppress(OSError):
            if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
    return found
