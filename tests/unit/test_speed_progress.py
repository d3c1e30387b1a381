"""The speed.progress record read off Spark's JSON of a query progress report."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kafka.errors import KafkaConnectionError

from shared.platform.speed_tables import SpeedTables
from shared.settings import Settings
from speed_layer import progress
from speed_layer.progress import progress_record, state_operators

# Spark's StreamingQueryProgress.json of a booth_stats micro-batch (as Spark 4.0 writes
# it: the Kafka source's offsets as objects, not strings), cut to the fields that matter
REPORT = """{
  "id": "c25079e5-d2bf-49e1-97a5-d94d12825374", "runId": "ea877613-2871-4cc5-930a-714a7368f28d",
  "name": "speed.booth_stats", "timestamp": "2026-11-25T09:14:59.000Z", "batchId": 3,
  "batchDuration": 440, "numInputRows": 10, "inputRowsPerSecond": 10.0,
  "processedRowsPerSecond": 22.7,
  "durationMs": {"addBatch": 335, "queryPlanning": 19, "triggerExecution": 439},
  "eventTime": {"max": "2026-11-25T09:14:58.501Z", "watermark": "2026-11-25T09:12:58.501Z"},
  "stateOperators": [
    {"operatorName": "stateStoreSave", "numRowsTotal": 40, "numRowsDroppedByWatermark": 2,
     "numRowsUpdated": 6, "memoryUsedBytes": 132184, "allUpdatesTimeMs": 31, "allRemovalsTimeMs": 4,
     "commitTimeMs": 120, "customMetrics": {"rocksdbSstFileSize": 2048, "rocksdbGetCount": 12,
                                            "rocksdbWriterStallLatencyMs": 0,
                                            "rocksdbCommitFlushLatency": 55,
                                            "numRegisteredTimers": 3}},
    {"operatorName": "dedupeWithinWatermark", "numRowsTotal": 7, "numRowsDroppedByWatermark": 1,
     "memoryUsedBytes": 900, "commitTimeMs": 9,
     "customMetrics": {"stateOnCurrentVersionSizeBytes": 512}}
  ],
  "sources": [{"description": "KafkaV2[Subscribe[toll.entries]]",
               "startOffset": {"toll.entries": {"0": 5, "1": 3}},
               "endOffset": {"toll.entries": {"0": 9, "1": 6}},
               "numInputRows": 10}],
  "sink": {"description": "ForeachBatchSink", "numOutputRows": -1}
}"""


def test_the_record_holds_the_watermark_rates_late_rows_and_offsets_of_the_report() -> None:
    assert progress_record(json.loads(REPORT)) == {
        "query": "speed.booth_stats",
        "batch_id": 3,
        "timestamp": "2026-11-25T09:14:59.000Z",
        "watermark": "2026-11-25T09:12:58.501Z",
        "num_input_rows": 10,
        "input_rows_per_second": 10.0,
        "processed_rows_per_second": 22.7,
        "batch_duration_ms": 440,
        "phases_ms": {"addBatch": 335, "queryPlanning": 19, "triggerExecution": 439},
        "rows_dropped_by_watermark": 3,
        "state_rows": 47,
        "state_operators": [
            {"operator": "stateStoreSave", "rows": 40, "memory_bytes": 132184, "disk_bytes": 2048,
             "counters": {"rows_updated": 6, "rocksdb_gets": 12, "timers_registered": 3},
             "time_ms": {"updates": 31, "removals": 4, "commit": 120,
                         "rocksdb_writer_stall": 0, "rocksdb_commit_flush": 55}},
            {"operator": "dedupeWithinWatermark", "rows": 7, "memory_bytes": 900,
             "disk_bytes": 512, "counters": {}, "time_ms": {"commit": 9}},
        ],
        "source_end_offsets": [{"toll.entries": {"0": 9, "1": 6}}],
    }  # fmt: skip


def test_where_the_state_stores_count_no_rows_the_record_says_none() -> None:
    # trackTotalNumberOfRows off: Spark reports 0 rows, which is no count
    report = json.loads(REPORT)
    for op in report["stateOperators"]:
        op["numRowsTotal"] = 0
    record = progress_record(report, rows_counted=False)
    assert record["state_rows"] is None
    assert [(op["rows"], op["disk_bytes"]) for op in record["state_operators"]] == [
        (None, 2048),
        (None, 512),
    ]


def test_operators_of_one_kind_are_numbered_in_plan_order() -> None:
    joins = [{"operatorName": "symmetricHashJoin", "numRowsTotal": rows} for rows in (5, 9)]
    assert [
        (op["operator"], op["rows"], op["disk_bytes"])
        for op in state_operators({"stateOperators": [*joins, {"operatorName": "other"}]})
    ] == [("symmetricHashJoin#1", 5, None), ("symmetricHashJoin#2", 9, None), ("other", None, None)]


def test_what_spark_leaves_out_of_a_first_report_is_none_or_empty() -> None:
    # a query's first micro-batch: no watermark yet, no rates (Spark omits NaN), no
    # state operator, and a source that has read nothing (its offsets null)
    first = {
        "id": "c25079e5-d2bf-49e1-97a5-d94d12825374", "name": "speed.lookups",
        "timestamp": "2026-11-25T09:14:50.000Z", "batchId": 0, "batchDuration": 2000,
        "numInputRows": 0, "eventTime": {}, "stateOperators": [],
        "sources": [{"description": "KafkaV2", "startOffset": None, "endOffset": None}],
    }  # fmt: skip
    record = progress_record(first)
    assert record["watermark"] is None
    assert record["input_rows_per_second"] is None
    assert record["processed_rows_per_second"] is None
    assert (record["rows_dropped_by_watermark"], record["state_rows"]) == (0, 0)
    assert record["source_end_offsets"] == [{}]


def test_the_late_row_totals_are_read_again_while_a_broker_is_down(monkeypatch: Any) -> None:
    """A starting job's read of ``speed.progress`` meets a broker just killed: it tries
    again (the others answer), and gives up only after ``LATE_ROWS_READ_S``."""
    tables = SpeedTables()
    tables.note_progress(json.dumps({
        "query": "speed.booth_stats", "view_settings": {}, "late_rows_total": 7,
    }).encode())  # fmt: skip
    failures = [KafkaConnectionError("111 ECONNREFUSED")] * 2
    calls = []

    def read(settings: Settings, views: Any, timeout_s: float) -> SpeedTables:
        calls.append(views)
        if failures:
            raise failures.pop()
        return tables

    monkeypatch.setattr(progress, "read_speed_store", read)
    monkeypatch.setattr(progress.time, "sleep", lambda seconds: None)
    assert progress.late_rows_reported(Settings()) == {"speed.booth_stats": 7}
    assert len(calls) == 3

    monkeypatch.setattr(progress, "LATE_ROWS_READ_S", -1.0)  # the deadline passed
    failures.append(KafkaConnectionError("111 ECONNREFUSED"))
    with pytest.raises(KafkaConnectionError):
        progress.late_rows_reported(Settings())


def test_a_micro_batch_is_logged_and_published_with_the_late_row_total_so_far(
    monkeypatch: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The listener's path for each report: one log line, one ``speed.progress`` record
    keyed by query, its ``late_rows_total`` going on from the job's earlier records."""
    sent: list[tuple[str, bytes, dict[str, Any]]] = []

    class Producer:
        def send(self, topic: str, key: bytes, value: bytes) -> None:
            sent.append((topic, key, json.loads(value)))

    monkeypatch.setattr(progress, "kafka_producer", lambda *args, **kwargs: Producer())
    publisher = progress.ProgressPublisher(Settings(), {"speed.booth_stats": 4})
    with caplog.at_level("INFO", logger="lambdaline.speed"):
        publisher.progressed(json.loads(REPORT))
    [(topic, key, record)] = sent
    assert (topic, key) == ("speed.progress", b"speed.booth_stats")
    assert record["late_rows_total"] == 4 + 3
    assert record["phases_ms"]["queryPlanning"] == 19
    assert record["view_settings"] == Settings().views.labels
    [logged] = [r.getMessage() for r in caplog.records if "micro_batch" in r.getMessage()]
    assert '"batch_id": 3' in logged and '"addBatch": 335' in logged
