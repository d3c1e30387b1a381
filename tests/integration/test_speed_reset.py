"""Starting the speed layer over (`lambdaline speed reset`) on the real broker and real Spark,
with the API's speed consumer following the store throughout."""

from __future__ import annotations

import json
import shutil
import time
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from serving.speed_consumer import SpeedConsumer
from shared.platform.kafka_admin import records_written
from shared.platform.speed_tables import SpeedTables
from shared.platform.streaming import KafkaDataLossError
from shared.platform.topic_admin import create_topics, delete_topics
from shared.settings import Settings
from speed_layer import job
from speed_layer.checkpoint import (
    ROCKSDB_PROVIDER,
    STATE_LAYOUT,
    STATE_STORE_PROVIDER_CONF,
    CheckpointError,
    checkpoint_dir,
    claimed_checkpoint,
    reset,
)
from tests.integration.helpers import (
    isolated_settings,
    read_all,
    run_cli,
    send,
    speed_view,
)
from tests.scenarios import OneDay, entry_value


def state_store_provider(folder: Path) -> str | None:
    """The state store provider a query's checkpoint was made with (None: no micro-batch
    logged yet, or Spark's default, which it does not record): Spark's offset log
    ``offsets/<batch>`` is a version line, then the batch's metadata JSON, whose
    ``conf`` keeps the settings a checkpoint fixes."""
    logged = [path for path in (folder / "offsets").glob("[0-9]*") if path.name.isdigit()]
    if not logged:
        return None
    latest = max(logged, key=lambda path: int(path.name))
    conf = json.loads(latest.read_text(encoding="utf-8").splitlines()[1]).get("conf", {})
    provider = conf.get(STATE_STORE_PROVIDER_CONF)
    return str(provider) if provider is not None else None


DEFAULT_SPANS = {"rolling_window": "1h", "rolling_slide": "5m", "session_gap": "30m"}
"""The view settings of the hopping windows and visits, as their defaults label them."""

pytestmark = pytest.mark.integration

Row = tuple[str, datetime, datetime, int, Decimal]

# booth_stats of OneDay.ENTRIES by hand (e2 is sent twice and counts once), as the API holds them
FIVE_MINUTE_ROWS: list[Row] = [
    ("b1", datetime(2026, 1, 5, 10, 0), datetime(2026, 1, 5, 10, 5), 2, Decimal("6.50")),
    ("b1", datetime(2026, 1, 5, 10, 5), datetime(2026, 1, 5, 10, 10), 1, Decimal("5.75")),
    ("b2", datetime(2026, 1, 5, 10, 0), datetime(2026, 1, 5, 10, 5), 1, Decimal("7.25")),
]
TEN_MINUTE_ROWS: list[Row] = [
    ("b1", datetime(2026, 1, 5, 10, 0), datetime(2026, 1, 5, 10, 10), 3, Decimal("12.25")),
    ("b2", datetime(2026, 1, 5, 10, 0), datetime(2026, 1, 5, 10, 10), 1, Decimal("7.25")),
]


def held_rows(tables: SpeedTables) -> list[Row]:
    cursor = tables.cursor()
    try:
        return cursor.execute(
            "SELECT booth_id, window_start, window_end, vehicle_count, total_toll "
            "FROM booth_stats ORDER BY booth_id, window_start"
        ).fetchall()
    finally:
        cursor.close()


def wait_for_rows(tables: SpeedTables, expected: list[Row], timeout_s: float = 60) -> list[Row]:
    deadline = time.monotonic() + timeout_s
    while (rows := held_rows(tables)) != expected and time.monotonic() < deadline:
        time.sleep(0.2)
    return rows


@pytest.mark.slow
def test_a_reset_starts_the_speed_layer_over_with_a_new_window_and_the_api_follows(
    kafka: Settings, spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> None:
    settings = isolated_settings(kafka, tmp_path_factory.mktemp("reset"))
    send(settings, settings.topics.entries, OneDay.ENTRIES + OneDay.MALFORMED)
    job.run(spark, settings, available_now=True)
    tables = SpeedTables()
    consumer = SpeedConsumer(settings, tables)  # what each API process runs
    consumer.start()
    try:
        assert consumer.wait_caught_up(60), consumer.error
        assert held_rows(tables) == FIVE_MINUTE_ROWS
        assert tables.watermark is not None
        assert tables.view_settings == [
            {"window": "5m", "max_trip": "1h", "registration_lookback": "400d", **DEFAULT_SPANS}
        ]
        dead_letters = len(read_all(settings, settings.topics.dead_letters))
        assert dead_letters == len(OneDay.MALFORMED)

        # deleting the checkpoint alone: the new job's micro-batch ids would start at 0
        # again under rows of higher ids, so `speed run` refuses before Spark starts
        shutil.rmtree(checkpoint_dir(settings))
        refused = run_cli(settings, "speed", "run", "--available-now")
        assert refused.returncode == 1, refused.stderr
        said = " ".join(refused.stderr.split())
        assert f"error: the speed checkpoint {checkpoint_dir(settings)} is new" in said
        assert "Start the speed layer over with `lambdaline speed reset`" in said

        reset = run_cli(settings, "speed", "reset", "--yes")
        assert reset.returncode == 0, reset.stderr
        assert "the speed-store topics are empty" in " ".join(reset.stdout.split())
        assert records_written(settings.kafka, settings.topics.speed_store()) == dict.fromkeys(
            settings.topics.speed_store(), 0
        )
        assert not checkpoint_dir(settings).exists()
        assert len(read_all(settings, settings.topics.entries)) == len(
            OneDay.ENTRIES + OneDay.MALFORMED
        )
        assert len(read_all(settings, settings.topics.dead_letters)) == dead_letters  # kept

        # the API empties its tables once it sees the topics are new
        assert wait_for_rows(tables, []) == []
        deadline = time.monotonic() + 30
        while tables.watermark is not None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert tables.watermark is None and tables.view_settings == []

        ten_minutes = settings.updated(window=timedelta(minutes=10))
        job.run(spark, ten_minutes, available_now=True)
        # the new job's micro-batch ids start again at 0, below the old rows' ids:
        # read from the new topics' start, its rows are all the API holds
        assert wait_for_rows(tables, TEN_MINUTE_ROWS) == TEN_MINUTE_ROWS
        assert consumer.error is None
        # what /v1/status holds up to an API still running with window=5m
        deadline = time.monotonic() + 30
        while not tables.view_settings and time.monotonic() < deadline:
            time.sleep(0.2)
        assert tables.view_settings == [
            {"window": "10m", "max_trip": "1h", "registration_lookback": "400d", **DEFAULT_SPANS}
        ]
        # dead.letters is an append-only log the reset keeps: the new job, reading the
        # input from its start, writes the same dead letters again
        assert len(read_all(settings, settings.topics.dead_letters)) == 2 * dead_letters
    finally:
        consumer.stop()


def test_input_topics_created_again_stop_the_job_until_a_reset(
    kafka: Settings, spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> None:
    settings = isolated_settings(kafka, tmp_path_factory.mktemp("lost"))
    send(settings, settings.topics.entries, OneDay.ENTRIES)
    job.run(spark, settings, available_now=True)
    # the broker's data lost: the topics come back empty and get one entry
    delete_topics(settings.kafka, settings.topics.inputs())
    create_topics(settings)
    again = "2026-01-05T11:00:00.000Z"
    send(
        settings,
        settings.topics.entries,
        [(b"P7", entry_value("n1", "b7", "P7", again, "3.00"), again)],
    )

    with pytest.raises(
        KafkaDataLossError, match=r"Partition .*toll\.entries-0 offset was changed from 5 to 1"
    ):
        job.run(spark, settings, available_now=True)  # Spark's failOnDataLoss
    reset(settings)
    job.run(spark, settings, available_now=True)
    stats = speed_view(settings, "booth_stats")
    assert [
        (row["booth_id"], row["window_start"], row["vehicle_count"]) for row in stats.values()
    ] == [("b7", "2026-01-05T11:00:00.000Z", 1)]


def test_input_topics_created_again_past_the_old_offsets_are_refused_not_skipped(
    kafka: Settings, spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> None:
    settings = isolated_settings(kafka, tmp_path_factory.mktemp("recreated"))
    send(settings, settings.topics.entries, OneDay.ENTRIES)  # 5 records
    with claimed_checkpoint(settings):  # as `speed run` holds it
        job.run(spark, settings, available_now=True)
    recorded = json.loads((checkpoint_dir(settings) / "input_topic_ids.json").read_text())
    assert sorted(recorded) == sorted(settings.topics.inputs())
    # the topics created again and given 8 entries, more than the checkpoint read:
    # Spark alone would go on from offset 5 and count the last 3
    delete_topics(settings.kafka, settings.topics.inputs())
    create_topics(settings)
    times = [f"2026-01-05T11:0{minute}:00.000Z" for minute in range(8)]
    send(settings, settings.topics.entries, [
        (f"Q{n}".encode(), entry_value(f"n{n}", "b7", f"Q{n}", at, "3.00"), at)
        for n, at in enumerate(times)
    ])  # fmt: skip

    refused = run_cli(settings, "speed", "run", "--available-now")
    assert refused.returncode == 1, refused.stderr
    said = " ".join(refused.stderr.split())
    entries = settings.topics.entries
    assert (
        f"error: input topics were deleted and created again since the speed checkpoint "
        f"{checkpoint_dir(settings)} first read them: "
    ) in said
    assert f"{entries} (id {recorded[entries]}, now " in said
    assert "`lambdaline speed reset` starts the speed layer over" in said

    reset(settings)
    job.run(spark, settings, available_now=True)
    stats = speed_view(settings, "booth_stats")
    assert sorted(
        (row["booth_id"], row["window_start"], row["vehicle_count"]) for row in stats.values()
    ) == [("b7", "2026-01-05T11:00:00.000Z", 5), ("b7", "2026-01-05T11:05:00.000Z", 3)]


HDFS_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"


def _hdfs_checkpoint(spark: SparkSession, folder: Path) -> None:
    """A query's checkpoint made with Spark's HDFS-backed state store, as a speed job
    made before it chose RocksDB: one micro-batch of a streaming count."""
    spark.conf.set(STATE_STORE_PROVIDER_CONF, HDFS_PROVIDER)
    try:
        counts = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 5).load()
        query = (
            counts.groupBy((counts.value % 2).alias("parity"))
            .count()
            .writeStream.format("noop")
            .outputMode("update")
            .option("checkpointLocation", str(folder))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
    finally:
        spark.conf.set(STATE_STORE_PROVIDER_CONF, ROCKSDB_PROVIDER)


def test_a_checkpoint_of_another_state_store_or_layout_is_refused_until_a_reset(
    kafka: Settings, spark: SparkSession, tmp_path: Path
) -> None:
    settings = isolated_settings(kafka, tmp_path)
    send(settings, settings.topics.entries, OneDay.ENTRIES)
    # the operator runs on RocksDB only: another store is refused at once
    spark.conf.set(STATE_STORE_PROVIDER_CONF, HDFS_PROVIDER)
    try:
        with pytest.raises(CheckpointError, match="transformWithState, which runs on RocksDB only"):
            job.run(spark, settings, available_now=True)
    finally:
        spark.conf.set(STATE_STORE_PROVIDER_CONF, ROCKSDB_PROVIDER)
    assert not any(checkpoint_dir(settings).glob("*/offsets"))  # no query started

    # a checkpoint an earlier speed job made: an aggregation's, with the HDFS-backed
    # store, and no record of how it keeps its state
    _hdfs_checkpoint(spark, checkpoint_dir(settings) / "booth_stats")
    assert state_store_provider(checkpoint_dir(settings) / "booth_stats") == HDFS_PROVIDER
    refused = run_cli(settings, "speed", "run", "--available-now")
    assert refused.returncode == 1
    message = " ".join(refused.stderr.split())
    assert (
        f"error: the speed checkpoint {checkpoint_dir(settings)} keeps its state as "
        f"stream-stream joins and an aggregation a view, but the speed job now keeps it as "
        f"{STATE_LAYOUT}"
    ) in message
    assert "Start the speed layer over with `lambdaline speed reset`" in message

    assert run_cli(settings, "speed", "reset", "--yes").returncode == 0
    job.run(spark, settings, available_now=True)
    assert state_store_provider(checkpoint_dir(settings) / "views") == ROCKSDB_PROVIDER
    assert not (checkpoint_dir(settings) / "booth_stats").exists()
    assert sorted(row["vehicle_count"] for row in speed_view(settings, "booth_stats").values()) == [
        1, 1, 2,
    ]  # fmt: skip
