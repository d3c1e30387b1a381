from __future__ import annotations

from pathlib import Path

import pyspark

from shared.jvm import _artifact_name, pom_properties


def test_connector_version_matches_installed_pyspark() -> None:
    assert pom_properties()["spark.version"] == pyspark.__version__


def test_kafka_broker_is_a_4x_release() -> None:
    assert pom_properties()["kafka.version"].startswith("4.")


def test_artifact_names_drop_only_the_version() -> None:
    assert (
        _artifact_name(Path("spark-sql-kafka-0-10_2.13-4.0.0.jar")) == "spark-sql-kafka-0-10_2.13"
    )
    assert _artifact_name(Path("kafka-clients-3.9.0.jar")) == "kafka-clients"
    assert _artifact_name(Path("zstd-jni-1.5.7-7.jar")) == "zstd-jni"
