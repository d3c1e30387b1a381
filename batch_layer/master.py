"""The master dataset: every input record, immutable, append-only, in Parquet.

Layout under its location (:class:`MasterDataset`: a local path or any Hadoop URL)::

    topic=toll.entries/event_date=2026-11-21/ingest_batch=3/part-*.parquet
    topic=toll.exits/...
    topic=vehicle.registrations/...
    dead_letters/record_date=2026-11-21/ingest_batch=3/part-*.parquet
    _ingest_log/3.json            batch 3 is stored whole, and what it had read to
                                  (batch_layer.ingest_log)
    _checkpoints/ingest/          the ingest query's Structured Streaming checkpoint,
                                  with input_topic_ids.json (shared.platform.topic_ids) and,
                                  after `batch reset-ingest`, ingest_start.json

Every valid record is stored raw (``key``, ``value``, source topic, partition,
offset and record timestamp) together with the fields the shared validation
decoded from it, so a recompute reads typed columns instead of parsing JSON
again; the raw bytes stay for any future re-derivation. Records that fail
validation go to ``dead_letters`` with their reason, dated by their record
timestamp (an invalid record may have no event time).

Exactly once: :func:`ingest` is a Structured Streaming query with
``Trigger.AvailableNow`` and its own checkpoint. Each micro-batch writes only
the ``ingest_batch=<batch id>`` partitions, with dynamic partition overwrite,
so a micro-batch replayed after a crash (Spark replays the same offsets)
replaces its own earlier attempt instead of adding to it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import date

from py4j.protocol import Py4JJavaError
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from batch_layer import hadoop_files, ingest_log
from shared.domain.events import EVENT_TYPES, EventType
from shared.domain.topics import Topics
from shared.domain.validation import (
    DEAD_LETTER_SCHEMA,
    RAW_COLUMNS,
    SOURCE_COLUMNS,
    classify_records,
    split_classified,
)
from shared.platform import topic_ids
from shared.platform.failpoints import failpoint
from shared.platform.logs import log_event
from shared.platform.streaming import (
    brief_java_errors,
    kafka_stream,
    raise_if_failed,
    stop_query,
    stop_requests,
    wait_for,
)
from shared.settings import Settings, ViewSettings

logger = logging.getLogger("lambdaline.batch")

EVENT_DATE = "event_date"
RECORD_DATE = "record_date"
INGEST_BATCH = "ingest_batch"
DEAD_LETTERS_DIR = "dead_letters"


@dataclass(frozen=True)
class MasterDataset:
    """Where the master dataset and its parts live: what the functions here read of the
    settings (``Settings.master_location`` and the input topics' names)."""

    location: str
    """A path or a Hadoop URL, no trailing ``/``."""
    topics: Topics

    @classmethod
    def of(cls, settings: Settings) -> MasterDataset:
        return cls(settings.master_location, settings.topics)

    def events(self, event_type: EventType) -> str:
        """Where the valid events of one type live."""
        return f"{self.location}/topic={self.topics.of(event_type)}"

    @property
    def dead_letters(self) -> str:
        return f"{self.location}/{DEAD_LETTERS_DIR}"

    @property
    def ingest_checkpoint(self) -> str:
        return f"{self.location}/_checkpoints/ingest"


def _source_fields() -> list[T.StructField]:
    by_name = {column.name: column for column in DEAD_LETTER_SCHEMA.fields}
    return [by_name[name] for name in (*SOURCE_COLUMNS, *RAW_COLUMNS)]


def master_schema(event_type: EventType) -> T.StructType:
    """Schema of the master dataset of one event type, partition columns included."""
    return T.StructType(
        [
            *event_type.spark_schema.fields,
            *_source_fields(),
            T.StructField(EVENT_DATE, T.DateType()),
            T.StructField(INGEST_BATCH, T.LongType()),
        ]
    )


MASTER_DEAD_LETTER_SCHEMA = T.StructType(
    [
        *DEAD_LETTER_SCHEMA.fields,
        T.StructField(RECORD_DATE, T.DateType()),
        T.StructField(INGEST_BATCH, T.LongType()),
    ]
)


@dataclass(frozen=True)
class IngestedBatch:
    """What one ingest micro-batch added to the master dataset."""

    batch_id: int
    records: int
    dead_letters: int


class MasterDatasetError(Exception):
    """The master dataset's location cannot be used; the message says why."""


def require_master_location(spark: SparkSession, location: str) -> None:
    """Raise :class:`MasterDatasetError` unless Spark can open ``location``'s file system.

    Checked before the ingest starts: otherwise a URL whose file system Spark
    lacks (``s3a://`` without hadoop-aws) or cannot reach fails inside the
    streaming query, as a Java stack trace of some 280 lines.
    """
    try:
        fs, path = hadoop_files.filesystem(spark, location)
        fs.exists(path)
    except Py4JJavaError as error:
        cause = error.java_exception
        while cause.getCause() is not None:
            cause = cause.getCause()
        reason = f"{cause.getClass().getSimpleName()}: {cause.getMessage()}"
        hint = (
            "; its file system's jars must be on Spark's classpath (e.g. hadoop-aws for s3a://)"
            if "ClassNotFoundException" in reason or "No FileSystem for scheme" in reason
            else ""
        )
        raise MasterDatasetError(
            f"cannot use the master dataset at {location} (master_dir): {reason}{hint}"
        ) from None


def _partition_value(path: str, column: str) -> str:
    for part in path.split("/"):
        if part.startswith(f"{column}="):
            return part.split("=", 1)[1]
    raise ValueError(f"{path} has no {column}= part")


def partitions(spark: SparkSession, location: str, date_column: str) -> set[tuple[date, int]]:
    """The (date, ingest batch) partitions present under one master-dataset location."""
    found = set()
    for path in hadoop_files.glob(spark, f"{location}/{date_column}=*/{INGEST_BATCH}=*"):
        day = date.fromisoformat(_partition_value(path, date_column))
        found.add((day, int(_partition_value(path, INGEST_BATCH))))
    return found


START_FILE = "ingest_start.json"
"""In the ingest checkpoint, written by ``batch reset-ingest``: see :class:`IngestStart`."""


@dataclass(frozen=True)
class IngestStart:
    """Where an ingest checkpoint starts: the master dataset's ``ingest_batch`` of its
    micro-batch 0, and Spark's ``startingOffsets`` for it (None: the earliest).

    A checkpoint made by ``batch run`` starts at 0 and the earliest offsets; one
    made by ``batch reset-ingest`` (the input topics created again, or records
    lost) goes on after the batches the master dataset holds, from the offsets
    the old checkpoint had read to where Kafka still has them.
    """

    first_batch: int = 0
    starting_offsets: dict[str, dict[str, int]] | None = None

    def render(self) -> str:
        document = {"first_batch": self.first_batch, "starting_offsets": self.starting_offsets}
        return json.dumps(document, indent=2, sort_keys=True) + "\n"


def ingest_start(spark: SparkSession, master: MasterDataset) -> IngestStart:
    """The ingest checkpoint's :class:`IngestStart` (the default if it has none)."""
    location = f"{master.ingest_checkpoint}/{START_FILE}"
    text = hadoop_files.read_text(spark, location)
    if text is None:
        return IngestStart()
    try:
        document = json.loads(text)
        first = document["first_batch"]
        offsets = document["starting_offsets"]
        if not isinstance(first, int) or first < 0:
            raise ValueError(f"first_batch is {first!r}")
        if offsets is not None and not all(
            isinstance(numbers, dict) and all(isinstance(n, int) for n in numbers.values())
            for numbers in offsets.values()
        ):
            raise ValueError(f"starting_offsets is {offsets!r}")
    except (ValueError, TypeError, KeyError, AttributeError) as error:
        raise MasterDatasetError(
            f"cannot read {location} ({type(error).__name__}: {error}); `lambdaline batch "
            "reset-ingest` wrote it, and the ingest cannot number its batches without it"
        ) from None
    return IngestStart(first, offsets)


def last_ingest_batch(spark: SparkSession, master: MasterDataset) -> int | None:
    """The newest ingest batch the checkpoint has committed (the master dataset's
    numbering), or None."""
    return _newest_in_checkpoint(spark, master, "commits")


def newest_ingest_batch_begun(spark: SparkSession, master: MasterDataset) -> int | None:
    """The newest ingest batch the checkpoint has begun (logged its offsets for), or None.

    Spark logs a micro-batch's offsets before it runs it, so no partition of the
    master dataset can have a newer ``ingest_batch`` than this.
    """
    return _newest_in_checkpoint(spark, master, "offsets")


def _newest_in_checkpoint(spark: SparkSession, master: MasterDataset, log: str) -> int | None:
    """The newest batch in one of the ingest checkpoint's logs (``offsets``, ``commits``),
    numbered as the master dataset numbers them: after a reset, the batches stored
    before it count as in that log."""
    newest = newest_spark_batch(spark, master, log)
    first = ingest_start(spark, master).first_batch
    if newest is None:
        return first - 1 if first else None
    return first + newest


def newest_spark_batch(spark: SparkSession, master: MasterDataset, log: str) -> int | None:
    """The newest micro-batch id (Spark's, from 0) in one of the ingest checkpoint's logs."""
    entries = hadoop_files.glob(spark, f"{master.ingest_checkpoint}/{log}/[0-9]*")
    ids = [int(path.rsplit("/", 1)[1]) for path in entries]
    return max(ids) if ids else None


def check_ingest_checkpoint(master: MasterDataset, stored: int | None, begun: int | None) -> None:
    """Raise :class:`MasterDatasetError` if the master dataset holds an ingest batch
    (newest: ``stored``) that its checkpoint never began (newest: ``begun``).

    That is a checkpoint deleted or put back from an older copy. Spark would then
    read Kafka again from the checkpoint's offsets (from the earliest, if there is
    none) and number the micro-batches from there, so records already stored
    would be stored a second time, and partitions of a stored batch id
    overwritten by other records; the next run's late-data check, which compares
    batch ids, would go wrong as well.
    """
    if stored is None or (begun is not None and stored <= begun):
        return
    checkpoint = master.ingest_checkpoint
    has = "has begun none" if begun is None else f"has begun only up to {begun}"
    raise MasterDatasetError(
        f"the master dataset at {master.location} holds ingest micro-batches up to "
        f"{stored}, but its ingest checkpoint {checkpoint} {has}: was the checkpoint deleted "
        "or put back from an older copy? Ingesting now would store records a second time. "
        "Put the checkpoint back, or run `lambdaline batch reset-ingest`: it begins a new "
        "checkpoint where the master dataset's ingest log says the stored batches had read to"
    )


def claim_input_topics(spark: SparkSession, master: MasterDataset, now: dict[str, str]) -> None:
    """Record the input topics' ids (``now``) with a new ingest checkpoint; raise
    :class:`shared.platform.topic_ids.TopicsRecreatedError` if one differs from what it recorded.
    """
    checkpoint = master.ingest_checkpoint
    location = f"{checkpoint}/{topic_ids.FILE_NAME}"
    text = hadoop_files.read_text(spark, location)
    try:
        new = topic_ids.claim(text, now, location, f"the ingest checkpoint {checkpoint}")
    except ValueError as error:  # unreadable; TopicsRecreatedError is the caller's
        raise MasterDatasetError(str(error)) from None
    if new is not None:
        hadoop_files.write_new(spark, location, new)
        log_event(logger, "ingest_input_topic_ids", checkpoint=checkpoint, **now)


def _write_partitions(frame: DataFrame, location: str, date_column: str) -> None:
    (
        frame.write.mode("overwrite")
        .option("partitionOverwriteMode", "dynamic")  # only this batch's partitions
        .partitionBy(date_column, INGEST_BATCH)
        .parquet(location)
    )


def _count_rows(spark: SparkSession, location: str, schema: T.StructType, batch_id: int) -> int:
    """Rows one micro-batch wrote under a location (Parquet footers only)."""
    if not hadoop_files.glob(spark, location):
        return 0
    written = spark.read.schema(schema).parquet(location)
    return written.where(F.col(INGEST_BATCH) == batch_id).count()


def _ingest_batch(
    master: MasterDataset,
    views: ViewSettings,
    first_batch: int,
    input_topic_ids: Mapping[str, str],
    on_batch: Callable[[IngestedBatch], None] | None,
) -> Callable[[DataFrame, int], None]:
    def write(batch: DataFrame, spark_batch_id: int) -> None:
        batch_id = first_batch + spark_batch_id  # the master dataset's numbering
        spark = batch.sparkSession
        # run again after a crash, the batch is not whole until it is logged again
        ingest_log.forget(spark, master.location, batch_id)
        # decode once: every output below is a filter of this one persisted frame
        classified = classify_records(batch, master.topics, views.max_future_skew).persist()
        try:
            records = classified.count()
            decoded = split_classified(
                classified, master.topics, views.dead_letter_bytes, keep_raw=True
            )
            for event_type in EVENT_TYPES:
                events = decoded.of(event_type).select(
                    "*",
                    F.to_date(event_type.time_field).alias(EVENT_DATE),
                    F.lit(batch_id).cast(T.LongType()).alias(INGEST_BATCH),
                )
                _write_partitions(events, master.events(event_type), EVENT_DATE)
            dead_letters = decoded.dead_letters.select(
                "*",
                F.to_date("source_timestamp").alias(RECORD_DATE),
                F.lit(batch_id).cast(T.LongType()).alias(INGEST_BATCH),
            )
            location = master.dead_letters
            _write_partitions(dead_letters, location, RECORD_DATE)
            dead = _count_rows(spark, location, MASTER_DEAD_LETTER_SCHEMA, batch_id)
        finally:
            classified.unpersist()
        failpoint("ingest_before_log")
        # Spark logged this micro-batch's offsets before it ran it
        offsets = f"{master.ingest_checkpoint}/offsets/{spark_batch_id}"
        read_to = ingest_log.spark_offsets(hadoop_files.read_text(spark, offsets), offsets)
        logged = ingest_log.LoggedBatch(batch_id, read_to, dict(input_topic_ids), records, dead)
        ingest_log.write(spark, master.location, logged)
        failpoint("ingest_before_commit")
        ingested = IngestedBatch(batch_id, records, dead)
        log_event(
            logger, "batch_ingest_batch", batch_id=batch_id, records=records, dead_letters=dead
        )
        if on_batch is not None:
            on_batch(ingested)

    return write


def ingest(
    spark: SparkSession,
    settings: Settings,
    input_topic_ids: Mapping[str, str],
    on_batch: Callable[[IngestedBatch], None] | None = None,
) -> list[IngestedBatch]:
    """Copy every Kafka record not yet in the master dataset into it, then return.

    One ``Trigger.AvailableNow`` query over the three input topics, whose ids
    (:func:`claim_input_topics`) each batch's entry in the ingest log records;
    the micro-batches it ran (none if Kafka holds nothing new) are returned.
    """
    # a record Kafka already deleted (retention) is gone for good: say so and stop
    reader = kafka_stream(spark, settings.kafka, settings.topics.inputs()).option(
        "failOnDataLoss", "true"
    )
    master = MasterDataset.of(settings)
    start = ingest_start(spark, master)
    if start.starting_offsets is not None:  # read by Spark only when the checkpoint is new
        reader = reader.option("startingOffsets", json.dumps(start.starting_offsets))
    if settings.batch.max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", settings.batch.max_offsets_per_trigger)
    batches: list[IngestedBatch] = []

    def collect(ingested: IngestedBatch) -> None:
        batches.append(ingested)
        if on_batch is not None:
            on_batch(ingested)

    # a signal only sets the request while the query runs, and the query is stopped
    # before the run exits (shared.platform.streaming: a py4j call must not be left half-way)
    with stop_requests() as stop:
        query = (
            reader.load()
            .writeStream.queryName("batch.ingest")
            .foreachBatch(
                brief_java_errors(
                    _ingest_batch(
                        master, settings.views, start.first_batch, input_topic_ids, collect
                    )
                )
            )
            .option("checkpointLocation", master.ingest_checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        if not wait_for([query], stop):
            stop_query(query)  # its micro-batch is not committed: the next run takes it again
            raise SystemExit(stop.exit_code)
    raise_if_failed([query])
    return batches


def _no_rows(spark: SparkSession, schema: T.StructType) -> DataFrame:
    """An empty frame of this schema, as a read of the master dataset's files gives: a scan
    of no files, planned in the JVM. (A frame made from a Python list is a Python RDD: each
    of its tasks would start a Python worker, and the executors of a cluster need none.)"""
    return spark.read.schema(schema).parquet()


def read_events(
    spark: SparkSession, master: MasterDataset, event_type: EventType, dates: Iterable[date]
) -> DataFrame:
    """The master dataset's valid events of one type on the given event dates."""
    schema = master_schema(event_type)
    location = master.events(event_type)
    wanted = sorted(set(dates))
    if not wanted or not hadoop_files.glob(spark, location):
        return _no_rows(spark, schema)
    return spark.read.schema(schema).parquet(location).where(F.col(EVENT_DATE).isin(wanted))


def read_dead_letters(
    spark: SparkSession, master: MasterDataset, dates: Iterable[date]
) -> DataFrame:
    """The master dataset's dead letters whose record timestamp falls on the given dates
    (their raw bytes bounded as the ingest wrote them: ``ViewSettings.dead_letter_bytes``)."""
    location = master.dead_letters
    wanted = sorted(set(dates))
    if not wanted or not hadoop_files.glob(spark, location):
        return _no_rows(spark, MASTER_DEAD_LETTER_SCHEMA)
    frame = spark.read.schema(MASTER_DEAD_LETTER_SCHEMA).parquet(location)
    return frame.where(F.col(RECORD_DATE).isin(wanted))
