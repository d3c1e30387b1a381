"""The Spark settings of every Spark JVM the suite starts for its tests: the session the
tests share, and the speed and batch runs they start as processes.

A test's run reads a handful of records, once. Spark's generated Java for its plans (the
decode's stage alone is ~330 KB) costs more to compile than those rows cost to interpret,
and the JIT's optimising tier costs more than it saves before the run ends. So these runs
interpret their queries, on the JIT's first tier (docs/CONTRIBUTING.md has the figures).
Their drivers also map Spark's classes from one class archive (:func:`make_class_archive`)
rather than load and verify them again, which halves a cold start.

The users' defaults (``speed_layer.job.SPEED_SPARK_CONF``, ``batch_layer.run``) stay as
measured for them, and the demo (``tests/e2e/test_demo.py``) runs both layers on them, as
a user does. The tests that count compiled classes (``tests/unit/test_speed_records.py``)
turn code generation on for themselves.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyspark

from shared.platform.jvm import JdkToolMissingError, jdk_tool

INTERPRETED_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""The JIT's first tier alone, and the serial collector: in place of the speed job's
options, which keep compiled code for days of running."""


def _class_archive_path() -> Path:
    """The archive of this virtual environment's Spark classes, for its JDK: a file in the
    environment (its class path names the environment's jars; ``make clean`` removes it)."""
    jars = sorted(path.name for path in (Path(pyspark.__file__).parent / "jars").glob("*.jar"))
    try:
        java = os.path.realpath(jdk_tool("java"))
    except JdkToolMissingError:  # the tests that need it say so
        java = ""
    key = json.dumps([java, pyspark.__version__, jars])
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return Path(sys.prefix) / f"lambdaline-spark-classes-{digest}.jsa"


CLASS_ARCHIVE = _class_archive_path()
"""Where :func:`make_class_archive` writes the archive."""

DRIVER_JVM = f"{INTERPRETED_JVM} -XX:SharedArchiveFile={CLASS_ARCHIVE}"
"""A driver's options. Without the archive (or with one another JDK or class path made)
the JVM loads its classes as usual, and says nothing."""

TEST_SPARK_CONF: dict[str, str] = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.driver.extraJavaOptions": DRIVER_JVM,
    # a test's batch run on the Spark standalone cluster: its executors too (their class
    # path is the worker's, so no archive)
    "spark.executor.extraJavaOptions": INTERPRETED_JVM,
}
"""Over each layer's own tuning: in the shared session's config, and as
``LAMBDALINE_SPARK_CONF`` (:data:`TEST_SPARK_ENVIRONMENT`) in a process's environment."""

TEST_SPARK_ENVIRONMENT = {"LAMBDALINE_SPARK_CONF": json.dumps(TEST_SPARK_CONF)}
""":data:`TEST_SPARK_CONF` as the ``spark_conf`` setting of a ``lambdaline`` process."""

_WARM_UP = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.extraJavaOptions", sys.argv[1])
        .getOrCreate()
    )
    numbers = spark.range(100)
    numbers.groupBy((numbers.id % 3).alias("k")).count().collect()
    stream = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 5).load()
    query = (
        stream.groupBy("value").count().writeStream.format("noop").outputMode("update")
        .option("checkpointLocation", sys.argv[2]).trigger(availableNow=True).start()
    )
    query.awaitTermination(120)
    spark.stop()
    """
)


def make_class_archive(scratch: Path) -> float:
    """Write :data:`CLASS_ARCHIVE`, unless it is there: a Spark session that runs a batch
    and a streaming query, its JVM told to archive the classes it loaded when it exits
    (the JDK's dynamic class data sharing). Returns the seconds it took (0: there already)."""
    if CLASS_ARCHIVE.exists():
        return 0.0
    partial = CLASS_ARCHIVE.with_suffix(f".{os.getpid()}.partial")
    options = f"{INTERPRETED_JVM} -XX:ArchiveClassesAtExit={partial}"
    started = os.times().elapsed
    done = subprocess.run(
        [sys.executable, "-c", _WARM_UP, options, str(scratch / "warm-up-checkpoint")],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    if done.returncode != 0 or not partial.exists():
        raise RuntimeError(f"cannot write the class archive {CLASS_ARCHIVE}: {done.stderr[-2000:]}")
    partial.replace(CLASS_ARCHIVE)
    return os.times().elapsed - started
