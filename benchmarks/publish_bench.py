"""Publish a `lambdaline bench` or `lambdaline bench soak` run: its report and charts
into docs/bench/ (a soak's into docs/bench/soak/), its table into the README, each
replacing the last.

    .venv/bin/python benchmarks/publish_bench.py [RUN_FOLDER]

RUN_FOLDER is a folder either command wrote (default: the newest bench run
under bench-results/). The README's block between the two `bench` markers (a
soak's: the `soak` markers) is written again from its results.json; nothing
else of the README changes.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from lambdaline.bench.report import readme_block
from lambdaline.bench.soak_report import soak_readme_block

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / "docs" / "bench"
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
FILES = ("results.json", "report.md", "freshness.png", "throughput.png", "accuracy.png")
SOAK_BEGIN, SOAK_END = "<!-- soak:begin -->", "<!-- soak:end -->"
SOAK_FILES = (
    "results.json", "report.md", "soak-rates.png", "soak-memory.png", "soak-state.png",
    "soak-freshness.png",
)  # fmt: skip


def newest_run(runs: Path) -> Path:
    found = sorted(path for path in runs.glob("*-events/results.json"))
    if not found:
        raise SystemExit(f"no run under {runs}: run `lambdaline bench --out {runs}` first")
    return max(found, key=lambda path: path.stat().st_mtime).parent


def replace_block(readme: str, block: list[str], markers: tuple[str, str] = (BEGIN, END)) -> str:
    """The README with the text between the markers replaced by ``block``."""
    head, begin, rest = readme.partition(markers[0])
    _, end, tail = rest.partition(markers[1])
    if not begin or not end:
        raise SystemExit(f"README.md has no {markers[0]} … {markers[1]} block")
    return "\n".join([head + begin, *block, end + tail])


def main(argv: list[str]) -> int:
    run = Path(argv[1]) if len(argv) > 1 else newest_run(ROOT / "bench-results")
    results_file = run / "results.json"
    soak = results_file.is_file() and "trends" in json.loads(results_file.read_text())
    files, published = (SOAK_FILES, PUBLISHED / "soak") if soak else (FILES, PUBLISHED)
    missing = [name for name in files if not (run / name).is_file()]
    if missing:
        raise SystemExit(f"{run} is not a finished run (no {', '.join(missing)})")
    published.mkdir(parents=True, exist_ok=True)
    for name in files:
        shutil.copyfile(run / name, published / name)
    results = json.loads((run / "results.json").read_text())
    if soak:  # its verdicts; the 10-s samples (a megabyte an hour) stay in bench-results/
        summary = {key: value for key, value in results.items() if key != "phases"}
        (published / "results.json").write_text(json.dumps(summary, indent=2) + "\n")
    charts = {name.removesuffix(".png"): name for name in files if name.endswith(".png")}
    where = published.relative_to(ROOT).as_posix()
    readme = ROOT / "README.md"
    if soak:
        text = replace_block(
            readme.read_text(), soak_readme_block(results, charts, where), (SOAK_BEGIN, SOAK_END)
        )
    else:
        text = replace_block(readme.read_text(), readme_block(results, charts, where))
    readme.write_text(text)
    print(f"published {run} to {where} and README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
