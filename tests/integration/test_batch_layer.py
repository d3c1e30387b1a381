"""The batch layer on the real broker, real Spark and real DuckDB files, over three days.

The input and the batch store's rows for the run date D are ``tests.scenarios.ThreeDays``
(window 5 min, max_trip 1 h; D = 2026-01-05 unless a test says otherwise).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pytest
from kafka import TopicPartition
from pyspark.sql import SparkSession
from rich.console import Console

from batch_layer import ingest_reset
from batch_layer.cli import reset_ingest
from batch_layer.master import (
    EVENT_DATE,
    MasterDataset,
    MasterDatasetError,
    last_ingest_batch,
    master_schema,
    partitions,
    read_dead_letters,
    read_events,
)
from batch_layer.publish import rollback
from batch_layer.run import RunReport, run_batch
from shared.domain.events import EVENT_TYPES, TOLL_ENTRY, TOLL_EXIT, VEHICLE_REGISTRATION
from shared.platform.batch_store import (
    STORE_TABLE_BY_NAME,
    STORE_TABLES,
    read_current,
    version_file,
)
from shared.platform.kafka_admin import admin_client
from shared.platform.streaming import KafkaDataLossError
from shared.platform.topic_admin import create_topics, delete_topics
from shared.platform.topic_ids import TopicsRecreatedError
from shared.settings import Settings
from tests.integration.helpers import (
    batch_rows,
    environment_of,
    isolated_settings,
    lookback_scenario,
    run_cli,
    send,
    send_three_days,
)
from tests.scenarios import Lookback, ThreeDays, entry_value, exit_value, t

pytestmark = pytest.mark.integration

D = ThreeDays.D
ALL_DAYS = [date(2026, 1, day) for day in range(1, 8)]  # every date the input touches


def batch(spark: SparkSession, settings: Settings, run_date: date, lookback: int = 2) -> RunReport:
    return run_batch(spark, settings, run_date, lookback, console=Console(file=io.StringIO()))


@pytest.fixture(scope="module")
def first_run(
    kafka: Settings, spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> Settings:
    """One batch run for D over the three days of input."""
    settings = isolated_settings(kafka, tmp_path_factory.mktemp("batch"))
    send_three_days(settings)
    report = batch(spark, settings, D)
    assert report.version is not None and report.version.version == 1
    return settings


def test_booth_stats(first_run: Settings) -> None:
    assert batch_rows(first_run, "booth_stats") == ThreeDays.BOOTH_STATS


def test_vehicle_trips_take_the_earliest_exit_even_after_midnight(first_run: Settings) -> None:
    assert batch_rows(first_run, "vehicle_trips") == ThreeDays.VEHICLE_TRIPS


def test_expired_registrations_use_the_registration_at_entry_time(first_run: Settings) -> None:
    assert batch_rows(first_run, "expired_registrations") == ThreeDays.EXPIRED_REGISTRATIONS


def test_diagnostics(first_run: Settings) -> None:
    assert batch_rows(first_run, "diagnostics") == ThreeDays.DIAGNOSTICS


def test_dead_letters_up_to_the_run_date_with_reasons(first_run: Settings) -> None:
    letters = [
        (row["source_topic"], row["source_offset"], row["value"], row["reason"], row["detail"])
        for row in batch_rows(first_run, "dead_letters")
    ]
    topic = first_run.topics.entries
    assert letters == [
        (topic, 6, b"not json", "invalid_json", "value is not a JSON object"),
        (topic, 7, ThreeDays.MALFORMED[1][1], "missing_field",
         "missing: entry_time, license_plate, state, make, model, vehicle_type, weight_kg, toll, tag"),
        (topic, 8, ThreeDays.MALFORMED[2][1], "invalid_value", "invalid: booth_id"),
    ]  # fmt: skip


def test_an_input_without_files_is_read_as_no_rows_without_a_python_worker(
    kafka: Settings, spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A type of event with no files in reach (exits before the first trip ends, no dead
    letters yet) is an empty scan: a frame from a Python list would start a Python worker
    in each task, which a cluster's executors need not have (tests/faults/test_batch_kills.py
    runs them without one)."""
    dataset = MasterDataset.of(isolated_settings(kafka, tmp_path))
    frames = {
        **{event_type.name: read_events(spark, dataset, event_type, ALL_DAYS)
           for event_type in EVENT_TYPES},
        "dead letters, no dates": read_dead_letters(spark, dataset, []),
        "dead letters": read_dead_letters(spark, dataset, ALL_DAYS),
    }  # fmt: skip
    for name, frame in frames.items():
        assert frame.count() == 0, name
        frame.explain()
        plan = capsys.readouterr().out
        assert "FileScan parquet" in plan and "ExistingRDD" not in plan, f"{name}: {plan}"
    # the columns and partition columns a read of files gives
    assert frames[TOLL_EXIT.name].columns == master_schema(TOLL_EXIT).fieldNames()


def test_a_registration_applies_for_the_lookback_only(
    kafka: Settings, spark: SparkSession, tmp_path: Path
) -> None:
    settings = lookback_scenario(kafka, tmp_path)
    batch(spark, settings, date(2026, 1, 5))

    assert [
        (row["booth_id"], row["license_plate"], row["entry_time"].isoformat(),
         row["registration_id"])
        for row in batch_rows(settings, "expired_registrations")
    ] == Lookback.ALERTS  # fmt: skip
    assert [
        (row["booth_id"], row["window_start"].isoformat(), row["count"])
        for row in batch_rows(settings, "diagnostics")
    ] == Lookback.MISSING_REGISTRATIONS
    assert {row["reason"] for row in batch_rows(settings, "diagnostics")} == {
        "missing_registration"
    }


def test_pointer_and_manifest(first_run: Settings) -> None:
    current = read_current(first_run.batch_store)
    assert current is not None
    assert current.version == 1
    assert current.horizon.isoformat() == "2026-01-06T00:00:00+00:00"
    assert current.dates == (date(2026, 1, 2), date(2026, 1, 3), date(2026, 1, 4), D)
    # booth_rolling: the 12 hourly windows of e1 and e2 (both in 10:00-10:05, so the
    # same 12), of e3 and of e4; vehicle_visits: P1's two (e1, e4), P2's e2, P3's e3
    assert current.row_counts == {
        "booth_stats": 3, "vehicle_trips": 3, "expired_registrations": 2, "diagnostics": 2,
        "booth_rolling": 36, "vehicle_visits": 4, "dead_letters": 3,
    }  # fmt: skip
    pointer = json.loads((first_run.batch_store / "CURRENT").read_text())
    assert pointer["path"] == "versions/00000001.duckdb"


def all_tables(settings: Settings, version: int) -> dict[str, list[dict[str, Any]]]:
    return {spec.name: batch_rows(settings, spec.name, version) for spec in STORE_TABLES}


def test_late_data_is_recomputed_and_a_rerun_changes_only_the_version(
    kafka: Settings, spark: SparkSession, tmp_path: Path
) -> None:
    settings = isolated_settings(kafka, tmp_path)
    send_three_days(settings)
    batch(spark, settings, D, lookback=0)  # version 1; lookback 0: only new and touched dates

    # a day later: e4's exit arrives late, so does an entry for 01-04, and e2 once more
    send(settings, settings.topics.exits, [
        (b"P1", exit_value("x4", "b2", "P1", "2026-01-05T13:10:00.000Z"), "2026-01-07T01:00:00.000Z"),
    ])  # fmt: skip
    send(settings, settings.topics.entries, [
        (b"P2", entry_value("e7", "b2", "P2", "2026-01-04T15:00:00.000Z", "1.00"), "2026-01-07T01:00:01.000Z"),
        (b"P2", entry_value("e2", "b1", "P2", "2026-01-04T10:03:00.000Z", "4.00"), "2026-01-07T01:00:02.000Z"),
    ])  # fmt: skip
    second = batch(spark, settings, date(2026, 1, 6), lookback=0)
    # the entries of 01-04 touch the days either side too (a window or a visit across
    # midnight), the exit its date, 01-06 is new
    assert second.recomputed_dates == [date(2026, 1, 3), date(2026, 1, 4), D, date(2026, 1, 6)]
    assert second.records_ingested == 3

    new_trips = [
        # 2026-01-06, a date this run covers
        {"booth_id": "b1", "license_plate": "P2", "entry_time": t("2026-01-06T08:00"),
         "exit_time": t("2026-01-06T08:05"), "duration_seconds": 300.0},
        # e4, whose exit came late
        {"booth_id": "b2", "license_plate": "P1", "entry_time": t("2026-01-05T13:00"),
         "exit_time": t("2026-01-05T13:10"), "duration_seconds": 600.0},
    ]  # fmt: skip
    key = STORE_TABLE_BY_NAME["vehicle_trips"].key
    assert batch_rows(settings, "vehicle_trips") == sorted(
        ThreeDays.VEHICLE_TRIPS + new_trips, key=lambda row: tuple(row[name] for name in key)
    )
    assert batch_rows(settings, "diagnostics") == [
        {"booth_id": "b1", "window_start": t("2026-01-04T23:50"), "reason": "missing_registration", "count": 1},
        {"booth_id": "b2", "window_start": t("2026-01-04T15:00"), "reason": "missing_exit", "count": 1},
    ]  # fmt: skip
    assert [(r["booth_id"], r["window_start"], r["vehicle_count"]) for r in batch_rows(settings, "booth_stats")] == [
        ("b1", t("2026-01-04T10:00"), 2), ("b1", t("2026-01-04T23:50"), 1),
        ("b1", t("2026-01-06T08:00"), 1), ("b2", t("2026-01-04T15:00"), 1),
        ("b2", t("2026-01-05T13:00"), 1),
    ]  # fmt: skip
    assert [r["reason"] for r in batch_rows(settings, "dead_letters")] == [
        "invalid_json", "missing_field", "invalid_value", "future_event_time",
    ]  # fmt: skip

    # no new data: the same contents under a new version (the lookback recomputes 01-06)
    third = batch(spark, settings, date(2026, 1, 6), lookback=1)
    assert third.records_ingested == 0 and third.recomputed_dates == [date(2026, 1, 6)]
    assert third.version is not None and second.version is not None
    assert third.version.version == second.version.version + 1
    assert all_tables(settings, third.version.version) == all_tables(
        settings, second.version.version
    )


def test_a_changed_window_recomputes_every_date_of_the_next_version(
    kafka: Settings, spark: SparkSession, tmp_path: Path
) -> None:
    settings = isolated_settings(kafka, tmp_path)
    send_three_days(settings)
    batch(spark, settings, D, lookback=0)  # 5-minute windows

    ten_minutes = settings.updated(window=timedelta(minutes=10))
    report = batch(spark, ten_minutes, D, lookback=0)  # no new data, no lookback
    assert report.views_changed
    assert report.recomputed_dates == [date(2026, 1, 2), date(2026, 1, 3), date(2026, 1, 4), D]
    # every entry lies in the first half of a 10-minute window, so the rows of ThreeDays.BOOTH_STATS
    # start where they did and end 10 minutes later; e1 and e2 were one 5-minute window already
    ends = [t("2026-01-04T10:10"), t("2026-01-05T00:00"), t("2026-01-05T13:10")]
    expected = [
        {**row, "window_end": end} for row, end in zip(ThreeDays.BOOTH_STATS, ends, strict=True)
    ]
    assert batch_rows(settings, "booth_stats") == expected
    current = read_current(settings.batch_store)
    assert current is not None and current.view_settings == {
        "window": "10m",
        "max_trip": "1h",
        "registration_lookback": "400d",
        "rolling_window": "1h",
        "rolling_slide": "5m",
        "session_gap": "30m",
    }


def test_same_master_dataset_gives_identical_contents(
    first_run: Settings, spark: SparkSession
) -> None:
    # a run with a lookback over every date recomputes everything from the same master dataset
    report = batch(spark, first_run, D, lookback=10)
    assert report.recomputed_dates == [date(2026, 1, 2), date(2026, 1, 3), date(2026, 1, 4), D]
    assert report.version is not None
    assert all_tables(first_run, report.version.version) == all_tables(first_run, 1)
    with duckdb.connect() as connection:
        for number in (1, report.version.version):
            path = version_file(first_run.batch_store, number)
            connection.execute(f"ATTACH '{path}' AS v{number} (READ_ONLY)")
        for spec in STORE_TABLES:
            difference = connection.execute(
                f'SELECT count(*) FROM (SELECT * FROM v1."{spec.name}" EXCEPT ALL '
                f'SELECT * FROM v{report.version.version}."{spec.name}")'
            ).fetchone()
            assert difference == (0,)


def test_rollback_moves_the_pointer_back(first_run: Settings, spark: SparkSession) -> None:
    newer = batch(spark, first_run, D)
    assert newer.version is not None and newer.version.version > 1
    rollback(first_run.batch_store, 1)
    current = read_current(first_run.batch_store)
    assert current is not None and current.version == 1

    listed = run_cli(first_run, "batch", "versions", "--json")
    assert listed.returncode == 0, listed.stderr
    versions = json.loads(listed.stdout)
    assert [v["version"] for v in versions if v["current"]] == [1]
    assert newer.version.version in [v["version"] for v in versions]

    missing = run_cli(first_run, "batch", "rollback", "999")
    assert missing.returncode == 1
    assert "version 999 is not in" in missing.stderr + missing.stdout
    rollback(first_run.batch_store, newer.version.version)


def kill_at_failpoint(settings: Settings, failpoint: str) -> None:
    """Start ``lambdaline batch run`` for D, wait for it at ``failpoint``, then kill -9 it."""
    run = subprocess.Popen(
        [sys.executable, "-m", "lambdaline.cli", "batch", "run", "--date", D.isoformat()],
        env={**environment_of(settings), "LAMBDALINE_FAILPOINT": failpoint},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True,  # its own process group: the Python driver and its JVM
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        assert run.stderr is not None
        for line in run.stderr:
            if '"failpoint_reached"' in line:
                break
            assert time.monotonic() < deadline, "the run never reached the failpoint"
        else:
            raise AssertionError(f"the run ended (exit {run.wait()}) before the failpoint")
    finally:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.parametrize("failpoint", ["publish_tables"])  # the others: tests/faults
def test_kill_9_during_publish_leaves_current_untouched(
    first_run: Settings, spark: SparkSession, failpoint: str
) -> None:
    pointer = first_run.batch_store / "CURRENT"
    before = pointer.read_bytes()
    served = read_current(first_run.batch_store)
    assert served is not None

    kill_at_failpoint(first_run, failpoint)

    assert pointer.read_bytes() == before
    assert read_current(first_run.batch_store) == served
    assert batch_rows(first_run, "booth_stats", served.version) == batch_rows(
        first_run, "booth_stats"
    )

    after = batch(spark, first_run, D)  # the next run succeeds and is served
    assert after.version is not None and after.version.version > served.version
    current = read_current(first_run.batch_store)
    assert current is not None and current.version == after.version.version
    assert all_tables(first_run, current.version) == all_tables(first_run, served.version)
    assert not list((first_run.batch_store / "versions").glob(".*tmp*"))


def files_under(folder: Path) -> dict[str, int]:
    return {str(path.relative_to(folder)): path.stat().st_size for path in folder.rglob("*")}


@pytest.fixture
def ingested_once(kafka: Settings, spark: SparkSession, tmp_path: Path) -> Settings:
    """Topics of its own and one batch run for D over the input: ingest batch 0."""
    settings = isolated_settings(kafka, tmp_path)
    send_three_days(settings)
    batch(spark, settings, D)
    return settings


def test_a_deleted_ingest_checkpoint_is_refused_then_a_reset_ingest_goes_on_from_the_log(
    ingested_once: Settings, spark: SparkSession
) -> None:
    settings = ingested_once
    recorded = json.loads(
        (Path(MasterDataset.of(settings).ingest_checkpoint) / "input_topic_ids.json").read_text()
    )
    # the master dataset logs batch 0 as stored whole, with what it had read
    logged = json.loads(Path(f"{settings.master_location}/_ingest_log/0.json").read_text())
    topics = settings.topics
    assert logged == {
        "batch": 0,
        "read_to": {  # send() writes to partition 0: 6 entries + 4 malformed, 7 exits, 5
            topics.entries: {"0": 10, "1": 0}, topics.exits: {"0": 7, "1": 0},
            topics.registrations: {"0": 5, "1": 0},
        },
        "topic_ids": recorded,
        "records": len(ThreeDays.ENTRIES + ThreeDays.MALFORMED + ThreeDays.EXITS + ThreeDays.REGISTRATIONS),
        "dead_letters": len(ThreeDays.MALFORMED),
    }  # fmt: skip
    served = read_current(settings.batch_store)
    checkpoint = Path(MasterDataset.of(settings).ingest_checkpoint)
    shutil.rmtree(checkpoint)  # as a user "cleaning up checkpoints" would
    stored = files_under(Path(settings.master_location))

    # without the check, the ingest read Kafka from its earliest offsets again
    with pytest.raises(MasterDatasetError, match=rf"ingest checkpoint {checkpoint} has begun none"):
        batch(spark, settings, D)
    assert files_under(Path(settings.master_location)) == stored
    assert read_current(settings.batch_store) == served

    send(settings, topics.entries, [NEW_ENTRY])
    shown = reset_ingest_here(spark, settings)
    assert starts_table(settings, shown) == {  # read to, Kafka keeps, starts at, why
        f"{topics.entries}-0": "10 0..11 10 goes on where it was read to",
        f"{topics.exits}-0": "7 0..7 7 goes on where it was read to",
        f"{topics.registrations}-0": "5 0..5 5 goes on where it was read to",
        **{f"{topic}-1": "0 0..0 0 goes on where it was read to"
           for topic in settings.topics.inputs()},
    }  # fmt: skip
    said = " ".join(shown.split())
    assert f"This begins a new ingest checkpoint at {checkpoint}, whose batches are numbered from 1" in said  # fmt: skip

    report = batch(spark, settings, D)
    assert report.records_ingested == 1  # e7 alone: nothing stored is stored again
    assert (
        read_events(spark, MasterDataset.of(settings), TOLL_ENTRY, ALL_DAYS).count()
        == len(ThreeDays.ENTRIES) + 1
    )
    written = partitions(spark, MasterDataset.of(settings).events(TOLL_ENTRY), EVENT_DATE)
    assert {batch_id for _, batch_id in written} == {0, 1}
    assert [row["booth_id"] for row in batch_rows(settings, "booth_stats")] == [
        "b1",
        "b1",
        "b2",
        "b3",
    ]


def reset_ingest_here(spark: SparkSession, settings: Settings) -> str:
    """``lambdaline batch reset-ingest --yes`` in the session's Spark (``batch_layer.cli
    .reset_ingest``, which the command runs in its own): what it prints, at ``run_cli``'s
    300 columns. The command's own checks are tested through it once
    (:func:`test_records_deleted_before_the_ingest_read_them_stop_it_until_a_reset_ingest`)."""
    shown = io.StringIO()
    reset_ingest(spark, settings, Console(file=shown, width=300, soft_wrap=True), lambda: None)
    return shown.getvalue()


def starts_table(settings: Settings, printed: str) -> dict[str, str]:
    """`batch reset-ingest`'s table: each partition's row, its cells joined by spaces."""
    return {
        line.split()[0]: " ".join(line.split()[1:])
        for line in printed.splitlines()
        if line.strip().startswith(tuple(settings.topics.inputs()))
    }


NEW_ENTRY = (b"P7", entry_value("e7", "b3", "P7", "2026-01-05T14:00:00.000Z", "1.00"), "2026-01-05T14:00:00.100Z")  # fmt: skip


@pytest.mark.slow
def test_input_topics_created_again_are_refused_then_a_reset_ingest_goes_on_into_the_master(
    ingested_once: Settings, spark: SparkSession
) -> None:
    settings = ingested_once
    checkpoint = MasterDataset.of(settings).ingest_checkpoint
    recorded = json.loads((Path(checkpoint) / "input_topic_ids.json").read_text())
    assert sorted(recorded) == sorted(settings.topics.inputs())
    served = read_current(settings.batch_store)
    stored = files_under(Path(settings.master_location))
    # the broker's data lost and the same records sent again: the new topics' end
    # offsets equal the checkpoint's, so Spark alone would find nothing new to read
    delete_topics(settings.kafka, settings.topics.inputs())
    create_topics(settings)
    send_three_days(settings)

    with pytest.raises(TopicsRecreatedError) as refused:
        batch(spark, settings, D)
    said = str(refused.value)
    assert said.startswith(
        f"input topics were deleted and created again since the ingest checkpoint {checkpoint} "
        "first read them: "
    )
    for topic in settings.topics.inputs():
        assert f"{topic} (id {recorded[topic]}, now " in said
    assert files_under(Path(settings.master_location)) == stored
    assert read_current(settings.batch_store) == served

    send(settings, settings.topics.entries, [NEW_ENTRY])
    shown = reset_ingest_here(spark, settings)
    table = starts_table(settings, shown)
    assert table == {  # read to, Kafka keeps, starts at, why
        f"{settings.topics.entries}-0": "10 0..11 earliest topic created again (new id)",
        f"{settings.topics.exits}-0": "7 0..7 earliest topic created again (new id)",
        f"{settings.topics.registrations}-0": "5 0..5 earliest topic created again (new id)",
        **{f"{topic}-1": "0 0..0 earliest topic created again (new id)"
           for topic in settings.topics.inputs()},  # send() writes to partition 0
    }  # fmt: skip
    assert "whose batches are numbered from 1" in " ".join(shown.split())
    assert len(list(Path(checkpoint).parent.glob("ingest.replaced-*"))) == 1

    report = batch(spark, settings, D)  # ingest batch 1: every record again, and e7
    sent = len(ThreeDays.ENTRIES + ThreeDays.MALFORMED + ThreeDays.EXITS + ThreeDays.REGISTRATIONS)
    assert report.records_ingested == sent + 1
    written = partitions(spark, MasterDataset.of(settings).events(TOLL_ENTRY), EVENT_DATE)
    assert {batch_id for _, batch_id in written} == {0, 1}
    master = {
        event_type.name: read_events(
            spark, MasterDataset.of(settings), event_type, ALL_DAYS
        ).count()
        for event_type in EVENT_TYPES
    }
    assert master == {
        TOLL_ENTRY.name: 2 * len(ThreeDays.ENTRIES) + 1, TOLL_EXIT.name: 2 * len(ThreeDays.EXITS),
        VEHICLE_REGISTRATION.name: 2 * len(ThreeDays.REGISTRATIONS),
    }  # fmt: skip
    # every copy counts once; e7 (booth b3, plate P7: no exit, no registration) is new
    assert batch_rows(settings, "booth_stats") == [*ThreeDays.BOOTH_STATS, {
        "booth_id": "b3", "window_start": t("2026-01-05T14:00"), "window_end": t("2026-01-05T14:05"),
        "vehicle_count": 1, "total_toll": Decimal("1.00"),
        "first_entry_time": t("2026-01-05T14:00"), "last_entry_time": t("2026-01-05T14:00"),
    }]  # fmt: skip
    assert batch_rows(settings, "vehicle_trips") == ThreeDays.VEHICLE_TRIPS
    assert batch_rows(settings, "expired_registrations") == ThreeDays.EXPIRED_REGISTRATIONS
    assert batch_rows(settings, "diagnostics") == [*ThreeDays.DIAGNOSTICS,
        {"booth_id": "b3", "window_start": t("2026-01-05T14:00"), "reason": "missing_exit", "count": 1},
        {"booth_id": "b3", "window_start": t("2026-01-05T14:00"), "reason": "missing_registration", "count": 1},
    ]  # fmt: skip
    # dead letters are records, not events: each generation's are kept (3 dated <= D)
    assert len(batch_rows(settings, "dead_letters")) == 2 * 3
    assert batch(spark, settings, D).records_ingested == 0  # and nothing is read twice


@pytest.mark.slow
def test_records_deleted_before_the_ingest_read_them_stop_it_until_a_reset_ingest(
    ingested_once: Settings, spark: SparkSession
) -> None:
    settings = ingested_once  # toll.entries-0 read to offset 10
    lost = [
        (f"L{n}".encode(), entry_value(f"l{n}", "b8", f"L{n}", at, "1.00"), at)
        for n, at in enumerate(["2026-01-05T15:00:00.000Z", "2026-01-05T15:01:00.000Z",
                                "2026-01-05T15:02:00.000Z"])
    ]  # fmt: skip
    send(settings, settings.topics.entries, lost)
    # retention (or an operator) deletes offsets 10..12 before the next run reads them
    admin = admin_client(settings.kafka)
    try:
        admin.delete_records({TopicPartition(settings.topics.entries, 0): 13})
    finally:
        admin.close()
    send(settings, settings.topics.entries, [NEW_ENTRY])  # offset 13

    with pytest.raises(KafkaDataLossError):
        batch(spark, settings, D)
    stored = files_under(Path(settings.master_location))
    unanswered = run_cli(settings, "batch", "reset-ingest")  # no terminal to ask
    assert unanswered.returncode == 1
    assert "nothing changed: confirm with --yes" in " ".join(unanswered.stderr.split())
    assert files_under(Path(settings.master_location)) == stored
    reset = run_cli(settings, "batch", "reset-ingest", "--yes")
    assert reset.returncode == 0, reset.stderr
    table = starts_table(settings, reset.stdout)
    topics = settings.topics
    assert table == {  # read to, Kafka keeps, starts at, why
        f"{topics.entries}-0": "10 13..14 earliest 3 records deleted before they were read",
        f"{topics.exits}-0": "7 0..7 7 goes on where it was read to",
        f"{topics.registrations}-0": "5 0..5 5 goes on where it was read to",
        **{f"{topic}-1": "0 0..0 0 goes on where it was read to"
           for topic in settings.topics.inputs()},
    }  # fmt: skip

    report = batch(spark, settings, D)
    assert report.records_ingested == 1  # e7 alone: nothing stored is stored again
    assert (
        read_events(spark, MasterDataset.of(settings), TOLL_ENTRY, ALL_DAYS).count()
        == len(ThreeDays.ENTRIES) + 1
    )
    assert [row["booth_id"] for row in batch_rows(settings, "booth_stats")] == [
        "b1",
        "b1",
        "b2",
        "b3",
    ]


@pytest.mark.slow
def test_a_reset_ingest_deletes_what_a_batch_killed_while_writing_wrote(
    ingested_once: Settings, spark: SparkSession
) -> None:
    settings = ingested_once
    send(settings, settings.topics.entries, [NEW_ENTRY])
    kill_at_failpoint(settings, "ingest_before_log")  # batch 1 written, never logged
    written = partitions(spark, MasterDataset.of(settings).events(TOLL_ENTRY), EVENT_DATE)
    assert {batch_id for _, batch_id in written} == {0, 1}
    # then the broker's data is lost; the producers send e7 again
    delete_topics(settings.kafka, settings.topics.inputs())
    create_topics(settings)
    send(settings, settings.topics.entries, [NEW_ENTRY])

    said = " ".join(reset_ingest_here(spark, settings).split())
    assert "whose batches are numbered from 1" in said
    assert (
        "It deletes the partitions of ingest batch 1, which a run stopped while writing it" in said
    )
    written = partitions(spark, MasterDataset.of(settings).events(TOLL_ENTRY), EVENT_DATE)
    assert {batch_id for _, batch_id in written} == {0}

    report = batch(spark, settings, D)
    assert report.records_ingested == 1
    assert (
        read_events(spark, MasterDataset.of(settings), TOLL_ENTRY, ALL_DAYS).count()
        == len(ThreeDays.ENTRIES) + 1
    )
    written = partitions(spark, MasterDataset.of(settings).events(TOLL_ENTRY), EVENT_DATE)
    assert {batch_id for _, batch_id in written} == {0, 1}


def test_a_checkpoint_put_back_from_an_older_copy_is_set_aside_by_a_reset_ingest(
    ingested_once: Settings, spark: SparkSession, tmp_path: Path
) -> None:
    settings = ingested_once
    checkpoint = Path(MasterDataset.of(settings).ingest_checkpoint)
    shutil.copytree(checkpoint, tmp_path / "older")  # after ingest batch 0
    send(settings, settings.topics.entries, [NEW_ENTRY])
    batch(spark, settings, D)  # ingest batch 1: e7, to offset 11
    shutil.rmtree(checkpoint)
    shutil.copytree(tmp_path / "older", checkpoint)
    with pytest.raises(MasterDatasetError, match=rf"ingest checkpoint {checkpoint} has begun only up to 0"):  # fmt: skip
        batch(spark, settings, D)

    # batch 1 is in the ingest log: kept, and read from where it had read to
    reset = ingest_reset.plan(spark, settings)
    assert (reset.first_batch, reset.unfinished) == (2, [])
    starts = {(item.topic, item.partition): item.starts_at for item in reset.starts}
    assert starts[(settings.topics.entries, 0)] == 11
    assert reset.aside is not None
    ingest_reset.carry_out(spark, MasterDataset.of(settings), reset)
    assert (Path(reset.aside) / "commits" / "0").exists()  # the older copy, set aside

    assert batch(spark, settings, D).records_ingested == 0
    assert (
        read_events(spark, MasterDataset.of(settings), TOLL_ENTRY, ALL_DAYS).count()
        == len(ThreeDays.ENTRIES) + 1
    )


@pytest.mark.slow
def test_kill_9_between_an_ingest_write_and_its_commit_loses_and_doubles_nothing(
    kafka: Settings, spark: SparkSession, tmp_path: Path
) -> None:
    settings = isolated_settings(kafka, tmp_path)
    send_three_days(settings)
    kill_at_failpoint(settings, "ingest_before_commit")

    # micro-batch 0 wrote its partitions of the master dataset and logged them whole;
    # Spark never committed it
    assert last_ingest_batch(spark, MasterDataset.of(settings)) is None
    log = Path(f"{settings.master_location}/_ingest_log")
    assert sorted(path.name for path in log.glob("*.json")) == ["0.json"]
    written = partitions(spark, MasterDataset.of(settings).events(TOLL_ENTRY), EVENT_DATE)
    assert {batch_id for _, batch_id in written} == {0}
    assert read_current(settings.batch_store) is None

    report = batch(spark, settings, D)  # replays micro-batch 0 over its own partitions
    assert report.records_ingested == len(
        ThreeDays.ENTRIES + ThreeDays.MALFORMED + ThreeDays.EXITS + ThreeDays.REGISTRATIONS
    )
    assert sorted(path.name for path in log.glob("*.json")) == ["0.json"]  # logged again
    assert json.loads((log / "0.json").read_text())["records"] == len(
        ThreeDays.ENTRIES + ThreeDays.MALFORMED + ThreeDays.EXITS + ThreeDays.REGISTRATIONS
    )
    master = {
        event_type.name: read_events(
            spark, MasterDataset.of(settings), event_type, ALL_DAYS
        ).count()
        for event_type in EVENT_TYPES
    }
    assert master == {
        TOLL_ENTRY.name: len(ThreeDays.ENTRIES), TOLL_EXIT.name: len(ThreeDays.EXITS),
        VEHICLE_REGISTRATION.name: len(ThreeDays.REGISTRATIONS),
    }  # fmt: skip
    assert read_dead_letters(spark, MasterDataset.of(settings), ALL_DAYS).count() == len(
        ThreeDays.MALFORMED
    )
    assert batch_rows(settings, "booth_stats") == ThreeDays.BOOTH_STATS
    assert batch_rows(settings, "vehicle_trips") == ThreeDays.VEHICLE_TRIPS
    assert batch_rows(settings, "expired_registrations") == ThreeDays.EXPIRED_REGISTRATIONS
    assert batch_rows(settings, "diagnostics") == ThreeDays.DIAGNOSTICS
