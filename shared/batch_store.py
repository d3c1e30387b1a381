"""The batch store's contract: its layout, its tables and the ``CURRENT`` pointer.

The batch layer writes the store and the serving layer reads it; both import
this module and nothing of each other. Layout under ``settings.batch_store``::

    CURRENT                      JSON pointer to the served version (see BatchVersion)
    versions/00000007.duckdb     one immutable DuckDB file per published version

A version file holds one table per view (named and shaped as in DESIGN.md), the
``dead_letters`` table and ``lambdaline_version`` (one row: the version's own
manifest, the same JSON as ``CURRENT`` holds when it is served). Times are
DuckDB ``TIMESTAMP`` values in UTC. Rows are stored in key order, so the same
inputs give the same file contents.

``CURRENT`` is only ever replaced whole (written to a temporary file, fsynced,
renamed over the old one), so a reader sees the old pointer or the new one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any

from shared.events import format_instant, parse_instant


@dataclass(frozen=True)
class StoreTable:
    """A batch-store table: its DuckDB columns, its key and the column that dates a row."""

    name: str
    columns: tuple[tuple[str, str], ...]
    key: tuple[str, ...]
    date_column: str

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.columns)

    def ddl(self) -> str:
        columns = ", ".join(f'"{name}" {sql_type}' for name, sql_type in self.columns)
        return f'CREATE TABLE "{self.name}" ({columns})'


STORE_TABLES: tuple[StoreTable, ...] = (
    StoreTable(
        "booth_stats",
        (
            ("booth_id", "VARCHAR NOT NULL"),
            ("window_start", "TIMESTAMP NOT NULL"),
            ("window_end", "TIMESTAMP NOT NULL"),
            ("vehicle_count", "BIGINT NOT NULL"),
            ("total_toll", "DECIMAL(18,2) NOT NULL"),
            ("first_entry_time", "TIMESTAMP NOT NULL"),
            ("last_entry_time", "TIMESTAMP NOT NULL"),
        ),
        key=("booth_id", "window_start"),
        date_column="window_start",
    ),
    StoreTable(
        "vehicle_trips",
        (
            ("booth_id", "VARCHAR NOT NULL"),
            ("license_plate", "VARCHAR NOT NULL"),
            ("entry_time", "TIMESTAMP NOT NULL"),
            ("exit_time", "TIMESTAMP NOT NULL"),
            ("duration_seconds", "DOUBLE NOT NULL"),
        ),
        key=("booth_id", "license_plate", "entry_time"),
        date_column="entry_time",
    ),
    StoreTable(
        "expired_registrations",
        (
            ("booth_id", "VARCHAR NOT NULL"),
            ("license_plate", "VARCHAR NOT NULL"),
            ("entry_time", "TIMESTAMP NOT NULL"),
            ("registration_id", "VARCHAR NOT NULL"),
        ),
        key=("booth_id", "license_plate", "entry_time"),
        date_column="entry_time",
    ),
    StoreTable(
        "diagnostics",
        (
            ("booth_id", "VARCHAR NOT NULL"),
            ("window_start", "TIMESTAMP NOT NULL"),
            ("reason", "VARCHAR NOT NULL"),
            ("count", "BIGINT NOT NULL"),
        ),
        key=("booth_id", "window_start", "reason"),
        date_column="window_start",
    ),
    StoreTable(
        "dead_letters",
        (
            ("source_topic", "VARCHAR NOT NULL"),
            ("source_partition", "INTEGER NOT NULL"),
            ("source_offset", "BIGINT NOT NULL"),
            ("source_timestamp", "TIMESTAMP NOT NULL"),
            ("key", "BLOB"),
            ("value", "BLOB"),
            ("reason", "VARCHAR NOT NULL"),
            ("detail", "VARCHAR NOT NULL"),
        ),
        key=("source_topic", "source_partition", "source_offset"),
        date_column="source_timestamp",
    ),
)
"""Every table of a version file; the four views of DESIGN.md, then the dead letters."""

STORE_TABLE_BY_NAME = {table.name: table for table in STORE_TABLES}
MANIFEST_TABLE = "lambdaline_version"
POINTER_FILE = "CURRENT"
VERSIONS_DIR = "versions"


@dataclass(frozen=True)
class BatchVersion:
    """One published version: what ``CURRENT`` holds while it is served.

    ``horizon`` is the published time boundary: the version holds every event
    date before it. ``ingest_batch`` is the last master-dataset ingest batch the
    version has seen; records ingested after it mark their dates for recompute.
    ``view_settings`` are the settings its rows were computed under
    (``Settings.view_settings``); None in versions published before 2026-11-25.
    """

    version: int
    horizon: datetime
    created_at: datetime
    dates: tuple[date, ...]
    recomputed_dates: tuple[date, ...]
    row_counts: dict[str, int]
    ingest_batch: int | None
    view_settings: dict[str, str] | None = None
    path: str = field(default="")

    def __post_init__(self) -> None:
        if not self.path:
            object.__setattr__(self, "path", version_path(self.version))

    def to_json(self) -> str:
        document: dict[str, Any] = {
            "version": self.version,
            "path": self.path,
            "horizon": format_instant(self.horizon),
            "created_at": format_instant(self.created_at),
            "dates": [day.isoformat() for day in self.dates],
            "recomputed_dates": [day.isoformat() for day in self.recomputed_dates],
            "row_counts": self.row_counts,
            "ingest_batch": self.ingest_batch,
            "view_settings": self.view_settings,
        }
        return json.dumps(document, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> BatchVersion:
        document = json.loads(text)
        return cls(
            version=int(document["version"]),
            path=str(document["path"]),
            horizon=parse_instant(document["horizon"]),
            created_at=parse_instant(document["created_at"]),
            dates=tuple(date.fromisoformat(day) for day in document["dates"]),
            recomputed_dates=tuple(date.fromisoformat(day) for day in document["recomputed_dates"]),
            row_counts={str(name): int(count) for name, count in document["row_counts"].items()},
            ingest_batch=document["ingest_batch"],
            view_settings=document.get("view_settings"),
        )


def version_path(version: int) -> str:
    """A version file's path relative to the store directory."""
    return f"{VERSIONS_DIR}/{version:08d}.duckdb"


def version_file(store: Path, version: int) -> Path:
    return store / version_path(version)


def read_current(store: Path) -> BatchVersion | None:
    """The served version, or None if nothing has been published yet."""
    try:
        text = (store / POINTER_FILE).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    return BatchVersion.from_json(text)
