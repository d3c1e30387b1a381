"""The fault-injection suite's shared parts (its cases run on ``tests.conftest``'s
cluster of three brokers): how many times each fault is injected (``FAULTS_FULL=1``: the full counts), and
the results table every case adds its row to.

A full run (``FAULTS_FULL=1 make test-faults``) writes the table into
``docs/reliability.md``, between its two ``results`` markers; a reduced run leaves
the document alone (its counts are not the ones it states).
"""

from __future__ import annotations

import os
import platform
import random
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

FULL = os.environ.get("FAULTS_FULL") == "1"
SEED = int(os.environ.get("FAULTS_SEED") or random.SystemRandom().randrange(10**6))
"""The seed of every random moment a case picks; a failure names it, and ``FAULTS_SEED``
gives a run the same moments again."""

REPORT = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"
BEGIN, END = "<!-- results: begin -->", "<!-- results: end -->"


def times(reduced: int, full: int) -> int:
    """How many times a case injects its fault: ``reduced`` in CI, ``full`` with FAULTS_FULL=1."""
    return full if FULL else reduced


FULL_TIMEOUT_S = 3600
"""A case's limit in a full run: ten driver kills take about 12 minutes, beyond the
suite's 600 s per test."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if FULL:
        for item in items:
            if item.get_closest_marker("faults") is not None:
                item.add_marker(pytest.mark.timeout(FULL_TIMEOUT_S), append=False)  # before its own


@dataclass(frozen=True)
class Result:
    """One row of the results table: what a case injected and what it found."""

    fault: str
    injected: int
    outcome: str
    records_lost: int | str
    rows_wrong: int


class Results:
    """The rows the cases add; a case adds its row only after all its checks passed."""

    def __init__(self) -> None:
        self.rows: list[Result] = []

    def add(
        self,
        fault: str,
        injected: int,
        outcome: str,
        records_lost: int | str = 0,
        rows_wrong: int = 0,
    ) -> None:
        self.rows.append(Result(fault, injected, outcome, records_lost, rows_wrong))


@pytest.fixture(scope="session")
def results(request: pytest.FixtureRequest) -> Iterator[Results]:
    collected = Results()
    yield collected
    failed = request.session.testsfailed
    if FULL and collected.rows and not failed:
        write_report(collected.rows)


def write_report(rows: list[Result]) -> None:
    """Replace the table between the markers of ``docs/reliability.md`` with these rows."""
    text = REPORT.read_text()
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
        cwd=REPORT.parent, check=False,
    ).stdout.strip() or "unknown"  # fmt: skip
    lines = [
        BEGIN,
        f"`FAULTS_FULL=1 make test-faults` at commit `{commit}`, "
        f"{datetime.now(UTC):%Y-%m-%d}, {os.cpu_count()} cores, {platform.system()}, "
        f"`FAULTS_SEED={SEED}`:",
        "",
        "| fault | times injected | outcome | records lost | rows wrong |",
        "|---|---:|---|---:|---:|",
        *(
            f"| {r.fault} | {r.injected} | {r.outcome} | {r.records_lost} | {r.rows_wrong} |"
            for r in rows
        ),
        END,
    ]
    REPORT.write_text(head + "\n".join(lines) + tail)


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> random.Random:
    """Random moments for one case, from the suite's seed and the case's name."""
    print(f"FAULTS_SEED={SEED}")  # shown with a failure's captured output
    return random.Random(f"{SEED}:{request.node.name}")
