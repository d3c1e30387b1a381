"""``lambdaline bench``: one seeded dataset through both layers, side by side, in one run.

Steps, on a broker of its own (free ports, a temporary state folder):

1. **generate** about ``--events`` records (toll entries with their exits,
   registrations, late records, duplicates and malformed ones) over two
   simulated days;
2. **speed**: ``lambdaline speed run --available-now`` over all of it, as its own
   process: events/s, events per CPU-second, micro-batch durations from
   ``speed.progress``;
3. **batch**: one batch run (ingest, recompute, publish) in this process's Spark
   session, with per-step CPU seconds of the JVM and its Python workers;
4. **peer**: the same recompute in plain DuckDB SQL over the same Parquet;
5. **accuracy**: per view, the speed store (materialised as the API does) against
   batch truth, over the rows the speed layer has finalised, with the late-dropped
   counts and dead letters that explain the difference;
6. **serving**: ``lambdaline serve`` under an open-loop booth-day load;
7. **freshness**: with the continuous speed job running and the demo's traffic
   sent in real time, probes are timed until the API shows their rows, per view
   (``lambdaline.bench.freshness``: booth_stats and an alert from the entry's
   send(), a trip from the exit's); the batch layer's freshness is its schedule
   period plus its runtime.

CPU seconds come from the kernel's accounting of each process (``/proc``,
``getrusage``), never from wall time. Everything started is stopped by pid.
"""

from __future__ import annotations

import io
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx2
from croniter import croniter
from pydantic import TypeAdapter
from rich.console import Console

from batch_layer.run import batch_spark_session, run_batch
from lambdaline.bench.freshness import FreshnessProbes
from lambdaline.bench.load import open_loop
from lambdaline.bench.measure import (
    TreeCpu,
    cpu_seconds_of_tree,
    machine,
    microbatch_span_s,
    own_cpu_seconds,
    percentile,
    stop_spark_and_its_jvm,
)
from lambdaline.bench.peer import peer_views
from lambdaline.bench.report import write_charts, write_report
from lambdaline.bench.streams import KEY_VARIABLE
from lambdaline.generator import GeneratorConfig, send_to_kafka
from lambdaline.kafka_broker import ephemeral_broker, free_port
from lambdaline.processes import Supervisor, log_tail, stop_process, wait_until_answers
from serving.speed_consumer import SpeedConsumer
from shared.domain.events import (
    format_instant,
)
from shared.platform.batch_store import STORE_TABLE_BY_NAME, read_current, version_file
from shared.platform.jvm import pom_properties
from shared.platform.kafka_admin import kafka_consumer, kafka_producer
from shared.platform.kafka_security import security_environment
from shared.platform.speed_tables import SpeedTables
from shared.platform.topic_admin import create_topics
from shared.settings import Settings
from shared.settings.views import VIEW_BY_NAME, VIEW_NAMES

RECORDS_PER_ENTRY = 2.06
"""Records the generator sends per entry with its default fractions (measured)."""
START = datetime(2026, 1, 5, tzinfo=UTC)
DATA_DAYS = 2


class BenchError(RuntimeError):
    """A step of the benchmark failed; the message names it and its log."""


@dataclass(frozen=True)
class BenchOptions:
    events: int = 1_000_000
    out: Path = Path("bench-results")
    seed: int = 7
    probes: int = 20
    probe_interval_s: float = 1.0
    load_rates: tuple[float, ...] = (25.0, 50.0, 100.0, 200.0)
    load_seconds: float = 8.0


STREAM_CLIENTS = 100
"""``GET /v1/stream`` clients connected for the second run of :meth:`Bench._with_streams`."""
STREAM_MARGIN_S = 4.0
"""How much longer than the load they stay connected (they connect before it starts)."""


def _ms(values: list[float]) -> dict[str, float]:
    return {
        "p50": round(percentile(values, 0.5) * 1000, 2),
        "p99": round(percentile(values, 0.99) * 1000, 2),
    }


def _quantiles(values: list[float], *qs: float) -> dict[str, float | None]:
    return {f"p{round(q * 100)}": (round(percentile(values, q), 3) if values else None) for q in qs}


def serving_summary(ramp: list[dict[str, Any]]) -> dict[str, Any]:
    """The headline of a load ramp: the highest rate served without queueing.

    Without queueing: at least 95 % of the offered rate served, and a median
    latency at most twice that of the lowest rate (queueing shows in the median
    first, since latency counts from when a request was due).
    """
    floor = ramp[0]["latency_ms"]["p50"]
    calm = [
        r for r in ramp
        if r["served_per_s"] >= 0.95 * r["offered_per_s"] and r["latency_ms"]["p50"] <= 2 * floor
    ]  # fmt: skip
    headline = calm[-1] if calm else ramp[0]
    return {
        "requests_per_s": headline["served_per_s"],
        "latency_ms": headline["latency_ms"],
        "errors": sum(r["errors"] for r in ramp),
        "query": "GET /v1/booths/{booth}/stats for one day (288 five-minute rows)",
        "headline": "the highest offered rate served at >= 95 % with a median latency at "
        "most twice the lowest rate's (no queueing)",
        "ramp": ramp,
    }


class Bench:
    """One run of the benchmark; each step fills its part of ``results``."""

    def __init__(self, settings: Settings, options: BenchOptions, folder: Path, console: Console):
        self.settings = settings
        self.options = options
        self.folder = folder
        self.console = console
        self.api_key = secrets.token_urlsafe(12)
        self.env = {
            **os.environ,
            "LAMBDALINE_STATE_DIR": str(settings.state_dir),
            "LAMBDALINE_KAFKA_BOOTSTRAP": settings.kafka.bootstrap,
            "LAMBDALINE_KAFKA_CONTROLLER_PORT": str(settings.kafka.controller_port),
            "LAMBDALINE_API_KEYS": self.api_key,
            # the bench's broker's, not the caller's cluster's
            **security_environment(settings.kafka),
        }
        self.children = Supervisor(env=self.env, logs=folder, prefix="log-")
        self.results: dict[str, Any] = {}
        self.events = 0
        self.run_date = START.date()

    def step(self, text: str) -> None:
        self.console.print(f"[bold]bench[/bold] {text}", highlight=False)

    # --- 1. the dataset --------------------------------------------------------------
    def generate(self) -> None:
        entries = max(1, round(self.options.events / RECORDS_PER_ENTRY))
        config = GeneratorConfig(
            events=entries, seed=self.options.seed, start=START,
            traffic=entries / (DATA_DAYS * 86400), plates=max(1000, entries // 10),
        )  # fmt: skip
        self.step(f"generating {entries:,} entries (about {self.options.events:,} events)")
        summary = send_to_kafka(config, self.settings)
        assert summary.last_timestamp_ms is not None
        self.events = summary.records
        self.run_date = datetime.fromtimestamp(summary.last_timestamp_ms / 1000, UTC).date()
        self.results["dataset"] = {
            "events": summary.records, "entries": entries, "seed": self.options.seed,
            "by_kind": dict(sorted(summary.by_kind.items())),
            "first_event_date": START.date().isoformat(),
            "last_event_date": self.run_date.isoformat(),
            "generator_events_per_s": round(summary.records / summary.seconds),
        }  # fmt: skip

    # --- 2. the speed layer over everything ----------------------------------------------
    def speed(self) -> None:
        self.step("speed layer: lambdaline speed run --available-now over all events")
        began = time.monotonic()
        child = self.children.spawn("speed-available-now", "speed", "run", "--available-now")
        cpu = TreeCpu(child.process)
        code = child.process.wait()
        wall, cpu_s = time.monotonic() - began, cpu.wait()
        self.children.stop(child)  # anything of its group left behind, now, not at the end
        if code != 0:
            raise BenchError(f"the speed run exited with {code}:\n{log_tail(child.log)}")
        progress = self._progress_records()
        durations = [p["batch_duration_ms"] / 1000 for p in progress if p["num_input_rows"]]
        dropped: dict[str, int] = {}
        for record in progress:
            query = str(record["query"])
            dropped[query] = dropped.get(query, 0) + int(record["rows_dropped_by_watermark"])
        span_s = microbatch_span_s(progress)
        self.results["speed"] = {
            "events_per_s": round(self.events / wall, 1),
            # the same without start-up: from the first micro-batch's start to the last's end
            "microbatch_span_s": None if span_s is None else round(span_s, 1),
            "events_per_microbatch_s": None if not span_s else round(self.events / span_s, 1),
            "events_per_cpu_s": round(self.events / cpu_s, 1),
            "wall_s": round(wall, 1), "cpu_s": round(cpu_s, 1),
            "microbatch_s": _quantiles(durations, 0.5, 0.99),
            "microbatches": len(durations),
            "rows_dropped_by_watermark": dropped,
        }  # fmt: skip

    def _progress_records(self) -> list[dict[str, Any]]:
        consumer = kafka_consumer(
            self.settings.kafka, "lambdaline-bench", auto_offset_reset="earliest", group_id=None,
            consumer_timeout_ms=3000,
        )  # fmt: skip
        consumer.subscribe([self.settings.speed_topics.speed_progress])
        try:
            return [json.loads(record.value) for record in consumer]
        finally:
            consumer.close()

    # --- 3 and 4. the batch layer and its DuckDB peer ----------------------------------------
    def batch(self) -> None:
        self.step(f"batch layer: ingest, recompute and publish up to {self.run_date}")
        spark = batch_spark_session(self.settings, "lambdaline-bench-batch")
        spark.sparkContext.setLogLevel("ERROR")
        jvm = spark.sparkContext._gateway.proc.pid  # type: ignore[union-attr]
        try:
            report = run_batch(
                spark, self.settings, self.run_date, lookback_days=0,
                console=Console(file=io.StringIO()),
                cpu_clock=lambda: cpu_seconds_of_tree(jvm) + own_cpu_seconds(),
            )  # fmt: skip
        finally:
            stop_spark_and_its_jvm(spark)  # the peer gets the cores to itself
        assert report.version is not None
        runtime = {step: round(seconds, 2) for step, seconds in report.seconds.items()}
        period = self._schedule_period_s()
        self.results["batch"] = {
            "events_per_s": round(self.events / report.seconds["total"], 1),
            "events_per_cpu_s": round(self.events / report.cpu_seconds["total"], 1),
            "runtime_s": runtime,
            "cpu_s": {step: round(s, 1) for step, s in report.cpu_seconds.items()},
            "freshness_s": round(period + report.seconds["total"], 1),
            "schedule": self.settings.batch.cron, "schedule_period_s": period,
            "version": report.version.version, "row_counts": report.version.row_counts,
            "records_ingested": report.records_ingested,
            "dead_letters": report.dead_letters_ingested,
        }  # fmt: skip
        self.step("peer: the same recompute in plain DuckDB SQL over the same Parquet")
        cores = os.cpu_count() or 1
        used = own_cpu_seconds()
        counts, seconds = peer_views(self.settings, threads=cores)
        cpu_s = own_cpu_seconds() - used
        recompute = report.seconds["recompute"]
        self.results["peer_duckdb_batch"] = {
            "events_per_s": round(self.events / seconds, 1),
            "events_per_cpu_s": round(self.events / cpu_s, 1),
            "recompute_s": round(seconds, 2),
            "spark_recompute_over_peer": round(recompute / seconds, 2),
            "row_counts": counts,
            "row_counts_equal_spark": counts == report.version.row_counts,
        }

    def _schedule_period_s(self) -> float:
        runs = croniter(self.settings.batch.cron, START)
        first = runs.get_next(datetime)
        return float((runs.get_next(datetime) - first).total_seconds())

    # --- 5. accuracy ---------------------------------------------------------------------
    def accuracy(self) -> None:
        self.step("accuracy: speed store against batch truth, per view")
        tables = SpeedTables()
        consumer = SpeedConsumer(self.settings, tables)
        consumer.start()
        try:
            if not consumer.wait_caught_up(120):
                raise BenchError(f"could not read the speed store: {consumer.error}")
            watermark = tables.watermark
            current = read_current(self.settings.batch_store)
            assert current is not None and watermark is not None
            # finalised: every entry of the row's window is older than the watermark
            # minus max_trip (a missing exit is only known after max_trip)
            cutoff = (
                watermark
                - self.settings.views.sizes["max_trip"]
                - self.settings.views.sizes["window"]
            )
            cursor = tables.cursor()
            path = version_file(self.settings.batch_store, current.version)
            cursor.execute(f"ATTACH '{path}' AS truth (READ_ONLY)")
            views = {view: self._compare(cursor, view, cutoff) for view in VIEW_NAMES}
            cursor.close()
        finally:
            consumer.stop()
            tables.close()
        dead_speed = sum(1 for _ in self._all_records(self.settings.topics.dead_letters))
        self.results["accuracy"] = {
            "compared_below": format_instant(cutoff.replace(tzinfo=UTC)),
            "rule": "rows whose time column (a rolling window's or a visit's end) lies before "
            "the speed watermark minus max_trip and one window",
            "views": views,
            "late_dropped_by_query": self.results["speed"]["rows_dropped_by_watermark"],
            "dead_letters": {"batch": self.results["batch"]["dead_letters"], "speed": dead_speed},
        }

    @staticmethod
    def _compare(cursor: Any, view: str, cutoff: datetime) -> dict[str, int]:
        table = STORE_TABLE_BY_NAME[view]
        candidates = VIEW_BY_NAME[view].candidates  # a withdrawn candidate is no row
        shown = f' AND "{candidates.shown_if}"' if candidates and candidates.shown_if else ""
        values = [name for name, _ in table.columns if name not in table.key]
        on = " AND ".join(f'b."{k}" = s."{k}"' for k in table.key)
        same = " AND ".join(f'b."{v}" IS NOT DISTINCT FROM s."{v}"' for v in values) or "TRUE"
        first = table.key[0]
        time_column = VIEW_BY_NAME[view].horizon_column  # a window's or a visit's end: whole
        row = cursor.execute(
            f"""
            WITH b AS (SELECT * FROM truth."{view}" WHERE "{time_column}" < $cutoff),
                 s AS (SELECT * FROM "{view}" WHERE "{time_column}" < $cutoff{shown})
            SELECT count(*) FILTER (WHERE b."{first}" IS NOT NULL AND s."{first}" IS NOT NULL
                                      AND {same}),
                   count(*) FILTER (WHERE b."{first}" IS NOT NULL AND s."{first}" IS NOT NULL
                                      AND NOT ({same})),
                   count(*) FILTER (WHERE s."{first}" IS NULL),
                   count(*) FILTER (WHERE b."{first}" IS NULL)
            FROM b FULL OUTER JOIN s ON {on}
            """,
            {"cutoff": cutoff},
        ).fetchone()
        equal, different, missing, extra = (int(n) for n in row)
        return {"equal": equal, "different": different, "missing": missing, "extra": extra}

    def _all_records(self, topic: str) -> list[Any]:
        consumer = kafka_consumer(
            self.settings.kafka, "lambdaline-bench", auto_offset_reset="earliest", group_id=None,
            consumer_timeout_ms=3000,
        )  # fmt: skip
        consumer.subscribe([topic])
        try:
            return list(consumer)
        finally:
            consumer.close()

    # --- 6 and 7. serving load, then freshness through the API -----------------------------
    def serving_and_freshness(self) -> None:
        port = free_port()
        self.step(f"serving: lambdaline serve on port {port}")
        server = self.children.spawn("api", "serve", "--port", str(port))
        client = httpx2.Client(
            base_url=f"http://127.0.0.1:{port}", headers={"X-API-Key": self.api_key}, timeout=10
        )
        try:
            self._wait_ready(client, server.log)
            self._load(port)
            self._freshness(client)
            self._with_streams(port)
        finally:
            client.close()
            self.children.stop_all()

    def _wait_ready(self, client: httpx2.Client, log: Path) -> None:
        if not wait_until_answers(client, 120):
            raise BenchError(f"the API did not become ready in 120 s:\n{log_tail(log)}")

    @staticmethod
    def _booth_day(rng: Any) -> tuple[str, dict[str, str]]:
        """One booth's day of ``booth_stats``, at random among the dataset's."""
        day = START.date() + timedelta(days=rng.randrange(DATA_DAYS))
        return f"/v1/booths/booth-{rng.randrange(10) + 1:02d}/stats", {
            "from": f"{day.isoformat()}T00:00:00Z",
            "to": f"{(day + timedelta(days=1)).isoformat()}T00:00:00Z",
        }

    def _load(self, port: int) -> None:
        booth_day = self._booth_day
        open_loop(port, self.api_key, booth_day, rate=20, seconds=2)  # warm up
        ramp: list[dict[str, Any]] = []
        for rate in self.options.load_rates:
            self.step(f"serving: booth-day queries at {rate:g} requests/s")
            result = open_loop(port, self.api_key, booth_day, rate, self.options.load_seconds)
            ramp.append({
                "offered_per_s": rate, "served_per_s": round(result.served_per_s, 1),
                "latency_ms": _ms(result.latencies_s), "errors": result.errors,
                "cache_hit_share": round(result.cache_hits / max(len(result.latencies_s), 1), 3),
            })  # fmt: skip
        self.results["serving"] = serving_summary(ramp)

    def _freshness(self, client: httpx2.Client) -> None:
        demo = self.settings.demo
        traffic = demo.traffic * demo.speedup  # entries per real second, as the demo sends
        self.step(
            f"freshness: continuous speed job, the demo's traffic ({traffic:g} entries/s) in "
            f"real time, probes timed until the API shows their rows"
        )
        self.children.spawn("speed-continuous", "speed", "run")
        self.children.spawn(
            "traffic", "generate", "--events", str(10**12), "--start", "now", "--speedup", "1",
            "--traffic", f"{traffic:g}", "--seed", str(self.options.seed + 1), "--workers", "1",
        )  # fmt: skip
        producer = kafka_producer(self.settings.kafka, "lambdaline-bench", linger_ms=0)
        try:
            with FreshnessProbes(self.settings, client, producer) as probes:
                # the job's start-up: wait until it answers at all
                if not probes.wait_seen([probes.send()], 300):
                    raise BenchError("the continuous speed job showed no probe within 300 s")
                sent = []
                for _ in range(self.options.probes):
                    time.sleep(self.options.probe_interval_s)
                    sent.append(probes.send())
                probes.wait_seen(sent, 180)
                latencies = probes.latencies(sent)
        finally:
            producer.close()
        speed = self.results["speed"]
        speed["freshness_traffic_entries_per_s"] = traffic
        speed["freshness_s"] = {
            view: _quantiles(samples, 0.5, 0.95, 0.99) for view, samples in latencies.items()
        }
        speed["freshness_samples_s"] = {
            view: [round(x, 3) for x in samples] for view, samples in latencies.items()
        }
        speed["freshness_not_seen"] = {
            view: len(sent) - len(samples) for view, samples in latencies.items()
        }

    def _with_streams(self, port: int) -> None:
        """The booth-day load at the ramp's first rate twice, while the continuous speed job
        and the demo's traffic run: alone, then with ``STREAM_CLIENTS`` clients of
        ``GET /v1/stream`` (every view) reading in a process of their own."""
        rate, seconds = self.options.load_rates[0], self.options.load_seconds
        self.step(
            f"serving: booth-day queries at {rate:g} requests/s, alone, then with "
            f"{STREAM_CLIENTS} stream clients"
        )
        alone = open_loop(port, self.api_key, self._booth_day, rate, seconds)
        clients = subprocess.Popen(
            [
                sys.executable, "-m", "lambdaline.bench.streams", "--port", str(port),
                "--clients", str(STREAM_CLIENTS), "--seconds", f"{seconds + STREAM_MARGIN_S:g}",
            ],
            env={**self.env, KEY_VARIABLE: self.api_key}, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip
        try:
            assert clients.stdout is not None and clients.stderr is not None
            if not clients.stdout.readline().startswith("connected"):
                raise BenchError(f"the stream clients did not connect: {clients.stderr.read()}")
            time.sleep(1.0)  # every stream past its greeting
            together = open_loop(port, self.api_key, self._booth_day, rate, seconds)
            received = json.loads(clients.stdout.readline() or "{}")
        finally:
            stop_process(clients)  # type: ignore[arg-type]
        if not received:
            raise BenchError("the stream clients ended without their summary")
        self.results["serving"]["with_streams"] = {
            "offered_per_s": rate, "seconds": seconds, "clients": STREAM_CLIENTS,
            "alone": {
                "served_per_s": round(alone.served_per_s, 1),
                "latency_ms": _ms(alone.latencies_s), "errors": alone.errors,
            },
            "with_streams": {
                "served_per_s": round(together.served_per_s, 1),
                "latency_ms": _ms(together.latencies_s), "errors": together.errors,
            },
            "stream_events": received["events"], "stream_rows": received["rows"],
            "streams_ended_early": received["ended_early"],
            "while": "the continuous speed job and the demo's traffic run",
        }  # fmt: skip

    # --- the whole run ---------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        began = time.monotonic()
        self.generate()
        self.speed()
        self.batch()
        self.accuracy()
        self.serving_and_freshness()
        # by the settings file's names; the API key and this machine's paths left out
        flat = self.settings.flat()
        settings = TypeAdapter(dict[str, Any]).dump_python(
            {name: value for name, value in flat.items() if name not in ("api_keys", "state_dir")},
            mode="json",
        )
        return {
            "started_at": format_instant(datetime.now(UTC)),
            **self.results,
            "machine": machine() | {"kafka": pom_properties().get("kafka.version")},
            "settings": settings,
            "bench": {
                "events_requested": self.options.events, "probes": self.options.probes,
                "load_rates": list(self.options.load_rates),
                "load_seconds": self.options.load_seconds,
                "seconds": round(time.monotonic() - began, 1),
            },
        }  # fmt: skip


def run(base: Settings, options: BenchOptions, console: Console) -> Path:
    """Run the benchmark; return the folder holding results.json, report.md and the charts."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    folder = options.out / f"{stamp}-{options.events}-events"
    folder.mkdir(parents=True, exist_ok=False)  # a run never overwrites another
    with (
        tempfile.TemporaryDirectory(prefix="lambdaline-bench-") as state,
        ephemeral_broker(Path(state), kafka_heap=base.kafka.heap) as broker,
    ):
        # the user's views, speed job and Spark, as the children inherit them
        settings = broker.updated(
            views=base.views, speed=base.speed, spark=base.spark, batch_max_offsets_per_trigger=None
        )
        create_topics(settings)
        bench = Bench(settings, options, folder, console)
        try:
            results = bench.run()
        finally:
            bench.children.stop_all()
    (folder / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    charts = write_charts(results, folder)
    write_report(results, folder, charts)
    return folder
