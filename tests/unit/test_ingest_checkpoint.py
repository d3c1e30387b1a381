"""The batch layer's ingest refuses a checkpoint that does not match the master dataset, and
where `batch reset-ingest` starts a new one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from batch_layer.ingest_reset import EARLIEST, IngestResetPlan, starting_offsets
from batch_layer.master import IngestStart, MasterDatasetError, check_ingest_checkpoint
from shared.kafka_admin import Bounds
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
    check_ingest_checkpoint(Settings(state_dir=tmp_path), stored, begun)


@pytest.mark.parametrize(
    ("begun", "has"),
    [(None, "has begun none"), (2, "has begun only up to 2")],
)
def test_a_checkpoint_deleted_or_older_than_the_master_dataset_is_refused(
    tmp_path: Path, begun: int | None, has: str
) -> None:
    settings = Settings(state_dir=tmp_path)
    with pytest.raises(MasterDatasetError) as refused:
        check_ingest_checkpoint(settings, 7, begun)
    assert str(refused.value).startswith(
        f"the master dataset at {settings.master_location} holds ingest micro-batches up to 7, "
        f"but its ingest checkpoint {settings.master_location}/_checkpoints/ingest {has}: "
    )
    assert f"deleting {settings.master_location}" in str(refused.value)


def test_a_reset_ingest_starts_each_partition_where_kafka_still_has_what_was_read() -> None:
    read_to = {"toll.entries": {0: 10, 1: 4, 2: 9}, "toll.exits": {0: 7}}
    bounds = {
        ("toll.entries", 0): Bounds(0, 12),  # read to 10 of 12: goes on at 10
        ("toll.entries", 1): Bounds(6, 8),  # 4 and 5 deleted before they were read
        ("toll.entries", 2): Bounds(0, 3),  # offsets went back: the topic is another
        ("toll.entries", 3): Bounds(0, 2),  # a partition added since
        ("toll.exits", 0): Bounds(0, 9),  # the topic has a new id
    }
    starts = starting_offsets(read_to, bounds, created_again={"toll.exits"})
    assert [(s.topic, s.partition, s.read_to, s.starts_at, s.why) for s in starts] == [
        ("toll.entries", 0, 10, 10, "goes on where it was read to"),
        ("toll.entries", 1, 4, EARLIEST, "2 records deleted before they were read"),
        ("toll.entries", 2, 9, EARLIEST, "offsets went back (9 read, 3 now written)"),
        ("toll.entries", 3, None, EARLIEST, "not read before"),
        ("toll.exits", 0, 7, EARLIEST, "topic created again (new id)"),
    ]
    plan = IngestResetPlan("ckpt", "ckpt.replaced-x", 4, starts, uncommitted=[])
    assert plan.start == IngestStart(
        first_batch=4,
        starting_offsets={
            "toll.entries": {"0": 10, "1": -2, "2": -2, "3": -2},
            "toll.exits": {"0": -2},
        },
    )
    assert json.loads(plan.start.render()) == {
        "first_batch": 4,
        "starting_offsets": {
            "toll.entries": {"0": 10, "1": -2, "2": -2, "3": -2},
            "toll.exits": {"0": -2},
        },
    }
