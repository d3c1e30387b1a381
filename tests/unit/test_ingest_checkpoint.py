"""The batch layer's ingest refuses a checkpoint that does not match the master dataset;
the master dataset's ingest log; where `batch reset-ingest` starts a new checkpoint."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from batch_layer.ingest_log import IngestLogError, LoggedBatch, parse, spark_offsets, unfinished
from batch_layer.ingest_reset import EARLIEST, IngestResetPlan, starting_offsets
from batch_layer.master import (
    IngestStart,
    MasterDataset,
    MasterDatasetError,
    check_ingest_checkpoint,
)
from shared.platform.batch_store import BatchVersion, LostInput
from shared.platform.kafka_admin import Bounds
from shared.settings import Settings


@pytest.mark.parametrize(
    ("stored", "begun"),
    [
        (None, None),  # the first run
        (None, 3),  # a master dataset emptied by hand: nothing to store twice
        (4, 4),  # every stored batch committed
        (4, 5),  # batch 5 begun, killed before it wrote (or replayed next run)
        (0, 0),  # batch 0 wrote its partitions and was killed before its commit
    ],
)
def test_a_checkpoint_that_began_every_stored_batch_is_accepted(
    tmp_path: Path, stored: int | None, begun: int | None
) -> None:
    check_ingest_checkpoint(MasterDataset.of(Settings(state_dir=tmp_path)), stored, begun)


@pytest.mark.parametrize(
    ("begun", "has"),
    [(None, "has begun none"), (2, "has begun only up to 2")],
)
def test_a_checkpoint_deleted_or_older_than_the_master_dataset_is_refused(
    tmp_path: Path, begun: int | None, has: str
) -> None:
    settings = Settings(state_dir=tmp_path)
    with pytest.raises(MasterDatasetError) as refused:
        check_ingest_checkpoint(MasterDataset.of(settings), 7, begun)
    assert str(refused.value).startswith(
        f"the master dataset at {settings.master_location} holds ingest micro-batches up to 7, "
        f"but its ingest checkpoint {settings.master_location}/_checkpoints/ingest {has}: "
    )
    assert "run `lambdaline batch reset-ingest`" in str(refused.value)


def test_a_reset_ingest_starts_each_partition_where_kafka_still_has_what_was_read() -> None:
    read_to = {"toll.entries": {0: 10, 1: 4, 2: 9}, "toll.exits": {0: 7}}
    bounds = {
        ("toll.entries", 0): Bounds(0, 12),  # read to 10 of 12: goes on at 10
        ("toll.entries", 1): Bounds(6, 8),  # 4 and 5 deleted before they were read
        ("toll.entries", 2): Bounds(0, 3),  # offsets went back: the topic is another
        ("toll.entries", 3): Bounds(0, 2),  # a partition added since
        ("toll.entries", 4): Bounds(5, 9),  # added since, and 0-4 deleted before any read
        ("toll.exits", 0): Bounds(0, 9),  # the topic has a new id
    }
    starts = starting_offsets(read_to, bounds, created_again={"toll.exits"})
    assert [(s.topic, s.partition, s.read_to, s.starts_at, s.why) for s in starts] == [
        ("toll.entries", 0, 10, 10, "goes on where it was read to"),
        ("toll.entries", 1, 4, EARLIEST, "2 records deleted before they were read"),
        ("toll.entries", 2, 9, EARLIEST, "offsets went back (9 read, 3 now written)"),
        ("toll.entries", 3, None, EARLIEST, "not read before"),
        ("toll.entries", 4, None, EARLIEST,
         "not read before; 5 records deleted before they were read"),
        ("toll.exits", 0, 7, EARLIEST, "topic created again (new id)"),
    ]  # fmt: skip
    plan = IngestResetPlan("ckpt", "ckpt.replaced-x", 4, starts, unfinished=[])
    assert plan.start == IngestStart(
        first_batch=4,
        starting_offsets={
            "toll.entries": {"0": 10, "1": -2, "2": -2, "3": -2, "4": -2},
            "toll.exits": {"0": -2},
        },
    )
    assert json.loads(plan.start.render()) == {
        "first_batch": 4,
        "starting_offsets": {
            "toll.entries": {"0": 10, "1": -2, "2": -2, "3": -2, "4": -2},
            "toll.exits": {"0": -2},
        },
    }
    # the records deleted before they were read: lost, from the new checkpoint's first batch
    assert plan.lost == [
        LostInput("toll.entries", 1, 4, 6, ingest_batch=4),
        LostInput("toll.entries", 4, 0, 5, ingest_batch=4),
    ]
    assert [lost.records for lost in plan.lost] == [2, 5]


def test_a_version_lists_the_lost_input_and_one_from_before_reads_as_none() -> None:
    lost = LostInput("toll.entries", 1, 4, 6, ingest_batch=4)
    version = BatchVersion(
        version=3, horizon=datetime(2026, 1, 6, tzinfo=UTC),
        created_at=datetime(2026, 1, 6, 1, tzinfo=UTC), dates=(date(2026, 1, 5),),
        recomputed_dates=(date(2026, 1, 5),), row_counts={"booth_stats": 1}, ingest_batch=4,
        view_settings={"window": "5m"}, lost_input=(lost,),
    )  # fmt: skip
    document = json.loads(version.to_json())
    assert document["lost_input"] == [
        {"topic": "toll.entries", "partition": 1, "first_offset": 4, "end_offset": 6,
         "records": 2, "ingest_batch": 4}
    ]  # fmt: skip
    assert BatchVersion.from_json(version.to_json()) == version
    del document["lost_input"]  # as a version published before lost input was recorded
    assert BatchVersion.from_json(json.dumps(document)).lost_input == ()
    with pytest.raises(ValueError, match="not a range of lost records"):
        LostInput.from_document({**lost.to_document(), "end_offset": 4})


def test_an_ingest_log_entry_reads_back_as_written() -> None:
    entry = LoggedBatch(
        batch=12,
        read_to={"toll.entries": {1: 40, 0: 41}, "toll.exits": {0: 0}},
        topic_ids={"toll.exits": "id-x", "toll.entries": "id-e"},
        records=80,
        dead_letters=3,
    )
    text = entry.render()
    assert json.loads(text) == {  # partitions as JSON keys, as Spark's offset log has them
        "batch": 12,
        "read_to": {"toll.entries": {"0": 41, "1": 40}, "toll.exits": {"0": 0}},
        "topic_ids": {"toll.entries": "id-e", "toll.exits": "id-x"},
        "records": 80,
        "dead_letters": 3,
    }
    assert parse(text, "log/12.json") == entry


@pytest.mark.parametrize(
    "text",
    [
        "",
        "[]",
        '{"batch": 1}',
        '{"batch": -1, "read_to": {}, "topic_ids": {}, "records": 0, "dead_letters": 0}',
        '{"batch": 1, "read_to": {"t": {"0": "9"}}, "topic_ids": {}, "records": 0, '
        '"dead_letters": 0}',
        '{"batch": 1, "read_to": {"t": {"x": 9}}, "topic_ids": {}, "records": 0, '
        '"dead_letters": 0}',
    ],
)
def test_an_unreadable_ingest_log_entry_is_named(text: str) -> None:
    with pytest.raises(ValueError, match=r"^cannot read the ingest log entry log/1\.json \("):
        parse(text, "log/1.json")


def test_the_offsets_of_a_spark_offset_log_entry() -> None:
    # as Spark 4.0 writes offsets/<id> for a query with one Kafka source
    text = (
        "v1\n"
        '{"batchWatermarkMs":0,"batchTimestampMs":1764050000000,"conf":{}}\n'
        '{"toll.exits":{"1":0,"0":7},"toll.entries":{"1":3,"0":10}}'
    )
    assert spark_offsets(text, "offsets/0") == {
        "toll.exits": {0: 7, 1: 0},
        "toll.entries": {0: 10, 1: 3},
    }
    with pytest.raises(ValueError, match=r"^cannot read Spark's offset log offsets/0 \("):
        spark_offsets("", "offsets/0")
    with pytest.raises(ValueError, match=r"^Spark's offset log has no entry offsets/0$"):
        spark_offsets(None, "offsets/0")


@pytest.mark.parametrize(
    ("stored", "logged", "expected"),
    [
        (set(), set(), []),
        ({0, 1, 2}, {0, 1, 2}, []),
        ({0, 1, 2}, {0, 1}, [2]),  # a run stopped while it wrote batch 2
        ({0}, set(), [0]),  # the first batch
        ({0, 2}, {0, 1, 2}, []),  # batch 1 held only transaction markers: nothing stored
        ({5, 6}, {5}, [6]),
    ],
)
def test_only_the_newest_stored_batch_may_lack_its_ingest_log_entry(
    stored: set[int], logged: set[int], expected: list[int]
) -> None:
    assert unfinished(stored, logged) == expected


@pytest.mark.parametrize(
    ("stored", "logged", "named"),
    [
        ({0, 1, 2}, set(), "0, 1, 2"),  # the log lost
        ({0, 1, 2}, {0, 2}, "1"),  # an entry deleted by hand
        ({0, 1, 2}, {0}, "1, 2"),
    ],
)
def test_older_stored_batches_the_ingest_log_lacks_are_refused(
    stored: set[int], logged: set[int], named: str
) -> None:
    with pytest.raises(IngestLogError) as refused:
        unfinished(stored, logged)
    assert str(refused.value).startswith(
        f"the master dataset stores ingest batch(es) {named} that its ingest log does not list"
    )
