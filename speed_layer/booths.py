"""The speed layer's booth lane: the tumbling and hopping booth counts from one query.

One stateful operator keyed by booth (Spark's ``transformWithState``, event
time): the Java processor ``jvm/lambdaline/speed/BoothLane.java``. It counts a
booth's entries into buckets of gcd(``window``, ``rolling_slide``), and each
micro-batch writes the rows of every window its entries changed: a tumbling
row is the sum of its window's buckets, a hopping row the sum of its hopping
window's (the rules of the view functions whose speed plan is ``Lane.BOOTHS``:
counts and tolls add up; the equivalence tests hold the two forms to each
other). One query where two aggregations each needed their own (Spark allows
one streaming aggregation per query in update mode): one micro-batch's fixed
cost, and the entries decoded once, instead of two. Its rows' ``kind`` is the
view they are of.
"""

from __future__ import annotations

from datetime import timedelta

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from shared.domain.views.rules import MONEY_TOTAL
from shared.domain.views.view import Lane, ViewSizes
from shared.platform.streaming import MicroBatchFunction
from shared.settings import Settings
from shared.settings.views import REGISTERED
from speed_layer.speed_store import (
    kafka_sink_options,
    speed_records,
    topic_records,
    write_records,
)

BOOTH_LANE_VIEWS = tuple(view.spec for view in REGISTERED if view.speed.lane is Lane.BOOTHS)
"""The views the booth lane writes: the kinds of its rows (``BoothLane``' output kinds)."""


def _ms(duration: timedelta) -> int:
    return duration // timedelta(milliseconds=1)


def booth_lane(entries: DataFrame, sizes: ViewSizes) -> DataFrame:
    """``BoothLane`` over entries (watermarked on entry_time, without duplicates): ``kind``
    (a view's name) and the columns of both views (a hopping row's first and last entry
    times null).

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
            inputs._jdf,
            *(_ms(sizes[name]) for name in ("window", "rolling_window", "rolling_slide")),
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
    """foreachBatch: the changed rows of the booth lane's views to their speed topics, in one
    Kafka write."""
    options = kafka_sink_options(settings.kafka)

    def publish(rows: DataFrame, batch_id: int) -> None:
        rows.persist()  # two selects read it below: compute it once
        try:
            write_records(
                [
                    topic_records(
                        settings.speed_topics.speed(view.name),
                        speed_records(view, rows.where(F.col("kind") == view.name), batch_id),
                    )
                    for view in BOOTH_LANE_VIEWS
                ],
                options,
            )
        finally:
            rows.unpersist()

    return publish
