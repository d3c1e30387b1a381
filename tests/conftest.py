"""Fixtures shared by every test: one SparkSession for the whole run, clean settings."""

from __future__ import annotations

import os

os.environ.setdefault(
    "PYARROW_IGNORE_TIMEZONE", "1"
)  # pyspark.pandas (assertDataFrameEqual) wants it
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from batch_layer.run import BATCH_SPARK_CONF
from shared.platform.spark_session import spark_session
from shared.settings import Settings, get_settings
from speed_layer.job import SPEED_SPARK_CONF


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """One local SparkSession for the whole run: small, UTC, no UI. Tests never stop it.

    It has the speed job's fair scheduler pools; jobs started outside a pool (the
    batch layer's, the tests' own) run in order, as under Spark's default. It has
    the batch job's SQL tuning too, so an in-process batch run plans its joins as
    ``lambdaline batch run`` does (JVM options belong to the process, not here).
    """
    batch_sql = {
        key: value for key, value in BATCH_SPARK_CONF.items() if key.startswith("spark.sql.")
    }
    settings = Settings(
        state_dir=tmp_path_factory.mktemp("spark-session"),  # its scratch goes with the run
        spark_master="local[2]",
        spark_shuffle_partitions=2,
    )
    session = spark_session(
        settings,
        "lambdaline-tests",
        extra_config={
            **batch_sql,
            **SPEED_SPARK_CONF,
            "spark.ui.enabled": "false",
            "spark.default.parallelism": "2",
        },
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def _isolated_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Tests see default settings: no LAMBDALINE_* from the shell, an empty settings file."""
    for name in list(os.environ):
        if name.startswith("LAMBDALINE_"):
            monkeypatch.delenv(name)
    no_settings = tmp_path_factory.getbasetemp() / "empty.toml"
    no_settings.touch()
    monkeypatch.setenv("LAMBDALINE_CONFIG", str(no_settings))
    get_settings.cache_clear()


@pytest.fixture
def settings() -> Settings:
    return Settings()
