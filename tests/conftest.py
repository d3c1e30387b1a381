"""Fixtures shared by every test: one SparkSession for the whole run; for the tests that
need clusters, one Kafka cluster of three brokers and one Spark standalone cluster;
clean settings."""

from __future__ import annotations

import os

os.environ.setdefault(
    "PYARROW_IGNORE_TIMEZONE", "1"
)  # pyspark.pandas (assertDataFrameEqual) wants it
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from batch_layer.run import BATCH_SPARK_CONF
from lambdaline import kafka_broker, spark_cluster
from shared.platform.spark_session import spark_session
from shared.platform.topic_admin import create_topics
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


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """A running cluster of three KRaft brokers with every lambdaline topic (replication
    3), for the run: the cluster tests and the fault suite share it."""
    folder = tmp_path_factory.mktemp("kafka-cluster")
    with kafka_broker.ephemeral_broker(folder, brokers=3, kafka_heap="512m") as settings:
        create_topics(settings)
        yield settings
    assert not kafka_broker.status(settings).pids  # every node stopped, by its pid


@pytest.fixture(scope="session")
def spark_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """A Spark standalone cluster for the run: a master and two workers of two cores each,
    started and stopped by their pids."""
    ui = kafka_broker.free_ports(3)  # the master's web UI, then each worker's
    settings = Settings(
        state_dir=tmp_path_factory.mktemp("spark-cluster"),
        spark_cluster_port=kafka_broker.free_ports(1, avoid=frozenset(range(ui, ui + 3))),
        spark_cluster_ui_port=ui,
        spark_workers=2,
        spark_worker_cores=2,
    )
    state = spark_cluster.start(settings)
    try:
        assert state.alive_workers == 2 and len(state.pids) == 3
        yield settings
    finally:
        pids = spark_cluster.stop(settings)
        assert sorted(pids) == sorted(state.pids)
        assert not any(Path(f"/proc/{pid}").exists() for pid in pids)


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
