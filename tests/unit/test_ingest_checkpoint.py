"""The batch layer's ingest refuses a checkpoint that does not match the master dataset."""

from __future__ import annotations

from pathlib import Path

import pytest

from batch_layer.master import MasterDatasetError, check_ingest_checkpoint
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
