"""Generations' pure parts: names, records, the pointer, where a new job starts, readiness,
tokens and stream ids across generations (the whole path: tests/integration/test_generations.py)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lambdaline.cli import app
from serving.consistency import ConsistencyToken
from serving.stream import BadEventIdError, StreamHub, decode_id, encode_id
from shared.domain.topics import Topics
from shared.platform.batch_store import BatchVersion
from shared.platform.generations import (
    FIRST,
    Active,
    Generation,
    GenerationError,
    JobFacts,
    generation_settings,
    input_lag,
    of_settings,
    read_active,
    read_generations,
    replay_from,
    retire_record,
    settings_of,
    waiting_for,
    write_active,
    write_generation,
)
from shared.settings import Settings
from speed_layer.job import input_starts

H = datetime(2026, 1, 6, tzinfo=UTC)


def test_generation_one_keeps_its_names_and_later_ones_get_their_own() -> None:
    topics = Topics()
    assert topics.of_generation(1) is topics
    two = topics.of_generation(2)
    assert two.speed("booth_stats") == "speed.g2.booth_stats"
    assert two.speed_progress == "speed.progress.g2"
    assert two.diagnostic_entries == "speed.g2.internal.diagnostic_entries"
    assert (two.entries, two.dead_letters) == (topics.entries, topics.dead_letters)
    with pytest.raises(ValueError, match="from 1"):
        topics.of_generation(0)


def test_a_generations_paths_are_its_own(tmp_path: Path) -> None:
    one, two = Settings(state_dir=tmp_path), Settings(state_dir=tmp_path, generation=2)
    assert one.batch_store == one.batch_store_root == tmp_path / "batch"
    assert two.batch_store == tmp_path / "batch" / "generations" / "0002"
    assert two.batch_store_root == one.batch_store_root
    assert (one.speed_checkpoint.name, two.speed_checkpoint.name) == ("speed", "speed.g2")
    assert two.speed_topics.speed_store()[0] == "speed.g2.booth_stats"
    assert two.topics == one.topics  # the configured names; the inputs are shared


def test_a_record_reads_back_and_its_fingerprint_follows_settings_and_code(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path)
    first = of_settings(settings, 1)
    write_generation(tmp_path, first)
    assert read_generations(tmp_path) == {1: first}
    assert of_settings(settings, 2).fingerprint == first.fingerprint  # same settings, same code
    wider = of_settings(settings.updated(window="10m"), 2)
    assert wider.fingerprint != first.fingerprint
    other_code = Generation(
        2, first.modules, {**first.digests, first.modules[0]: "0" * 64}, first.view_settings,
        first.created_at,
    )  # fmt: skip
    assert other_code.fingerprint != first.fingerprint


def test_active_is_generation_one_until_written_and_then_what_was_written(tmp_path: Path) -> None:
    assert read_active(tmp_path) == FIRST
    written = Active(2, 1, datetime(2026, 11, 29, 4, 0, tzinfo=UTC))
    write_active(tmp_path, written)
    assert read_active(tmp_path) == written
    (tmp_path / "ACTIVE").write_text("{not json")
    with pytest.raises(GenerationError, match="cannot read"):
        read_active(tmp_path)


def test_a_generation_runs_with_its_recorded_view_settings_whatever_the_environment(
    tmp_path: Path,
) -> None:
    base = Settings(state_dir=tmp_path)
    write_generation(tmp_path / "batch", of_settings(base.updated(window="10m"), 2))
    chosen = generation_settings(base.updated(window="15m"), 2)
    assert (chosen.generation, chosen.views.labels["window"]) == (2, "10m")
    with pytest.raises(GenerationError, match="no generation 3"):
        generation_settings(base, 3)
    assert generation_settings(base, 1).generation == 1  # never recorded: as configured


def test_a_generation_of_other_view_modules_or_code_is_refused(tmp_path: Path) -> None:
    base = Settings(state_dir=tmp_path)
    made = of_settings(base, 2)
    more = Generation(2, (*made.modules, "tests.views.heavy_vehicles"), made.digests,
                      made.view_settings, made.created_at)  # fmt: skip
    with pytest.raises(
        GenerationError, match=re.escape("LAMBDALINE_VIEW_MODULES='tests.views.heavy")
    ):
        settings_of(base, more)
    changed = Generation(2, made.modules, {**made.digests, made.modules[1]: "f" * 64},
                         made.view_settings, made.created_at)  # fmt: skip
    with pytest.raises(
        GenerationError, match=re.escape("other code of shared.domain.views.vehicle_trips")
    ):
        settings_of(base, changed)


def test_a_new_job_reads_back_a_day_and_the_lateness_bounds_before_the_horizon() -> None:
    settings = Settings()  # watermark 2m, max_future_skew 1h, max_trip 1h, rolling 1h
    assert replay_from(settings, None) is None
    assert replay_from(settings, H) == H - timedelta(days=1, hours=1, minutes=2)
    long_trips = settings.updated(max_trip="2d")
    assert replay_from(long_trips, H) == H - timedelta(days=2, hours=1, minutes=2)


def test_a_new_job_reads_the_looked_up_events_back_by_their_lookback() -> None:
    settings = Settings().updated(registration_lookback="30d")
    starts = input_starts(settings, H)
    topics = settings.topics
    # entries and exits from the replay point, registrations 30 days before it
    assert starts[topics.entries] == H
    assert starts[topics.exits] == H
    assert starts[topics.registrations] == H - timedelta(days=30)
    assert input_starts(settings, None) == {}


def test_the_lag_is_each_input_partitions_end_less_the_least_read_to() -> None:
    ends = {("in", 0): 100, ("in", 1): 50}
    reports = {
        "speed.booths": {"source_end_offsets": [{"in": {"0": 90, "1": 50}}]},
        "speed.lookups": {"source_end_offsets": [{"in": {"0": 95, "1": 40}}]},
        "speed.derived.diagnostics": {"source_end_offsets": [{"internal": {"0": 1}}]},
    }
    assert input_lag(reports, ends) == (100 - 90) + (50 - 40)
    assert input_lag({"speed.booths": reports["speed.booths"]}, {**ends, ("in", 2): 5}) is None


def _version(horizon: datetime) -> BatchVersion:
    return BatchVersion(1, horizon, horizon, (), (), {}, None, {}, generation=2)


def test_ready_needs_a_version_reaching_its_start_a_close_watermark_and_little_lag() -> None:
    speed = Settings().speed  # 1 min, 10,000 records
    made = of_settings(Settings(), 2)
    new = Generation(2, made.modules, made.digests, made.view_settings, made.created_at,
                     covers_from=H)  # fmt: skip
    now = H + timedelta(hours=3)
    close = JobFacts(now - timedelta(seconds=30), 10)
    assert waiting_for(new, _version(H), close, now, speed) == []
    [no_version] = waiting_for(new, None, close, now, speed)
    assert "batch run --generation 2" in no_version
    [short] = waiting_for(new, _version(H - timedelta(days=1)), close, now, speed)
    assert "reaching 2026-01-06T00:00:00.000Z" in short
    [behind] = waiting_for(new, _version(H), JobFacts(now - timedelta(minutes=5), 0), now, speed)
    assert "300 s behind" in behind and "speed_promote_watermark_gap" in behind
    [lagging] = waiting_for(new, _version(H), JobFacts(now, 20_000), now, speed)
    assert "20,000 input records" in lagging
    assert len(waiting_for(new, None, JobFacts(None, None), now, speed)) == 2


def test_a_token_says_its_generation_and_one_of_another_is_not_waited_for() -> None:
    token = ConsistencyToken(batch_version=3, input={"in": {0: 10}}, generation=2)
    assert ConsistencyToken.decode(token.encode()) == token
    raw = json.loads(__import__("base64").urlsafe_b64decode(token.encode() + "=="))
    assert raw["generation"] == 2
    have = ConsistencyToken(batch_version=1, input={"in": {0: 5}}, generation=1)
    assert have.behind(token) == []  # another generation: nothing orders
    assert have.behind(ConsistencyToken(input={"in": {0: 10}}, generation=1)) == [
        "input in[0] to 10 (at 5)"
    ]
    assert have.behind(ConsistencyToken(input={"in": {0: 10}})) != []  # none named: the first


def test_stream_ids_name_their_generation_from_the_second_on() -> None:
    positions = {("booth_stats", 0): 12}
    assert encode_id(positions) == "booth_stats.0:12"
    assert encode_id(positions, 3) == "g3/booth_stats.0:12"
    assert decode_id("g3/booth_stats.0:12", 10) == (3, positions)
    assert decode_id("booth_stats.0:12", 10) == (1, positions)
    with pytest.raises(BadEventIdError):
        decode_id("g1/booth_stats.0:12", 10)


def test_a_last_event_id_of_another_generation_is_answered_with_reset() -> None:
    hub = StreamHub(100, 10, generation=2)
    views = frozenset({"booth_stats"})
    moved = hub.subscribe(views, {("booth_stats", 0): 5}, (), resume_generation=1)
    assert moved.first[0].startswith(b"event: reset\nid: \n")
    assert b"of generation 1; the stream is of generation 2" in moved.first[0]
    same = hub.subscribe(views, {("booth_stats", 0): 5}, (), resume_generation=2)
    assert same.first == [] and same.generation == 2


def _cli(monkeypatch: pytest.MonkeyPatch, state: Path, *args: str) -> tuple[int, str]:
    monkeypatch.setenv("LAMBDALINE_STATE_DIR", str(state))
    monkeypatch.setenv("COLUMNS", "300")
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def test_generation_commands_name_what_is_wrong_and_exit_1(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    code, said = _cli(monkeypatch, tmp_path, "generation", "status")
    assert code == 0 and "one generation (1), never recorded" in said
    code, said = _cli(monkeypatch, tmp_path, "generation", "start", "--no-job")
    assert code == 1 and "nothing has been computed yet" in said
    code, said = _cli(monkeypatch, tmp_path, "generation", "promote")
    assert code == 1 and "no generation newer than the served one (1)" in said
    code, said = _cli(monkeypatch, tmp_path, "generation", "rollback")
    assert code == 1 and "generation 1 is served and none was before it" in said
    code, said = _cli(monkeypatch, tmp_path, "generation", "retire", "1")
    assert code == 1 and "no generation 1" in said
    code, said = _cli(monkeypatch, tmp_path, "speed", "run", "--generation", "4")
    assert code == 1 and "no generation 4" in said
    code, said = _cli(monkeypatch, tmp_path, "batch", "run", "--generation", "4", "--date",
                      "2026-01-05")  # fmt: skip
    assert code == 1 and "no generation 4" in said


def test_the_served_generation_cannot_be_retired_nor_a_retired_one_served_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    root = Settings(state_dir=tmp_path).batch_store_root
    settings = Settings(state_dir=tmp_path)
    write_generation(root, of_settings(settings, 1))
    write_generation(root, of_settings(settings.updated(window="10m"), 2))
    write_active(root, Active(2, 1, H))
    code, said = _cli(monkeypatch, tmp_path, "generation", "retire", "2")
    assert code == 1 and "generation 2 is served" in said
    retire_record(root, read_generations(root)[1])
    code, said = _cli(monkeypatch, tmp_path, "generation", "rollback")
    assert code == 1 and "was retired: it cannot be served" in said
    assert read_active(root).generation == 2
    code, said = _cli(monkeypatch, tmp_path, "speed", "run")  # generation 1, by default
    assert code == 1 and "generation 2 is served (--generation 2)" in said
