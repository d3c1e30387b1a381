"""The speed job drops duplicates exactly where the batch layer does (shared.domain.views.rules.COUNTED_INPUTS)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from shared.domain.events import EVENT_TYPES, EventType
from shared.domain.views.rules import COUNTED_INPUTS
from speed_layer.job import with_event_time


def streaming_events(spark: SparkSession, event_type: EventType) -> DataFrame:
    """A stream with the columns with_event_time reads (no data flows: only the plan counts)."""
    return (
        spark.readStream.format("rate")
        .load()
        .select(F.col("value").cast("string").alias("event_id"), F.col("timestamp"))
        .withColumnRenamed("timestamp", event_type.time_field)
    )


@pytest.mark.parametrize("event_type", EVENT_TYPES, ids=lambda event_type: event_type.name)
def test_only_counted_event_types_lose_their_duplicates(
    spark: SparkSession, event_type: EventType
) -> None:
    events = with_event_time(streaming_events(spark, event_type), event_type, timedelta(minutes=2))
    plan = events._jdf.queryExecution().logical().toString()
    assert "EventTimeWatermark" in plan
    assert ("DeduplicateWithinWatermark" in plan) == (event_type.name in COUNTED_INPUTS)
