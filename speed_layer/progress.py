"""Observability of the speed job: a log line and a ``speed.progress`` record per micro-batch.

The record (keyed by query name, so the compacted topic keeps each query's
latest) carries the query's event-time watermark, which the serving layer
publishes as ``speed_watermark``, and the rates, duration and late-row count
taken from Spark's own query progress. ``late_rows_total`` counts the rows the
query has dropped as late since its store began: a job started again goes on
from its latest record's count. A micro-batch whose record was not sent before
the driver died is not counted (the next batch run's corrections report it as
rows only in batch). It also carries the job's
``view_settings`` (the view sizes): the serving layer compares them with its
own, since it labels and checks granularities by its own.

The publisher hears Spark's query events through :func:`listening`, as Spark's
own JSON of each event, not through PySpark's ``StreamingQueryListener``: that
one turns every progress report into Python objects getter by getter, about
500 py4j round trips a report, and py4j ends each of the report's maps by
letting its Java iterator throw, which PySpark then inspects through reflection
that searches every jar on the class path. A JFR profile of the job at 1,000
records/s found 10 % of the JVM's CPU in that listener thread
(docs/performance.md, "The speed layer").
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, ClassVar, Protocol

from kafka.errors import KafkaError, KafkaTimeoutError
from pyspark.java_gateway import ensure_callback_server_started
from pyspark.sql import SparkSession

from shared.platform.kafka_admin import kafka_producer
from shared.platform.logs import log_event
from shared.platform.speed_reader import read_speed_store
from shared.settings import Settings

logger = logging.getLogger("lambdaline.speed")

FLUSH_TIMEOUT_S = 5.0
"""How long the progress producer waits to send what it holds when a query ends:
a progress record is an observation, not data, and is not worth holding up a stop."""


def _offsets(offset: object) -> dict[str, Any]:
    """A source's offsets in a progress report: Spark writes a JSON offset (the
    Kafka source's ``{"topic": {"0": 42}}``) as an object, anything else as is."""
    return offset if isinstance(offset, dict) else {}


STATE_DISK_METRICS = ("rocksdbSstFileSize", "stateOnCurrentVersionSizeBytes")
"""A state operator's bytes at rest, by provider: RocksDB's SST files on local disk
(its memory is ``memoryUsedBytes``); the HDFS-backed store's current version."""


STATE_TIME_METRICS = {
    "updates": "allUpdatesTimeMs",
    "removals": "allRemovalsTimeMs",
    "commit": "commitTimeMs",
}
"""Where a stateful operator's micro-batch went, in ms summed over its partitions."""
ROCKSDB_TIME_METRICS = {
    "rocksdb_writer_stall": "rocksdbWriterStallLatencyMs",
    "rocksdb_compaction": "rocksdbTotalCompactionLatencyMs",
    "rocksdb_commit_flush": "rocksdbCommitFlushLatency",
    "rocksdb_commit_compact": "rocksdbCommitCompactLatency",
    "rocksdb_commit_checkpoint": "rocksdbCommitCheckpointLatency",
    "rocksdb_load": "rocksdbLoadLatencyMs",
}
"""The same within RocksDB (its custom metrics): what a long commit or load waited for."""
STATE_COUNTERS = {
    "rows_updated": "numRowsUpdated",
    "rows_removed": "numRowsRemoved",
}
"""A stateful operator's own counts in a micro-batch (summed over its partitions)."""
STATE_CUSTOM_COUNTERS = {
    "rocksdb_gets": "rocksdbGetCount",
    "rocksdb_get_ms": "rocksdbGetLatency",
    "rocksdb_puts": "rocksdbPutCount",
    "rocksdb_put_ms": "rocksdbPutLatency",
    "rocksdb_bytes_read": "rocksdbTotalBytesRead",
    "rocksdb_bytes_written": "rocksdbTotalBytesWritten",
    "rocksdb_bytes_read_by_iterator": "rocksdbTotalBytesReadThroughIterator",
    "rocksdb_block_cache_hits": "rocksdbReadBlockCacheHitCount",
    "rocksdb_block_cache_misses": "rocksdbReadBlockCacheMissCount",
    "rocksdb_bytes_written_by_flush": "rocksdbTotalBytesWrittenByFlush",
    "rocksdb_bytes_written_by_compaction": "rocksdbTotalBytesWrittenByCompaction",
    "rocksdb_keys": "rocksdbNumInternalColFamiliesKeys",
    "timers_registered": "numRegisteredTimers",
    "timers_deleted": "numDeletedTimers",
    "timers_expired": "numExpiredTimers",
    "timer_processing_ms": "timerProcessingTimeMs",
}
"""The same within RocksDB and ``transformWithState`` (their custom metrics): reads,
writes, the block cache, flush and compaction, and timers (RocksDB's get and put
latencies summed, in ms)."""


def state_operators(progress: Mapping[str, Any], rows_counted: bool = True) -> list[dict[str, Any]]:
    """Each stateful operator's state in a progress report: its name (numbered where a
    query has several of one kind, in plan order), rows (None where the state store
    counts none: ``rows_counted`` False, :func:`rows_counted`), memory, bytes at rest
    and where its micro-batch's time went (``time_ms``)."""
    operators = progress.get("stateOperators") or []
    names = [op.get("operatorName", "state") for op in operators]
    reported = []
    for index, (name, op) in enumerate(zip(names, operators, strict=True)):
        if names.count(name) > 1:
            name = f"{name}#{names[: index + 1].count(name)}"
        metrics = op.get("customMetrics") or {}
        disk = next((metrics[key] for key in STATE_DISK_METRICS if key in metrics), None)
        reported.append(
            {
                "operator": name,
                "rows": op.get("numRowsTotal") if rows_counted else None,
                "memory_bytes": op.get("memoryUsedBytes"),
                "disk_bytes": disk,
                "counters": {
                    **{name: op[key] for name, key in STATE_COUNTERS.items() if key in op},
                    **{
                        name: metrics[key]
                        for name, key in STATE_CUSTOM_COUNTERS.items()
                        if key in metrics
                    },
                },
                "time_ms": {
                    **{name: op[key] for name, key in STATE_TIME_METRICS.items() if key in op},
                    **{
                        name: metrics[key]
                        for name, key in ROCKSDB_TIME_METRICS.items()
                        if key in metrics
                    },
                },
            }
        )
    return reported


ROW_TRACKING_CONF = "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows"


def rows_counted(spark: SparkSession) -> bool:
    """Whether the session's RocksDB state stores count their rows: with
    ``trackTotalNumberOfRows`` off (the speed job's tuning) Spark reports 0 for every
    operator, which is no count at all."""
    return str(spark.conf.get(ROW_TRACKING_CONF, "true")).lower() != "false"


def progress_record(progress: Mapping[str, Any], rows_counted: bool = True) -> dict[str, Any]:
    """The fields of one query progress report (Spark's JSON of a
    ``StreamingQueryProgress``) that the speed store publishes; ``rows_counted``: see
    :func:`state_operators`.

    Spark leaves out a rate that is not a number (no time elapsed yet), and the
    watermark of a query that has none.
    """
    operators = progress.get("stateOperators") or []
    return {
        "query": progress.get("name"),
        "batch_id": progress["batchId"],
        "timestamp": progress["timestamp"],
        "watermark": (progress.get("eventTime") or {}).get("watermark"),
        "num_input_rows": progress.get("numInputRows"),
        "input_rows_per_second": progress.get("inputRowsPerSecond"),
        "processed_rows_per_second": progress.get("processedRowsPerSecond"),
        "batch_duration_ms": progress.get("batchDuration"),
        # where the micro-batch's time went (latestOffset, getBatch, queryPlanning,
        # addBatch, walCommit, commitOffsets)
        "phases_ms": progress.get("durationMs") or {},
        "rows_dropped_by_watermark": sum(op["numRowsDroppedByWatermark"] for op in operators),
        # late_rows_total: added by ProgressPublisher, which keeps the count
        "state_rows": sum(op["numRowsTotal"] for op in operators) if rows_counted else None,
        "state_operators": state_operators(progress, rows_counted),
        "source_end_offsets": [_offsets(source.get("endOffset")) for source in progress["sources"]],
    }


LATE_ROWS_READ_S = 120.0
"""How long a starting job keeps trying to read the late-row totals (a broker of the
cluster may be down a moment: the next attempt asks the others)."""


def late_rows_reported(settings: Settings) -> dict[str, int]:
    """Each query's ``late_rows_total`` in its latest ``speed.progress`` record (the
    topic is compacted by query, so a job started again goes on from there).

    A Kafka error is retried every 2 s for ``LATE_ROWS_READ_S``, then raised: starting
    from zero would undercount the late rows the next batch version reports.
    """
    deadline = time.monotonic() + LATE_ROWS_READ_S
    while True:
        try:
            tables = read_speed_store(settings, views=(), timeout_s=60)
            break
        except KafkaError as error:
            if time.monotonic() > deadline:
                raise
            log_event(
                logger, "speed_late_rows_retry", error=f"{type(error).__name__}: {error}",
                retry_s=2.0,
            )  # fmt: skip
            time.sleep(2.0)
    try:
        return {
            query: int(report.get("late_rows_total") or 0)
            for query, report in tables.reports.items()
        }
    finally:
        tables.close()


class QueryEvents(Protocol):
    """What :func:`listening` hands Spark's query events to, each as its JSON document."""

    def started(self, event: dict[str, Any]) -> None: ...

    def progressed(self, progress: dict[str, Any]) -> None: ...

    def terminated(self, event: dict[str, Any]) -> None: ...


class _JsonEvents:
    """Spark's listener interface for Python (a py4j callback), each event read as JSON."""

    def __init__(self, receiver: QueryEvents):
        self.receiver = receiver

    def onQueryStarted(self, jevent: Any) -> None:  # noqa: N802 (Spark's interface)
        self.receiver.started(json.loads(jevent.json()))

    def onQueryProgress(self, jevent: Any) -> None:  # noqa: N802
        self.receiver.progressed(json.loads(jevent.progress().json()))

    def onQueryIdle(self, jevent: Any) -> None:  # noqa: N802
        pass

    def onQueryTerminated(self, jevent: Any) -> None:  # noqa: N802
        self.receiver.terminated(json.loads(jevent.json()))

    class Java:
        implements: ClassVar[list[str]] = [
            "org.apache.spark.sql.streaming.PythonStreamingQueryListener"
        ]


@contextlib.contextmanager
def listening(spark: SparkSession, receiver: QueryEvents) -> Iterator[None]:
    """While active, Spark's listener bus hands ``receiver`` the session's query events.

    Registered as PySpark's ``StreamingQueryManager.addListener`` registers its
    listeners (the callback server, Spark's ``PythonStreamingQueryListenerWrapper``),
    with events read as JSON instead of converted getter by getter.
    """
    gateway = spark.sparkContext._gateway
    assert gateway is not None, "a local SparkSession has a py4j gateway"
    ensure_callback_server_started(gateway)  # type: ignore[no-untyped-call]
    wrapper = gateway.jvm.org.apache.spark.sql.streaming.PythonStreamingQueryListenerWrapper
    jlistener = wrapper(_JsonEvents(receiver))
    manager = spark._jsparkSession.streams()
    manager.addListener(jlistener)
    try:
        yield
    finally:
        manager.removeListener(jlistener)


class ProgressPublisher:
    """Logs each micro-batch and publishes it to ``speed.progress`` (:class:`QueryEvents`)."""

    def __init__(
        self,
        settings: Settings,
        late_rows_before: Mapping[str, int] | None = None,
        rows_counted: bool = True,
    ):
        """``late_rows_before``: each query's ``late_rows_total`` in its latest record
        (:func:`late_rows_reported`), which this job's counts go on from;
        ``rows_counted``: the job's state stores count their rows (:func:`rows_counted`)."""
        self.rows_counted = rows_counted
        self.topic = settings.speed_topics.speed_progress
        self.view_settings = settings.views.labels
        self.late_rows_total = dict(late_rows_before or {})
        self.producer = kafka_producer(settings.kafka, "lambdaline-speed-progress", linger_ms=0)
        self._terminated: set[str] = set()
        self._terminated_changed = threading.Condition()

    def started(self, event: dict[str, Any]) -> None:
        log_event(logger, "query_started", query=event.get("name"), id=event["id"])

    def progressed(self, progress: dict[str, Any]) -> None:
        record = progress_record(progress, self.rows_counted)
        log_event(logger, "micro_batch", **record)
        query = record["query"] or "unnamed"
        total = self.late_rows_total.get(query, 0) + record["rows_dropped_by_watermark"]
        self.late_rows_total[query] = total
        key = query.encode()
        published = {**record, "late_rows_total": total, "view_settings": self.view_settings}
        self.producer.send(self.topic, key=key, value=json.dumps(published).encode())

    def terminated(self, event: dict[str, Any]) -> None:
        log_event(logger, "query_terminated", id=event["id"], exception=event.get("exception"))
        self._flush()
        with self._terminated_changed:
            self._terminated.add(event["id"])
            self._terminated_changed.notify_all()

    def wait_for_terminations(self, query_ids: Iterable[str], timeout_s: float = 10.0) -> None:
        """Wait until Spark's (asynchronous) listener bus has delivered these terminations.

        Removing the listener earlier lets the bus call back into a closed Python
        side at shutdown, which Spark logs as an error.
        """
        wanted = set(query_ids)
        deadline = time.monotonic() + timeout_s
        with self._terminated_changed:
            while not wanted <= self._terminated and time.monotonic() < deadline:
                self._terminated_changed.wait(timeout=deadline - time.monotonic())

    def _flush(self) -> None:
        """Send what is buffered, waiting :data:`FLUSH_TIMEOUT_S` at most.

        Unbounded, a flush to a broker that has gone held Spark's listener bus
        (and so the job's exit) for a minute and a half after its queries failed.
        """
        try:
            self.producer.flush(timeout=FLUSH_TIMEOUT_S)
        except KafkaTimeoutError:
            log_event(logger, "progress_unsent", topic=self.topic, waited_s=FLUSH_TIMEOUT_S)

    def close(self) -> None:
        try:
            self.producer.close(timeout=FLUSH_TIMEOUT_S)  # flushes first
        except KafkaTimeoutError:
            # kafka-python's close gives up here, unclosed; its network thread is a
            # daemon and ends with the process
            log_event(logger, "progress_unsent", topic=self.topic, waited_s=FLUSH_TIMEOUT_S)
