"""The benchmark's report.md and its PNG charts (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

ACCURACY_PARTS = ("equal", "different", "missing", "extra")
FRESHNESS_LABELS = {
    "booth_stats": "booth_stats (from the entry)",
    "vehicle_trips": "trip (from the exit)",
    "expired_registrations": "alert (from the entry)",
    "vehicle_visits": "visit (from its end + the watermark delay)",
}
"""What each view's freshness is timed from (``lambdaline.bench.freshness``)."""


def _freshness(quantiles: dict[str, Any]) -> str:
    return f"p50 {quantiles.get('p50')} / p95 {quantiles.get('p95')} / p99 {quantiles.get('p99')}"


def write_charts(results: dict[str, Any], folder: Path) -> dict[str, str]:
    """freshness.png, throughput.png and accuracy.png; returns {chart: file name}."""
    charts = {}

    figure, axis = plt.subplots(figsize=(8, 3.2))
    samples = results["speed"].get("freshness_samples_s") or {}
    labels = ["batch (period + run)"]
    batch = results["batch"]["freshness_s"]
    axis.scatter([batch], [0], marker="|", s=400, color="tab:red")
    for row, (view, seconds) in enumerate(samples.items(), start=1):
        axis.scatter(seconds, [row] * len(seconds), marker="|", s=400)
        labels.append(f"speed: {FRESHNESS_LABELS.get(view, view)}")
    axis.set_xscale("log")
    axis.set_yticks(list(range(len(labels))), labels)
    axis.set_ylim(-0.5, len(labels) - 0.5)
    axis.set_xlabel("event sent -> row visible through the API (s, log scale)")
    axis.set_title("Freshness per layer")
    figure.tight_layout()
    figure.savefig(folder / "freshness.png", dpi=110)
    plt.close(figure)
    charts["freshness"] = "freshness.png"

    runtime = results["batch"]["runtime_s"]
    events = results["dataset"]["events"]
    bars = {
        "speed\n(available-now)": results["speed"]["events_per_s"],
        "batch\ningest": events / runtime["ingest"],
        "batch\nrecompute": events / runtime["recompute"],
        "batch\ntotal": results["batch"]["events_per_s"],
        "DuckDB peer\nrecompute": results["peer_duckdb_batch"]["events_per_s"],
    }
    figure, axis = plt.subplots(figsize=(8, 3.5))
    colours = ["tab:blue", "tab:orange", "tab:orange", "tab:orange", "tab:green"]
    axis.bar(list(bars), list(bars.values()), color=colours)
    axis.set_yscale("log")
    axis.set_ylabel("events/s (log scale)")
    axis.set_title(f"Throughput over the same {events:,} events")
    for index, value in enumerate(bars.values()):
        axis.annotate(f"{value:,.0f}", (index, value), ha="center", va="bottom", fontsize=8)
    figure.tight_layout()
    figure.savefig(folder / "throughput.png", dpi=110)
    plt.close(figure)
    charts["throughput"] = "throughput.png"

    views = results["accuracy"]["views"]
    figure, axis = plt.subplots(figsize=(8, 3))
    left = [0] * len(views)
    for part in ACCURACY_PARTS:
        widths = [views[view][part] for view in views]
        axis.barh(list(views), widths, left=left, label=part)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    axis.set_xlabel("rows (speed store vs batch truth)")
    axis.set_title("Accuracy of the speed layer per view")
    axis.legend(loc="lower right", fontsize=8)
    figure.tight_layout()
    figure.savefig(folder / "accuracy.png", dpi=110)
    plt.close(figure)
    charts["accuracy"] = "accuracy.png"
    return charts


def _row(*cells: object) -> str:
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


def summary_table(results: dict[str, Any]) -> list[str]:
    """The side-by-side table of the two layers (and the peer), as Markdown lines."""
    speed, batch, peer = results["speed"], results["batch"], results["peer_duckdb_batch"]
    # fmt: off
    serving = results["serving"]
    freshness = speed.get("freshness_s", {})
    traffic = speed.get("freshness_traffic_entries_per_s")
    runtime = batch["runtime_s"]
    in_batches = speed.get("events_per_microbatch_s")
    speed_rate = f"{speed['events_per_s']:,.0f}" + (
        f" ({in_batches:,.0f} in its micro-batches)" if in_batches else ""
    )
    span = speed.get("microbatch_span_s")
    speed_wall = f"{speed['wall_s']}" + (f" (micro-batches {span})" if span else "")
    return [
        _row("", "speed layer", "batch layer", "DuckDB peer (recompute)"),
        _row("---", "---", "---", "---"),
        _row(
            "events/s", speed_rate, f"{batch['events_per_s']:,.0f}",
            f"{peer['events_per_s']:,.0f}",
        ),
        _row(
            "events per CPU-s", f"{speed['events_per_cpu_s']:,.0f}",
            f"{batch['events_per_cpu_s']:,.0f}", f"{peer['events_per_cpu_s']:,.0f}",
        ),
        _row(
            "runtime (s)", speed_wall,
            f"{runtime['total']} (ingest {runtime['ingest']}, recompute {runtime['recompute']}, "
            f"publish {runtime['publish']})", f"{peer['recompute_s']}",
        ),
        _row(
            "freshness (s)" + (f", at {traffic:g} entries/s" if traffic else ""),
            "<br>".join(
                f"{FRESHNESS_LABELS.get(view, view)}: {_freshness(quantiles)}"
                for view, quantiles in freshness.items()
            ),
            f"{batch['freshness_s']:,} (period {batch['schedule_period_s']:,.0f} + run)", "",
        ),
        _row(
            "micro-batch (s)",
            f"p50 {speed['microbatch_s']['p50']} / p99 {speed['microbatch_s']['p99']}", "", "",
        ),
        _row(
            "serving",
            f"{serving['requests_per_s']} req/s, p50 {serving['latency_ms']['p50']} ms / "
            f"p99 {serving['latency_ms']['p99']} ms, {serving['errors']} errors", "", "",
        ),
        *_streams_row(serving.get("with_streams")),
    ]
    # fmt: on


def _streams_row(streams: dict[str, Any] | None) -> list[str]:
    """The booth-day latency with stream clients connected, beside the same load alone."""
    if streams is None:  # results of a run before the benchmark measured it
        return []
    alone, together = streams["alone"]["latency_ms"], streams["with_streams"]["latency_ms"]
    return [
        _row(
            f"serving, {streams['clients']} stream clients",
            f"at {streams['offered_per_s']:g} req/s: p50 {together['p50']} ms / p99 "
            f"{together['p99']} ms (alone: p50 {alone['p50']} ms / p99 {alone['p99']} ms); "
            f"{streams['stream_rows']:,} rows pushed, {streams['streams_ended_early']} "
            "streams ended early",
            "",
            "",
        )
    ]


def readme_block(results: dict[str, Any], charts: dict[str, str], where: str) -> list[str]:
    """The README's "Latest run" block, as Markdown lines: what ran, the side-by-side
    table, the batch against its peer, the speed layer's accuracy, and the charts
    (their files under ``where``, relative to the README)."""
    dataset, machine, accuracy = results["dataset"], results["machine"], results["accuracy"]
    peer = results["peer_duckdb_batch"]
    views = accuracy["views"]
    equal = ", ".join(f"{view} {counts['equal']:,}" for view, counts in views.items())
    off = sum(counts[part] for counts in views.values() for part in ACCURACY_PARTS[1:])
    late = sum(accuracy["late_dropped_by_query"].values())
    return [
        f"`lambdaline bench --events {results['bench']['events_requested']}`, "
        f"{results['started_at'][:16].replace('T', ' ')} UTC: {dataset['events']:,} events "
        f"(seed {dataset['seed']}), {machine['cores']} cores, {machine['memory_gib']} GiB, "
        f"Python {machine['python']}, Kafka {machine['kafka']}; "
        f"[report]({where}/report.md), [results.json]({where}/results.json).",
        "",
        *summary_table(results),
        "",
        f"Spark recompute / DuckDB peer: {peer['spark_recompute_over_peer']}x (row counts "
        f"equal: {'yes' if peer['row_counts_equal_spark'] else 'no'}). Speed layer against "
        f"batch truth, rows equal: {equal}; {off:,} different, missing or extra; {late:,} "
        f"rows dropped as late; dead letters {accuracy['dead_letters']['speed']:,} (speed) and "
        f"{accuracy['dead_letters']['batch']:,} (batch).",
        "",
        *(f"![{name}]({where}/{file})" for name, file in charts.items()),
    ]


def write_report(results: dict[str, Any], folder: Path, charts: dict[str, str]) -> Path:
    dataset, accuracy, machine = results["dataset"], results["accuracy"], results["machine"]
    peer = results["peer_duckdb_batch"]
    lines = [
        f"# lambdaline bench: {dataset['events']:,} events",
        "",
        f"Run {results['started_at']} on {machine['cores']} cores, {machine['memory_gib']} GiB, "
        f"{machine['platform']}; Python {machine['python']}, {machine['java']}, "
        f"Kafka {machine['kafka']}, "
        + ", ".join(f"{name} {version}" for name, version in machine["versions"].items())
        + ".",
        "",
        f"Dataset: seed {dataset['seed']}, {dataset['entries']:,} entries, event dates "
        f"{dataset['first_event_date']} .. {dataset['last_event_date']}; "
        + ", ".join(f"{kind} {count:,}" for kind, count in dataset["by_kind"].items())
        + ".",
        "",
        *summary_table(results),
        "",
        f"Spark recompute / DuckDB peer: {peer['spark_recompute_over_peer']}x "
        f"(row counts equal: {peer['row_counts_equal_spark']}).",
        "",
        f"## Accuracy (speed store vs batch truth, {accuracy['rule']}: before "
        f"{accuracy['compared_below']})",
        "",
        _row("view", *ACCURACY_PARTS),
        _row(*(["---"] * (len(ACCURACY_PARTS) + 1))),
        *(
            _row(view, *(counts[part] for part in ACCURACY_PARTS))
            for view, counts in accuracy["views"].items()
        ),
        "",
        "Rows dropped as later than the watermark, per speed query: "
        + ", ".join(f"{q} {n:,}" for q, n in sorted(accuracy["late_dropped_by_query"].items()))
        + f". Dead letters: batch {accuracy['dead_letters']['batch']:,}, "
        f"speed {accuracy['dead_letters']['speed']:,}.",
        "",
        *(f"![{name}]({file})" for name, file in charts.items()),
        "",
        "Reproduce: `lambdaline bench --events "
        f"{results['bench']['events_requested']}` (results.json holds every figure and setting).",
        "",
    ]
    path = folder / "report.md"
    path.write_text("\n".join(lines))
    return path
