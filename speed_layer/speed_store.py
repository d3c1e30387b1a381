"""Writers of the speed layer: the speed store (``speed.<view>``) and ``dead.letters``.

A speed-store record is keyed by the view key (its JSON; a candidate's by the
view key and its rank) and its value holds the view's columns (and a
candidate's hidden ones: :mod:`shared.domain.views.spec`), times as ISO-8601
UTC, plus a ``version`` that orders the records of one key: the id of the
micro-batch that wrote it, where a query writes through foreachBatch, or the
operator's own (``speed_layer.operator``). Spark may replay a micro-batch after a
failure; the replay recomputes the same rows from the same checkpointed state,
so it writes the same records again, and the compacted topic keeps one per key:
a restart never double counts.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.readwriter import DataStreamWriter

from shared.domain.topics import DERIVED_QUERY_PREFIX
from shared.domain.views.spec import ViewSpec
from shared.platform.kafka_security import spark_kafka_options
from shared.platform.streaming import MicroBatchFunction, brief_java_errors
from shared.settings import KafkaSettings, Settings
from speed_layer.checkpoint import checkpoint_dir

JSON_OPTIONS = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'", "ignoreNullFields": "false"}
"""Times as ISO-8601 UTC with milliseconds (the session time zone is UTC)."""


def kafka_sink_options(kafka: KafkaSettings) -> dict[str, str]:
    """Spark's Kafka sink: a record counts as written once every in-sync replica has it
    (``acks=all``; with ``min.insync.replicas`` 2 a broker may die without losing it), and
    a retried send is not written twice (idempotence). Both are the Java producer's
    defaults; they are stated because the speed store's correctness rests on them."""
    return {
        **spark_kafka_options(kafka),
        "kafka.acks": "all",
        "kafka.enable.idempotence": "true",
        "kafka.compression.type": "lz4",
        "kafka.linger.ms": "5",
    }


def _json(columns: list[Column]) -> Column:
    return F.to_json(F.struct(*columns), JSON_OPTIONS)


VERSION_TYPE = "decimal(20,0)"
"""A micro-batch id's type as a record's ``version``: a JSON number like a ``long``, but
a constant of a decimal type is a reference in Spark's generated code where a
``long`` constant is written into it. With a ``long`` each micro-batch's projection
was a new class, compiled (on the driver and again in a task) and kept in Spark's
cache of compiled classes, pushing the classes that do not change out of it."""


def _column(name: str, columns: Mapping[str, Column] | None) -> Column:
    return F.col(name) if columns is None else columns[name].alias(name)


def record_key(view: ViewSpec, columns: Mapping[str, Column] | None = None) -> Column:
    """A speed record's key: the JSON of the row's ``record_key`` columns (``columns``: each
    by name, where they are not the frame's own)."""
    return _json([_column(name, columns) for name in view.record_key])


def record_value(
    view: ViewSpec, version: Column, columns: Mapping[str, Column] | None = None
) -> Column:
    """A speed record's value: the JSON of the row's ``record_columns`` and its version."""
    return _json(
        [*(_column(c.name, columns) for c in view.record_columns), version.alias("version")]
    )


def speed_records(view: ViewSpec, rows: DataFrame, batch_id: int) -> DataFrame:
    """The Kafka records (key, value) of one micro-batch's rows of a view, the micro-batch's
    id their version."""
    version = F.lit(batch_id).cast(VERSION_TYPE)
    return rows.select(record_key(view).alias("key"), record_value(view, version).alias("value"))


def publish_view(view: ViewSpec, settings: Settings) -> MicroBatchFunction:
    """A foreachBatch function writing a view's changed rows to ``speed.<view>``."""
    topic = settings.speed_topics.speed(view.name)
    options = kafka_sink_options(settings.kafka)

    def publish(rows: DataFrame, batch_id: int) -> None:
        speed_records(view, rows, batch_id).write.format("kafka").options(**options).option(
            "topic", topic
        ).save()

    return publish


def view_writer(
    view: ViewSpec, rows: DataFrame, settings: Settings, output_mode: str, derived: bool = False
) -> DataStreamWriter:
    """A streaming writer of a view to the speed store (not started; add the trigger).

    ``derived``: the rows come from the speed layer's own internal topic, not
    from the input, so the query's name starts with ``DERIVED_QUERY_PREFIX``
    (its watermark is left out of the speed watermark).
    """
    name = f"{DERIVED_QUERY_PREFIX}{view.name}" if derived else f"speed.{view.name}"
    return (
        rows.writeStream.queryName(name)
        .outputMode(output_mode)
        .foreachBatch(brief_java_errors(publish_view(view, settings)))
        .option("checkpointLocation", str(checkpoint_dir(settings) / view.name))
    )


def dead_letter_value() -> Column:
    """A ``dead.letters`` record's value, of a dead letter's columns
    (``shared.domain.validation.DEAD_LETTER_SCHEMA``): its source, its reason, and the
    bounded raw value (``shared.domain.validation.bounded_raw``) as text when it is UTF-8
    and always as base64, with the full lengths and SHA-256 of the key and the value, so
    a record's size is bounded whatever the input was. The record's key is the original
    key's bounded prefix."""
    return _json(
        [
            F.col("source_topic"),
            F.col("source_partition"),
            F.col("source_offset"),
            F.col("source_timestamp"),
            F.col("reason"),
            F.col("detail"),
            F.when(
                F.is_valid_utf8(F.col("value").cast("string")), F.col("value").cast("string")
            ).alias("value"),
            F.base64(F.col("value")).alias("value_base64"),
            F.col("value_length"),
            F.col("value_sha256"),
            F.col("key_length"),
            F.col("key_sha256"),
        ]
    )
