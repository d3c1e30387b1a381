"""The master dataset's ingest log: which ingest batches it holds whole, and what each read.

``<master>/_ingest_log/<batch>.json``: one small file per ingest batch, written by
the batch's micro-batch after all its partitions and before Spark commits it. A
micro-batch run again (after a crash) deletes its entry first and writes it again
at its end, so an entry always stands for a whole batch. Each entry holds the
offsets the ingest had read to once the batch was stored (Spark's offset log of
that micro-batch: every partition, not only those with records) and the ids of
the topics it read.

``<master>/_ingest_log/lost-<batch>.json``: the input records Kafka had deleted
before the ingest read them, written by ``batch reset-ingest`` when its new
checkpoint starts past them (:class:`shared.platform.batch_store.LostInput`; ``<batch>``
is the new checkpoint's first batch). The master dataset never holds them, and each
version published after says so.

The ingest's checkpoint holds the same offsets, but it is not the master dataset:
it can be deleted ("cleaning up checkpoints"), put back from an older copy, or
set aside by ``batch reset-ingest``. With the log, the master dataset alone says
what it stores, so a new checkpoint can go on from there
(:mod:`batch_layer.ingest_reset`) instead of the master dataset starting over.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from pyspark.sql import SparkSession

from batch_layer import hadoop_files
from shared.platform.batch_store import LostInput

LOG_DIR = "_ingest_log"
LOST_PREFIX = "lost-"


@dataclass(frozen=True)
class LoggedBatch:
    """One ingest batch the master dataset holds whole."""

    batch: int
    read_to: dict[str, dict[int, int]]
    """Per topic and partition, the offset the ingest had read to with this batch."""
    topic_ids: dict[str, str]
    """The ids (KIP-516) of the topics it read; empty where Kafka has none (before 2.8)."""
    records: int
    dead_letters: int

    def render(self) -> str:
        document = {
            "batch": self.batch,
            "read_to": {
                topic: {str(partition): at for partition, at in sorted(offsets.items())}
                for topic, offsets in sorted(self.read_to.items())
            },
            "topic_ids": dict(sorted(self.topic_ids.items())),
            "records": self.records,
            "dead_letters": self.dead_letters,
        }
        return json.dumps(document, indent=2) + "\n"


def parse(text: str, where: str) -> LoggedBatch:
    """An entry from its file's text; ValueError naming ``where`` if it is not one."""
    try:
        document = json.loads(text)
        entry = LoggedBatch(
            batch=_count(document["batch"]),
            read_to={
                str(topic): {int(partition): _count(at) for partition, at in offsets.items()}
                for topic, offsets in document["read_to"].items()
            },
            topic_ids={str(topic): str(id_) for topic, id_ in document["topic_ids"].items()},
            records=_count(document["records"]),
            dead_letters=_count(document["dead_letters"]),
        )
    except (ValueError, TypeError, KeyError, AttributeError) as error:
        raise ValueError(f"cannot read the ingest log entry {where} ({error!r})") from None
    return entry


def _count(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{value!r} is not a count or an offset")
    return value


def spark_offsets(text: str | None, where: str) -> dict[str, dict[int, int]]:
    """The Kafka offsets in an entry of Spark's offset log (a checkpoint's ``offsets/<id>``).

    The entry is a version line, the micro-batch's metadata, then one line per
    source; the ingest has one, Spark's Kafka source: ``{"topic": {"0": 42}}``.
    ValueError naming ``where`` if it is missing (``text`` None) or not such an entry.
    """
    if text is None:
        raise ValueError(f"Spark's offset log has no entry {where}")
    try:
        source = json.loads(text.splitlines()[-1])
        return {
            str(topic): {int(partition): _count(at) for partition, at in offsets.items()}
            for topic, offsets in source.items()
        }
    except (ValueError, TypeError, IndexError, AttributeError) as error:
        raise ValueError(f"cannot read Spark's offset log {where} ({error!r})") from None


def location(master: str) -> str:
    """The ingest log's folder in the master dataset at ``master`` (a path or URL)."""
    return f"{master}/{LOG_DIR}"


def entry_location(master: str, batch: int) -> str:
    return f"{location(master)}/{batch}.json"


def logged_batches(spark: SparkSession, master: str) -> set[int]:
    """The ingest batches the log has an entry for (from the files' names alone)."""
    names = (
        path.rsplit("/", 1)[1] for path in hadoop_files.glob(spark, f"{location(master)}/*.json")
    )
    return {
        int(name.removesuffix(".json")) for name in names if name.removesuffix(".json").isdigit()
    }


def read_entry(spark: SparkSession, master: str, batch: int) -> LoggedBatch:
    """One batch's entry; ValueError if it is missing or unreadable."""
    where = entry_location(master, batch)
    text = hadoop_files.read_text(spark, where)
    if text is None:
        raise ValueError(f"the ingest log has no entry {where}")
    entry = parse(text, where)
    if entry.batch != batch:
        raise ValueError(f"the ingest log entry {where} is of batch {entry.batch}")
    return entry


def write(spark: SparkSession, master: str, entry: LoggedBatch) -> None:
    """Log a batch as stored whole (its partitions are all written)."""
    hadoop_files.write_new(spark, entry_location(master, entry.batch), entry.render())


def forget(spark: SparkSession, master: str, batch: int) -> None:
    """Delete a batch's entry (if any) before its partitions are written again."""
    hadoop_files.delete(spark, entry_location(master, batch))


def lost_location(master: str, batch: int) -> str:
    return f"{location(master)}/{LOST_PREFIX}{batch}.json"


def record_lost(spark: SparkSession, master: str, lost: Sequence[LostInput]) -> None:
    """Log the ranges of input records Kafka deleted before the ingest read them, under
    the first batch that goes on after them (a reset run again replaces its record)."""
    if not lost:
        return
    [batch] = {item.ingest_batch for item in lost}
    where = lost_location(master, batch)
    document = {"lost": [item.to_document() for item in lost]}
    hadoop_files.delete(spark, where)
    hadoop_files.write_new(spark, where, json.dumps(document, indent=2) + "\n")


def lost_input(spark: SparkSession, master: str) -> tuple[LostInput, ...]:
    """Every range of input records the log says the master dataset will never hold,
    in the order they were lost; ValueError naming a record that cannot be read."""
    found: list[LostInput] = []
    for path in hadoop_files.glob(spark, f"{location(master)}/{LOST_PREFIX}*.json"):
        text = hadoop_files.read_text(spark, path) or ""
        try:
            found += [LostInput.from_document(item) for item in json.loads(text)["lost"]]
        except (ValueError, TypeError, KeyError) as error:
            raise ValueError(f"cannot read the ingest log's record {path} ({error!r})") from None
    return tuple(sorted(found, key=lambda item: (item.ingest_batch, item.topic, item.partition)))


class IngestLogError(ValueError):
    """The ingest log does not account for the batches the master dataset stores."""


def unfinished(stored: Collection[int], logged: Collection[int]) -> list[int]:
    """The stored ingest batches no micro-batch finished writing: those the log lacks.

    Only the newest stored batch can be one (a run killed while it wrote that
    batch; the next micro-batch run again takes the same number). Raises
    :class:`IngestLogError` if an older one lacks its entry too: a log edited or
    lost by hand.
    """
    missing = sorted(set(stored) - set(logged))
    if len(missing) > 1 or (missing and missing[0] < max(logged, default=-1)):
        shown = ", ".join(map(str, missing))
        raise IngestLogError(
            f"the master dataset stores ingest batch(es) {shown} that its ingest log does not "
            "list; only the newest batch may lack its entry (a run killed while writing it). "
            "Was its log edited by hand, or put back from an older copy?"
        )
    return missing
