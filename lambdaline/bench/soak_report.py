"""The soak's report.md, its README block and its time-series PNGs (matplotlib, no display)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from lambdaline.bench.report import FRESHNESS_LABELS

TREND_NAMES = {
    "lag_records": "consumer lag (records)",
    "heap_after_gc_mb": "speed JVM heap after GC (MB, least in each sample)",
    "rss_mb": "speed JVM RSS (MB)",
    "state_rows": "state rows, every operator",
    "state_bytes": "state on disk (MB, RocksDB's live SST files), every operator",
}


def _timeline(results: dict[str, Any]) -> list[tuple[str, float, dict[str, Any]]]:
    """Every sample of the speed job's phases on one clock: (phase, minutes, sample)."""
    points, offset = [], 0.0
    for phase in results["phases"]:
        if phase["name"] == "floor":
            continue
        for sample in phase["samples"]:
            points.append((phase["name"], (offset + sample["t_s"]) / 60, sample))
        if phase["samples"]:
            offset += phase["samples"][-1]["t_s"]
    return points


def _state_by_operator(sample: dict[str, Any], rows: bool = True) -> dict[str, float]:
    """Each operator's state rows, or (``rows`` False) its MB on disk."""
    return {
        f"{query.removeprefix('speed.')}: {op['operator']}": (
            float(op.get("rows") or 0) if rows else (op.get("disk_bytes") or 0) / 2**20
        )
        for query, ops in sample["state"].items()
        for op in ops
    }


def write_soak_charts(results: dict[str, Any], folder: Path) -> dict[str, str]:
    """soak-rates.png, soak-memory.png, soak-state.png, soak-freshness.png."""
    line = _timeline(results)
    minutes = [m for _, m, _ in line]
    window_start = None
    soak = next(p for p in results["phases"] if p["name"] == "soak")
    if soak["samples"]:
        window_start = max(0.0, (soak["samples"][-1]["t_s"] - results["trend_window_s"]) / 60)

    def finish(axis: Any, name: str, title: str) -> str:
        if window_start is not None:
            axis.axvline(window_start, color="grey", linestyle=":", label="trend window")
        axis.set_xlabel("minutes")
        axis.set_title(title)
        axis.legend(fontsize=7, loc="upper left")
        axis.figure.tight_layout()
        axis.figure.savefig(folder / name, dpi=110)
        plt.close(axis.figure)
        return name

    charts = {}
    _, axis = plt.subplots(figsize=(8, 3.4))
    axis.plot(minutes, [s["input_per_s"] for _, _, s in line], label="input events/s")
    axis.plot(minutes, [s["processed_per_s"] for _, _, s in line], label="processed/s")
    lag = axis.twinx()
    lag.plot(minutes, [s["lag_records"] for _, _, s in line], color="tab:red", label="lag")
    lag.set_ylabel("lag (records)")
    charts["rates"] = finish(axis, "soak-rates.png", "input, processed and lag")

    _, axis = plt.subplots(figsize=(8, 3.4))
    heap = [(m, s["heap_after_gc_mb"]) for _, m, s in line if s["heap_after_gc_mb"] is not None]
    axis.plot([m for m, _ in heap], [v for _, v in heap], label="heap after GC (MB)")
    axis.plot(minutes, [s["rss_mb"] for _, _, s in line], label="RSS (MB)")
    charts["memory"] = finish(axis, "soak-memory.png", "the speed JVM's memory")

    _, axis = plt.subplots(figsize=(8, 3.4))
    rows = any(v > 0 for _, _, s in line for v in _state_by_operator(s).values())
    names = sorted({name for _, _, s in line for name in _state_by_operator(s)})
    for name in names:
        axis.plot(
            minutes, [_state_by_operator(s, rows).get(name, 0) for _, _, s in line], label=name
        )
    title = "state rows" if rows else "state on disk (MB, rows not counted)"
    charts["state"] = finish(axis, "soak-state.png", f"{title} per stateful operator")

    _, axis = plt.subplots(figsize=(8, 3.4))
    for view in FRESHNESS_LABELS:
        points = [(m, x) for _, m, s in line for x in s.get("freshness_s", {}).get(view, [])]
        axis.scatter([m for m, _ in points], [x for _, x in points], s=8,
                     label=FRESHNESS_LABELS[view])  # fmt: skip
    axis.set_ylabel("seconds to visible")
    charts["freshness"] = finish(axis, "soak-freshness.png", "freshness of probes per view")
    return charts


def _row(*cells: object) -> str:
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


def soak_table(results: dict[str, Any]) -> list[str]:
    """The headline table of a soak run."""
    options, cpu = results["options"], results["cpu_us_per_event"]
    highest = results["highest_flat_rate"]
    lines = [
        _row("soak", "figure"),
        _row("---", "---"),
        _row("rate, duration", f"{options['rate']:g} events/s for {options['minutes']:g} min "
             f"(state full after {results['state_fills_after_s'] / 60:g} min)"),
    ]  # fmt: skip
    rates = results["window_rates_per_s"]
    lines.append(
        _row(
            f"input / processed, last {results['trend_window_s'] / 60:g} min",
            f"{rates['input']:g} / {rates['processed']:g} events/s",
        )
    )
    for name, verdict in results["trends"].items():
        growth = verdict["fitted_growth"]
        lines.append(
            _row(
                f"{TREND_NAMES[name]}, last {results['trend_window_s'] / 60:g} min",
                f"mean {verdict['mean']}, fitted growth {growth} (limit {verdict['limit']}): "
                f"{'flat' if verdict['flat'] else 'RISING'}",
            )
        )
    lines.append(
        _row(
            "highest rate with flat lag for 15 min",
            "none of the steps"
            if highest is None
            else f"{highest['input_per_s']:g} events/s in, {highest['processed_per_s']:g}/s "
            f"processed ({highest['phase']}, {highest['offered_per_s']:g}/s offered)",
        )
    )
    for view, quantiles in results["freshness_s"].items():
        lines.append(
            _row(
                f"freshness: {FRESHNESS_LABELS.get(view, view)}",
                f"p50 {quantiles['p50']} s / p99 {quantiles['p99']} s "
                f"({quantiles['samples']} probes)",
            )
        )
    lines.append(
        _row(
            "CPU per event: speed job / floor job",
            f"{cpu['speed_job']} µs / {cpu['floor_job']} µs (x{cpu['ratio']})",
        )
    )
    cores = results.get("cpu_cores")
    if cores and cores["parts"]:
        parts = ", ".join(f"{part} {value:g}" for part, value in cores["parts"].items())
        lines.append(
            _row(
                f"CPU cores, last {results['trend_window_s'] / 60:g} min",
                f"{parts}; the machine busy {cores['machine_busy']} of {cores['machine']}",
            )
        )
    per_1000 = results.get("cpu_s_per_1000_events")
    if per_1000:
        lines.append(
            _row(
                "CPU-seconds per 1,000 events",
                ", ".join(f"{part} {value}" for part, value in per_1000.items()),
            )
        )
    back = results.get("recovery")
    if back is not None:
        options = results["options"]
        fresh = ", ".join(
            f"{FRESHNESS_LABELS.get(view, view)} p99 {q['p99']} s"
            for view, q in back["freshness_s"].items()
        )
        lines.append(
            _row(
                f"after a {options['outage_minutes']:g}-min outage (the driver SIGKILLed)",
                f"{back['lag_left_records']:,} records behind; "
                + (
                    f"lag within 10 s of input after {back['back_within_s']} s"
                    if back["back_within_s"] is not None
                    else f"lag not back within 10 s of input in {options['recovery_minutes']:g} min"
                )
                + f", processing {back['catch_up_per_s']} events/s meanwhile; then {fresh}",
            )
        )
    if results.get("speed_records_per_event") is not None:
        lines.append(_row("speed records written per event", results["speed_records_per_event"]))
    for label, found in results.get("profiles", {}).items():
        if "cpu_s_by_thread_group" not in found:
            lines.append(_row(f"profile {label}", found.get("error", "none")))
            continue
        groups = ", ".join(
            f"{group} {seconds / found['seconds']:.2f}"
            for group, seconds in list(found["cpu_s_by_thread_group"].items())[:6]
        )
        lines.append(
            _row(f"profile {label}: cores by thread", f"{found['cores']} in all: {groups}")
        )
    for query, figures in results.get("microbatches", {}).items():
        seconds = figures["seconds"]
        slowest = sorted(figures.get("phases_mean_s", {}).items(), key=lambda kv: -kv[1])[:3]
        phases = ", ".join(f"{name} {mean} s" for name, mean in slowest)
        lines.append(
            _row(
                f"{query}: micro-batches, last {results['trend_window_s'] / 60:g} min",
                f"{figures['count']}, p50 {seconds['p50']} s / p99 {seconds['p99']} s, "
                f"{figures['rows_p50']} input rows (p50)" + (f"; mean {phases}" if phases else ""),
            )
        )
    return lines


def soak_readme_block(results: dict[str, Any], charts: dict[str, str], where: str) -> list[str]:
    """The README's soak block: the table and the charts, from a run's results."""
    machine = results["machine"]
    return [
        f"`lambdaline bench soak --rate {results['options']['rate']:g} --minutes "
        f"{results['options']['minutes']:g}` on {machine.get('cores')} cores, "
        f"{results['started_at'][:10]}:",
        "",
        *soak_table(results),
        "",
        " ".join(f"![{name}]({where}/{file})" for name, file in charts.items()),
    ]


def write_soak_report(results: dict[str, Any], folder: Path, charts: dict[str, str]) -> Path:
    lines = [
        "# lambdaline bench soak",
        "",
        *soak_table(results),
        "",
        "Trend limits: "
        + "; ".join(
            f"{TREND_NAMES[name]}: {rule}" for name, rule in results["trend_limits"].items()
        ),
        "",
        *(f"![{name}]({file})" for name, file in charts.items()),
        "",
    ]
    path = folder / "report.md"
    path.write_text("\n".join(lines))
    return path
