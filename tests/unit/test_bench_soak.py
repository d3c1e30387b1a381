"""The soak's pure parts: GC log parsing, trends, offsets read, CPU per event, verdicts."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from lambdaline.bench.freshness import Probe
from lambdaline.bench.soak import (
    Phase,
    SoakOptions,
    collections,
    cpu_per_event_us,
    fitted_growth,
    micro_batch_figures,
    read_offsets,
    recovery,
    summarise,
    trend,
)
from shared.settings import Settings

GC_LOG = """\
[0.012s] Using G1
[3.118s] GC(0) Pause Young (Normal) (G1 Evacuation Pause) 24M->6M(256M) 4.512ms
[9.874s] GC(1) Pause Young (Concurrent Start) (Metadata GC Threshold) 118M->21M(256M) 7.1ms
[9.881s] GC(2) Concurrent Mark Cycle
[60.2s] GC(3) Pause Full (System.gc()) 1G->512K(1G) 120.0ms
"""


def test_heap_after_each_collection_and_its_pause_are_read_from_a_unified_gc_log() -> None:
    assert collections(GC_LOG.splitlines()) == [(6.0, 4.512), (21.0, 7.1), (0.5, 120.0)]
    assert collections(["[1.0s] GC(9) Pause Remark 2G->1G(4G) 0.9ms"]) == [(1024.0, 0.9)]


def test_fitted_growth_is_the_lines_rise_over_the_span() -> None:
    # values 10, 12, 14, 16 at t 0, 10, 20, 30: slope 0.2 per s over 30 s
    assert fitted_growth([(0, 10), (10, 12), (20, 14), (30, 16)]) == pytest.approx(6.0)
    # a saw-tooth around a level: no rise
    assert fitted_growth([(0, 5), (10, 9), (20, 5), (30, 9), (40, 5)]) == pytest.approx(0.0)
    assert fitted_growth([(0, 1), (10, 2)]) is None  # too few points to call a trend


def test_a_trend_is_flat_only_under_its_limit() -> None:
    rising = trend([(0, 100), (10, 200), (20, 300)], limit=150)
    assert (rising["fitted_growth"], rising["flat"]) == (200.0, False)
    level = trend([(0, 100), (10, 120), (20, 100)], limit=150)
    assert (level["fitted_growth"], level["flat"], level["mean"]) == (0.0, True, 106.7)


def test_offsets_read_count_the_named_topics_only() -> None:
    progress = {
        "source_end_offsets": [
            {"toll.entries": {"0": 10, "1": 5}},
            {"toll.exits": {"0": 7}, "other": {"0": 1000}},
        ]
    }
    assert read_offsets(progress, ["toll.entries", "toll.exits"]) == 22
    assert read_offsets({}, ["toll.entries"]) == 0


def sample(read: int, cpu: float) -> dict[str, Any]:
    return {"read_records": read, "cpu_s": cpu}


def test_cpu_per_event_is_cpu_over_records_read_between_first_and_last() -> None:
    # 20,000 records in 3 CPU-seconds: 150 µs each
    assert cpu_per_event_us([sample(1000, 10.0), sample(5000, 11.0), sample(21000, 13.0)]) == 150.0
    assert cpu_per_event_us([sample(1000, 10.0)]) is None
    assert cpu_per_event_us([sample(1000, 10.0), sample(1000, 12.0)]) is None


def phase_samples(minutes: int, lag: Callable[[int], int], rate: float) -> list[dict[str, Any]]:
    """One sample a minute (t = 0..minutes), everything else steady."""
    return [
        {
            "t_s": 60.0 * m, "input_per_s": rate, "processed_per_s": rate, "lag_records": lag(m),
            "cpu_s": 60.0 * m, "read_records": int(rate * 60 * m), "heap_after_gc_mb": 300.0,
            "rss_mb": 2000.0, "state": {"speed.lookups": [{"operator": "join", "rows": 1000}]},
            "stack_cores": {"speed": 1.0, "api": 0.25 if m % 2 else 0.35},
            "machine_busy_cores": 1.9, "speed_records_per_s": rate / 2,
        }
        for m in range(minutes + 1)
    ]  # fmt: skip


def test_the_highest_flat_rate_is_judged_on_each_phases_last_15_minutes() -> None:
    # the soak at 2,000/s: lag flat for 40 min, then rising 5,000 a minute for the
    # last 20 (75,000 over its last 15 min, over 2,000 x 10 s = 20,000): not flat.
    # The step at 1,500/s: lag high at first (the backlog the soak left), then flat
    # at 3,000 for its last 15 minutes: flat
    soak = Phase("soak", 2000.0, samples=phase_samples(60, lambda m: max(0, m - 40) * 5000, 2000.0))
    step = Phase("ramp-1500", 1500.0, samples=phase_samples(20, lambda m: 90_000 if m < 5 else 3000, 1500.0))  # fmt: skip
    options = SoakOptions(rate=2000.0, minutes=60.0, ramp=(1500.0,), floor_minutes=0.0)

    results = summarise([soak, step], options, Settings())

    assert [r["phase"] for r in results["flat_rates"]] == ["ramp-1500"]
    assert results["highest_flat_rate"]["offered_per_s"] == 1500.0
    assert results["trends"]["lag_records"]["flat"] is False
    # the last 30 minutes of the soak: speed 1.0; the API 0.25 and 0.35 in turn
    # (t = 30..60: 31 samples, 16 at 0.35 on even minutes, 15 at 0.25)
    assert results["cpu_cores"]["parts"] == {
        "api": round((16 * 0.35 + 15 * 0.25) / 31, 2),
        "speed": 1.0,
    }
    assert results["cpu_cores"]["machine_busy"] == 1.9
    # 1.0 core of the speed job at 2,000 events/s: 0.5 CPU-seconds per 1,000 events
    assert results["cpu_s_per_1000_events"]["speed"] == 0.5
    assert results["speed_records_per_event"] == 0.5


def test_micro_batch_figures_are_counts_quantiles_and_median_rows() -> None:
    figures = micro_batch_figures(
        [
            (1.0, 100, {"addBatch": 600, "queryPlanning": 300, "triggerExecution": 1000}),
            (2.0, 300, {"addBatch": 1500, "queryPlanning": 400, "triggerExecution": 2000}),
            (3.0, 200, {"addBatch": 2700, "triggerExecution": 3000}),
        ]
    )
    assert figures["count"] == 3 and figures["rows_p50"] == 200
    assert figures["seconds"]["p50"] == 2.0 and 2.9 < figures["seconds"]["p99"] <= 3.0
    # a phase a report leaves out took no time; the whole trigger is not a phase
    assert figures["phases_mean_s"] == {"addBatch": 1.6, "queryPlanning": 0.233}
    assert micro_batch_figures([]) == {
        "count": 0,
        "seconds": {"p50": None, "p99": None},
        "rows_p50": None,
        "phases_mean_s": {},
    }


def test_recovery_is_the_lag_left_the_time_until_it_is_back_and_the_catch_up_rate() -> None:
    outage = phase_samples(5, lambda m: 2000 * 60 * m, 2000.0)  # 600,000 behind after 5 min
    after = phase_samples(10, lambda m: max(0, 600_000 - 150_000 * m) + 1000, 2000.0)
    for sample in after:
        sample["processed_per_s"] = 4500.0 if sample["lag_records"] > 20_000 else 2000.0
    after[3]["freshness_s"] = {"booth_stats": [1.5, 2.0, 2.5], "vehicle_trips": [4.0]}

    back = recovery(outage, after, 2000.0)

    # within 20,000 (2,000 x 10 s) from minute 4 on: caught up at 4,500/s until then
    assert back["lag_left_records"] == 600_000
    assert back["back_within_s"] == 240.0
    assert back["catch_up_per_s"] == round((4 * 4500.0 + 2000.0) / 5, 1)
    assert back["freshness_s"]["booth_stats"]["p50"] == 2.0
    assert back["freshness_s"]["expired_registrations"] == {"p50": None, "p99": None}
    assert (
        recovery(outage, phase_samples(3, lambda m: 500_000, 2000.0), 2000.0)["back_within_s"]
        is None
    )


def test_a_pending_probe_is_looked_for_less_often_as_it_ages() -> None:
    now = time.monotonic()
    probe = Probe(at=datetime.now(UTC), plate="P", window="w", ordinal=1, views=("a", "b", "c"))
    probe.sent = {"a": now - 1, "b": now - 100, "c": now - 100}
    # at 1 s old, a look a quarter second after the last; at 100 s old, 5 s after it
    probe.looked = {"a": now - 0.3, "b": now - 3, "c": now - 6}
    assert probe.pending == ["a", "c"]
    probe.seen["c"] = now
    assert probe.pending == ["a"]


def test_without_row_counts_the_state_is_judged_by_its_bytes_on_disk() -> None:
    # rows not counted (trackTotalNumberOfRows off): 0 each; the live SST bytes rise by
    # 10 MB a minute over the last 30 minutes from 1,000 MB (fitted growth 300 MB, over
    # 10 % of the mean): not flat
    samples = phase_samples(60, lambda m: 0, 2000.0)
    for m, one in enumerate(samples):
        disk = (1000 + 10 * m) * 2**20
        one["state"] = {"speed.views": [{"operator": "tws", "rows": 0, "disk_bytes": disk}]}
    options = SoakOptions(rate=2000.0, minutes=60.0, floor_minutes=0.0)

    results = summarise([Phase("soak", 2000.0, samples=samples)], options, Settings())

    assert "state_rows" not in results["trends"]
    assert results["trends"]["state_bytes"]["flat"] is False
    assert set(results["trend_limits"]) == set(results["trends"])
