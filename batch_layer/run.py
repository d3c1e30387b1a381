"""One batch run: ingest, recompute, publish (``lambdaline batch run``).

Reads top to bottom: take the run lock, ingest Kafka into the master dataset,
choose the dates to recompute, recompute them with the shared views, publish
the new version. Each step is timed, logged and shown as progress.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

from batch_layer import ingest_log, master
from batch_layer.corrections import read_speed_side
from batch_layer.publish import empty_store_tables, publish_version, run_lock
from batch_layer.recompute import dates_to_recompute, read_inventory, recompute, release
from shared.domain.views import reaches_of
from shared.platform import topic_ids
from shared.platform.batch_store import (
    STORE_TABLE_BY_NAME,
    STORE_TABLES,
    BatchVersion,
    read_current,
)
from shared.platform.failpoints import failpoint
from shared.platform.logs import log_event
from shared.platform.spark_session import spark_session
from shared.settings import Settings
from shared.settings.views import REGISTERED

logger = logging.getLogger("lambdaline.batch")


JVM_OPTIONS = "-XX:+UseParallelGC -XX:-DontCompileHugeMethods"

BATCH_SPARK_CONF: dict[str, str] = {
    # one sort per deduplication instead of two: Spark 3.5+ puts a partial
    # WindowGroupLimit (a sort of every input row) before the shuffle, which only
    # pays when many rows share an event_id, and duplicates are rare
    "spark.sql.optimizer.windowGroupLimitThreshold": "-1",
    # the trip join as a shuffled hash join (a hash table of each partition's
    # exits) instead of sorting both sides, chosen by AQE only when every
    # partition's build side is below this size, so a large backfill still gets
    # the sort-merge join, which spills; measured in docs/performance.md
    "spark.sql.adaptive.maxShuffledHashJoinLocalMapThreshold": "128MB",
    # the persisted entries and joins are read within seconds of being built:
    # compressing their in-memory columns costs more CPU than it saves
    "spark.sql.inMemoryColumnarStorage.compressed": "false",
    # a throughput collector for a job that ends: G1's concurrent work competes
    # with the tasks for the cores (local mode: the driver is the executor); and
    # JIT-compile generated methods over 8,000 bytes of bytecode, which HotSpot
    # otherwise interprets for good: the validation stage's is ~15,000
    "spark.driver.extraJavaOptions": JVM_OPTIONS,
    "spark.executor.extraJavaOptions": JVM_OPTIONS,
}
"""The batch job's Spark tuning; measured in docs/performance.md ("The batch layer").
The ``spark_conf`` setting overrides any of it."""


def batch_spark_session(settings: Settings, app_name: str = "lambdaline-batch") -> SparkSession:
    """The SparkSession a batch run wants: the shared one, with :data:`BATCH_SPARK_CONF`."""
    return spark_session(settings, app_name, extra_config=BATCH_SPARK_CONF)


def default_run_date(now: datetime | None = None) -> date:
    """Yesterday, UTC: the last whole day a nightly run can close."""
    return ((now or datetime.now(UTC)).astimezone(UTC) - timedelta(days=1)).date()


def horizon_after(run_date: date) -> datetime:
    """The time boundary a run for ``run_date`` publishes: the start of the next day, UTC."""
    return datetime.combine(run_date + timedelta(days=1), datetime.min.time(), UTC)


@dataclass
class RunReport:
    """What a batch run did, for its summary table and its log line."""

    run_date: date
    version: BatchVersion | None = None
    ingest_batches: int = 0
    records_ingested: int = 0
    dead_letters_ingested: int = 0
    recomputed_dates: list[date] = field(default_factory=list)
    views_changed: bool = False
    """The published version's rows were computed under other view settings."""
    views_added: list[str] = field(default_factory=list)
    """Registered views the published version does not hold: every date is recomputed."""
    seconds: dict[str, float] = field(default_factory=dict)
    cpu_seconds: dict[str, float] = field(default_factory=dict)
    """Per step, when the caller passed a ``cpu_clock`` (a benchmark does)."""


def _views_added(published: BatchVersion) -> list[str]:
    """The registered views a published version holds no table of (added since)."""
    return [view.name for view in REGISTERED if view.name not in published.row_counts]


def as_store_rows(frame: DataFrame, table_name: str) -> pa.Table:
    """Collect a view to the driver as Arrow, shaped as its batch-store table.

    Spark timestamps become zone-less UTC timestamps (DuckDB ``TIMESTAMP``);
    the session time zone is UTC, so the cast keeps the wall-clock value.
    """
    table = STORE_TABLE_BY_NAME[table_name]
    types = dict(frame.dtypes)
    columns = [
        F.col(name).cast(T.TimestampNTZType()).alias(name) if types[name] == "timestamp" else name
        for name in table.column_names
    ]
    return frame.select(*columns).toArrow()


CpuClock = Callable[[], float]


@contextmanager
def _step(
    report: RunReport, name: str, progress: Progress, label: str, cpu_clock: CpuClock | None
) -> Iterator[TaskID]:
    task = progress.add_task(label, total=None)
    started, cpu_started = time.monotonic(), cpu_clock() if cpu_clock else 0.0
    try:
        yield task
    finally:
        report.seconds[name] = round(time.monotonic() - started, 3)
        if cpu_clock is not None:
            report.cpu_seconds[name] = round(cpu_clock() - cpu_started, 3)
        progress.update(task, total=1, completed=1)
        log_event(logger, "batch_step", step=name, seconds=report.seconds[name])


def run_batch(
    spark: SparkSession,
    settings: Settings,
    run_date: date,
    lookback_days: int,
    console: Console | None = None,
    cpu_clock: CpuClock | None = None,
) -> RunReport:
    """Ingest, recompute and publish once; returns what was done.

    Raises :class:`batch_layer.publish.BatchStoreError` if another run holds
    the lock, :class:`batch_layer.master.MasterDatasetError` if the master
    dataset's location cannot be used or it holds ingest batches its checkpoint
    never began, :class:`shared.platform.topic_ids.TopicsRecreatedError` if an input topic
    is not the one the ingest checkpoint read (all before anything is written).
    A failure before the pointer moves leaves the served version as it was.
    """
    report = RunReport(run_date)
    store = settings.batch_store
    started, cpu_started = time.monotonic(), cpu_clock() if cpu_clock else 0.0
    log_event(
        logger, "batch_start", run_date=run_date.isoformat(), lookback_days=lookback_days,
        master=settings.master_location, store=str(store), generation=settings.generation,
        spark_master=spark.sparkContext.master,
    )  # fmt: skip
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with (
        run_lock(settings.batch_store_root),
        Progress(*columns, console=console or Console(stderr=True), transient=False) as progress,
    ):
        # ingest: Kafka -> master dataset, exactly once
        with _step(report, "ingest", progress, "ingest Kafka -> master dataset", cpu_clock) as task:
            dataset = master.MasterDataset.of(settings)
            master.require_master_location(spark, dataset.location)
            master.check_ingest_checkpoint(
                dataset,
                stored=read_inventory(spark, dataset).newest_batch(),
                begun=master.newest_ingest_batch_begun(spark, dataset),
            )
            now = topic_ids.current(settings.kafka, settings.topics.inputs())
            master.claim_input_topics(spark, dataset, now)
            try:  # what the master dataset will never hold, for the version to list
                lost_input = ingest_log.lost_input(spark, settings.master_location)
            except ValueError as error:
                raise master.MasterDatasetError(str(error)) from None

            def ingested(batch: master.IngestedBatch) -> None:
                report.ingest_batches += 1
                report.records_ingested += batch.records
                report.dead_letters_ingested += batch.dead_letters
                progress.update(
                    task,
                    description=f"ingest: {report.records_ingested:,} records "
                    f"({report.dead_letters_ingested:,} dead letters) "
                    f"in {report.ingest_batches} micro-batches",
                )

            master.ingest(spark, settings, now, on_batch=ingested)
            ingest_batch = master.last_ingest_batch(spark, dataset)

        # recompute: the dates this version must replace, by the shared views
        with _step(report, "recompute", progress, "recompute views", cpu_clock) as task:
            published = read_current(store)
            if published is not None and published.view_settings != settings.views.labels:
                report.views_changed = True
                log_event(
                    logger, "batch_view_settings_changed", published_version=published.version,
                    published=published.view_settings, now=settings.views.labels,
                )  # fmt: skip
            if published is not None and (added := _views_added(published)):
                report.views_added = added
                log_event(
                    logger, "batch_views_added", published_version=published.version, views=added
                )
            inventory = read_inventory(spark, dataset)
            sizes = settings.views.sizes
            dates = dates_to_recompute(
                run_date=run_date,
                inventory=inventory,
                published_horizon=published.horizon.date() if published else None,
                published_ingest_batch=published.ingest_batch if published else None,
                lookback_days=lookback_days,
                reaches=reaches_of(REGISTERED, sizes),
                rows_start_before=max(view.starts_before(sizes) for view in REGISTERED),
                views_changed=report.views_changed or bool(report.views_added),
            )
            report.recomputed_dates = dates
            progress.update(task, description=f"recompute {len(dates)} dates")
            fresh = empty_store_tables()
            if dates:
                views = recompute(spark, dataset, settings.views, inventory, dates)
                for table in STORE_TABLES:
                    progress.update(task, description=f"recompute {len(dates)} dates: {table.name}")
                    fresh[table.name] = as_store_rows(views[table.name], table.name)
                release(spark)
            failpoint("recompute_before_publish")

        # publish: a new DuckDB version, compared with the speed store, then the CURRENT pointer
        with _step(report, "publish", progress, "publish version", cpu_clock) as task:
            progress.update(task, description="publish version: reading the speed store")
            speed = read_speed_side(settings)
            progress.update(task, description="publish version")
            try:
                report.version = publish_version(
                    store,
                    fresh,
                    dates,
                    horizon_after(run_date),
                    ingest_batch,
                    settings.batch.keep_versions,
                    view_settings=settings.views.labels,
                    lost_input=lost_input,
                    speed=speed,
                    generation=settings.generation,
                )
            finally:
                speed.close()
    report.seconds["total"] = round(time.monotonic() - started, 3)
    if cpu_clock is not None:
        report.cpu_seconds["total"] = round(cpu_clock() - cpu_started, 3)
    log_event(
        logger, "batch_finished", version=report.version.version,
        horizon=report.version.horizon.isoformat(), records_ingested=report.records_ingested,
        recomputed_dates=[d.isoformat() for d in dates], seconds=report.seconds,
    )  # fmt: skip
    return report
