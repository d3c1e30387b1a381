"""The speed checkpoint's record of the view settings it was made under (files only)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from shared.settings import Settings
from speed_layer.checkpoint import CheckpointError, checkpoint_dir, claim_checkpoint


def test_the_first_start_records_the_view_settings_and_a_later_one_with_them_passes(
    tmp_path: Path,
) -> None:
    settings = Settings(state_dir=tmp_path)
    claim_checkpoint(settings)
    recorded = tmp_path / "checkpoints" / "speed" / "view_settings.json"
    assert json.loads(recorded.read_text()) == {"max_trip": "1h", "window": "5m"}
    claim_checkpoint(settings)  # the same settings: no error
    assert sorted(path.name for path in recorded.parent.iterdir()) == ["view_settings.json"]


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"window": timedelta(minutes=10)}, "window=10m"),
        ({"max_trip": timedelta(hours=2)}, "max_trip=2h"),
    ],
)
def test_a_checkpoint_made_with_other_view_settings_is_refused_until_they_are_set_back(
    tmp_path: Path, change: dict[str, timedelta], named: str
) -> None:
    claim_checkpoint(Settings(state_dir=tmp_path))
    with pytest.raises(CheckpointError) as refused:
        claim_checkpoint(Settings(state_dir=tmp_path).model_copy(update=change))
    message = str(refused.value)
    folder = tmp_path / "checkpoints" / "speed"
    assert message.startswith(
        f"the speed checkpoint {folder} was made with max_trip=1h, window=5m, "
        "but the settings now say "
    )
    assert named in message
    assert "speed.booth_stats, speed.vehicle_trips" in message  # the topics to delete
    claim_checkpoint(Settings(state_dir=tmp_path))  # set back: passes


def test_a_checkpoint_from_before_the_record_is_taken_to_match(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path, window=timedelta(minutes=15))
    (checkpoint_dir(settings) / "booth_stats" / "offsets").mkdir(parents=True)
    claim_checkpoint(settings)
    recorded = json.loads((checkpoint_dir(settings) / "view_settings.json").read_text())
    assert recorded == {"max_trip": "1h", "window": "15m"}


def test_a_record_that_is_not_json_is_named(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path)
    recorded = checkpoint_dir(settings) / "view_settings.json"
    recorded.parent.mkdir(parents=True)
    recorded.write_text("window = 5m\n")
    with pytest.raises(CheckpointError, match=rf"cannot read {recorded} \(Expecting value"):
        claim_checkpoint(settings)
