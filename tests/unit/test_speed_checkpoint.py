"""The speed checkpoint's record of the view settings it was made under and of the input
topics' ids, and its claim on the speed store (files only; counts and ids are given)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from shared.platform.topic_ids import TopicsRecreatedError, recreated
from shared.settings import Settings
from speed_layer.checkpoint import (
    ROCKSDB_PROVIDER,
    STATE_LAYOUT,
    STATE_LAYOUT_FILE,
    CheckpointError,
    checkpoint_dir,
    checkpoint_started,
    claim_checkpoint,
    claim_input_topics,
    claim_speed_store,
    claim_state_store,
)


def claim(settings: Settings) -> None:
    """What ``speed run`` claims of these settings: their checkpoint, their view settings."""
    claim_checkpoint(checkpoint_dir(settings), settings.views.labels)


def test_the_first_start_records_the_view_settings_and_a_later_one_with_them_passes(
    tmp_path: Path,
) -> None:
    settings = Settings(state_dir=tmp_path)
    claim(settings)
    recorded = tmp_path / "checkpoints" / "speed" / "view_settings.json"
    assert json.loads(recorded.read_text()) == {
        "max_trip": "1h",
        "registration_lookback": "400d",
        "rolling_slide": "5m",
        "rolling_window": "1h",
        "session_gap": "30m",
        "window": "5m",
    }
    claim(settings)  # the same settings: no error
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
    claim(Settings(state_dir=tmp_path))
    with pytest.raises(CheckpointError) as refused:
        claim(Settings(state_dir=tmp_path).updated(**change))
    message = str(refused.value)
    folder = tmp_path / "checkpoints" / "speed"
    assert message.startswith(
        f"the speed checkpoint {folder} was made with max_trip=1h, registration_lookback=400d, "
        "rolling_slide=5m, rolling_window=1h, session_gap=30m, window=5m, but the settings now say "
    )
    assert named in message
    assert "start the speed layer over with `lambdaline speed reset`" in message
    claim(Settings(state_dir=tmp_path))  # set back: passes


def test_a_checkpoint_from_before_the_record_is_taken_to_match(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path, window=timedelta(minutes=15))
    (checkpoint_dir(settings) / "booth_stats" / "offsets").mkdir(parents=True)
    claim(settings)
    recorded = json.loads((checkpoint_dir(settings) / "view_settings.json").read_text())
    assert recorded == {
        "max_trip": "1h", "registration_lookback": "400d", "rolling_slide": "5m",
        "rolling_window": "1h", "session_gap": "30m", "window": "15m",
    }  # fmt: skip


def test_a_record_that_is_not_json_is_named(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path)
    recorded = checkpoint_dir(settings) / "view_settings.json"
    recorded.parent.mkdir(parents=True)
    recorded.write_text("window = 5m\n")
    with pytest.raises(CheckpointError, match=rf"cannot read {recorded} \(Expecting value"):
        claim(settings)


EMPTY_STORE = {"speed.booth_stats": 0, "speed.progress": 0}
WRITTEN_STORE = {"speed.booth_stats": 12, "speed.progress": 3}


def test_a_new_checkpoint_may_start_on_an_empty_speed_store(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path)
    claim(settings)  # what `speed run` does first: the folder and its record exist
    assert not checkpoint_started(checkpoint_dir(settings))
    claim_speed_store(checkpoint_dir(settings), EMPTY_STORE)


def test_a_new_checkpoint_is_refused_a_speed_store_written_by_another(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path)
    claim(settings)
    with pytest.raises(CheckpointError) as refused:
        claim_speed_store(checkpoint_dir(settings), WRITTEN_STORE)
    message = str(refused.value)
    assert message.startswith(
        f"the speed checkpoint {checkpoint_dir(settings)} is new, but the speed store's topics "
        "hold records of an earlier one: speed.booth_stats (12), speed.progress (3) records."
    )
    assert "`lambdaline speed reset`" in message


def test_a_started_checkpoint_goes_on_over_the_store_it_wrote(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path)
    offsets = checkpoint_dir(settings) / "lookups" / "offsets"
    offsets.mkdir(parents=True)
    assert not checkpoint_started(
        checkpoint_dir(settings)
    )  # a query folder alone: no micro-batch begun
    (offsets / "0").write_text("v1\n")
    assert checkpoint_started(checkpoint_dir(settings))
    claim_speed_store(checkpoint_dir(settings), WRITTEN_STORE)


ENTRIES_ID = "5b0ba4a4-4c69-4b38-8bd5-6f0c1e57d2b1"
EXITS_ID = "0f6b4a64-93a1-4c2e-8d9b-2f3c5b1a7e10"


def test_the_first_start_records_the_input_topics_ids_and_a_new_id_is_refused(
    tmp_path: Path,
) -> None:
    settings = Settings(state_dir=tmp_path)
    claim_input_topics(
        checkpoint_dir(settings), {"toll.entries": ENTRIES_ID, "toll.exits": EXITS_ID}
    )
    recorded = tmp_path / "checkpoints" / "speed" / "input_topic_ids.json"
    assert json.loads(recorded.read_text()) == {"toll.entries": ENTRIES_ID, "toll.exits": EXITS_ID}
    claim_input_topics(
        checkpoint_dir(settings), {"toll.entries": ENTRIES_ID, "toll.exits": EXITS_ID}
    )

    new_id = "9d1e7c55-0000-4000-8000-000000000001"
    with pytest.raises(TopicsRecreatedError) as refused:
        claim_input_topics(
            checkpoint_dir(settings), {"toll.entries": new_id, "toll.exits": EXITS_ID}
        )
    assert str(refused.value) == (
        f"input topics were deleted and created again since the speed checkpoint "
        f"{tmp_path / 'checkpoints' / 'speed'} first read them: toll.entries (id {ENTRIES_ID}, "
        f"now {new_id}). Spark would go on from the old topics' offsets and skip the new "
        "topics' records below them without an error"
    )
    # the record is the checkpoint's: a refusal does not change it
    assert json.loads(recorded.read_text()) == {"toll.entries": ENTRIES_ID, "toll.exits": EXITS_ID}


def test_a_topic_the_record_lacks_or_kafka_no_longer_names_is_not_a_change() -> None:
    recorded = {"toll.entries": ENTRIES_ID, "toll.exits": EXITS_ID}
    assert recreated(recorded, {"toll.entries": ENTRIES_ID}) == []  # a missing topic
    assert recreated({}, recorded) == []  # a broker before 2.8 gives no ids
    assert recreated(recorded, {**recorded, "vehicle.registrations": EXITS_ID}) == []
    assert recreated(recorded, {"toll.entries": EXITS_ID, "toll.exits": ENTRIES_ID}) == [
        ("toll.entries", ENTRIES_ID, EXITS_ID), ("toll.exits", EXITS_ID, ENTRIES_ID)
    ]  # fmt: skip


@pytest.mark.parametrize("text", ["{", '["toll.entries"]', '{"toll.entries": 7}'])
def test_an_unreadable_record_of_topic_ids_is_named(tmp_path: Path, text: str) -> None:
    settings = Settings(state_dir=tmp_path)
    recorded = tmp_path / "checkpoints" / "speed" / "input_topic_ids.json"
    recorded.parent.mkdir(parents=True)
    recorded.write_text(text)
    with pytest.raises(CheckpointError, match=rf"^cannot read {recorded} \("):
        claim_input_topics(checkpoint_dir(settings), {"toll.entries": ENTRIES_ID})


def test_a_checkpoint_of_the_layout_before_is_refused_naming_the_reset(tmp_path: Path) -> None:
    folder = checkpoint_dir(Settings(state_dir=tmp_path))
    folder.mkdir(parents=True)
    (folder / STATE_LAYOUT_FILE).write_text("booth lane, plate lane\n")  # two operators
    with pytest.raises(CheckpointError) as refused:
        claim_state_store(folder, ROCKSDB_PROVIDER)
    assert "keeps its state as booth lane, plate lane" in str(refused.value)
    assert f"now keeps it as {STATE_LAYOUT}" in str(refused.value)
    assert "lambdaline speed reset" in str(refused.value)


def test_a_new_checkpoint_records_the_layout_and_goes_on_under_it(tmp_path: Path) -> None:
    folder = checkpoint_dir(Settings(state_dir=tmp_path))
    claim_state_store(folder, ROCKSDB_PROVIDER)
    assert (folder / STATE_LAYOUT_FILE).read_text() == STATE_LAYOUT + "\n"
    claim_state_store(folder, ROCKSDB_PROVIDER)  # the next start of it


def test_a_checkpoint_for_other_operator_views_is_refused_naming_the_reset(
    tmp_path: Path,
) -> None:
    folder = checkpoint_dir(Settings(state_dir=tmp_path))
    claim_state_store(folder, ROCKSDB_PROVIDER, ["booth_stats", "vehicle_trips"])
    claim_state_store(folder, ROCKSDB_PROVIDER, ["booth_stats", "vehicle_trips"])
    with pytest.raises(CheckpointError) as refused:  # a best match added before the trips
        claim_state_store(folder, ROCKSDB_PROVIDER, ["booth_stats", "next_entries",
                                                     "vehicle_trips"])  # fmt: skip
    assert "in slots, of booth_stats, vehicle_trips, but" in str(refused.value)
    assert "of booth_stats, next_entries, vehicle_trips" in str(refused.value)
    assert "lambdaline speed reset" in str(refused.value)
