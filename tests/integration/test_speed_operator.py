"""The speed operator directly, in the session's Spark: hand-written records through the
speed job's plan (one decode, the operator, its records), read from files instead of
Kafka, written to a list instead of Kafka; two micro-batches of input and the watermark
between them. Every expected record was worked out by hand from the events below.

Sizes are the defaults: window 5 min, rolling 1 h every 5 min, max_trip 1 h, lookback
400 days, session_gap 30 min, watermark 2 min.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from shared.domain.validation import decode_together
from shared.domain.views.view import View
from shared.settings import Settings
from shared.settings.views import REGISTERED
from speed_layer.operator import apply_operator, operator_config, operator_input, operator_records
from tests.scenarios import RAW_SCHEMA, Record, entry, entry_value, exit_, registration
from tests.views import declared

pytestmark = pytest.mark.integration

SETTINGS = Settings()
TOPICS = SETTINGS.topics

FIRST: list[tuple[str, Record]] = [
    # booth bA's roll-up, with a copy of a2
    (TOPICS.entries, entry("a1", "bA", "PA1", "2026-01-05T10:01:00.000Z", "2.50")),
    (TOPICS.entries, entry("a2", "bA", "PA2", "2026-01-05T10:03:00.000Z", "4.00")),
    (TOPICS.entries, entry("a2", "bA", "PA2", "2026-01-05T10:03:00.000Z", "4.00")),
    (TOPICS.entries, entry("a3", "bA", "PA3", "2026-01-05T10:07:00.000Z", "5.75")),
    # a trip: its exit, and one at another booth that ends nothing
    (TOPICS.entries, entry("t1", "bT", "PT", "2026-01-05T10:00:00.000Z", "2.50")),
    (TOPICS.exits, exit_("x1", "bT", "PT", "2026-01-05T10:12:00.000Z")),
    (TOPICS.exits, exit_("x2", "bX", "PT", "2026-01-05T10:30:00.000Z")),
    # an alert: an expired registration recorded before the entry
    (TOPICS.registrations, registration("g1", "R1", "PR", True, "2025-12-20T00:00:00.000Z")),
    (TOPICS.entries, entry("er", "bR", "PR", "2026-01-05T10:30:00.000Z", "2.50")),
    # a registration that had not expired: no candidate written at all
    (TOPICS.registrations, registration("g2", "RH", "PH", False, "2025-12-26T00:00:00.000Z")),
    (TOPICS.entries, entry("eh", "bH", "PH", "2026-01-05T10:06:00.000Z", "2.50")),
    # no registration
    (TOPICS.entries, entry("em", "bM", "PM", "2026-01-05T10:08:00.000Z", "2.50")),
    # a visit of three entries (the third in the second micro-batch)
    (TOPICS.entries, entry("s1", "bS1", "PS", "2026-01-05T10:00:00.000Z", "2.50")),
    (TOPICS.entries, entry("s2", "bS2", "PS", "2026-01-05T10:20:00.000Z", "4.00")),
    # a dead letter
    (TOPICS.entries, (b"PD", b"not json", "2026-01-05T10:09:00.000Z")),
]
"""The first micro-batch. The watermark then moves to 10:28 (the latest entry, 10:30,
less 2 min)."""

SECOND: list[tuple[str, Record]] = [
    # an earlier exit of t1's booth: after the watermark, but t1 is still held (its
    # trip is provisional until 11:00), so it ends the trip sooner
    (TOPICS.exits, exit_("x3", "bT", "PT", "2026-01-05T10:10:00.000Z")),
    # a later registration that had not expired, before er is final: it withdraws
    # the alert; one of the same time with a lower id ranks below it
    (TOPICS.registrations, registration("g3", "R2", "PR", False, "2025-12-25T00:00:00.000Z")),
    (TOPICS.registrations, registration("g4", "R1b", "PR", True, "2025-12-25T00:00:00.000Z")),
    # late (at or before 10:28): dropped, by the roll-up too
    (TOPICS.entries, entry("a4", "bA", "PA4", "2026-01-05T10:02:00.000Z", "9.00")),
    # a copy of s2, and the visit's third entry
    (TOPICS.entries, entry("s2", "bS2", "PS", "2026-01-05T10:20:00.000Z", "4.00")),
    (TOPICS.entries, entry("s3", "bS3", "PS", "2026-01-05T10:45:00.000Z", "5.75")),
    # moves the watermark to 12:58: every trip, registration and visit above is decided
    (TOPICS.entries, entry("z1", "bZ", "PZ", "2026-01-05T13:00:00.000Z", "2.50")),
]


def _raw(batch: list[tuple[str, Record]], first_offset: int) -> list[tuple[Any, ...]]:
    return [
        (key, value, topic, 0, first_offset + n,
         datetime.fromisoformat(sent.replace("Z", "+00:00")).astimezone(UTC))
        for n, (topic, (key, value, sent)) in enumerate(batch)
    ]  # fmt: skip


def _plan(
    spark: SparkSession, source: Path, views: tuple[View, ...], files_per_trigger: int = 0
) -> DataFrame:
    reader = spark.readStream.schema(RAW_SCHEMA)
    if files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", files_per_trigger)
    raw = reader.parquet(str(source))
    given = SETTINGS.views
    sizes = {**{size.name: size.default for view in views for size in view.sizes}, **given.sizes}
    decoded = decode_together(raw, TOPICS, given.max_future_skew, given.dead_letter_bytes)
    found = apply_operator(
        operator_input(decoded, given.watermark, sizes, views), operator_config(sizes, views)
    )
    return operator_records(found, SETTINGS, views)


@pytest.fixture(scope="module")
def runs(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Any]]:
    """The records of each available-now run, parsed: (topic, key, value)."""
    yield _runs(spark, tmp_path_factory.mktemp("speed-operator"), (FIRST, SECOND), REGISTERED)


def _runs(
    spark: SparkSession, folder: Path, batches: tuple[list[tuple[str, Record]], ...],
    views: tuple[View, ...],
) -> list[Any]:  # fmt: skip
    source, checkpoint = folder / "input", folder / "checkpoint"
    written: list[list[tuple[str, Any, Any]]] = []
    offset = 0
    for batch in batches:
        spark.createDataFrame(_raw(batch, offset), RAW_SCHEMA).coalesce(1).write.mode(
            "append"
        ).parquet(str(source))
        offset += len(batch)
        records: list[tuple[str, Any, Any]] = []

        def collect(rows: DataFrame, batch_id: int, into: list[Any] = records) -> None:
            into.extend((r.topic, r.key, r.value) for r in rows.collect())

        query = (
            _plan(spark, source, views)
            .writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        assert query.exception() is None
        written.append(
            [
                (topic, json.loads(key) if key.startswith(b"{") else key.decode(),
                 json.loads(value, parse_float=Decimal))
                for topic, key, value in records
            ]
        )  # fmt: skip
    return written


def _one_run_a_file_a_batch(
    spark: SparkSession, folder: Path, files: tuple[list[tuple[str, Record]], ...]
) -> tuple[list[Any], list[dict[str, Any]]]:
    """One available-now run over ``files``, a micro-batch each, so that one's watermark
    (for eviction) is from the file before it and its late events' from the one before
    that: the records written, parsed, and the progress reports."""
    source, offset = folder / "input", 0
    for file in files:
        spark.createDataFrame(_raw(file, offset), RAW_SCHEMA).coalesce(1).write.mode(
            "append"
        ).parquet(str(source))
        offset += len(file)
    records: list[Any] = []

    def collect(rows: DataFrame, batch_id: int) -> None:
        records.extend((r.topic, json.loads(r.key), json.loads(r.value)) for r in rows.collect()
                       if r.key and r.key.startswith(b"{"))  # fmt: skip

    query = (
        _plan(spark, source, REGISTERED, files_per_trigger=1)
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(folder / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None
    return records, [json.loads(progress.json) for progress in query.recentProgress]


def test_an_entry_after_the_last_batchs_watermark_is_taken_by_every_part_a_late_one_by_none(
    spark: SparkSession, tmp_path: Path
) -> None:
    at = "2026-01-05T10:{}:00.000Z".format
    records, progress = _one_run_a_file_a_batch(spark, tmp_path, (
        [(TOPICS.entries, entry("w1", "bW", "PW1", at(30), "1.00"))],
        # its batch's watermark is 10:28 (w1's), so w3's (next) is 10:38
        [(TOPICS.entries, entry("w2", "bW", "PW2", at(40), "2.00"))],
        # 10:33: at or before its batch's watermark (10:38) but after the last batch's
        # (10:28), so it is not late: in its window, and its plate's visit
        [(TOPICS.entries, entry("w3", "bW", "PW3", at(33), "4.00"))],
        # 10:20, at or before the last batch's watermark (10:38): late, in no part
        [(TOPICS.entries, entry("w4", "bW", "PW4", at(20), "8.00"))],
        [(TOPICS.entries, entry("z3", "bZ", "PZ3", "2026-01-05T13:00:00.000Z", "0.50"))],
    ))  # fmt: skip
    latest = {}
    for topic, key, value in records:
        if topic == TOPICS.speed("booth_stats") and key["booth_id"] == "bW":
            latest[key["window_start"]] = (value["vehicle_count"], value["total_toll"])
    assert latest == {at(30): (2, 5.0), at(40): (1, 2.0)}
    visits = {key["license_plate"] for topic, key, _ in records
              if topic == TOPICS.speed("vehicle_visits")}  # fmt: skip
    assert {"PW1", "PW2", "PW3"} <= visits and "PW4" not in visits
    # w4's two rows (its booth's, its plate's), dropped by Spark and counted
    dropped = sum(op["numRowsDroppedByWatermark"] for p in progress for op in p["stateOperators"])
    assert dropped == 2


def of(records: list[Any], topic: str) -> list[tuple[Any, Any]]:
    return [(key, value) for t, key, value in records if t == topic]


def without_version(value: dict[str, Any]) -> dict[str, Any]:
    assert value["version"] > 0
    return {name: v for name, v in value.items() if name != "version"}


def test_the_roll_up_counts_each_entry_once_and_not_a_late_one(runs: list[Any]) -> None:
    first, second = runs
    stats = {
        key["window_start"]: without_version(value)
        for key, value in of(first, TOPICS.speed("booth_stats"))
        if key["booth_id"] == "bA"
    }
    assert stats == {
        "2026-01-05T10:00:00.000Z": {
            "booth_id": "bA", "window_start": "2026-01-05T10:00:00.000Z",
            "window_end": "2026-01-05T10:05:00.000Z", "vehicle_count": 2,
            "total_toll": Decimal("6.50"), "first_entry_time": "2026-01-05T10:01:00.000Z",
            "last_entry_time": "2026-01-05T10:03:00.000Z",
        },
        "2026-01-05T10:05:00.000Z": {
            "booth_id": "bA", "window_start": "2026-01-05T10:05:00.000Z",
            "window_end": "2026-01-05T10:10:00.000Z", "vehicle_count": 1,
            "total_toll": Decimal("5.75"), "first_entry_time": "2026-01-05T10:07:00.000Z",
            "last_entry_time": "2026-01-05T10:07:00.000Z",
        },
    }  # fmt: skip
    rolling = {
        key["window_start"]: (value["vehicle_count"], value["total_toll"], value["window_end"])
        for key, value in of(first, TOPICS.speed("booth_rolling"))
        if key["booth_id"] == "bA"
    }
    # the hopping windows holding 10:01 start at 09:05 ... 10:00; 10:07's at 09:10 ... 10:05
    assert sorted(rolling) == [
        f"2026-01-05T{h}:{m:02d}:00.000Z"
        for h, m in [("09", m) for m in range(5, 60, 5)] + [("10", 0), ("10", 5)]
    ]
    assert rolling["2026-01-05T09:05:00.000Z"] == (2, Decimal("6.50"), "2026-01-05T10:05:00.000Z")
    assert rolling["2026-01-05T10:00:00.000Z"] == (3, Decimal("12.25"), "2026-01-05T11:00:00.000Z")
    assert rolling["2026-01-05T10:05:00.000Z"] == (1, Decimal("5.75"), "2026-01-05T11:05:00.000Z")
    # a4 (10:02) came after the watermark had passed it: no window of bA changed
    assert [
        key for key, _ in of(second, TOPICS.speed("booth_stats")) if key["booth_id"] == "bA"
    ] == []


def test_a_trip_is_its_earliest_exit_of_the_booth_and_an_earlier_one_arriving_later_wins(
    runs: list[Any],
) -> None:
    first, second = runs

    def trips(records: list[Any]) -> list[tuple[str, Any]]:
        return [
            (value["exit_time"], value["duration_seconds"])
            for key, value in of(records, TOPICS.speed("vehicle_trips"))
            if key["license_plate"] == "PT"
        ]

    assert trips(first) == [("2026-01-05T10:12:00.000Z", Decimal("720.0"))]  # not bX's 10:30
    assert trips(second) == [("2026-01-05T10:10:00.000Z", Decimal("600.0"))]
    assert {
        key["license_plate"] for key, _ in of(first + second, TOPICS.speed("vehicle_trips"))
    } == {"PT"}


def test_a_registration_candidate_is_written_when_it_is_better_and_a_hidden_first_one_not(
    runs: list[Any],
) -> None:
    first, second = runs

    def alerts(records: list[Any]) -> list[tuple[str, str, bool]]:
        return [
            (value["license_plate"], value["registration_id"], value["expired"])
            for _, value in of(records, TOPICS.speed("expired_registrations"))
        ]

    # er: R1 (expired) at first; R2 (later, not expired) withdraws it; R1b (same time,
    # lower id) ranks below R2. eh's registration had not expired: nothing to write.
    assert alerts(first) == [("PR", "R1", True)]
    assert alerts(second) == [("PR", "R2", False)]


def test_entries_missing_a_match_go_to_the_internal_topic_once_decided(runs: list[Any]) -> None:
    first, second = runs
    internal = TOPICS.speed_prefix + "internal.diagnostic_entries"

    def missing(records: list[Any], reason: str) -> set[str]:
        return {
            value["event_id"] for _, value in of(records, internal) if value["reason"] == reason
        }

    # the first run's watermark (10:28) decides the registrations of the entries up to it
    assert missing(first, "missing_registration") == {"a1", "a2", "a3", "t1", "em", "s1", "s2"}
    assert missing(first, "missing_exit") == set()
    # the second's (12:58): s3's registration, and every exit due by then but t1's
    assert missing(second, "missing_registration") == {"s3"}
    assert missing(second, "missing_exit") == {"a1", "a2", "a3", "er", "eh", "em", "s1", "s2", "s3"}
    [(key, value)] = [(k, v) for k, v in of(first, internal) if v["event_id"] == "em"]
    assert key == "PM"
    assert value == {"event_id": "em", "booth_id": "bM", "entry_time": "2026-01-05T10:08:00.000Z",
                     "reason": "missing_registration"}  # fmt: skip


def test_a_visit_is_written_once_the_watermark_passes_its_end(runs: list[Any]) -> None:
    first, second = runs
    assert of(first, TOPICS.speed("vehicle_visits")) == []
    visits = {
        key["license_plate"]: without_version(v)
        for key, v in of(second, TOPICS.speed("vehicle_visits"))
    }
    assert visits["PS"] == {
        "license_plate": "PS", "session_start": "2026-01-05T10:00:00.000Z",
        "session_end": "2026-01-05T11:15:00.000Z", "entry_count": 3,
        "booths": ["bS1", "bS2", "bS3"], "total_toll": Decimal("12.25"),
    }  # fmt: skip
    # every plate with entries up to 12:28 has its visit; PZ's (13:00) is still open
    assert sorted(visits) == ["PA1", "PA2", "PA3", "PH", "PM", "PR", "PS", "PT"]


def test_a_dead_letter_passes_through(runs: list[Any]) -> None:
    first, _ = runs
    [(key, value)] = of(first, TOPICS.dead_letters)
    assert key == "PD"
    assert (value["reason"], value["value"], value["source_offset"]) == (
        "invalid_json",
        "not json",
        14,
    )


def _typed_entry(event_id: str, booth: str, plate: str, at: str, toll: str, kind: int) -> Record:
    value = json.loads(entry_value(event_id, booth, plate, at, toll))
    value["vehicle_type"] = kind
    return plate.encode(), json.dumps(value).encode(), at


DECLARED_FIRST: list[tuple[str, Record]] = [
    (TOPICS.entries, _typed_entry("n1", "bA", "PN", "2026-01-05T10:00:00.000Z", "2.50", 1)),
    # two next entries of n1 at one time: the lesser event id wins; each is the other's next
    (TOPICS.entries, _typed_entry("n2", "bB", "PN", "2026-01-05T10:30:00.000Z", "4.00", 2)),
    (TOPICS.entries, _typed_entry("n3", "bA", "PN", "2026-01-05T10:30:00.000Z", "1.00", 1)),
    # another plate, entered once: no next entry, and no diagnostic either
    (TOPICS.entries, _typed_entry("n4", "bA", "PQ", "2026-01-05T10:05:00.000Z", "0.75", 1)),
]
"""The declared views' first micro-batch; the watermark then moves to 10:28."""

DECLARED_SECOND: list[tuple[str, Record]] = [
    # late (at or before 10:28): not n1's next entry, not in a roll-up window
    (TOPICS.entries, _typed_entry("n5", "bA", "PN", "2026-01-05T10:10:00.000Z", "9.00", 1)),
    # after n2 and n3: better for none of them
    (TOPICS.entries, _typed_entry("n6", "bA", "PN", "2026-01-05T11:00:00.000Z", "3.00", 2)),
    (TOPICS.entries, _typed_entry("z2", "bZ", "PZ", "2026-01-05T13:00:00.000Z", "2.50", 1)),
]


@pytest.fixture(scope="module")
def declared_runs(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[Any]]:
    """The records of ``tests.views.declared``'s views alone through the operator."""
    folder = tmp_path_factory.mktemp("speed-operator-declared")
    yield _runs(spark, folder, (DECLARED_FIRST, DECLARED_SECOND), declared.VIEWS)


def test_a_declared_roll_up_groups_by_its_own_keys_and_takes_no_late_entry(
    declared_runs: list[Any],
) -> None:
    latest: dict[tuple[Any, ...], Any] = {}
    for records in declared_runs:
        for key, value in of(records, TOPICS.speed("tolls_by_type")):
            latest[(key["booth_id"], key["vehicle_type"], key["window_start"])] = value[
                "total_toll"
            ]
    assert latest == {
        ("bA", 1, "2026-01-05T10:00:00.000Z"): Decimal("3.25"),  # n1, n4; not n5
        ("bA", 1, "2026-01-05T10:30:00.000Z"): Decimal("1.00"),
        ("bB", 2, "2026-01-05T10:30:00.000Z"): Decimal("4.00"),
        ("bA", 2, "2026-01-05T11:00:00.000Z"): Decimal("3.00"),
        ("bZ", 1, "2026-01-05T13:00:00.000Z"): Decimal("2.50"),
    }


def test_a_declared_best_match_over_its_own_events_breaks_ties_and_skips_itself(
    declared_runs: list[Any],
) -> None:
    first, second = (of(records, TOPICS.speed("next_entries")) for records in declared_runs)
    assert sorted(
        (key["license_plate"], key["entry_time"], value["next_entry_time"], value["next_booth_id"],
         value["next_event_id"])
        for key, value in first
    ) == [
        ("PN", "2026-01-05T10:00:00.000Z", "2026-01-05T10:30:00.000Z", "bB", "n2"),
        ("PN", "2026-01-05T10:30:00.000Z", "2026-01-05T10:30:00.000Z", "bA", "n3"),  # n2's
        ("PN", "2026-01-05T10:30:00.000Z", "2026-01-05T10:30:00.000Z", "bB", "n2"),  # n3's
    ]  # fmt: skip
    assert second == []  # n5 was late; n6 beats no candidate; a missing one writes nothing
    assert not [r for records in declared_runs for r in records if r[0] not in (
        TOPICS.speed("tolls_by_type"), TOPICS.speed("next_entries"))]  # fmt: skip
