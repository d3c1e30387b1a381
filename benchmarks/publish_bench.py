"""Publish a `lambdaline bench` run: its report and charts into docs/bench/, its table
into the README, each replacing the last.

    .venv/bin/python benchmarks/publish_bench.py [RUN_FOLDER]

RUN_FOLDER is a folder `lambdaline bench` wrote (default: the newest under
bench-results/). The README's block between the two `bench` markers is written
again from its results.json; nothing else of the README changes.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from lambdaline.bench.report import readme_block

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / "docs" / "bench"
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
FILES = ("results.json", "report.md", "freshness.png", "throughput.png", "accuracy.png")


def newest_run(runs: Path) -> Path:
    found = sorted(path for path in runs.glob("*/results.json"))
    if not found:
        raise SystemExit(f"no run under {runs}: run `lambdaline bench --out {runs}` first")
    return max(found, key=lambda path: path.stat().st_mtime).parent


def replace_block(readme: str, block: list[str]) -> str:
    """The README with the text between the markers replaced by ``block``."""
    head, begin, rest = readme.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not begin or not end:
        raise SystemExit(f"README.md has no {BEGIN} … {END} block")
    return "\n".join([head + begin, *block, end + tail])


def main(argv: list[str]) -> int:
    run = Path(argv[1]) if len(argv) > 1 else newest_run(ROOT / "bench-results")
    missing = [name for name in FILES if not (run / name).is_file()]
    if missing:
        raise SystemExit(f"{run} is not a finished bench run (no {', '.join(missing)})")
    PUBLISHED.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        shutil.copyfile(run / name, PUBLISHED / name)
    results = json.loads((run / "results.json").read_text())
    charts = {name.removesuffix(".png"): name for name in FILES if name.endswith(".png")}
    readme = ROOT / "README.md"
    block = readme_block(results, charts, PUBLISHED.relative_to(ROOT).as_posix())
    readme.write_text(replace_block(readme.read_text(), block))
    print(f"published {run} to {PUBLISHED.relative_to(ROOT)} and README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
