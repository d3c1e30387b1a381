"""Where a local driver keeps its scratch (the session shared by the tests is one)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pyspark.sql import SparkSession


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
