"""Where a local driver keeps its scratch (the session shared by the tests is one)."""

from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from shared.platform.spark_session import DRIVER_LOG4J2


def test_a_local_driver_keeps_its_scratch_under_the_state_dir(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> None:
    if "SPARK_LOCAL_DIRS" in os.environ:
        pytest.skip("SPARK_LOCAL_DIRS is set in this shell, and it wins")
    context = spark.sparkContext
    utils = context._jvm.org.apache.spark.util.Utils  # type: ignore[union-attr]
    [local_dir] = [Path(d) for d in utils.getConfiguredLocalDirs(context._jsc.sc().conf())]  # type: ignore[union-attr]
    # the session fixture's state_dir is a temporary directory of this pytest run
    assert local_dir.name == "spark-local"
    assert local_dir.is_relative_to(tmp_path_factory.getbasetemp())
    spark.range(1_000).repartition(2).count()  # a shuffle writes its files there
    assert any(found.name.startswith("blockmgr-") for found in local_dir.iterdir())
    # set only while the JVM started: processes started later do not inherit it
    assert "SPARK_LOCAL_DIRS" not in os.environ


def test_a_local_driver_logs_without_the_warnings_that_ask_nothing(spark: SparkSession) -> None:
    if "SPARK_CONF_DIR" in os.environ or "log4j2" in os.environ.get("SPARK_SUBMIT_OPTS", ""):
        pytest.skip("this shell brings its own log4j2 configuration, and it wins")
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    assert jvm.java.lang.System.getProperty("log4j2.configurationFile") == str(DRIVER_LOG4J2)
    logs = jvm.org.apache.logging.log4j.LogManager
    quiet = "org.apache.spark.sql.execution.streaming.ResolveWriteToStream"
    assert str(logs.getLogger(quiet).getLevel()) == "ERROR"
    # its other warnings show (the test session's root logger is at ERROR)
    state_store = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
    assert str(logs.getLogger(state_store).getLevel()) == "WARN"


def test_a_local_driver_keeps_its_artifacts_in_its_scratch_directory(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> None:
    if "SPARK_LOCAL_DIRS" in os.environ:
        pytest.skip("SPARK_LOCAL_DIRS is set in this shell: the JVM's temporary directory is /tmp")
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    # where a session keeps Spark Connect artifacts: the JVM's temporary directory,
    # which is the scratch directory, not the directory the command was started from
    # (Spark 4.0.0 made it there: SPARK-52396)
    manager = getattr(getattr(jvm.org.apache.spark.sql.artifact, "ArtifactManager$"), "MODULE$")
    artifacts = Path(str(manager.artifactRootDirectory())).resolve()
    assert artifacts.parent.name == "spark-local"
    assert artifacts.is_relative_to(tmp_path_factory.getbasetemp())


def test_a_local_driver_listens_on_the_loopback_only(spark: SparkSession) -> None:
    if "SPARK_LOCAL_IP" in os.environ:
        pytest.skip("SPARK_LOCAL_IP is set in this shell, and it wins")
    host = spark.conf.get("spark.driver.host")
    assert host is not None and ipaddress.ip_address(socket.gethostbyname(host)).is_loopback, host
    assert "SPARK_LOCAL_IP" not in os.environ  # set only while the JVM started
