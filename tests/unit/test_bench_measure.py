"""The benchmark's measurements: the span of a run's micro-batches, and stopping Spark's JVM."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace
from typing import Any

from lambdaline.bench.measure import microbatch_span_s, stop_spark_and_its_jvm


class FakeSession:
    """What stop_spark_and_its_jvm reads of a SparkSession: its gateway, and stop()."""

    def __init__(self, gateway: object) -> None:
        self.sparkContext = SimpleNamespace(_gateway=gateway)
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True


def test_the_jvm_pyspark_started_is_ended_by_closing_its_stdin(monkeypatch: Any) -> None:
    from pyspark import SparkContext

    monkeypatch.setattr(SparkContext, "_gateway", "started by this test")
    monkeypatch.setattr(SparkContext, "_jvm", "started by this test")
    jvm = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)  # ends on EOF
    session = FakeSession(SimpleNamespace(proc=jvm))

    seconds = stop_spark_and_its_jvm(session, timeout_s=10)  # type: ignore[arg-type]

    assert session.stopped and jvm.returncode == 0
    assert seconds is not None and 0 <= seconds < 10
    # pyspark starts a new JVM for the next session
    assert SparkContext._gateway is None and SparkContext._jvm is None


def test_under_spark_submit_the_session_stops_and_the_parent_jvm_is_left(monkeypatch: Any) -> None:
    from pyspark import SparkContext

    monkeypatch.setattr(SparkContext, "_gateway", "spark-submit's")
    session = FakeSession(SimpleNamespace())  # no proc: spark-submit launched this Python

    assert stop_spark_and_its_jvm(session) is None  # type: ignore[arg-type]
    assert session.stopped and SparkContext._gateway == "spark-submit's"


def progress(query: str, started: str, duration_ms: int, rows: int) -> dict[str, Any]:
    return {"query": query, "timestamp": started, "batch_duration_ms": duration_ms,
            "num_input_rows": rows}  # fmt: skip


def test_the_microbatch_span_runs_from_the_first_start_to_the_last_end_of_those_that_read() -> None:
    records = [
        progress("speed.booth_stats", "2026-11-26T13:53:04.295Z", 21_295, 148_490),
        progress("speed.lookups", "2026-11-26T13:53:04.375Z", 51_670, 2_150_680),
        progress("speed.lookups", "2026-11-26T13:53:56.055Z", 6_380, 0),  # read nothing
        progress("speed.derived.diagnostics", "2026-11-26T13:54:02.525Z", 1_829, 4_331),
    ]
    # 13:53:04.295 to 13:54:04.354 (02.525 + 1.829), worked out by hand
    assert microbatch_span_s(records) == 60.059


def test_no_microbatch_read_a_row_so_there_is_no_span() -> None:
    assert microbatch_span_s([]) is None
    assert microbatch_span_s([progress("speed.lookups", "2026-11-26T13:53:04Z", 900, 0)]) is None
