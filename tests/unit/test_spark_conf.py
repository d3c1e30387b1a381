"""The suite's Spark drivers map Spark's classes from the class archive the session's
start wrote (``tests/spark_conf.py``); a JVM that cannot use it says nothing, so this
test is what notices."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.spark_conf import CLASS_ARCHIVE, DRIVER_JVM

SESSION = """
import sys
from pyspark.sql import SparkSession

spark = (
    SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
    .config("spark.driver.extraJavaOptions", sys.argv[1]).getOrCreate()
)
spark.range(3).count()
spark.stop()
"""


def test_a_driver_on_the_test_conf_maps_sparks_classes_from_the_archive(tmp_path: Path) -> None:
    assert CLASS_ARCHIVE.exists()  # written by tests/conftest.py::pytest_sessionstart
    log = tmp_path / "classes.log"
    options = f"{DRIVER_JVM} -Xlog:class+load=info:file={log}"
    done = subprocess.run(
        [sys.executable, "-c", SESSION, options], capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = log.read_text().splitlines()
    mapped = sum(line.endswith("source: shared objects file (top)") for line in lines)
    read = sum(" source: file:" in line or " source: jar:" in line for line in lines)
    # ~11,000 classes mapped (Spark's, Scala's, their libraries'); the few hundred read
    # are those the JDK cannot archive (signed jars: Janino's)
    assert mapped > 5000 and read < 0.1 * mapped, (mapped, read)
