"""The speed store, materialised: one in-process DuckDB table per view.

The speed layer publishes each view to a compacted topic, one record per view
key whose JSON value holds the view's columns and the micro-batch id. Here the
latest value per key is kept (a record whose ``batch_id`` is older than the
one held is ignored: a replayed micro-batch never moves a row back), in tables
shaped like the batch store's (``shared.batch_store.STORE_TABLES``), so one
query text serves both stores. Times are zone-less UTC, as in the batch store.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

import duckdb
import pyarrow as pa

from shared.batch_store import STORE_TABLE_BY_NAME, StoreTable
from shared.events import parse_instant
from shared.topics import DERIVED_QUERY_PREFIX, VIEW_NAMES


def stored_instant(text: str) -> datetime:
    """An ISO-8601 instant as the stores hold it: a zone-less UTC datetime."""
    return parse_instant(text).replace(tzinfo=None)


def _speed_ddl(table: StoreTable) -> str:
    columns = ", ".join(f'"{name}" {sql_type}' for name, sql_type in table.columns)
    key = ", ".join(f'"{name}"' for name in table.key)
    return f'CREATE TABLE "{table.name}" ({columns}, batch_id BIGINT NOT NULL, PRIMARY KEY ({key}))'


def _typed(table: StoreTable, value: Mapping[str, Any]) -> list[Any]:
    row: list[Any] = []
    for name, sql_type in table.columns:
        field = value[name]
        if sql_type.startswith("TIMESTAMP"):
            field = stored_instant(field)
        elif sql_type.startswith("DECIMAL"):
            field = Decimal(str(field))
        row.append(field)
    return row


class SpeedTables:
    """In-process DuckDB tables of the speed views; safe to read while a consumer writes."""

    def __init__(self) -> None:
        self.connection = duckdb.connect()
        self._lock = threading.Lock()
        self._batch_ids: dict[str, dict[bytes, int]] = {view: {} for view in VIEW_NAMES}
        self.watermarks: dict[str, datetime] = {}
        for view in VIEW_NAMES:
            self.connection.execute(_speed_ddl(STORE_TABLE_BY_NAME[view]))

    def apply(self, view: str, records: Iterable[tuple[bytes, bytes]]) -> int:
        """Upsert (key, JSON value) records of a view; returns how many rows changed."""
        table = STORE_TABLE_BY_NAME[view]
        held = self._batch_ids[view]
        latest: dict[bytes, tuple[int, list[Any]]] = {}
        for key, raw in records:
            value = json.loads(raw)
            batch_id = int(value["batch_id"])
            if batch_id < held.get(key, -1) or batch_id < latest.get(key, (-1, []))[0]:
                continue  # an older micro-batch: never move a row back
            latest[key] = (batch_id, [*_typed(table, value), batch_id])
        if not latest:
            return 0
        # one INSERT over an Arrow table: DuckDB's executemany runs a statement per
        # row (measured ~350 rows/s), far below what the speed layer publishes
        names = [*table.column_names, "batch_id"]
        columns = list(zip(*(row for _, row in latest.values()), strict=True))
        incoming = pa.table(dict(zip(names, map(list, columns), strict=True)))
        quoted = ", ".join(f'"{name}"' for name in names)
        with self._lock:
            cursor = self.connection.cursor()
            try:
                cursor.register("incoming", incoming)
                cursor.execute(
                    f'INSERT OR REPLACE INTO "{view}" ({quoted}) SELECT {quoted} FROM incoming'
                )
                cursor.unregister("incoming")
            finally:
                cursor.close()
            for key, (batch_id, _) in latest.items():
                held[key] = batch_id
        return len(latest)

    def note_progress(self, raw: bytes) -> None:
        """Record a query's event-time watermark from a ``speed.progress`` record."""
        progress = json.loads(raw)
        watermark = progress.get("watermark")
        if watermark and stored_instant(watermark) > datetime(1970, 1, 1):  # 0: no data yet
            self.watermarks[str(progress["query"])] = stored_instant(watermark)

    @property
    def watermark(self) -> datetime | None:
        """The speed layer's watermark: the earliest of the watermarks of its queries
        that read the input topics (None before any)."""
        views = [
            mark
            for query, mark in self.watermarks.items()
            if query.startswith("speed.") and not query.startswith(DERIVED_QUERY_PREFIX)
        ]
        return min(views) if views else None

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A cursor of its own for one reader (DuckDB cursors are not shared across threads)."""
        return self.connection.cursor()

    def close(self) -> None:
        self.connection.close()
