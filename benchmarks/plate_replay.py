"""The plate lane over a replay: CPU and RocksDB bytes per event, the design before (one
value per plate, rewritten whole) against the operator's plates part (an entry per state
row, timers that do not move). A measurement, not a test.

    .venv/bin/python benchmarks/plate_replay.py [--plates 582000] [--entries 1,3,6,12]
        [--batch-seconds 2,60] [--designs old,new,new+sessions] [--old-rev 0ac9723]

For each k of ``--entries``: ``--plates`` plates, each preloaded with k entries spread
over the last ``max_trip`` before T0 (at its booth, every hour / k) and a registration
(not measured); then micro-batches of ``--batch-seconds`` of traffic from T0 on, as the
soak sends it at 2,000 events/s: 970 entries a second at random plates, and the exits of
the preloaded entries 12 minutes after each (162 k a second: k = 6 is the soak's
steady state), the watermark 2 min behind. ``--batches`` of each size are read, one
file a micro-batch, by one streaming query; the preloaded entries' deadlines fall due
as event time passes, so timers fire as in a soak.

Designs: ``old``, PlateLookups of ``--old-rev`` (its Java sources compiled from git),
over its input rows; ``new``, the operator's plates part (``speed_layer.operator``: best
matches only, as ``old``); ``new+sessions``, with the plate's sessions too (vehicle
visits, which the old design ran as a query of its own). ``none`` (always run): the
same rows shuffled by plate into a stateless projection, the fixed cost of a
micro-batch and its shuffle, subtracted from each design's CPU.

Reports, per design, k and batch size: µs of CPU (the process: driver and tasks, from
the kernel) per event over the measured micro-batches, less ``none``'s, and RocksDB's
bytes written per event (its counters). One local[2] session with the speed job's
Spark tuning (RocksDB, changelog checkpointing).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from io import BytesIO
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from lambdaline.bench.measure import cpu_seconds_of_tree
from shared.platform.jvm import compiled_jar
from shared.platform.spark_session import spark_session
from shared.settings import Settings, get_settings
from speed_layer.job import SPEED_SPARK_CONF
from speed_layer.operator import operator_config, operators_jar

T0 = datetime(2026, 1, 5, 12, tzinfo=UTC)
ENTRIES_PER_S = 970
TRIP_S = 720
WATERMARK = "120 seconds"
BOOTHS = 10
ROOT = Path(__file__).resolve().parents[1]


def old_jar(rev: str, cache: Path) -> Path:
    """The speed operators' jar of a git revision (its ``speed_layer/jvm`` sources)."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "speed_layer/jvm"],
        check=True, capture_output=True,
    ).stdout  # fmt: skip
    sources = Path(tempfile.mkdtemp(prefix="plate-replay-old-"))
    try:
        with tarfile.open(fileobj=BytesIO(archive)) as tar:
            tar.extractall(sources, filter="data")
        return compiled_jar(sources / "speed_layer" / "jvm", cache, f"lambdaline-speed-{rev}")
    finally:
        shutil.rmtree(sources, ignore_errors=True)


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _plate(p: Column) -> Column:
    return F.concat(F.lit("P"), p.cast("string"))


def _booth(p: Column) -> Column:
    return F.concat(F.lit("b"), (F.abs(F.xxhash64(p)) % BOOTHS).cast("string"))


def _phase(p: Column) -> Column:
    """A plate's offset within the spacing of its entries, in [0, 1)."""
    return (F.abs(F.xxhash64(p, F.lit(7))) % 1_000_000) / 1_000_000


def _events(kind: str, p: Column, time_ms: Column, event_id: Column) -> list[Column]:
    return [
        F.lit(kind).alias("kind"), _plate(p).alias("license_plate"), time_ms.alias("time_ms"),
        event_id.alias("event_id"), _booth(p).alias("booth_id"),
        F.lit(None).cast("string").alias("registration_id"),
        F.lit(None).cast("boolean").alias("expired"), F.lit(250).cast("long").alias("toll_cents"),
    ]  # fmt: skip


def preload(spark: SparkSession, plates: int, k: int) -> DataFrame:
    """k entries a plate over the hour before T0, and a registration 10 days before."""
    spacing = 3_600_000 / k
    entry_ms = F.lit(_ms(T0) - 3_600_000) + (F.col("j") + _phase(F.col("p"))) * spacing
    entries = (
        spark.range(plates).withColumnRenamed("id", "p")
        .crossJoin(spark.range(k).withColumnRenamed("id", "j"))
        .select(*_events("entry", F.col("p"), entry_ms.cast("long"),
                         F.concat(F.lit("e"), F.col("p"), F.lit("-"), F.col("j"))))
    )  # fmt: skip
    registrations = (
        spark.range(plates).withColumnRenamed("id", "p")
        .select(*_events("registration", F.col("p"),
                         F.lit(_ms(T0 - timedelta(days=10))).cast("long"),
                         F.concat(F.lit("r"), F.col("p"))))
        .withColumn("registration_id", F.concat(F.lit("R"), F.col("license_plate")))
        .withColumn("expired", F.lit(False))
    )  # fmt: skip
    return entries.unionByName(registrations)


def traffic(spark: SparkSession, plates: int, k: int, start: datetime, seconds: int) -> DataFrame:
    """``seconds`` of traffic from ``start``: new entries at random plates, and the exits
    of the preloaded entries due then."""
    spacing = 3_600_000 / k
    began = _ms(start)
    count = ENTRIES_PER_S * seconds
    new = spark.range(count).select(
        *_events("entry", F.abs(F.xxhash64(F.col("id"), F.lit(began))) % plates,
                 (F.lit(began) + F.col("id") * 1000 / ENTRIES_PER_S).cast("long"),
                 F.concat(F.lit("n"), F.lit(began), F.lit("-"), F.col("id")))
    )  # fmt: skip
    entry_ms = F.lit(_ms(T0) - 3_600_000) + (F.col("j") + _phase(F.col("p"))) * spacing
    exit_ms = (entry_ms + TRIP_S * 1000).cast("long")
    exits = (
        spark.range(plates).withColumnRenamed("id", "p")
        .crossJoin(spark.range(k).withColumnRenamed("id", "j"))
        .where((exit_ms >= began) & (exit_ms < began + seconds * 1000))
        .select(*_events("exit", F.col("p"), exit_ms,
                         F.concat(F.lit("x"), F.col("p"), F.lit("-"), F.col("j"))))
    )  # fmt: skip
    return new.unionByName(exits)


def old_input(rows: DataFrame) -> DataFrame:
    return rows.withColumn("event_time", F.timestamp_millis("time_ms")).withWatermark(
        "event_time", WATERMARK
    )


def new_input(rows: DataFrame) -> DataFrame:
    entry = F.col("kind") == "entry"
    return (
        rows.withColumn("key", F.concat(F.lit("p:"), F.col("license_plate")))
        .withColumn("event_time", F.when(entry, F.timestamp_millis("time_ms")))
        .withColumn("dead_key", F.lit(None).cast("binary"))
        .withColumn("dead_value", F.lit(None).cast("string"))
        .withWatermark("event_time", WATERMARK)
    )


def plan(spark: SparkSession, design: str, source: DataFrame, settings: Settings) -> DataFrame:
    jvm: Any = spark.sparkContext._jvm
    sizes = settings.views.sizes
    if design == "none":
        return source.repartition("license_plate").select("license_plate", "time_ms")
    if design == "old":
        ms = (sizes["max_trip"] // timedelta(milliseconds=1),
              sizes["registration_lookback"] // timedelta(milliseconds=1))  # fmt: skip
        return DataFrame(
            jvm.lambdaline.speed.PlateLookups.apply(old_input(source)._jdf, *ms), spark
        )
    config = operator_config(sizes)
    config["roll_up"] = None
    if design == "new":
        config["sessions"] = None
    return DataFrame(
        jvm.lambdaline.speed.SpeedOperator.apply(new_input(source)._jdf, json.dumps(config)), spark
    )


def drain(
    spark: SparkSession, design: str, folder: Path, settings: Settings
) -> tuple[float, list[dict[str, Any]]]:
    """Run the design's query over the files of ``folder/input`` it has not read yet, one a
    micro-batch; its CPU seconds and progress reports."""
    source = (
        spark.readStream.schema(spark.read.parquet(str(folder / "input")).schema)
        .option("maxFilesPerTrigger", 1)
        .parquet(str(folder / "input"))
    )
    before = cpu_seconds_of_tree(os.getpid())
    query = (
        plan(spark, design, source, settings).writeStream.format("noop")
        .option("checkpointLocation", str(folder / f"checkpoint-{design}"))
        .trigger(availableNow=True).start()
    )  # fmt: skip
    query.awaitTermination()
    return cpu_seconds_of_tree(os.getpid()) - before, [
        json.loads(p.json) for p in query.recentProgress
    ]


@contextlib.contextmanager
def jfr(spark: SparkSession, recording: Path | None) -> Iterator[None]:
    """A JFR recording of the session's JVM meanwhile (``jcmd``), if ``recording`` is given."""
    if recording is None:
        yield
        return
    jvm: Any = spark.sparkContext._jvm
    pid = str(jvm.java.lang.ProcessHandle.current().pid())
    recording.parent.mkdir(parents=True, exist_ok=True)
    start = ["jcmd", pid, "JFR.start", "name=replay", "settings=profile", f"filename={recording}"]
    subprocess.run(start, check=True, capture_output=True)
    try:
        yield
    finally:
        subprocess.run(["jcmd", pid, "JFR.stop", "name=replay"], check=True, capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plates", type=int, default=582_000)
    parser.add_argument("--entries", default="1,3,6,12")
    parser.add_argument("--batch-seconds", default="2,60")
    parser.add_argument(
        "--batches",
        type=int,
        default=0,
        help="micro-batches of each size (default: 60 s of traffic each)",
    )
    parser.add_argument("--designs", default="old,new,new+sessions")
    parser.add_argument("--old-rev", default="0ac9723")
    parser.add_argument(
        "--jfr", type=Path, help="a folder: a JFR recording of each design's measured batches"
    )
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="plate-replay-"))
    # the environment's settings (LAMBDALINE_SPARK_CONF: a setting to measure), on a
    # local[2] session and a state folder of the run's own
    settings = get_settings().updated(
        state_dir=work / "state", spark_master="local[2]", spark_shuffle_partitions=2
    )
    jars = [operators_jar(settings.jvm_cache_dir)]
    designs = [d for d in args.designs.split(",") if d]
    if "old" in designs:
        jars.append(old_jar(args.old_rev, settings.jvm_cache_dir))
    spark = spark_session(settings, "lambdaline-plate-replay", extra_config={
        **SPEED_SPARK_CONF, "spark.ui.enabled": "false", "spark.sql.files.maxPartitionBytes": "8m",
    }, extra_jars=jars)  # fmt: skip
    spark.sparkContext.setLogLevel("ERROR")
    results = []
    try:
        for k in (int(x) for x in args.entries.split(",")):
            for seconds in (int(x) for x in args.batch_seconds.split(",")):
                folder = work / f"k{k}-{seconds}s"
                inputs = str(folder / "input")
                preload(spark, args.plates, k).repartition(8).write.parquet(inputs)
                for design in ["none", *designs]:  # each its own checkpoint, from the preload
                    drain(spark, design, folder, settings)
                for n in range(args.batches or max(1, 60 // seconds)):
                    start = T0 + timedelta(seconds=n * seconds)
                    traffic(spark, args.plates, k, start, seconds).coalesce(1).write.mode(
                        "append"
                    ).parquet(inputs)
                measured = {}
                for design in ["none", *designs]:
                    recording = args.jfr / f"k{k}-{seconds}s-{design}.jfr" if args.jfr else None
                    with jfr(spark, recording):
                        measured[design] = drain(spark, design, folder, settings)
                baseline_cpu = measured["none"][0]
                for design in designs:
                    cpu, progress = measured[design]
                    events = sum(p["numInputRows"] for p in progress) or 1
                    written = sum(
                        op.get("customMetrics", {}).get("rocksdbTotalBytesWritten", 0)
                        for p in progress
                        for op in p.get("stateOperators", [])
                    )
                    row = {
                        "entries_per_plate": k, "batch_seconds": seconds, "design": design,
                        "events": events,
                        "batches": sum(1 for p in progress if p["numInputRows"] > 0),
                        "cpu_us_per_event": round((cpu - baseline_cpu) * 1e6 / events, 1),
                        "cpu_us_per_event_with_fixed": round(cpu * 1e6 / events, 1),
                        "rocksdb_bytes_per_event": round(written / events),
                    }  # fmt: skip
                    results.append(row)
                    print(json.dumps(row), flush=True)
                shutil.rmtree(folder, ignore_errors=True)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({"results": results}, indent=1))


if __name__ == "__main__":
    main()
