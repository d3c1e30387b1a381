"""The table a batch run prints at its end."""

from __future__ import annotations

import io
from datetime import UTC, date, datetime

from rich.console import Console

from batch_layer.cli import summary_table
from batch_layer.run import RunReport
from shared.platform.batch_store import BatchVersion


def test_the_batch_summary_says_why_dead_letters_ingested_and_kept_can_differ() -> None:
    version = BatchVersion(
        version=3, horizon=datetime(2026, 1, 6, tzinfo=UTC), created_at=datetime.now(UTC),
        dates=(date(2026, 1, 5),), recomputed_dates=(date(2026, 1, 5),),
        row_counts={"booth_stats": 40, "dead_letters": 13}, ingest_batch=0,
        view_settings={"window": "5m", "max_trip": "1h", "registration_lookback": "400d"},
    )  # fmt: skip
    report = RunReport(
        run_date=date(2026, 1, 5), version=version, ingest_batches=1, records_ingested=6_374,
        dead_letters_ingested=25, recomputed_dates=[date(2026, 1, 5)],
    )  # fmt: skip
    console = Console(file=io.StringIO(), width=100)

    console.print(summary_table(report))

    text = " ".join(console.file.getvalue().split())  # type: ignore[attr-defined]
    assert "of which dead letters │ 25" in text
    assert "rows: dead_letters │ 13" in text
    assert "event dates up to 2026-01-05; records of later dates wait in the master dataset" in text
