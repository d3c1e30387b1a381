"""Batch-layer throughput on this machine, with plain DuckDB SQL as a single-machine peer.

    .venv/bin/python benchmarks/batch_throughput.py [--entries 1000000] [--traffic 4]

Starts its own broker (free ports, temporary state), sends a seeded dataset
(``--entries`` toll entries plus their exits, registrations, duplicates and
malformed records: about 2.05 records per entry, so the default is over two
million events spread over about three simulated days), then runs one batch run
in this process (Spark ``local[*]``) and times its steps:

- ingest: Kafka -> master dataset (validation included);
- recompute: every date, with the shared view functions, collected as Arrow;
- publish: the DuckDB version file and the pointer.

The peer recomputes the same views with DuckDB SQL over the same master-dataset
Parquet (``threads`` = the machine's cores) and its row counts are compared
with Spark's. CPU seconds come from the processes' own accounting
(``/proc/<pid>/stat`` of the Spark JVM and its Python workers; ``getrusage``
for DuckDB, which runs in this process), not from wall time.

Everything it starts it stops, by pid.
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import resource
import signal
import sys
import tempfile
import time
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import duckdb
from rich.console import Console

from batch_layer.run import run_batch
from lambdaline.generator import GeneratorConfig, send_to_kafka
from lambdaline.kafka_broker import ephemeral_broker
from lambdaline.topics import create_topics
from shared.batch_store import STORE_TABLES
from shared.settings import Settings
from shared.spark_session import spark_session

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _process_tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    tree, pending = [], [root]
    while pending:
        pid = pending.pop()
        tree.append(pid)
        pending += children.get(pid, [])
    return tree


def cpu_seconds_of_tree(root: int) -> float:
    """CPU seconds used by a process and its descendants (live ones, and reaped ones)."""
    total = 0
    for pid in _process_tree(root):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
    return total / CLOCK_TICKS


def own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def peer_views(master: str, topics: Any, threads: int) -> tuple[dict[str, int], float]:
    """The batch views in plain DuckDB SQL over the master dataset; (row counts, seconds)."""

    def events(topic: str) -> str:
        return (
            f"SELECT * FROM read_parquet('{master}/topic={topic}/*/*/*.parquet', "
            "hive_partitioning = true) QUALIFY row_number() OVER (PARTITION BY event_id "
            "ORDER BY source_timestamp, source_topic, source_partition, source_offset) = 1"
        )

    statements = f"""
        SET threads = {threads};
        SET TimeZone = 'UTC';
        CREATE TEMP TABLE entries AS {events(topics.entries)};
        CREATE TEMP TABLE exits AS {events(topics.exits)};
        CREATE TEMP TABLE registrations AS {events(topics.registrations)};
        CREATE TEMP TABLE booth_stats AS
            SELECT booth_id, window_start, window_start + INTERVAL 5 MINUTE AS window_end,
                   vehicle_count, total_toll, first_entry_time, last_entry_time
            FROM (
                SELECT booth_id, time_bucket(INTERVAL 5 MINUTE, entry_time::TIMESTAMP)
                           AS window_start,
                       count(*) AS vehicle_count, sum(toll)::DECIMAL(18, 2) AS total_toll,
                       min(entry_time) AS first_entry_time, max(entry_time) AS last_entry_time
                FROM entries GROUP BY ALL
            );
        CREATE TEMP TABLE vehicle_trips AS
            SELECT *, (epoch_ms(exit_time) - epoch_ms(entry_time)) / 1000.0 AS duration_seconds
            FROM (
                SELECT e.booth_id, e.license_plate, e.entry_time, min(x.exit_time) AS exit_time
                FROM entries e JOIN exits x
                  ON e.booth_id = x.booth_id AND e.license_plate = x.license_plate
                 AND x.exit_time BETWEEN e.entry_time AND e.entry_time + INTERVAL 1 HOUR
                GROUP BY ALL
            );
        CREATE TEMP TABLE at_entry AS
            SELECT e.booth_id, e.license_plate, e.entry_time, r.registration_id, r.expired
            FROM entries e ASOF LEFT JOIN registrations r
              ON e.license_plate = r.license_plate AND e.entry_time >= r.registration_time;
        CREATE TEMP TABLE expired_registrations AS
            SELECT booth_id, license_plate, entry_time, registration_id FROM at_entry WHERE expired;
        CREATE TEMP TABLE diagnostics AS
            SELECT booth_id, time_bucket(INTERVAL 5 MINUTE, entry_time::TIMESTAMP) AS window_start,
                   reason, count(*) AS count
            FROM (
                SELECT booth_id, entry_time, 'missing_exit' AS reason FROM entries e
                WHERE NOT EXISTS (
                    SELECT 1 FROM exits x
                    WHERE e.booth_id = x.booth_id AND e.license_plate = x.license_plate
                      AND x.exit_time BETWEEN e.entry_time AND e.entry_time + INTERVAL 1 HOUR)
                UNION ALL
                SELECT booth_id, entry_time, 'missing_registration' FROM at_entry
                WHERE registration_id IS NULL
            ) GROUP BY ALL;
        CREATE TEMP TABLE dead_letters AS
            SELECT * FROM read_parquet(
                '{master}/dead_letters/*/*/*.parquet', hive_partitioning = true);
    """
    started = time.monotonic()
    with duckdb.connect() as connection:
        connection.execute(statements)
        seconds = time.monotonic() - started
        counts = {}
        for table in STORE_TABLES:
            row = connection.execute(f'SELECT count(*) FROM "{table.name}"').fetchone()
            counts[table.name] = int(row[0]) if row else 0
    return counts, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--traffic", type=float, default=4.0, help="entries per simulated second")
    parser.add_argument("--plates", type=int, default=50_000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    cores = os.cpu_count() or 1

    with (
        tempfile.TemporaryDirectory(prefix="lambdaline-bench-batch-") as state,
        ephemeral_broker(Path(state)) as broker,
    ):
        settings: Settings = broker.model_copy(update={"batch_max_offsets_per_trigger": None})
        create_topics(settings)
        config = GeneratorConfig(
            events=args.entries, seed=args.seed, traffic=args.traffic, plates=args.plates,
            start=datetime(2026, 1, 5, 0, tzinfo=UTC),
        )  # fmt: skip
        print(f"sending {args.entries:,} entries (and their other records) ...", flush=True)
        summary = send_to_kafka(config, settings)
        records = summary.records
        print(f"sent {records:,} records", flush=True)

        spark = spark_session(settings, "lambdaline-bench-batch")
        jvm = spark.sparkContext._gateway.proc.pid  # type: ignore[union-attr]

        def spark_cpu_seconds() -> float:  # the JVM, its Python workers, and this driver
            return cpu_seconds_of_tree(jvm) + own_cpu_seconds()

        print("batch run ...", flush=True)
        report = run_batch(
            spark, settings, run_date=date(2026, 12, 31), lookback_days=0,
            console=Console(file=io.StringIO()), cpu_clock=spark_cpu_seconds,
        )  # fmt: skip
        # the same recompute again, on a warm JVM (a long-lived cluster's case)
        print("batch run again, recomputing every date ...", flush=True)
        warm = run_batch(
            spark, settings, run_date=date(2026, 12, 31), lookback_days=10_000,
            console=Console(file=io.StringIO()), cpu_clock=spark_cpu_seconds,
        )  # fmt: skip
        spark.stop()
        assert report.version is not None
        spark_counts = {k: v for k, v in report.version.row_counts.items()}

        used = own_cpu_seconds()
        peer_counts, peer_seconds = peer_views(settings.master_location, settings.topics, cores)
        peer_cpu = own_cpu_seconds() - used

    steps = report.seconds
    print()
    print(f"machine: {cores} cores, {platform.platform()}, Python {platform.python_version()}")
    print(
        f"dataset: {records:,} records ({args.entries:,} entries, seed {args.seed}, "
        f"{report.records_ingested:,} ingested, {report.dead_letters_ingested:,} dead letters, "
        f"{len(report.recomputed_dates)} event dates)"
    )
    cpu = report.cpu_seconds
    print(f"{'step':<26}{'seconds':>9}{'events/s':>11}{'CPU-s':>9}{'events/CPU-s':>14}")
    for step in ("ingest", "recompute", "publish", "total"):
        print(
            f"{'spark ' + step:<26}{steps[step]:>9.1f}{records / steps[step]:>11,.0f}"
            f"{cpu[step]:>9.1f}{records / cpu[step]:>14,.0f}"
        )
    print(
        f"{'spark recompute, warm JVM':<26}{warm.seconds['recompute']:>9.1f}"
        f"{records / warm.seconds['recompute']:>11,.0f}{warm.cpu_seconds['recompute']:>9.1f}"
        f"{records / warm.cpu_seconds['recompute']:>14,.0f}"
    )
    print(
        f"{'duckdb peer recompute':<26}{peer_seconds:>9.1f}{records / peer_seconds:>11,.0f}"
        f"{peer_cpu:>9.1f}{records / peer_cpu:>14,.0f}"
    )
    print(
        f"spark recompute / duckdb peer: {steps['recompute'] / peer_seconds:.1f}x wall time "
        f"({warm.seconds['recompute'] / peer_seconds:.1f}x warm)"
    )
    assert warm.version is not None
    same = warm.version.row_counts == report.version.row_counts
    print(f"warm rerun recomputed {len(warm.recomputed_dates)} dates, same row counts: {same}")
    print(f"{'rows':<24}{'spark':>12}{'duckdb peer':>14}")
    for table in STORE_TABLES:
        name = table.name
        flag = "" if spark_counts[name] == peer_counts[name] else "  <- differs"
        print(f"{name:<24}{spark_counts[name]:>12,}{peer_counts[name]:>14,}{flag}")


if __name__ == "__main__":
    main()
