"""Speed-layer throughput and latency on this machine (a measurement, not a test).

    .venv/bin/python benchmarks/speed_throughput.py [--rates 500,1000,2000] [--seconds 60]

Starts its own broker (free ports, temporary state), creates the topics and runs
`lambdaline speed run` continuously in a process group of its own. For each rate
it streams generated events in real time (simulated time = wall time, so event
time is when the event was sent) for `--seconds`, then reports:

- sent: input records per second the step actually wrote, per topic and in all
  (from the broker's end offsets). Trips last seconds here (median 10 s), not the
  generator's default 12 minutes, so exits flow within a step;
- processed: input rows the booth_stats query took per second during the step,
  from its own progress reports on speed.progress;
- micro-batch time p50/p99 (the trigger is 1 s; sustainable means it stays under);
- backlog at the end of the step: input records the query had not yet read
  (Kafka end offsets minus the offsets of its last reported micro-batch);
- the lookups query (trips, registrations, dead letters; every input topic, on
  its own, longer trigger): input records read per second during the step (from
  its offsets), micro-batch time p50/p99 and its backlog, the same way;
- event-to-speed-store latency p50/p99: for every speed.booth_stats record
  written during the step, its Kafka timestamp (when Spark wrote it) minus the
  newest entry_time it covers (when that event was sent);
- where the CPU went during the step, in cores: the Spark JVM, its Python
  workers (none run today: no query calls Python per row), the speed job's Python
  driver, the broker and the generator (this process and its producer
  processes). On a 2-core machine they compete for the same two cores.

Last, two verdicts over the steps (``lambdaline.bench.measure.speed_verdict``):
the highest step it kept up with (after the step's drain pause, booth_stats less
than a second's worth of the entries sent unread and the lookups less than one
lookup trigger's worth of the records sent, so the lag did not grow), and the
highest that was also sustainable in the strict sense (each query's
micro-batch p99 within its trigger), each with the records per second that
step actually sent.

Everything it starts it stops, by pid.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer, TopicPartition

from lambdaline.bench.measure import (
    cpu_seconds_by_process,
    cpu_seconds_of_tree,
    own_cpu_seconds,
    percentile,
    speed_cpu_model,
    speed_verdict,
)
from lambdaline.generator import GeneratorConfig, send_to_kafka
from lambdaline.kafka_broker import ephemeral_broker, status
from lambdaline.processes import exit_on_signals
from shared.platform.topic_admin import create_topics
from shared.settings import Settings

RECORDS_PER_ENTRY = 2.05  # entries, exits, registrations, 1 % duplicates, 1 % malformed
TRIP_MEDIAN = timedelta(seconds=10)
GOAL_EVENTS_PER_S = 50_000
"""The speed issue's goal for the sustainable input rate on this 2-core machine."""


def _read(settings: Settings, topic: str) -> list[Any]:
    consumer = KafkaConsumer(
        topic, bootstrap_servers=settings.kafka.bootstrap, auto_offset_reset="earliest",
        group_id=None, consumer_timeout_ms=2000,
    )  # fmt: skip
    records = list(consumer)
    consumer.close()
    return records


def _end_offsets(settings: Settings, topic: str) -> int:
    consumer = KafkaConsumer(bootstrap_servers=settings.kafka.bootstrap, group_id=None)
    partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or []]
    total = sum(consumer.end_offsets(partitions).values())
    consumer.close()
    return total


def _cpu_seconds(job_pid: int, broker_pid: int) -> dict[str, float]:
    """CPU seconds so far of each part of the run, by role."""
    roles = {"spark_jvm": 0.0, "python_workers": 0.0, "speed_driver": 0.0}
    for command, seconds in cpu_seconds_by_process(job_pid).values():
        if "pyspark.daemon" in command or "pyspark.worker" in command:
            roles["python_workers"] += seconds
        elif command.split(" ", 1)[0].endswith("/java"):
            roles["spark_jvm"] += seconds
        else:
            roles["speed_driver"] += seconds
    children = resource.getrusage(resource.RUSAGE_CHILDREN)  # the reaped producer processes
    roles["broker"] = cpu_seconds_of_tree(broker_pid)
    roles["generator"] = own_cpu_seconds() + children.ru_utime + children.ru_stime
    return roles


def _ms(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000


def measure_step(settings: Settings, rate: int, seconds: int, job_pid: int) -> dict[str, Any]:
    """Stream at `rate` records/s for `seconds` (0: send nothing, the idle step), then
    read what the speed job reported."""
    start = datetime.now(UTC)
    broker_pid = status(settings).pid
    if broker_pid is None:
        raise RuntimeError(f"the benchmark's broker at {settings.kafka.bootstrap} is not running")
    cpu_before = _cpu_seconds(job_pid, broker_pid)
    sent_before = {topic: _end_offsets(settings, topic) for topic in settings.topics.inputs()}
    step_began = time.time() * 1000
    if rate:
        config = GeneratorConfig(
            events=int(rate * seconds / RECORDS_PER_ENTRY), seed=rate, start=start,
            traffic=rate / RECORDS_PER_ENTRY, speedup=1.0, late=0.0, plates=5000,
            # trips of seconds, not the default's 12 minutes, so that exits flow within
            # the step (and the trip join matches); exits still due at its end are not sent
            trip_median=TRIP_MEDIAN, duration=timedelta(seconds=seconds),
        )  # fmt: skip
        send_to_kafka(config, settings)
    else:
        time.sleep(seconds)
    time.sleep(5)  # let the last micro-batches report
    step_ended = time.time() * 1000
    cpu_after = _cpu_seconds(job_pid, broker_pid)
    step_s = (step_ended - step_began) / 1000

    sent = {
        topic: round((_end_offsets(settings, topic) - before) / step_s)
        for topic, before in sent_before.items()
    }
    progress = [json.loads(r.value) for r in _read(settings, settings.speed_topics.speed_progress)]

    def reports(query: str) -> list[dict[str, Any]]:
        return [
            p for p in progress
            if p["query"] == query and step_began <= _ms(p["timestamp"]) <= step_ended
        ]  # fmt: skip

    def read_by(report: dict[str, Any] | None) -> int:
        """Records the query had read, over all its sources, by the end of this micro-batch."""
        if report is None:
            return 0
        return sum(
            sum(sum(parts.values()) for parts in source.values())
            for source in report["source_end_offsets"]
        )

    def unread(reported: list[dict[str, Any]], topics: list[str]) -> int:
        """Records of `topics` the query had not read by its last micro-batch of the step."""
        last = reported[-1] if reported else None
        return sum(_end_offsets(settings, topic) for topic in topics) - read_by(last)

    stats = reports("speed.booths")
    with_input = [p for p in stats if p["num_input_rows"] > 0]
    processed = sum(p["num_input_rows"] for p in with_input)
    backlog = unread(stats, [settings.topics.entries])
    lookups = reports("speed.lookups")
    lookups_with_input = [p for p in lookups if p["num_input_rows"] > 0]
    lookup_durations = [p["batch_duration_ms"] / 1000 for p in lookups_with_input]
    # from offsets, not num_input_rows: Spark counts a source once per branch of
    # the plan that scans it, and the lookups scan theirs in several branches
    before = [
        p for p in progress if p["query"] == "speed.lookups" and _ms(p["timestamp"]) < step_began
    ]
    lookups_read = read_by(lookups[-1] if lookups else None) - read_by(
        before[-1] if before else None
    )

    latencies = []
    for record in _read(settings, settings.speed_topics.speed("booth_stats")):
        if record.timestamp >= step_began:
            row = json.loads(record.value)
            latencies.append((record.timestamp - _ms(row["last_entry_time"])) / 1000)
    durations = [p["batch_duration_ms"] / 1000 for p in with_input]
    return {
        "offered_records_per_s": rate,
        "sent_records_per_s": {"all": sum(sent.values()), **sent},
        "processed_entry_rows_per_s": round(processed / step_s),
        "microbatches": len(with_input),
        "microbatch_s": {"p50": percentile(durations, 0.5), "p99": percentile(durations, 0.99)},
        "entries_backlog_at_end": backlog,
        "latency_s": {"p50": percentile(latencies, 0.5), "p99": percentile(latencies, 0.99)},
        "latency_samples": len(latencies),
        "lookups": {
            "read_records_per_s": round(lookups_read / step_s) if lookups else 0,
            "microbatches": len(lookups_with_input),
            "microbatch_s": {
                "p50": percentile(lookup_durations, 0.5),
                "p99": percentile(lookup_durations, 0.99),
            },
            "records_backlog_at_end": unread(lookups, settings.topics.inputs()),
        },
        "cpu_cores": {
            role: round((cpu_after[role] - cpu_before[role]) / step_s, 2) for role in cpu_after
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rates", default="1000,1000,2000,3000",
        help="records/s, comma-separated (the first step also warms the JIT up; 0: send nothing)",
    )  # fmt: skip
    parser.add_argument("--seconds", type=int, default=60, help="duration of each rate step")
    args = parser.parse_args()
    exit_on_signals()  # SIGTERM (`timeout`) runs the clean-up: the broker and jobs stop

    with (
        tempfile.TemporaryDirectory(prefix="lambdaline-speed-bench-") as state,
        ephemeral_broker(Path(state)) as settings,
    ):
        job = None
        trigger_s = settings.speed.trigger.total_seconds()
        lookup_trigger_s = settings.speed.lookup_trigger.total_seconds()
        try:
            create_topics(settings)
            env = {
                **os.environ,
                "LAMBDALINE_STATE_DIR": state,
                "LAMBDALINE_KAFKA_BOOTSTRAP": settings.kafka.bootstrap,
            }
            with (Path(state) / "speed.log").open("wb") as log:
                job = subprocess.Popen(
                    [sys.executable, "-m", "lambdaline.cli", "speed", "run"], env=env,
                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                )  # fmt: skip
            time.sleep(30)  # start-up: JVM, queries planned
            results = [
                measure_step(settings, int(rate), args.seconds, job.pid)
                for rate in args.rates.split(",")
            ]
        finally:
            if job is not None:
                job.send_signal(signal.SIGTERM)  # the driver stops its queries, then its JVM
                try:
                    job.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(job.pid, signal.SIGKILL)
                    job.wait()

    print(f"machine: {os.cpu_count()} cores; step: {args.seconds} s; triggers: booth_stats "
          f"{trigger_s:g} s, lookups {lookup_trigger_s:g} s; "
          f"run at {datetime.now(UTC):%Y-%m-%dT%H:%MZ}")  # fmt: skip
    print(json.dumps(results, indent=2))
    verdict = speed_verdict(results, trigger_s, lookup_trigger_s)

    def up_to(step: dict[str, int] | None) -> str:
        if step is None:
            return "at none of the steps"
        return (f"up to {step['sent_records_per_s']:,} records/s sent "
                f"(the step offering {step['offered_records_per_s']:,})")  # fmt: skip

    print(f"kept up (after the step, booth_stats less than 1 s of the entries sent unread, "
          f"the lookups less than {lookup_trigger_s:g} s of the records sent): "
          f"{up_to(verdict['kept_up'])}")  # fmt: skip
    print(f"sustainable (kept up, and micro-batch p99 within each query's trigger): "
          f"{up_to(verdict['sustainable'])}")  # fmt: skip
    model = speed_cpu_model(results, lookup_trigger_s, GOAL_EVENTS_PER_S)
    if model is None:
        print("CPU model: needs two rates kept up with after the first step (the JIT's warm-up)")
        return
    fixed, per_record = model["fixed_cores"], model["cpu_ms_per_record"]
    rates = ", ".join(f"{rate:,}" for rate in model["from_steps_sent_records_per_s"])
    print(
        f"CPU model (a line through the steps kept up with after the first, sending {rates} "
        f"records/s): the speed job {fixed['speed_job']} cores whatever the rate + "
        f"{per_record['speed_job']} CPU-ms per record, the broker {fixed['broker']} + "
        f"{per_record['broker']}, the generator {fixed['generator']} + "
        f"{per_record['generator']}: {GOAL_EVENTS_PER_S:,} records/s would need "
        f"{model['cores_needed_at_target']} cores (this machine has {os.cpu_count()})"
    )


if __name__ == "__main__":
    main()
