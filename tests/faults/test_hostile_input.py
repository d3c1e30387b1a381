"""Hostile input at volume, while the generator sends and the speed job runs on a
cluster of three brokers: every hostile record becomes a dead letter with a reason,
no query stops, and valid + dead letters = records read.

The hostile records, each sent ``times`` over to each input topic: invalid UTF-8,
a 1 MB value, JSON nested 100,000 deep, numbers out of range, NUL bytes (raw, and
inside a text), a control character in a plate, empty and absent keys.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from lambdaline.processes import log_tail, stop_process
from shared.platform.kafka_admin import kafka_producer, offset_bounds
from shared.settings import Settings
from tests.faults.conftest import Results, times
from tests.integration.helpers import (
    environment_of,
    isolated_settings,
    read_all,
    read_to,
    spawn_cli,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.faults]

ENTRY = {
    "event_id": "h", "booth_id": "b1", "entry_time": "2026-01-05T06:01:00.000Z",
    "license_plate": "P1", "state": "NY", "make": "Ford", "model": "F-150",
    "vehicle_type": 1, "weight_kg": 1500.0, "toll": 2.5, "tag": "t",
}  # fmt: skip


def _entry(**changes: object) -> bytes:
    return json.dumps({**ENTRY, **changes}).encode()


HOSTILE: dict[str, tuple[bytes | None, bytes]] = {
    "invalid UTF-8": (b"P1", b"\xff\xfe{\"event_id\": \"x\"}"),
    "1 MB value": (b"P1", _entry(make="m" * (1024 * 1024))),
    "nested 100,000 deep": (b"P1", b'{"a":' * 100_000 + b"1" + b"}" * 100_000),
    "integer out of range": (b"P1", _entry(vehicle_type=10**30)),
    "number beyond a double": (b"P1", _entry().replace(b'"weight_kg": 1500.0', b'"weight_kg": 1e400')),
    "NUL bytes": (b"P1", b"\x00" * 64),
    "NUL in a text": (b"P1", _entry(booth_id="b\u00001")),
    "line break in a plate": (b"P1", _entry(license_plate="P\n1")),
    "empty key and value": (b"", b""),
    "no key": (None, b"{}"),
}  # fmt: skip


def test_hostile_records_become_dead_letters_and_no_query_stops(
    kafka_cluster: Settings, tmp_path: Path, results: Results
) -> None:
    settings = isolated_settings(kafka_cluster, tmp_path / "state")
    inputs = settings.topics.inputs()
    env = environment_of(settings)
    logs = tmp_path / "logs"
    logs.mkdir()
    count = times(reduced=3, full=30)
    speed = spawn_cli(["speed", "run"], env, logs / "speed.log")
    generator = spawn_cli(
        ["generate", "--events", "2000", "--rate", "200",
         "--workers", "1", "--malformed", "0"],
        env, logs / "generator.log",
    )  # fmt: skip
    try:
        sent = _send_hostile(settings, inputs, count)
        assert generator.wait(timeout=300) == 0, log_tail(logs / "generator.log", 30)
        ends = {(t, p): b.end for (t, p), b in offset_bounds(settings.kafka, inputs).items()}
        wait_until(lambda: read_to(settings) == ends, 240, "the speed job to read everything")
        assert speed.poll() is None, log_tail(logs / "speed.log", 40)  # no query stopped
    finally:
        stop_process(generator)
        stop_process(speed)

    letters = [json.loads(r.value) for r in read_all(settings, settings.topics.dead_letters)]
    by_coordinates = {
        (letter["source_topic"], letter["source_partition"], letter["source_offset"]): letter
        for letter in letters
    }
    for coordinates, kind in sent.items():
        letter = by_coordinates.get(coordinates)
        assert letter is not None, f"{kind} at {coordinates} made no dead letter"
        assert letter["reason"] in ("invalid_json", "missing_field", "invalid_value"), letter
        raw = letter.get("value") or ""
        assert len(raw.encode()) <= settings.views.dead_letter_bytes * 4, kind
    # the generator sent no malformed record: the dead letters are the hostile records,
    # each once, so every other record read was valid (valid + dead letters = read)
    assert set(by_coordinates) == set(sent)
    assert len(letters) == len(sent)
    results.add(
        f"hostile input ({len(HOSTILE)} kinds) among the generator's records",
        len(sent),
        "each a dead letter with its reason and a bounded value; no query stopped; "
        "every other record read was valid",
    )


def _send_hostile(
    settings: Settings, topics: list[str], count: int
) -> dict[tuple[str, int, int], str]:
    """Send each hostile record ``count`` times to each topic; their coordinates."""
    producer = kafka_producer(
        settings.kafka, "lambdaline-hostile", max_request_size=4 * 1024 * 1024, linger_ms=0
    )
    futures = []
    try:
        for _ in range(count):
            for topic in topics:
                for kind, (key, value) in HOSTILE.items():
                    futures.append((kind, producer.send(topic, key=key, value=value)))
            time.sleep(0.5)  # spread among the generator's records
        producer.flush()
    finally:
        producer.close()
    sent = {}
    for kind, future in futures:
        metadata = future.get(timeout=30)
        sent[(metadata.topic, metadata.partition, metadata.offset)] = kind
    return sent
