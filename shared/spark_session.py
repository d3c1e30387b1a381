"""The SparkSession both layers run in, configured from settings.

Local runs get ``spark_master`` (default ``local[*]``), a capped driver heap, the
Kafka connector jars and few shuffle partitions. Under ``spark-submit`` the
master, memory and jars come from the submit command (see deploy/spark/); only
the SQL settings the views depend on (UTC session time zone, shuffle partitions,
Parquet timestamp type) are applied.

State stays in Spark's default HDFS-backed state store: on this project's small
local state it measured faster than RocksDB (no-data micro-batches of the join
queries took 3-6 s instead of ~40 s on two cores). For large state on a cluster,
pass ``--conf spark.sql.streaming.stateStore.providerClass=...RocksDBStateStoreProvider``
to spark-submit (before the first run: a checkpoint keeps its provider).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

from shared.jvm import spark_kafka_jars
from shared.settings import Settings


def under_spark_submit() -> bool:
    """True when spark-submit launched this process: its JVM is already running,
    with the master, memory and jars the submit command gave."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def spark_session(
    settings: Settings, app_name: str, extra_config: Mapping[str, str] | None = None
) -> SparkSession:
    """Get or create the session, with the Spark Kafka connector on its classpath.

    ``extra_config`` is the caller's tuning (a layer's defaults); the user's
    ``spark_conf`` setting overrides it key by key.
    """
    builder = SparkSession.builder.appName(app_name)
    if not under_spark_submit():
        if settings.spark_master.startswith("local"):
            # Python UDF workers must run this interpreter (the project's venv), not
            # whatever `python3` is first on the PATH; pyspark reads only the
            # environment variable for that. A cluster sets its own.
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        jars = ",".join(str(jar) for jar in spark_kafka_jars(settings))
        builder = (
            builder.master(settings.spark_master)
            .config("spark.jars", jars)
            .config("spark.driver.memory", settings.spark_driver_memory)
        )
    for key, value in {**(extra_config or {}), **settings.spark_conf}.items():
        builder = builder.config(key, value)
    sql_settings = {
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(settings.spark_shuffle_partitions),
        # the master dataset's Parquet: standard microsecond timestamps, not legacy INT96
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    }
    for key, value in sql_settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    for key, value in sql_settings.items():  # the session may have existed already
        if key.startswith("spark.sql."):
            session.conf.set(key, value)
    return session
