"""The speed layer's booth lane: booth_stats and booth_rolling from one query.

One stateful operator keyed by booth (Spark's ``transformWithState``, event
time): the Java processor ``jvm/lambdaline/speed/BoothLane.java``. It counts a
booth's entries into buckets of gcd(``window``, ``rolling_slide``), and each
micro-batch writes the rows of every window its entries changed: a booth_stats
row is the sum of its window's buckets, a booth_rolling row the sum of its
hopping window's (the rules of ``shared.domain.views.booth_stats`` and
``booth_rolling``: counts and tolls add up; the equivalence tests hold the two
forms to each other). One query where two aggregations each needed their own
(Spark allows one streaming aggregation per query in update mode): one
micro-batch's fixed cost, and the entries decoded once, instead of two.
"""

from __future__ import annotations

from datetime import timedelta

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from shared.domain.view_specs import BOOTH_ROLLING, BOOTH_STATS, ViewSizes
from shared.domain.views import MONEY_TOTAL
from shared.platform.streaming import MicroBatchFunction
from shared.settings import Settings
from speed_layer.speed_store import (
    kafka_sink_options,
    speed_records,
    topic_records,
    write_records,
)

STATS, ROLLING = BOOTH_STATS.name, BOOTH_ROLLING.name
"""The kinds of row of :func:`booth_lane` (``BoothLane``' output kinds)."""


def _ms(duration: timedelta) -> int:
    return duration // timedelta(milliseconds=1)


def booth_lane(entries: DataFrame, sizes: ViewSizes) -> DataFrame:
    """``BoothLane`` over entries (watermarked on entry_time, without duplicates): ``kind``
    (:data:`STATS` or :data:`ROLLING`) and the columns of both views (booth_rolling's rows
    with null first and last entry times).

    The session must have ``speed_layer.lookups.operators_jar`` on its classpath.
    """
    spark = entries.sparkSession
    processor = spark.sparkContext._jvm.lambdaline.speed.BoothLane  # type: ignore[union-attr]
    inputs = entries.select(
        "booth_id",
        "entry_time",  # the watermark's column: Spark drops late entries before the operator
        F.unix_millis("entry_time").alias("time_ms"),
        (F.col("toll") * 100).cast("long").alias("toll_cents"),
    )
    found = DataFrame(
        processor.apply(
            inputs._jdf, _ms(sizes.window), _ms(sizes.rolling_window), _ms(sizes.rolling_slide)
        ),
        spark,
    )
    return found.select(
        "kind",
        "booth_id",
        F.timestamp_millis("window_start_ms").alias("window_start"),
        F.timestamp_millis("window_end_ms").alias("window_end"),
        "vehicle_count",
        (F.col("toll_cents").cast("decimal(20,0)") / 100).cast(MONEY_TOTAL).alias("total_toll"),
        F.timestamp_millis("first_ms").alias("first_entry_time"),
        F.timestamp_millis("last_ms").alias("last_entry_time"),
    )


def publish_booths(settings: Settings) -> MicroBatchFunction:
    """foreachBatch: the changed booth_stats and booth_rolling rows to their speed topics,
    in one Kafka write."""
    options = kafka_sink_options(settings.kafka)
    topics = {STATS: settings.topics.speed(STATS), ROLLING: settings.topics.speed(ROLLING)}

    def publish(rows: DataFrame, batch_id: int) -> None:
        rows.persist()  # two selects read it below: compute it once
        try:
            write_records(
                [
                    topic_records(
                        topics[view.name],
                        speed_records(view, rows.where(F.col("kind") == view.name), batch_id),
                    )
                    for view in (BOOTH_STATS, BOOTH_ROLLING)
                ],
                options,
            )
        finally:
            rows.unpersist()

    return publish
