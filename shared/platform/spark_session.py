"""The SparkSession both layers run in, configured from settings.

Local runs get ``spark_master`` (default ``local[*]``), a capped driver heap, the
Kafka connector jars and few shuffle partitions; a ``local`` driver listens on the
loopback only. Under ``spark-submit`` the
master, memory and jars come from the submit command (see deploy/spark/); only
the SQL settings the views depend on (UTC session time zone, shuffle partitions,
Parquet timestamp type) are applied.

Both layers build their plans through thousands of PySpark calls (the shared
decode alone makes about 2,000 column expressions), so the session leaves
PySpark's DataFrame debugging off (:data:`SESSION_CONF`): with it on, every such
call first asks the JVM for the active session, a setting and the caller's stack,
five round trips instead of one.

A local driver keeps its scratch (shuffle files, spills, the temporary
directories of each application, the session's ``artifacts``) under
``<state_dir>/spark-local`` instead of ``/tmp`` (``SPARK_LOCAL_DIRS``, and the
driver JVM's ``java.io.tmpdir``):
Spark deletes them when it stops, and what a killed run leaves goes with the
state directory (``make clean``; a test's temporary directory). Set
``spark.local.dir`` in ``spark_conf``, or ``SPARK_LOCAL_DIRS``, to put it elsewhere.

A local driver also logs as ``shared/platform/spark-log4j2.properties`` says (Spark's
defaults at WARN, without four warnings that ask nothing of
the user), unless ``SPARK_SUBMIT_OPTS`` names a log4j2 file or ``SPARK_CONF_DIR``
is set.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from pyspark.sql import SparkSession

from shared.platform.environment import temporary_environment
from shared.platform.jvm import spark_kafka_jars
from shared.platform.streaming import QUERY_STOP_TIMEOUT_S
from shared.settings import Settings

DRIVER_LOG4J2 = Path(__file__).with_name("spark-log4j2.properties")
"""A local driver's logging: Spark's defaults at WARN, less warnings that ask nothing."""


SESSION_CONF = {
    # a query's stop() is bounded (shared.platform.streaming.QUERY_STOP_TIMEOUT_S)
    "spark.sql.streaming.stopTimeout": f"{QUERY_STOP_TIMEOUT_S * 1000}ms",
    # every PySpark call would otherwise record its Python call site in the JVM
    # (four more py4j round trips each): building the speed job's plans took 7.6 s
    # instead of 2.7 s (docs/performance.md). It only adds the Python line to the
    # context of a runtime error; set it to true in spark_conf to have that.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
}
"""Both layers' session settings, under their own tuning and the user's ``spark_conf``."""


def under_spark_submit() -> bool:
    """True when spark-submit launched this process: its JVM is already running,
    with the master, memory and jars the submit command gave."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def spark_session(
    settings: Settings,
    app_name: str,
    extra_config: Mapping[str, str] | None = None,
    extra_jars: Sequence[Path] = (),
) -> SparkSession:
    """Get or create the session, with the Spark Kafka connector on its classpath.

    ``extra_config`` is the caller's tuning (a layer's defaults); the user's
    ``spark_conf`` setting overrides it key by key. ``extra_jars`` join the
    connector's (a layer's own operators); Spark ships them to the executors.
    """
    builder = SparkSession.builder.appName(app_name)
    config = {**SESSION_CONF, **(extra_config or {}), **settings.spark.conf}
    launch_environment: dict[str, str] = {}
    if not under_spark_submit():
        if settings.spark.master.startswith("local"):
            # Python UDF workers must run this interpreter (the project's venv), not
            # whatever `python3` is first on the PATH; pyspark reads only the
            # environment variable for that. A cluster sets its own.
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            if "SPARK_LOCAL_IP" not in os.environ:
                # a local driver serves its blocks and RPC to itself alone: on the
                # loopback, not on the host's first interface (which Spark picks, with
                # a warning on every start, when the host name resolves to loopback)
                launch_environment["SPARK_LOCAL_IP"] = "127.0.0.1"
        jars = ",".join(
            str(jar) for jar in [*spark_kafka_jars(settings.jvm_cache_dir), *extra_jars]
        )
        builder = (
            builder.master(settings.spark.master)
            .config("spark.jars", jars)
            .config("spark.driver.memory", settings.spark.driver_memory)
        )
        submit_options = os.environ.get("SPARK_SUBMIT_OPTS", "")
        driver_options = [submit_options]
        if "spark.local.dir" not in config and "SPARK_LOCAL_DIRS" not in os.environ:
            scratch = settings.state_dir / "spark-local"
            scratch.mkdir(parents=True, exist_ok=True)
            # the environment variable, not spark.local.dir: Spark warns about that
            # setting on every start (a cluster manager would override it)
            launch_environment["SPARK_LOCAL_DIRS"] = str(scratch)
            # the JVM's own temporary directory too: spark-submit makes one there
            # per application (empty), which a killed driver left in /tmp, and the
            # session its artifacts/
            driver_options.append(f"-Djava.io.tmpdir={scratch}")
        if "log4j2.configurationFile" not in submit_options and "SPARK_CONF_DIR" not in os.environ:
            driver_options.append(f"-Dlog4j2.configurationFile={DRIVER_LOG4J2}")
        launch_environment["SPARK_SUBMIT_OPTS"] = " ".join(filter(None, driver_options))
    for key, value in config.items():
        builder = builder.config(key, value)
    sql_settings = {
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(settings.spark.shuffle_partitions),
        # the master dataset's Parquet: standard microsecond timestamps, not legacy INT96
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    }
    for key, value in sql_settings.items():
        builder = builder.config(key, value)
    with temporary_environment(
        launch_environment
    ):  # the driver's JVM, if it starts now, inherits it
        session = builder.getOrCreate()
    for key, value in sql_settings.items():  # the session may have existed already
        if key.startswith("spark.sql."):
            session.conf.set(key, value)
    return session
