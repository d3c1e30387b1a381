"""``batch reset-ingest``: a new ingest checkpoint that goes on into the same master dataset.

The ingest's checkpoint holds Kafka offsets. When Kafka no longer has what they
point at (the input topics deleted and created again, the broker's data lost,
records deleted by retention before the ingest read them), every run stops:
Spark's ``failOnDataLoss``, or :func:`shared.topic_ids.require_same`. The
master dataset is the system's record and keeps all it stored, so it is not
started over. Instead the old checkpoint is set aside and a new one begins:

- its batches are numbered after the newest the master dataset holds
  (:class:`batch_layer.master.IngestStart`), so ``ingest_batch`` still only grows
  and the next run recomputes the dates its records touch;
- each partition starts where the old checkpoint had read to, if Kafka still
  has that offset and the topic is the one it read; else at the earliest offset
  Kafka keeps (:func:`starting_offsets`), so nothing stored is stored again and
  nothing Kafka still has is skipped;
- partitions of a batch the old checkpoint began and never committed (a run
  killed mid-batch) are deleted: a replay would have overwritten them, and the
  new checkpoint reads their records again.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from pyspark.sql import SparkSession

from batch_layer import hadoop_files
from batch_layer.master import (
    INGEST_BATCH,
    START_FILE,
    IngestStart,
    MasterDatasetError,
    check_ingest_checkpoint,
    dead_letters_location,
    events_location,
    ingest_checkpoint,
    ingest_start,
    last_ingest_batch,
    newest_ingest_batch_begun,
    newest_spark_batch,
)
from batch_layer.recompute import read_inventory
from shared import topic_ids
from shared.events import EVENT_TYPES
from shared.kafka_admin import Bounds, offset_bounds
from shared.settings import Settings
from shared.topics import input_topics

EARLIEST = -2
"""Spark's ``startingOffsets`` value for a partition's earliest offset."""


@dataclass(frozen=True)
class PartitionStart:
    """Where one input partition starts in the new checkpoint, and why."""

    topic: str
    partition: int
    read_to: int | None
    """The offset the old checkpoint had read to (None: it read nothing there)."""
    bounds: Bounds
    starts_at: int
    """An offset, or :data:`EARLIEST`."""
    why: str


def starting_offsets(
    read_to: Mapping[str, Mapping[int, int]],
    bounds: Mapping[tuple[str, int], Bounds],
    created_again: Collection[str],
) -> list[PartitionStart]:
    """Where each partition Kafka has now starts: at ``read_to`` if Kafka still has that
    offset of the same topic, else at the earliest offset it keeps."""
    starts = []
    for (topic, partition), kept in sorted(bounds.items()):
        at = read_to.get(topic, {}).get(partition)
        if topic in created_again:
            start, why = EARLIEST, "topic created again (new id)"
        elif at is None:
            start, why = EARLIEST, "not read before"
        elif at > kept.end:
            start, why = EARLIEST, f"offsets went back ({at} read, {kept.end} now written)"
        elif at < kept.earliest:
            lost = kept.earliest - at
            start, why = EARLIEST, f"{lost:,} records deleted before they were read"
        else:
            start, why = at, "goes on where it was read to"
        starts.append(PartitionStart(topic, partition, at, kept, start, why))
    return starts


@dataclass(frozen=True)
class IngestResetPlan:
    checkpoint: str
    aside: str
    """Where the old checkpoint is moved to."""
    first_batch: int
    """The new checkpoint's first ingest batch."""
    starts: list[PartitionStart]
    uncommitted: list[int]
    """Ingest batches the old checkpoint began and never committed, deleted."""

    @property
    def start(self) -> IngestStart:
        offsets: dict[str, dict[str, int]] = {}
        for item in self.starts:
            offsets.setdefault(item.topic, {})[str(item.partition)] = item.starts_at
        return IngestStart(self.first_batch, offsets)


def plan(spark: SparkSession, settings: Settings) -> IngestResetPlan:
    """What :func:`carry_out` will do, from the old checkpoint, the master dataset and Kafka.

    Raises MasterDatasetError if there is no ingest checkpoint to go on from, or it
    does not know of every batch the master dataset holds (put back from an older copy).
    """
    checkpoint = ingest_checkpoint(settings)
    if not hadoop_files.glob(spark, f"{checkpoint}/*"):
        raise MasterDatasetError(
            f"there is no ingest checkpoint at {checkpoint} to go on from: a new one is made "
            "by the next `lambdaline batch run` (if the master dataset holds ingest batches "
            "already, put the old checkpoint back first; a reset cut short left it beside "
            f"this one, as {checkpoint}.replaced-*)"
        )
    topics = input_topics(settings)
    where = f"{checkpoint}/{topic_ids.FILE_NAME}"
    recorded_text = hadoop_files.read_text(spark, where)
    try:
        recorded = topic_ids.parse(recorded_text, where) if recorded_text else {}
    except ValueError as error:
        raise MasterDatasetError(str(error)) from None
    created_again = {
        item.topic for item in topic_ids.recreated(recorded, topic_ids.current(settings, topics))
    }
    inventory = read_inventory(spark, settings)
    # a checkpoint put back from an older copy knows of fewer batches than are stored:
    # refused, or the stored batches it does not know would be deleted as uncommitted
    check_ingest_checkpoint(
        settings, inventory.newest_batch(), newest_ingest_batch_begun(spark, settings)
    )
    committed = last_ingest_batch(spark, settings)
    # what the master dataset holds beyond it is deleted, so the numbers go on after it
    first_batch = 0 if committed is None else committed + 1
    stored = inventory.parts.values()
    uncommitted = sorted({batch for found in stored for _, batch in found if batch >= first_batch})
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return IngestResetPlan(
        checkpoint=checkpoint,
        aside=f"{checkpoint}.replaced-{stamp}",
        first_batch=first_batch,
        starts=starting_offsets(
            _read_to(spark, settings), offset_bounds(settings, topics), created_again
        ),
        uncommitted=uncommitted,
    )


def _read_to(spark: SparkSession, settings: Settings) -> dict[str, dict[int, int]]:
    """The offsets the old checkpoint's newest committed micro-batch read to (if it
    committed none: the offsets it was to start from)."""
    newest = newest_spark_batch(spark, settings, "commits")
    if newest is None:
        offsets = ingest_start(spark, settings).starting_offsets or {}
        return {
            topic: {int(p): at for p, at in numbers.items() if at >= 0}
            for topic, numbers in offsets.items()
        }
    location = f"{ingest_checkpoint(settings)}/offsets/{newest}"
    text = hadoop_files.read_text(spark, location) or ""
    # Spark's offset log: a version line, the batch's metadata, then a line per source
    try:
        source = json.loads(text.splitlines()[-1])
        return {topic: {int(p): int(n) for p, n in read.items()} for topic, read in source.items()}
    except (ValueError, IndexError, AttributeError) as error:
        raise MasterDatasetError(f"cannot read Spark's offset log {location} ({error})") from None


def _locations(settings: Settings) -> list[str]:
    return [events_location(settings, kind) for kind in EVENT_TYPES] + [
        dead_letters_location(settings)
    ]


def carry_out(spark: SparkSession, settings: Settings, reset: IngestResetPlan) -> None:
    """Delete the uncommitted batches' partitions, set the old checkpoint aside and
    begin the new one with its :class:`IngestStart`.

    In that order, a reset cut short leaves the old checkpoint (run the reset
    again), or a new one without its start, which ``batch run`` and :func:`plan`
    refuse (:func:`batch_layer.master.check_ingest_checkpoint`); :func:`plan`
    also names the copy set aside when there is no checkpoint at all.
    """
    for batch in reset.uncommitted:
        for location in _locations(settings):
            for folder in hadoop_files.glob(spark, f"{location}/*/{INGEST_BATCH}={batch}"):
                hadoop_files.delete(spark, folder)
    hadoop_files.rename(spark, reset.checkpoint, reset.aside)
    hadoop_files.write_new(spark, f"{reset.checkpoint}/{START_FILE}", reset.start.render())
