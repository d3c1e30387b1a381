"""The generator without Kafka: determinism, counts and the partitioning contract."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from lambdaline.generator import GeneratorConfig, partition_of, write_json_lines
from shared.settings import Settings


def generate(tmp_path: Path, name: str, settings: Settings, **options: object) -> Path:
    out = tmp_path / name
    write_json_lines(GeneratorConfig(**options), settings, out)  # type: ignore[arg-type]
    return out


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path: Path, settings: Settings) -> None:
    first = generate(tmp_path, "a.jsonl", settings, events=2000, seed=7)
    again = generate(tmp_path, "b.jsonl", settings, events=2000, seed=7)
    other = generate(tmp_path, "c.jsonl", settings, events=2000, seed=8)
    assert digest(first) == digest(again)
    assert digest(first) != digest(other)


def test_counts_by_kind(tmp_path: Path, settings: Settings) -> None:
    out = generate(
        tmp_path, "g.jsonl", settings, events=4000, plates=300, duplicate=0.0, malformed=0.0,
        missing_exit=0.0, unregistered=0.0,
    )  # fmt: skip
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    kinds = Counter(line["kind"] for line in lines)
    # every entry has an exit, every plate one registration, nothing else
    assert kinds == {"entry": 4000, "exit": 4000, "registration": 300}


def test_records_follow_kafka_partitioning_and_send_order(
    tmp_path: Path, settings: Settings
) -> None:
    out = generate(tmp_path, "p.jsonl", settings, events=1500)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    for line in lines:
        assert line["partition"] == partition_of(line["key"].encode(), settings.kafka.partitions)
    timestamps = [line["timestamp"] for line in lines]
    assert timestamps == sorted(timestamps)


def test_fractions_are_roughly_as_asked(tmp_path: Path, settings: Settings) -> None:
    out = generate(tmp_path, "f.jsonl", settings, events=20_000, malformed=0.05, duplicate=0.02)
    kinds = Counter(json.loads(line)["kind"] for line in out.read_text().splitlines())
    malformed = sum(count for kind, count in kinds.items() if kind.startswith("malformed:"))
    assert 800 <= malformed <= 1200  # 5 % of 20,000 entries, within a wide binomial margin
    assert {k for k in kinds if k.startswith("malformed:")} == {
        "malformed:invalid_json",
        "malformed:missing_field",
        "malformed:invalid_value",
        "malformed:future_event_time",
    }
    assert 0.015 < kinds["duplicate"] / (sum(kinds.values()) - kinds["duplicate"]) < 0.025


def test_start_sets_simulated_time(tmp_path: Path, settings: Settings) -> None:
    start = datetime(2026, 3, 1, 12, tzinfo=UTC)
    out = generate(tmp_path, "s.jsonl", settings, events=100, start=start, late=0.0, plates=50)
    entries = [
        json.loads(json.loads(line)["value"])
        for line in out.read_text().splitlines()
        if json.loads(line)["kind"] == "entry"
    ]
    first = min(entry["entry_time"] for entry in entries)
    assert first.startswith("2026-03-01T12:00:")


def test_trip_median_sets_how_long_trips_take(tmp_path: Path, settings: Settings) -> None:
    out = generate(
        tmp_path, "t.jsonl", settings, events=600, plates=100_000, late=0.0, missing_exit=0.0,
        malformed=0.0, duplicate=0.0,
        trip_median=timedelta(seconds=10),
    )  # fmt: skip
    values = [
        (json.loads(line)["kind"], json.loads(json.loads(line)["value"]))
        for line in out.read_text().splitlines()
    ]

    def instant(text: str) -> datetime:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))

    entered: dict[str, list[datetime]] = {}
    for kind, v in values:
        if kind == "entry":
            entered.setdefault(v["license_plate"], []).append(instant(v["entry_time"]))
    trips = []
    for kind, v in values:
        if kind == "exit":  # its trip began at the plate's latest entry before it
            exit_time = instant(v["exit_time"])
            began = max(t for t in entered[v["license_plate"]] if t < exit_time)
            trips.append((exit_time - began).total_seconds())
    trips.sort()
    assert len(trips) == 600
    assert 8.5 <= trips[len(trips) // 2] <= 11.5  # log-normal, median 10 s, sigma 0.5
    assert trips[-1] < 60  # nothing near the default's 12 minutes


def test_trip_median_must_be_positive() -> None:
    with pytest.raises(ValueError, match="trip_median must be > 0"):
        GeneratorConfig(events=1, trip_median=timedelta(0))
