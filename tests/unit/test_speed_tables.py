"""The materialised speed store: latest value per key, never moved back by a replay."""

from __future__ import annotations

import json
from datetime import datetime
from decimal import Decimal
from typing import Any

from serving.speed_tables import SpeedTables


def record(window: str, count: int, toll: str, batch_id: int) -> tuple[bytes, bytes]:
    value: dict[str, Any] = {
        "booth_id": "b1", "window_start": window, "window_end": "2026-01-05T06:05:00.000Z",
        "vehicle_count": count, "total_toll": toll,
        "first_entry_time": "2026-01-05T06:00:01.000Z",
        "last_entry_time": "2026-01-05T06:04:00.000Z", "batch_id": batch_id,
    }  # fmt: skip
    return f"b1|{window}".encode(), json.dumps(value).encode()


def rows(tables: SpeedTables) -> list[tuple[Any, ...]]:
    cursor = tables.cursor()
    try:
        return cursor.execute(
            "SELECT window_start, vehicle_count, total_toll, batch_id FROM booth_stats "
            "ORDER BY window_start"
        ).fetchall()
    finally:
        cursor.close()


def test_latest_batch_wins_and_an_older_replay_is_ignored() -> None:
    tables = SpeedTables()
    six, ten = "2026-01-05T06:00:00.000Z", "2026-01-05T10:00:00.000Z"
    assert tables.apply("booth_stats", [record(six, 3, "7.50", 2), record(ten, 1, "2.5", 2)]) == 2
    assert tables.apply("booth_stats", [record(six, 1, "2.50", 1)]) == 0  # a replay of batch 1
    # within one poll, the newest record of a key wins whatever the order
    tables.apply("booth_stats", [record(ten, 4, "10.00", 4), record(ten, 2, "5.00", 3)])
    assert rows(tables) == [
        (datetime(2026, 1, 5, 6), 3, Decimal("7.50"), 2),
        (datetime(2026, 1, 5, 10), 4, Decimal("10.00"), 4),
    ]
