"""The speed benchmark's verdict on which steps the job kept up with, its CPU model, and the
span of a run's micro-batches."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace
from typing import Any

from lambdaline.bench.measure import (
    microbatch_span_s,
    speed_cpu_model,
    speed_verdict,
    stop_spark_and_its_jvm,
)

TRIGGER_S, LOOKUP_TRIGGER_S = 1.0, 10.0


def step(
    offered: int,
    backlog: int,
    p99_s: float,
    lookup_backlog: int = 0,
    lookup_p99_s: float = 5.0,
    sent: int | None = None,
) -> dict[str, Any]:
    """A step that sent `sent` records/s (default: 80 % of those offered), half of them entries."""
    sent = int(offered * 0.8) if sent is None else sent
    return {
        "offered_records_per_s": offered,
        "sent_records_per_s": {"all": sent, "toll.entries": sent // 2},
        "entries_backlog_at_end": backlog,
        "microbatch_s": {"p50": p99_s / 2, "p99": p99_s},
        "lookups": {
            "records_backlog_at_end": lookup_backlog,
            "microbatch_s": {"p50": lookup_p99_s / 2, "p99": lookup_p99_s},
        },
    }


def verdict(steps: list[dict[str, Any]]) -> dict[str, dict[str, int] | None]:
    return speed_verdict(steps, TRIGGER_S, LOOKUP_TRIGGER_S)


def at(offered: int, sent: int) -> dict[str, int]:
    return {"offered_records_per_s": offered, "sent_records_per_s": sent}


def test_kept_up_means_less_than_a_second_of_the_entries_sent_unread() -> None:
    # the step named 2,000 sent 1,600 records/s, 800 of them entries: 799 unread keep up,
    # 800 do not (though 800 is less than a second of the 2,000 / 2 offered)
    kept_up = verdict([step(1000, 0, 8.0), step(2000, 799, 8.0)])["kept_up"]
    assert kept_up == at(2000, 1600)
    kept_up = verdict([step(1000, 0, 8.0), step(2000, 800, 8.0)])["kept_up"]
    assert kept_up == at(1000, 800)


def test_the_lookups_may_be_at_most_one_lookup_trigger_of_the_records_sent_behind() -> None:
    # 1,600 records/s sent, 10-s lookup trigger: 15,999 unread records keep up, 16,000 not
    steps = [step(1000, 0, 8.0), step(2000, 0, 8.0, lookup_backlog=15_999)]
    assert verdict(steps)["kept_up"] == at(2000, 1600)
    steps = [step(1000, 0, 8.0), step(2000, 0, 8.0, lookup_backlog=16_000)]
    assert verdict(steps)["kept_up"] == at(1000, 800)


def test_the_verdict_is_the_step_that_sent_the_most() -> None:
    # a step offering more may send less (the generator falls short on a busy machine)
    steps = [step(3000, 0, 8.0, sent=2400), step(4000, 0, 8.0, sent=2300)]
    assert verdict(steps)["kept_up"] == at(3000, 2400)


def test_sustainable_also_needs_microbatches_within_the_trigger() -> None:
    steps = [step(500, 0, 0.9), step(1000, 0, 1.0), step(3000, 0, 1.5), step(5000, 9000, 0.5)]
    assert verdict(steps) == {"kept_up": at(3000, 2400), "sustainable": at(1000, 800)}


def test_sustainable_needs_the_lookups_within_their_trigger_too() -> None:
    steps = [step(500, 0, 0.9, lookup_p99_s=10.0), step(1000, 0, 0.9, lookup_p99_s=10.5)]
    assert verdict(steps) == {"kept_up": at(1000, 800), "sustainable": at(500, 400)}


def test_no_step_kept_up() -> None:
    assert verdict([step(3000, 5000, 0.5)]) == {"kept_up": None, "sustainable": None}


def with_cpu(step_: dict[str, Any], job: float, broker: float, generator: float) -> dict[str, Any]:
    """A step whose speed job used `job` cores (JVM 90 %, its Python driver 10 %)."""
    cores = {"spark_jvm": job * 0.9, "python_workers": 0.0, "speed_driver": job * 0.1}
    return {**step_, "cpu_cores": {**cores, "broker": broker, "generator": generator}}


def test_the_cpu_model_fits_a_line_through_the_steps_kept_up_with_after_the_first() -> None:
    warm_up = with_cpu(step(1250, 0, 2.0, sent=1000), job=1.9, broker=0.2, generator=0.3)
    # sent 1,000 / 2,000 / 3,000 records/s: the job 1.0 / 1.2 / 1.4 cores, so 0.8 cores
    # whatever the rate and 0.2 CPU-ms a record; the broker 0.05 / 0.07 / 0.09 (0.03 and
    # 0.02 ms); the generator 0.1 / 0.2 / 0.3 (0 and 0.1 ms)
    steps = [
        warm_up,
        with_cpu(step(1250, 0, 1.0, sent=1000), job=1.0, broker=0.05, generator=0.1),
        with_cpu(step(2500, 0, 1.0, sent=2000), job=1.2, broker=0.07, generator=0.2),
        with_cpu(step(3750, 0, 1.0, sent=3000), job=1.4, broker=0.09, generator=0.3),
        # behind (entries unread): not a step the job kept up with, so not fitted
        with_cpu(step(5000, 90_000, 4.0, sent=4000), job=1.5, broker=0.1, generator=0.35),
    ]
    model = speed_cpu_model(steps, LOOKUP_TRIGGER_S, 10_000)
    assert model == {
        "from_steps_sent_records_per_s": [1000, 2000, 3000],
        "fixed_cores": {"speed_job": 0.8, "broker": 0.03, "generator": 0.0},
        "cpu_ms_per_record": {"speed_job": 0.2, "broker": 0.02, "generator": 0.1},
        "target_records_per_s": 10_000,
        # 0.83 + 10,000 x 0.32 ms = 0.83 + 3.2
        "cores_needed_at_target": 4.0,
    }


def test_the_cpu_model_needs_two_rates_kept_up_with_after_the_first_step() -> None:
    first = with_cpu(step(1250, 0, 1.0, sent=1000), job=1.9, broker=0.2, generator=0.3)
    kept = with_cpu(step(2500, 0, 1.0, sent=2000), job=1.2, broker=0.07, generator=0.2)
    behind = with_cpu(step(5000, 90_000, 4.0, sent=4000), job=1.5, broker=0.1, generator=0.35)
    again = with_cpu(step(2500, 0, 1.0, sent=2000), job=1.3, broker=0.07, generator=0.2)
    assert speed_cpu_model([first, kept, behind], LOOKUP_TRIGGER_S, 50_000) is None
    assert speed_cpu_model([first, kept, again], LOOKUP_TRIGGER_S, 50_000) is None
    assert speed_cpu_model([kept, first, behind], LOOKUP_TRIGGER_S, 50_000) is None


def test_an_idle_step_sent_nothing_so_the_job_never_kept_up_with_it() -> None:
    idle = with_cpu(step(0, 0, 0.0, sent=0), job=0.03, broker=0.03, generator=0.0)
    assert verdict([idle]) == {"kept_up": None, "sustainable": None}


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
