"""The Spark settings of every Spark JVM the suite starts for its tests: the session the
tests share, and the speed and batch runs they start as processes.

A test's run reads a handful of records, once. Spark's generated Java for its plans (the
decode's stage alone is ~330 KB) costs more to compile than those rows cost to interpret,
and the JIT's optimising tier costs more than it saves before the run ends. So these runs
interpret their queries, on the JIT's first tier (docs/CONTRIBUTING.md has the figures).
The users' defaults (``speed_layer.job.SPEED_SPARK_CONF``, ``batch_layer.run``) stay as
measured for them, and the demo (``tests/e2e/test_demo.py``) runs both layers on them, as
a user does. The tests that count compiled classes (``tests/unit/test_speed_records.py``)
turn code generation on for themselves.
"""

from __future__ import annotations

import json

INTERPRETED_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""The JIT's first tier alone, and the serial collector: in place of the speed job's
options, which keep compiled code for days of running."""

TEST_SPARK_CONF: dict[str, str] = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.driver.extraJavaOptions": INTERPRETED_JVM,
    # a test's batch run on the Spark standalone cluster: its executors too
    "spark.executor.extraJavaOptions": INTERPRETED_JVM,
}
"""Over each layer's own tuning: in the shared session's config, and as
``LAMBDALINE_SPARK_CONF`` (:data:`TEST_SPARK_ENVIRONMENT`) in a process's environment."""

TEST_SPARK_ENVIRONMENT = {"LAMBDALINE_SPARK_CONF": json.dumps(TEST_SPARK_CONF)}
""":data:`TEST_SPARK_CONF` as the ``spark_conf`` setting of a ``lambdaline`` process."""
