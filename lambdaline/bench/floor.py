"""The floor job: the least a Structured Streaming job over the same input can do.

Spark's Kafka source reads the three input topics, ``from_json`` parses each
value's event time, a 5-minute tumbling count per topic (under the speed
layer's watermark) is kept in state, and each changed count goes to a Kafka
topic: one stateful operator, one shuffle, no validation and no joins, on the
speed job's Spark session (its state store, its tuning) and its fastest
trigger. ``lambdaline bench soak`` runs it at the same input rate as the speed
job and sets the CPU each spends per event side by side: what the speed job
spends above the floor is what its rules cost.

Its micro-batches are published as the speed job's are
(``speed_layer.progress``), to :data:`FLOOR_PROGRESS_TOPIC`.
"""

from __future__ import annotations

import contextlib
import dataclasses

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from shared.platform.streaming import kafka_stream, stop_query, stop_requests, wait_for
from shared.settings import Settings
from speed_layer.job import speed_spark_session
from speed_layer.progress import ProgressPublisher, listening
from speed_layer.speed_store import kafka_sink_options

FLOOR_TOPIC = "bench.floor.counts"
FLOOR_PROGRESS_TOPIC = "bench.floor.progress"
FLOOR_QUERY = "bench.floor"
EVENT_TIMES = "entry_time timestamp, exit_time timestamp, registration_time timestamp"
"""The one thing the floor parses: an event's time, whichever type it is."""


def floor_settings(settings: Settings) -> Settings:
    """The settings the floor job runs with: its progress to a topic of its own."""
    return settings.updated(
        topics=dataclasses.replace(settings.topics, speed_progress=FLOOR_PROGRESS_TOPIC)
    )


def run_floor(settings: Settings) -> None:
    """Run the floor job until SIGINT/SIGTERM."""
    settings = floor_settings(settings)
    spark: SparkSession = speed_spark_session(settings, "lambdaline-bench-floor")
    try:
        parsed = (
            kafka_stream(spark, settings.kafka, settings.topics.inputs())
            # at the soak's rate from now on, not through the backlog the soak left
            .option("startingOffsets", "latest")
            .load()
            .select("topic", F.from_json(F.col("value").cast("string"), EVENT_TIMES).alias("e"))
            .select(
                "topic",
                F.coalesce("e.entry_time", "e.exit_time", "e.registration_time").alias("at"),
            )
        )
        delay = f"{int(settings.views.watermark.total_seconds())} seconds"
        counts = (
            parsed.withWatermark("at", delay)
            .groupBy(F.window("at", "5 minutes"), "topic")
            .count()
            .select(F.to_json(F.struct("window", "topic", "count")).alias("value"))
        )
        writer = (
            counts.writeStream.queryName(FLOOR_QUERY)
            .outputMode("update")
            .format("kafka")
            .options(**kafka_sink_options(settings.kafka))
            .option("topic", FLOOR_TOPIC)
            .option("checkpointLocation", str(settings.checkpoints_dir / "bench-floor"))
            .trigger(processingTime=f"{settings.speed.trigger.total_seconds()} seconds")
        )
        with (
            contextlib.closing(ProgressPublisher(settings)) as publisher,
            listening(spark, publisher),
            stop_requests() as stop,
        ):
            query = writer.start()
            try:
                wait_for([query], stop)
            finally:
                if query.isActive:
                    stop_query(query)
                publisher.wait_for_terminations([str(query.id)])
    finally:
        spark.stop()
