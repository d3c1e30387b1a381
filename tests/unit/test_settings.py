from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError

from shared.settings import (
    Settings,
    SettingsError,
    duration_label,
    get_settings,
    parse_duration,
    read_settings,
)


def test_defaults_are_those_of_the_design() -> None:
    settings = read_settings()
    assert settings == Settings()
    assert settings.state_dir == Path.cwd() / ".lambdaline"
    assert settings.kafka.bootstrap == "127.0.0.1:9092"
    assert settings.views.sizes["window"] == timedelta(minutes=5)
    assert settings.views.sizes["max_trip"] == timedelta(hours=1)
    assert settings.views.watermark == timedelta(minutes=2)
    assert settings.views.max_future_skew == timedelta(hours=1)
    assert settings.kafka.partitions == 2
    assert settings.topics.entries == "toll.entries"
    assert settings.topics.dead_letters == "dead.letters"
    assert settings.serving.api_keys == []
    assert settings.speed.trigger == timedelta(seconds=1)
    assert settings.speed.max_offsets_per_trigger == 60_000
    assert settings.speed.diagnostics_trigger == timedelta(seconds=10)


def test_environment_overrides_with_the_names_the_design_fixes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LAMBDALINE_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("LAMBDALINE_KAFKA_BOOTSTRAP", "localhost:19092")
    monkeypatch.setenv("LAMBDALINE_API_KEYS", "alpha, beta,,gamma")
    monkeypatch.setenv("LAMBDALINE_WINDOW", "90s")
    monkeypatch.setenv("LAMBDALINE_TOPICS__ENTRIES", "test.entries")
    settings = read_settings()
    assert settings.state_dir == tmp_path
    assert (settings.kafka.bootstrap_host, settings.kafka.bootstrap_port) == ("localhost", 19092)
    assert settings.serving.api_keys == ["alpha", "beta", "gamma"]
    assert settings.views.sizes["window"] == timedelta(seconds=90)
    assert settings.topics.entries == "test.entries"


def test_toml_file_is_read_and_environment_wins(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "lambdaline.toml"
    config.write_text('watermark = "30s"\nmax_trip = "2h"\n[topics]\nexits = "x.exits"\n')
    monkeypatch.setenv("LAMBDALINE_CONFIG", str(config))
    monkeypatch.setenv("LAMBDALINE_MAX_TRIP", "45m")
    settings = read_settings()
    assert settings.views.watermark == timedelta(seconds=30)
    assert settings.views.sizes["max_trip"] == timedelta(minutes=45)
    assert settings.topics.exits == "x.exits"


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        ("LAMBDALINE_WINDOW", "-5m", "LAMBDALINE_WINDOW"),
        ("LAMBDALINE_WATERMARK", "soon", "LAMBDALINE_WATERMARK"),
        ("LAMBDALINE_KAFKA_BOOTSTRAP", "no-port", "LAMBDALINE_KAFKA_BOOTSTRAP"),
        ("LAMBDALINE_KAFKA_PARTITIONS", "0", "LAMBDALINE_KAFKA_PARTITIONS"),
        ("LAMBDALINE_TOPICS__ENTRIES", "bad topic!", "LAMBDALINE_TOPICS__ENTRIES"),
        ("LAMBDALINE_SPEED_TRIGGER", "0s", "LAMBDALINE_SPEED_TRIGGER"),
        (
            "LAMBDALINE_SPEED_MAX_OFFSETS_PER_TRIGGER",
            "0",
            "LAMBDALINE_SPEED_MAX_OFFSETS_PER_TRIGGER",
        ),
        ("LAMBDALINE_INPUT_RETENTION", "0s", "LAMBDALINE_INPUT_RETENTION"),
        ("LAMBDALINE_KAFKA_START_TIMEOUT", "-90s", "LAMBDALINE_KAFKA_START_TIMEOUT"),
    ],
)
def test_a_bad_setting_fails_naming_it(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, named: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError, match=named):
        get_settings()


def test_unknown_setting_in_toml_is_rejected_with_the_closest_name(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "lambdaline.toml"
    config.write_text("windw = '5m'\n[topics]\nentrys = 'x.entries'\n")
    monkeypatch.setenv("LAMBDALINE_CONFIG", str(config))
    with pytest.raises(SettingsError) as raised:
        get_settings()
    assert str(raised.value).splitlines() == [
        f"unknown setting topics.entrys in {config}; did you mean topics.entries?",
        f"unknown setting windw in {config}; did you mean window?",
    ]


def test_an_environment_variable_that_names_no_setting_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # pydantic-settings ignores these: a misspelt name would change nothing without a word
    monkeypatch.setenv("LAMBDALINE_SPARK_DRIVER_MEM", "8g")
    monkeypatch.setenv("LAMBDALINE_TOPICS__ENTRYS", "x.entries")
    monkeypatch.setenv("LAMBDALINE_QQQ", "1")
    with pytest.raises(SettingsError) as raised:
        get_settings()
    assert str(raised.value).splitlines() == [
        "unknown setting LAMBDALINE_QQQ: no setting has that name",
        "unknown setting LAMBDALINE_SPARK_DRIVER_MEM: no setting has that name; "
        "did you mean LAMBDALINE_SPARK_DRIVER_MEMORY?",
        "unknown setting LAMBDALINE_TOPICS__ENTRYS: no setting has that name; "
        "did you mean LAMBDALINE_TOPICS__ENTRIES?",
    ]


def test_known_names_in_any_case_and_the_variables_read_elsewhere_are_accepted(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "lambdaline.toml"
    config.write_text("")
    monkeypatch.setenv("lambdaline_watermark", "30s")
    monkeypatch.setenv("LAMBDALINE_TOPICS", '{"exits": "x.exits"}')
    monkeypatch.setenv("LAMBDALINE_FAILPOINT", "before-rename")
    monkeypatch.setenv("LAMBDALINE_CONFIG", str(config))
    settings = get_settings()
    assert settings.views.watermark == timedelta(seconds=30)
    assert settings.topics.exits == "x.exits"


def test_a_config_file_that_is_missing_or_not_toml_is_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "lambdaline.toml"
    monkeypatch.setenv("LAMBDALINE_CONFIG", str(config))
    with pytest.raises(
        SettingsError, match=rf"^LAMBDALINE_CONFIG names {re.escape(str(config))}, "
    ):
        get_settings()
    config.write_text('watermark = "2m\n')
    with pytest.raises(
        SettingsError, match=rf"^{re.escape(str(config))} is not valid TOML: .*line 1, column 16"
    ):
        get_settings()


def test_a_file_where_a_directory_setting_points_is_named(tmp_path: Path) -> None:
    in_the_way = tmp_path / "state"
    in_the_way.write_text("")
    with pytest.raises(
        ValidationError, match=f"{re.escape(str(in_the_way))} exists and is not a directory"
    ):
        Settings(state_dir=in_the_way)
    with pytest.raises(ValidationError, match=r"batch\.store_dir"):
        Settings(state_dir=tmp_path, batch_store_dir=in_the_way)


def test_directories_are_made_absolute_where_the_settings_are_read(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # a path names the same place in every process it is handed to (the Spark JVM, the broker)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LAMBDALINE_STATE_DIR", "state")
    monkeypatch.setenv("LAMBDALINE_BATCH_STORE_DIR", "../published")
    monkeypatch.setenv("LAMBDALINE_JVM_CACHE_DIR", "jars")
    settings = get_settings()
    assert settings.state_dir == tmp_path / "state"
    assert settings.checkpoints_dir == tmp_path / "state" / "checkpoints"
    assert settings.master_location == f"{tmp_path}/state/master"
    assert settings.batch_store == tmp_path / ".." / "published"
    assert settings.jvm_cache_dir == tmp_path / "jars"

    monkeypatch.setenv("LAMBDALINE_MASTER_DIR", "lake/master/")
    assert get_settings.__wrapped__().master_location == f"{tmp_path}/lake/master"
    for url in ("hdfs://namenode:8020/lambdaline/master", "s3a://lake/master", "file:/x"):
        monkeypatch.setenv("LAMBDALINE_MASTER_DIR", url)
        assert get_settings.__wrapped__().master_location == url


def test_a_window_must_divide_a_day() -> None:
    with pytest.raises(ValidationError, match="must divide a day evenly"):
        Settings(window="7m")
    assert Settings(window="15m").views.sizes["window"].total_seconds() == 900


@pytest.mark.parametrize(
    ("duration", "label"),
    [
        (timedelta(minutes=5), "5m"), (timedelta(minutes=10), "10m"), (timedelta(minutes=90), "90m"),
        (timedelta(hours=1), "1h"), (timedelta(days=1), "1d"), (timedelta(days=2), "2d"),
        (timedelta(seconds=90), "90s"), (timedelta(milliseconds=1500), "1500ms"),
    ],
)  # fmt: skip
def test_a_duration_has_a_label_the_settings_read_back(duration: timedelta, label: str) -> None:
    assert duration_label(duration) == label
    assert parse_duration(label) == duration


def test_batch_cron_must_be_a_cron_expression() -> None:
    with pytest.raises(ValidationError, match="its hour field '24' is not valid"):
        Settings(batch_cron="0 24 * * *")
    with pytest.raises(ValidationError, match="has 6 fields"):
        Settings(demo_batch_cron="0 0 1 * * *")


def test_master_and_batch_store_default_under_the_state_dir(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path)
    assert settings.master_location == str(tmp_path / "master")
    assert settings.batch_store == tmp_path / "batch"
    moved = Settings(state_dir=tmp_path, master_dir="hdfs://namenode:8020/lambdaline/master/")
    assert moved.master_location == "hdfs://namenode:8020/lambdaline/master"


def test_extra_spark_conf_is_json_and_a_bad_value_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAMBDALINE_SPARK_CONF", '{"spark.scheduler.mode": "FAIR"}')
    assert get_settings().spark.conf == {"spark.scheduler.mode": "FAIR"}
    get_settings.cache_clear()
    monkeypatch.setenv("LAMBDALINE_SPARK_CONF", "FAIR")
    with pytest.raises(
        SettingsError, match=r"invalid setting spark_conf \(LAMBDALINE_SPARK_CONF\): not valid JSON"
    ):
        get_settings()


def test_updated_takes_a_whole_group_or_flat_names(tmp_path: Path) -> None:
    """How the bench and the soak keep the user's views, speed job and Spark on a broker of
    their own."""
    users = Settings(state_dir=tmp_path / "user", max_trip="25m", spark_conf={"a": "b"})
    broker = Settings(state_dir=tmp_path / "bench", kafka_bootstrap="127.0.0.1:1")
    moved = broker.updated(views=users.views, spark=users.spark, window="10m")
    assert moved.views.sizes["max_trip"] == timedelta(minutes=25)
    assert moved.views.sizes["window"] == timedelta(minutes=10)  # a flat name over its group
    assert moved.spark.conf == {"a": "b"}
    assert (moved.state_dir, moved.kafka.bootstrap) == (tmp_path / "bench", "127.0.0.1:1")
