"""Publishing versions with real DuckDB files (no Spark): copy rule, horizon, pruning, rollback."""

from __future__ import annotations

import json
import re
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from typer.testing import CliRunner

from batch_layer.publish import empty_store_tables, publish_version, rollback, run_lock
from lambdaline.cli import app
from shared.platform.batch_store import (
    BatchStoreError,
    list_versions,
    read_current,
    read_rolled_back,
    version_file,
)


def booth_rows(*rows: tuple[str, str, int]) -> pa.Table:
    """booth_stats rows (booth, window start, vehicle count); other columns filled in."""
    template = empty_store_tables()["booth_stats"]
    starts = [datetime.fromisoformat(start) for _, start, _ in rows]
    columns = {
        "booth_id": [booth for booth, _, _ in rows],
        "window_start": starts,
        "window_end": starts,
        "vehicle_count": [count for _, _, count in rows],
        "total_toll": [Decimal("1.00")] * len(rows),
        "first_entry_time": starts,
        "last_entry_time": starts,
    }
    return pa.Table.from_pydict(columns, schema=template.schema)


VIEW_SETTINGS = {"window": "5m", "max_trip": "1h", "registration_lookback": "400d"}


def publish(  # type: ignore[no-untyped-def]
    store: Path,
    rows: pa.Table,
    dates: list[date],
    horizon_day: int,
    keep: int = 5,
    view_settings: dict[str, str] = VIEW_SETTINGS,
):
    fresh = {**empty_store_tables(), "booth_stats": rows}
    horizon = datetime(2026, 1, horizon_day, tzinfo=UTC)
    return publish_version(
        store,
        fresh,
        dates,
        horizon,
        ingest_batch=0,
        keep_versions=keep,
        view_settings=view_settings,
    )


def booth_stats_of(store: Path, version: int) -> list[tuple[str, str, int]]:
    with duckdb.connect(str(version_file(store, version)), read_only=True) as connection:
        found = connection.execute(
            "SELECT booth_id, strftime(window_start, '%Y-%m-%dT%H:%M'), vehicle_count "
            "FROM booth_stats"
        ).fetchall()
    return [(booth, start, count) for booth, start, count in found]


def test_a_version_keeps_rows_of_dates_not_recomputed_and_replaces_the_rest(tmp_path: Path) -> None:
    first = publish(tmp_path, booth_rows(("b1", "2026-01-04T10:00", 2), ("b1", "2026-01-05T10:00", 3)),
                    [date(2026, 1, 4), date(2026, 1, 5)], horizon_day=6)  # fmt: skip
    second = publish(tmp_path, booth_rows(("b2", "2026-01-05T11:00", 7)), [date(2026, 1, 5)], 6)
    assert (first.version, second.version) == (1, 2)
    assert booth_stats_of(tmp_path, 2) == [
        ("b1", "2026-01-04T10:00", 2),
        ("b2", "2026-01-05T11:00", 7),
    ]
    assert second.row_counts["booth_stats"] == 2
    assert second.dates == (date(2026, 1, 4), date(2026, 1, 5))
    assert booth_stats_of(tmp_path, 1) == [
        ("b1", "2026-01-04T10:00", 2),
        ("b1", "2026-01-05T10:00", 3),
    ]


def test_rows_of_other_view_settings_are_never_kept_beside_new_ones(tmp_path: Path) -> None:
    publish(tmp_path, booth_rows(("b1", "2026-01-04T10:00", 2), ("b1", "2026-01-05T10:00", 3)),
            [date(2026, 1, 4), date(2026, 1, 5)], horizon_day=6)  # fmt: skip
    ten_minutes = {"window": "10m", "max_trip": "1h", "registration_lookback": "400d"}
    with pytest.raises(BatchStoreError, match=r"its rows of 2026-01-04 cannot be kept"):
        publish(tmp_path, booth_rows(("b1", "2026-01-05T10:00", 4)), [date(2026, 1, 5)], 6,
                view_settings=ten_minutes)  # fmt: skip
    assert [listed.manifest.version for listed in list_versions(tmp_path)] == [1]

    every_date = publish(tmp_path, booth_rows(("b1", "2026-01-04T10:00", 5)),
                         [date(2026, 1, 4), date(2026, 1, 5)], 6, view_settings=ten_minutes)  # fmt: skip
    assert booth_stats_of(tmp_path, every_date.version) == [("b1", "2026-01-04T10:00", 5)]
    current = read_current(tmp_path)
    assert current is not None and current.view_settings == ten_minutes


def test_rows_are_stored_in_key_order(tmp_path: Path) -> None:
    publish(tmp_path, booth_rows(("b2", "2026-01-04T10:00", 1), ("b1", "2026-01-04T10:05", 1),
                                 ("b1", "2026-01-04T10:00", 1)), [date(2026, 1, 4)], 5)  # fmt: skip
    assert booth_stats_of(tmp_path, 1) == [
        ("b1", "2026-01-04T10:00", 1), ("b1", "2026-01-04T10:05", 1), ("b2", "2026-01-04T10:00", 1)
    ]  # fmt: skip


def test_the_horizon_never_moves_backward(tmp_path: Path) -> None:
    publish(tmp_path, booth_rows(), [], horizon_day=9)
    older_run = publish(tmp_path, booth_rows(), [], horizon_day=6)
    assert older_run.horizon == datetime(2026, 1, 9, tzinfo=UTC)


def test_old_versions_are_pruned_but_never_the_current_one(tmp_path: Path) -> None:
    for _ in range(3):
        publish(tmp_path, booth_rows(), [], 6, keep=2)
    assert [listed.manifest.version for listed in list_versions(tmp_path)] == [2, 3]
    rollback(tmp_path, 2)
    publish(tmp_path, booth_rows(), [], 6, keep=1)  # version 4 becomes current
    rollback(tmp_path, 4)
    assert [(v.manifest.version, v.current) for v in list_versions(tmp_path)] == [(4, True)]


def test_rollback_moves_the_pointer_and_refuses_unknown_versions(tmp_path: Path) -> None:
    publish(tmp_path, booth_rows(("b1", "2026-01-04T10:00", 2)), [date(2026, 1, 4)], 5)
    publish(tmp_path, booth_rows(("b1", "2026-01-04T10:00", 9)), [date(2026, 1, 4)], 5)
    assert rollback(tmp_path, 1).version == 1
    current = read_current(tmp_path)
    assert current is not None and current.version == 1
    assert [v.current for v in list_versions(tmp_path)] == [True, False]
    with pytest.raises(BatchStoreError, match=r"version 7 is not in .* \(kept versions: 1, 2\)"):
        rollback(tmp_path, 7)


def test_a_rollback_withdraws_the_newer_versions_until_one_goes_back_to_them(
    tmp_path: Path,
) -> None:
    for _ in range(3):
        publish(tmp_path, booth_rows(), [], 5)
    rollback(tmp_path, 1)
    assert read_rolled_back(tmp_path) == {2, 3}
    publish(tmp_path, booth_rows(), [], 5)  # version 4, on version 1's rows
    assert [(v.manifest.version, v.rolled_back) for v in list_versions(tmp_path)] == [
        (1, False), (2, True), (3, True), (4, False)
    ]  # fmt: skip
    rollback(tmp_path, 3)  # back to 3: 2 stays withdrawn, 4 is newer than 3
    assert read_rolled_back(tmp_path) == {2, 4}


def test_leftovers_of_a_killed_publish_are_removed(tmp_path: Path) -> None:
    publish(tmp_path, booth_rows(), [], 5)
    leftover = tmp_path / "versions" / ".00000002.duckdb.tmp"
    leftover.write_bytes(b"half a file")
    assert publish(tmp_path, booth_rows(), [], 5).version == 2
    assert not leftover.exists()


def test_a_second_run_cannot_take_the_lock(tmp_path: Path) -> None:
    second = pytest.raises(BatchStoreError, match="another batch run holds")
    with run_lock(tmp_path), second, run_lock(tmp_path):
        pass
    with run_lock(tmp_path):  # released
        pass


def test_the_versions_table_reads_in_80_columns(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    publish(tmp_path, booth_rows(("b1", "2026-01-04T10:00", 2)), [date(2026, 1, 4)], horizon_day=5)
    publish(tmp_path, booth_rows(*[("b1", f"2026-01-05T{h:02d}:00", 1) for h in range(12)]),
            [date(2026, 1, 5)], horizon_day=6)  # fmt: skip
    monkeypatch.setenv("LAMBDALINE_BATCH_STORE_DIR", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "80")

    output = CliRunner().invoke(app, ["batch", "versions"]).output

    lines = output.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "…" not in output  # nothing cut short
    first, second = (
        next(line.split() for line in lines if line.startswith(f"{version} ")) for version in (1, 2)
    )
    assert first[:3] == ["1", "2026-01-05", "00:00"] and "*" not in first
    assert second[:4] == ["2", "*", "2026-01-06", "00:00"]  # the current version
    # version 2 recomputed 2026-01-05 (12 rows) and kept 2026-01-04's row of version 1
    assert first[-2:] == ["booth_stats", "1"] and second[-2:] == ["booth_stats", "13"]
    for name in ("vehicle_trips", "expired_registrations", "diagnostics", "dead_letters"):
        assert sum(line.split()[-2:] == [name, "0"] for line in lines) == 2


def test_versions_as_json_write_instants_as_the_api_and_current_do(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    publish(tmp_path, booth_rows(("b1", "2026-01-04T10:00", 2)), [date(2026, 1, 4)], horizon_day=5)
    monkeypatch.setenv("LAMBDALINE_BATCH_STORE_DIR", str(tmp_path))

    [listed] = json.loads(CliRunner().invoke(app, ["batch", "versions", "--json"]).output)

    assert listed["horizon"] == "2026-01-05T00:00:00.000Z"  # ISO-8601 UTC, milliseconds
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", listed["created_at"])
    current = json.loads((tmp_path / "CURRENT").read_text())
    assert (listed["horizon"], listed["created_at"]) == (current["horizon"], current["created_at"])
