"""The speed job's Spark conf under the user's: the joins' state format follows the
state store the user chose."""

from __future__ import annotations

from speed_layer import job
from speed_layer.checkpoint import ROCKSDB_PROVIDER, STATE_STORE_PROVIDER_CONF

HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
FORMAT = "spark.sql.streaming.join.stateFormatVersion"


def test_by_default_the_joins_keep_column_families_in_rocksdb() -> None:
    conf = job.speed_spark_conf({})

    assert conf[STATE_STORE_PROVIDER_CONF] == ROCKSDB_PROVIDER
    assert conf[FORMAT] == "3"
    assert job.speed_spark_conf({STATE_STORE_PROVIDER_CONF: ROCKSDB_PROVIDER})[FORMAT] == "3"


def test_another_provider_gets_sparks_default_join_format() -> None:
    assert job.speed_spark_conf({STATE_STORE_PROVIDER_CONF: HDFS})[FORMAT] == "2"
    assert job.SPEED_SPARK_CONF[FORMAT] == "3"  # the call above changed nothing shared
