"""Observability of the speed job: a log line and a ``speed.progress`` record per micro-batch.

The record (keyed by query name, so the compacted topic keeps each query's
latest) carries the query's event-time watermark, which the serving layer
publishes as ``speed_watermark``, and the rates, duration and late-row count
taken from Spark's own query progress. It also carries the job's
``view_settings`` (window, max_trip): the serving layer compares them with its
own, since it labels and checks granularities by its own window.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable
from typing import Any

from kafka.errors import KafkaTimeoutError
from pyspark.sql.streaming.listener import StreamingQueryListener

from shared.kafka_admin import kafka_producer
from shared.logs import log_event
from shared.settings import Settings

logger = logging.getLogger("lambdaline.speed")

FLUSH_TIMEOUT_S = 5.0
"""How long the progress producer waits to send what it holds when a query ends:
a progress record is an observation, not data, and is not worth holding up a stop."""


def progress_record(progress: Any) -> dict[str, Any]:
    """The fields of one StreamingQueryProgress that the speed store publishes."""
    operators = progress.stateOperators or []
    return {
        "query": progress.name,
        "batch_id": progress.batchId,
        "timestamp": progress.timestamp,
        "watermark": (progress.eventTime or {}).get("watermark"),
        "num_input_rows": progress.numInputRows,
        "input_rows_per_second": progress.inputRowsPerSecond,
        "processed_rows_per_second": progress.processedRowsPerSecond,
        "batch_duration_ms": progress.batchDuration,
        "rows_dropped_by_watermark": sum(op.numRowsDroppedByWatermark for op in operators),
        "state_rows": sum(op.numRowsTotal for op in operators),
        "source_end_offsets": [json.loads(source.endOffset or "{}") for source in progress.sources],
    }


class ProgressPublisher(StreamingQueryListener):
    """Logs each micro-batch and publishes it to ``speed.progress``."""

    def __init__(self, settings: Settings):
        self.topic = settings.topics.speed_progress
        self.view_settings = settings.view_settings
        self.producer = kafka_producer(settings, "lambdaline-speed-progress", linger_ms=0)
        self._terminated: set[str] = set()
        self._terminated_changed = threading.Condition()

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 (Spark's API)
        log_event(logger, "query_started", query=event.name, id=str(event.id))

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802
        record = progress_record(event.progress)
        # where the batch's time went (latestOffset, getBatch, queryPlanning,
        # addBatch, walCommit, commitOffsets...): in the log only
        log_event(logger, "micro_batch", **record, phases_ms=dict(event.progress.durationMs))
        key = (record["query"] or "unnamed").encode()
        published = {**record, "view_settings": self.view_settings}
        self.producer.send(self.topic, key=key, value=json.dumps(published).encode())

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802
        pass

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
        log_event(logger, "query_terminated", id=str(event.id), exception=event.exception)
        self._flush()
        with self._terminated_changed:
            self._terminated.add(str(event.id))
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
