"""`lambdaline bench` at a small N: the files it promises, with the figures they must hold.

The expected counts come from the generator's ground truth (its per-kind
summary), not from the layers: every record is ingested once, every malformed
record is a dead letter in both layers, and the peer agrees with Spark.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.spark_conf import TEST_SPARK_ENVIRONMENT

# beyond the suite's 600 s: on make test's two workers it took 243 s
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1200)]

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_bench_writes_results_report_and_charts(tmp_path: Path) -> None:
    command = [
        sys.executable, "-m", "lambdaline.cli", "bench", "--events", "3000",
        "--out", str(tmp_path), "--probes", "2", "--load-rates", "10", "--load-seconds", "1",
    ]  # fmt: skip
    # a view added from outside the project (tests.views.heavy_vehicles) is compared too;
    # the layers' queries interpreted, as in the suite's other runs (the demo compiles them)
    env = {
        **os.environ, "LAMBDALINE_KAFKA_HEAP": "512m",
        "LAMBDALINE_VIEW_MODULES": "tests.views.heavy_vehicles", **TEST_SPARK_ENVIRONMENT,
    }  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    [folder] = list(tmp_path.iterdir())
    results = json.loads((folder / "results.json").read_text())

    dataset = results["dataset"]
    kinds = dataset["by_kind"]
    assert dataset["events"] == sum(kinds.values())
    malformed = sum(n for kind, n in kinds.items() if kind.startswith("malformed:"))
    assert malformed > 0

    speed = results["speed"]
    for name in ("events_per_s", "events_per_cpu_s"):
        assert speed[name] > 0
    probed = {"booth_stats", "vehicle_trips", "expired_registrations"}
    assert set(speed["freshness_s"]) == set(speed["freshness_samples_s"]) == probed
    for view in probed:  # each of the 2 probes seen in every view, timed from its send()
        assert set(speed["freshness_s"][view]) == {"p50", "p95", "p99"}
        assert len(speed["freshness_samples_s"][view]) == 2, view
        assert speed["freshness_not_seen"][view] == 0, view
        assert 0 < speed["freshness_s"][view]["p50"] <= speed["freshness_s"][view]["p99"]
    assert speed["freshness_traffic_entries_per_s"] > 0
    assert set(speed["microbatch_s"]) == {"p50", "p99"} and speed["microbatch_s"]["p50"] > 0
    # the micro-batches are a part of the run: start-up comes before the first
    assert 0 < speed["microbatch_span_s"] < speed["wall_s"]
    assert speed["events_per_microbatch_s"] > speed["events_per_s"]

    batch = results["batch"]
    assert batch["records_ingested"] == dataset["events"]
    assert batch["dead_letters"] == malformed
    assert set(batch["runtime_s"]) == {"ingest", "recompute", "publish", "total"}
    assert batch["runtime_s"]["total"] >= batch["runtime_s"]["ingest"] > 0
    assert batch["freshness_s"] == pytest.approx(86400 + batch["runtime_s"]["total"], abs=0.1)
    assert batch["events_per_s"] > 0 and batch["events_per_cpu_s"] > 0

    peer = results["peer_duckdb_batch"]
    assert peer["events_per_s"] > 0
    assert peer["row_counts_equal_spark"] is True
    assert peer["row_counts"]["heavy_vehicles"] > 0  # the added view, by its reference SQL

    accuracy = results["accuracy"]
    assert set(accuracy["views"]) == {
        "booth_stats", "vehicle_trips", "expired_registrations", "diagnostics", "booth_rolling",
        "vehicle_visits", "heavy_vehicles",
    }  # fmt: skip
    for counts in accuracy["views"].values():
        assert set(counts) == {"equal", "different", "missing", "extra"}
    for view in ("booth_stats", "booth_rolling", "vehicle_visits", "heavy_vehicles"):
        assert accuracy["views"][view]["equal"] > 0, view
    assert accuracy["dead_letters"] == {"batch": malformed, "speed": malformed}

    serving = results["serving"]
    assert serving["errors"] == 0 and serving["requests_per_s"] > 0
    assert serving["latency_ms"]["p50"] <= serving["latency_ms"]["p99"]
    streams = serving["with_streams"]
    assert streams["clients"] == 100 and streams["streams_ended_early"] == 0
    for run in ("alone", "with_streams"):
        assert streams[run]["errors"] == 0 and streams[run]["served_per_s"] > 0, run
    # every stream got its greeting (horizon, watermark) at least; rows came from the
    # continuous speed job and the demo's traffic, running meanwhile
    assert streams["stream_events"] >= 2 * 100

    assert results["machine"]["cores"] == os.cpu_count()
    assert results["settings"]["window"] and "api_keys" not in results["settings"]

    report = (folder / "report.md").read_text()
    assert "| events/s |" in report and "![throughput](throughput.png)" in report
    assert "| serving, 100 stream clients | at 10 req/s: p50 " in report
    for chart in ("freshness.png", "throughput.png", "accuracy.png"):
        assert (folder / chart).read_bytes().startswith(PNG_MAGIC)
