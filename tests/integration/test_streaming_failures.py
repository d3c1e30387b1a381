"""A streaming query that fails ends the wait at once and is reported in one line (real Spark)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from shared.platform.streaming import (
    QueryFailedError,
    brief_java_errors,
    raise_if_failed,
    stop_requests,
    wait_for,
)

pytestmark = pytest.mark.integration


def test_a_failed_query_ends_the_wait_while_another_runs_and_names_its_cause(
    spark: SparkSession, tmp_path: Path
) -> None:
    def refuse(rows: DataFrame, batch_id: int) -> None:  # fails in a task, as a sink does
        rows.select(F.raise_error(F.concat(F.lit("sink refused row "), F.col("value")))).collect()

    def rate() -> DataFrame:
        return spark.readStream.format("rate").option("rowsPerSecond", 5).load()

    running = (
        rate().writeStream.format("noop").queryName("t.running")
        .option("checkpointLocation", str(tmp_path / "running")).start()
    )  # fmt: skip
    failing = (
        rate().writeStream.foreachBatch(brief_java_errors(refuse)).queryName("t.failing")
        .option("checkpointLocation", str(tmp_path / "failing")).start()
    )  # fmt: skip
    try:
        with stop_requests() as stop:
            assert wait_for([running, failing], stop) is True
        assert running.isActive  # the wait did not wait for it
        assert not failing.isActive
        with pytest.raises(QueryFailedError) as raised:
            raise_if_failed([running, failing])
        # one line: the innermost error, without the Python and Java traces and the plan
        assert re.fullmatch(
            r"query t\.failing failed: SparkRuntimeException: \[USER_RAISED_EXCEPTION\] "
            r"sink refused row \d+ SQLSTATE: P0001",
            str(raised.value),
        ), str(raised.value)
    finally:
        running.stop()
        failing.stop()


def test_a_failure_outside_foreach_batch_is_named_by_its_innermost_java_cause(
    spark: SparkSession, tmp_path: Path
) -> None:
    # Kafka refuses this admin client configuration when the query starts reading
    query = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", "127.0.0.1:1")
        .option("kafka.default.api.timeout.ms", "1000")  # shorter than request.timeout.ms
        .option("subscribe", "t.nowhere")
        .load()
        .writeStream.format("noop").queryName("t.misconfigured")
        .option("checkpointLocation", str(tmp_path / "misconfigured")).start()
    )  # fmt: skip
    try:
        with stop_requests() as stop:
            assert wait_for([query], stop) is True
        with pytest.raises(QueryFailedError) as raised:
            raise_if_failed([query])
        # Spark's own message says only "Failed to create new KafkaAdminClient"
        assert str(raised.value) == (
            "query t.misconfigured failed: ConfigException: The specified value of "
            "default.api.timeout.ms must be no smaller than the value of request.timeout.ms."
        )
    finally:
        query.stop()
