"""``batch reset-ingest``: a new ingest checkpoint that goes on into the same master dataset.

The ingest's checkpoint holds Kafka offsets. When Kafka no longer has what they
point at (the input topics deleted and created again, the broker's data lost,
records deleted by retention before the ingest read them), every run stops:
Spark's ``failOnDataLoss``, or :func:`shared.platform.topic_ids.require_same`. Every run
stops too when the checkpoint no longer knows every batch the master dataset
stores (deleted, or put back from an older copy). The master dataset is the
system's record and keeps all it stored, so it is not started over. Instead the
old checkpoint is set aside and a new one begins from what the master dataset's
ingest log (:mod:`batch_layer.ingest_log`) says it stores:

- its batches are numbered after the newest logged one
  (:class:`batch_layer.master.IngestStart`), so ``ingest_batch`` still only grows
  and the next run recomputes the dates its records touch;
- each partition starts where that batch had read to, if Kafka still has that
  offset and the topic is the one it read; else at the earliest offset Kafka
  keeps (:func:`starting_offsets`), so nothing stored is stored again and
  nothing Kafka still has is skipped; the records Kafka deleted before they were
  read are recorded as lost in the ingest log (:func:`batch_layer.ingest_log.record_lost`),
  and every version published after lists them;
- the partitions of a batch that no micro-batch finished writing (a run killed
  mid-batch: the log has no entry for it) are deleted; the new checkpoint reads
  their records again.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from pyspark.sql import SparkSession

from batch_layer import hadoop_files, ingest_log
from batch_layer.master import (
    INGEST_BATCH,
    START_FILE,
    IngestStart,
    MasterDataset,
    MasterDatasetError,
)
from batch_layer.recompute import read_inventory
from shared.domain.events import EVENT_TYPES
from shared.platform import topic_ids
from shared.platform.batch_store import LostInput
from shared.platform.kafka_admin import Bounds, offset_bounds
from shared.settings import Settings

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
    lost: tuple[int, int] | None = None
    """Offsets [first, end) Kafka deleted before the ingest read them, if any."""


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
        lost = None
        if topic in created_again:
            start, why = EARLIEST, "topic created again (new id)"
        elif at is None:
            start, why = EARLIEST, "not read before"
            if kept.earliest > 0:
                lost = (0, kept.earliest)
                why += f"; {kept.earliest:,} records deleted before they were read"
        elif at > kept.end:
            start, why = EARLIEST, f"offsets went back ({at} read, {kept.end} now written)"
        elif at < kept.earliest:
            lost = (at, kept.earliest)
            start, why = EARLIEST, f"{kept.earliest - at:,} records deleted before they were read"
        else:
            start, why = at, "goes on where it was read to"
        starts.append(PartitionStart(topic, partition, at, kept, start, why, lost))
    return starts


@dataclass(frozen=True)
class IngestResetPlan:
    checkpoint: str
    aside: str | None
    """Where the old checkpoint is moved to (None: there is none)."""
    first_batch: int
    """The new checkpoint's first ingest batch."""
    starts: list[PartitionStart]
    unfinished: list[int]
    """Ingest batches no micro-batch finished writing (not in the ingest log), deleted."""

    @property
    def lost(self) -> list[LostInput]:
        """The records Kafka deleted before they were read, per partition."""
        return [
            LostInput(item.topic, item.partition, *item.lost, ingest_batch=self.first_batch)
            for item in self.starts
            if item.lost is not None
        ]

    @property
    def start(self) -> IngestStart:
        offsets: dict[str, dict[str, int]] = {}
        for item in self.starts:
            offsets.setdefault(item.topic, {})[str(item.partition)] = item.starts_at
        return IngestStart(self.first_batch, offsets)


def plan(spark: SparkSession, settings: Settings) -> IngestResetPlan:
    """What :func:`carry_out` will do, from the master dataset's ingest log and Kafka.

    The old checkpoint, if there is one, is only set aside: the ingest log says
    what the master dataset stores and what its batches had read to, whether
    the checkpoint was deleted, put back from an older copy, or points at
    records Kafka no longer has. Raises MasterDatasetError if there is nothing
    to go on from, or the log does not account for the stored batches.
    """
    dataset = MasterDataset.of(settings)
    checkpoint = dataset.ingest_checkpoint
    has_checkpoint = bool(hadoop_files.glob(spark, f"{checkpoint}/*"))
    stored = read_inventory(spark, dataset).batches()
    if not has_checkpoint and not stored:
        raise MasterDatasetError(
            f"there is no ingest checkpoint at {checkpoint} and the master dataset stores "
            "nothing: the next `lambdaline batch run` begins both"
        )
    logged = ingest_log.logged_batches(spark, dataset.location)
    try:
        unfinished = ingest_log.unfinished(stored, logged)
        newest = ingest_log.read_entry(spark, dataset.location, max(logged)) if logged else None
    except ValueError as error:
        raise MasterDatasetError(str(error)) from None
    topics = settings.topics.inputs()
    created_again = {
        item.topic
        for item in topic_ids.recreated(
            newest.topic_ids if newest else {}, topic_ids.current(settings.kafka, topics)
        )
    }
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return IngestResetPlan(
        checkpoint=checkpoint,
        aside=f"{checkpoint}.replaced-{stamp}" if has_checkpoint else None,
        first_batch=newest.batch + 1 if newest else 0,
        starts=starting_offsets(
            newest.read_to if newest else {}, offset_bounds(settings.kafka, topics), created_again
        ),
        unfinished=unfinished,
    )


def _locations(dataset: MasterDataset) -> list[str]:
    return [dataset.events(kind) for kind in EVENT_TYPES] + [dataset.dead_letters]


def carry_out(spark: SparkSession, dataset: MasterDataset, reset: IngestResetPlan) -> None:
    """Delete the unfinished batch's partitions, record the records Kafka lost, set the
    old checkpoint aside and begin the new one with its :class:`IngestStart`.

    In that order, a reset cut short leaves the old checkpoint or none, which
    ``batch run`` refuses (:func:`batch_layer.master.check_ingest_checkpoint`);
    the reset run again goes on from the ingest log all the same.
    """
    for batch in reset.unfinished:
        for location in _locations(dataset):
            for folder in hadoop_files.glob(spark, f"{location}/*/{INGEST_BATCH}={batch}"):
                hadoop_files.delete(spark, folder)
    ingest_log.record_lost(spark, dataset.location, reset.lost)
    if reset.aside is not None:
        hadoop_files.rename(spark, reset.checkpoint, reset.aside)
    hadoop_files.write_new(spark, f"{reset.checkpoint}/{START_FILE}", reset.start.render())
