"""Speed-store records: their JSON, and one compiled class for every micro-batch."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from decimal import Decimal

import pytest
from pyspark.sql import DataFrame, SparkSession

from shared.domain.views.vehicle_trips import SPEC as VEHICLE_TRIPS
from speed_layer.speed_store import speed_records

CODEGEN = {"spark.sql.codegen.wholeStage": "true", "spark.sql.codegen.factoryMode": "FALLBACK"}
"""Spark's defaults: whole-stage code generation, interpreted only where it fails."""


def trips(spark: SparkSession) -> DataFrame:
    return spark.createDataFrame(
        [("B01", "AB-123", datetime(2026, 1, 5, 6, 0), datetime(2026, 1, 5, 6, 12), 720.0)],
        "booth_id string, license_plate string, entry_time timestamp, "
        "exit_time timestamp, duration_seconds double",
    )


def compilations(spark: SparkSession) -> int:
    """Classes Janino has compiled in this JVM so far (Spark's codegen metric)."""
    metrics = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics  # type: ignore[union-attr]
    return int(metrics.METRIC_COMPILATION_TIME().getCount())


def test_a_candidate_record_is_keyed_by_the_view_key_and_its_rank_with_its_version_an_integer(
    spark: SparkSession,
) -> None:
    [record] = speed_records(VEHICLE_TRIPS, trips(spark), 7).collect()

    assert json.loads(record.key) == {
        "booth_id": "B01",
        "license_plate": "AB-123",
        "entry_time": "2026-01-05T06:00:00.000Z",
        "exit_time": "2026-01-05T06:12:00.000Z",  # a trip's candidates: one per exit
    }
    value = json.loads(record.value, parse_float=Decimal)
    assert value == {
        "booth_id": "B01",
        "license_plate": "AB-123",
        "entry_time": "2026-01-05T06:00:00.000Z",
        "exit_time": "2026-01-05T06:12:00.000Z",
        "duration_seconds": Decimal("720.0"),
        "version": 7,
    }
    assert type(value["version"]) is int  # 7, not 7.0 or "7"
    assert '"version":7}' in record.value


@pytest.fixture
def compiling(spark: SparkSession) -> Iterator[SparkSession]:
    """The session generating code, as the speed job's does (the unit tests' interprets)."""
    interpreted = {key: spark.conf.get(key) for key in CODEGEN}
    for key, value in CODEGEN.items():
        spark.conf.set(key, value)
    yield spark
    for key, value in interpreted.items():
        spark.conf.set(key, value)


def test_a_new_micro_batch_id_as_version_compiles_no_new_class(compiling: SparkSession) -> None:
    spark = compiling
    start = compilations(spark)
    rows = trips(spark)
    speed_records(VEHICLE_TRIPS, rows, 1).collect()  # compiles what the plan needs
    before = compilations(spark)
    assert before > start

    [record] = speed_records(VEHICLE_TRIPS, rows, 2).collect()

    assert json.loads(record.value)["version"] == 2
    assert compilations(spark) == before
