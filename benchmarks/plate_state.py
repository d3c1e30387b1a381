"""What keyed state costs per row and per key in Spark's arbitrary-state API (a measurement).

    .venv/bin/python benchmarks/plate_state.py [--rows 4000] [--plates 2000] [--batches 12]
        [--impl python,jvm,none]

A ``rate-micro-batch`` stream (``--rows`` a micro-batch, event time advancing a
second a batch, a 10 s watermark) keyed by ``value % --plates``, through one
stateful operator that does per row what the speed layer's plate lane does: read
the plate's open entries (list state), append one, register an event-time timer
5 s on; each timer clears what it guards. After the warm-up every micro-batch
both adds and expires ``--rows`` entries, as a speed job in its steady state does. Implementations:

- ``python``: ``groupBy(...).transformWithState`` with a Python ``StatefulProcessor``
  (each state call a round trip from the Python worker to the JVM);
- ``jvm``: the same processor in Java (``benchmarks/jvm/OpenEntriesBench.java``,
  compiled here with ``shared.platform.jvm.compiled_jar``), applied from PySpark;
- ``none``: the same stream shuffled by plate into a stateless projection, the
  fixed cost of a micro-batch and its shuffle, to subtract.

Reports, per implementation, the median micro-batch time after ``--warmup``
batches, and that minus ``none``'s per row and per key. One local[2] session,
``spark.sql.shuffle.partitions`` 2, RocksDB state as the speed job keeps it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, TimerValues

from shared.platform.jvm import compiled_jar

JVM_SOURCES = Path(__file__).with_name("jvm")
OUTPUT_SCHEMA = "plate string, open long"
TIMEOUT_MS = 5_000


class OpenEntries(StatefulProcessor):
    """Per plate: the open entries (list state), one timer per entry."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.entries = handle.getListState("entries", "entry_ms long")

    def handleInputRows(  # noqa: N802 (Spark's names)
        self,
        key: tuple[str],
        rows: Iterator[Row],
        timerValues: TimerValues,  # noqa: N803
    ) -> Iterator[Row]:
        held = [entry for (entry,) in self.entries.get()]
        for row in rows:
            entry_ms = int(row.timestamp.timestamp() * 1000)
            self.entries.appendValue((entry_ms,))
            self.handle.registerTimer(entry_ms + TIMEOUT_MS)
            held.append(entry_ms)
        yield Row(plate=key[0], open=len(held))

    def handleExpiredTimer(  # noqa: N802 (Spark's names)
        self,
        key: tuple[str],
        timerValues: TimerValues,  # noqa: N803
        expiredTimerInfo: ExpiredTimerInfo,  # noqa: N803
    ) -> Iterator[Row]:
        expiry = expiredTimerInfo.getExpiryTimeInMs()
        kept = [(e,) for (e,) in self.entries.get() if e + TIMEOUT_MS > expiry]
        if kept:
            self.entries.put(kept)
        else:
            self.entries.clear()
        yield Row(plate=key[0], open=len(kept))


def keyed_stream(spark: SparkSession, rows: int, plates: int) -> DataFrame:
    return (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", rows)
        .option("numPartitions", 2)
        .option("advanceMillisPerBatch", 1000)
        .option("startTimestamp", 1_700_000_000_000)
        .load()
        .withColumn("plate", (F.col("value") % plates).cast("string"))
        .withWatermark("timestamp", "10 seconds")
    )


def applied(impl: str, stream: DataFrame, spark: SparkSession) -> DataFrame:
    if impl == "python":
        return stream.groupBy("plate").transformWithState(
            OpenEntries(), OUTPUT_SCHEMA, "Append", "EventTime"
        )
    if impl == "jvm":
        jvm = spark.sparkContext._jvm  # type: ignore[attr-defined]
        jdf = jvm.lambdaline.bench.OpenEntriesBench.apply(stream._jdf, TIMEOUT_MS)
        return DataFrame(jdf, spark)
    # the same shuffle by plate, no state
    return stream.repartition(2, "plate").select("plate", F.lit(1).cast("long").alias("open"))


def measure(impl: str, args: argparse.Namespace, spark: SparkSession) -> list[float]:
    with tempfile.TemporaryDirectory(prefix="plate-state-") as checkpoint:
        query = (
            applied(impl, keyed_stream(spark, args.rows, args.plates), spark)
            .writeStream.format("noop")
            .outputMode("append")
            .option("checkpointLocation", str(Path(checkpoint) / "q"))
            .trigger(processingTime="0 seconds")
            .start()
        )
        try:
            seen: dict[int, float] = {}
            deadline = time.monotonic() + 600
            while len(seen) < args.batches and time.monotonic() < deadline:
                for progress in query.recentProgress:
                    seen[progress["batchId"]] = progress["durationMs"]["triggerExecution"]
                if query.exception() is not None:
                    raise RuntimeError(str(query.exception()))
                time.sleep(0.2)
        finally:
            query.stop()
            time.sleep(2)  # RocksDB's background snapshot upload, before the folder goes
    ordered = [seen[batch] for batch in sorted(seen)]
    return ordered[args.warmup : args.batches]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4000, help="rows a micro-batch")
    parser.add_argument("--plates", type=int, default=2000, help="distinct keys")
    parser.add_argument("--batches", type=int, default=28, help="micro-batches in all")
    parser.add_argument("--warmup", type=int, default=18, help="first micro-batches left out")
    parser.add_argument("--impl", default="none,jvm,python", help="of none,jvm,python")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the Python workers: this venv
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("plate-state-bench")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
    )
    if "jvm" in args.impl.split(","):
        jar = compiled_jar(JVM_SOURCES, Path(tempfile.mkdtemp(prefix="plate-state-jar-")), "bench")
        builder = builder.config("spark.jars", str(jar))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    medians: dict[str, float] = {}
    for impl in args.impl.split(","):
        times = measure(impl, args, spark)
        medians[impl] = statistics.median(times)
        print(f"{impl}: micro-batch ms {[int(t) for t in times]}, median {medians[impl]:.0f}")
    base = medians.get("none")
    if base is not None:
        for impl, median in medians.items():
            if impl != "none":
                extra_us = (median - base) * 1000
                print(
                    f"{impl}: {extra_us / args.rows:.1f} µs a row, "
                    f"{extra_us / min(args.plates, args.rows):.1f} µs a key over a stateless batch"
                )
    spark.stop()


if __name__ == "__main__":
    main()
