"""The batch store's contract: its layout, its tables and the ``CURRENT`` pointer.

The batch layer writes the store and the serving layer reads it; both import
this module and nothing of each other. Layout under ``settings.batch_store``::

    CURRENT                      JSON pointer to the served version (see BatchVersion)
    versions/00000007.duckdb     one immutable DuckDB file per published version

A version file holds one table per view (shaped by its spec, :class:`StoreTable.of`), the
``dead_letters`` table and ``lambdaline_version`` (one row: the version's own
manifest, the same JSON as ``CURRENT`` holds when it is served). Times are
DuckDB ``TIMESTAMP`` values in UTC. Rows are stored in key order, so the same
inputs give the same file contents.

``CURRENT`` is only ever replaced whole (written to a temporary file, fsynced,
renamed over the old one), so a reader sees the old pointer or the new one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any

from shared.domain.events import format_instant, parse_instant
from shared.domain.view_specs import VIEWS, ColumnType, ViewSpec

DUCKDB_TYPES: Mapping[ColumnType, str] = {
    ColumnType.TEXT: "VARCHAR",
    ColumnType.INSTANT: "TIMESTAMP",  # zone-less UTC
    ColumnType.COUNT: "BIGINT",
    ColumnType.MONEY: "DECIMAL(18,2)",
    ColumnType.SECONDS: "DOUBLE",
    ColumnType.FLAG: "BOOLEAN",
    ColumnType.TEXT_LIST: "VARCHAR[]",
}
"""Each view column type as both stores hold it."""


@dataclass(frozen=True)
class StoreTable:
    """A batch-store table: its DuckDB columns, its key and the column that dates a row."""

    name: str
    columns: tuple[tuple[str, str], ...]
    key: tuple[str, ...]
    date_column: str

    @classmethod
    def of(cls, view: ViewSpec) -> StoreTable:
        """A view's table: its columns, typed and never null, kept in its key order."""
        columns = tuple(
            (column.name, f"{DUCKDB_TYPES[column.type]} NOT NULL") for column in view.columns
        )
        return cls(view.name, columns, view.key, view.time_column)

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.columns)

    def ddl(self) -> str:
        columns = ", ".join(f'"{name}" {sql_type}' for name, sql_type in self.columns)
        return f'CREATE TABLE "{self.name}" ({columns})'


DEAD_LETTERS_TABLE = StoreTable(
    "dead_letters",
    (
        ("source_topic", "VARCHAR NOT NULL"),
        ("source_partition", "INTEGER NOT NULL"),
        ("source_offset", "BIGINT NOT NULL"),
        ("source_timestamp", "TIMESTAMP NOT NULL"),
        ("key", "BLOB"),
        ("key_length", "INTEGER"),
        ("key_sha256", "VARCHAR"),
        ("value", "BLOB"),
        ("value_length", "INTEGER"),
        ("value_sha256", "VARCHAR"),
        ("reason", "VARCHAR NOT NULL"),
        ("detail", "VARCHAR NOT NULL"),
    ),
    key=("source_topic", "source_partition", "source_offset"),
    date_column="source_timestamp",
)

STORE_TABLES: tuple[StoreTable, ...] = (
    *(StoreTable.of(view) for view in VIEWS),
    DEAD_LETTERS_TABLE,
)
"""Every table of a version file: the views', then the dead letters."""

STORE_TABLE_BY_NAME = {table.name: table for table in STORE_TABLES}
MANIFEST_TABLE = "lambdaline_version"
POINTER_FILE = "CURRENT"
VERSIONS_DIR = "versions"


@dataclass(frozen=True)
class LostInput:
    """Input records Kafka deleted (retention) before the batch layer's ingest read
    them: offsets [first_offset, end_offset) of one partition. ``batch reset-ingest``
    records them in the master dataset's ingest log; ``ingest_batch`` is the first
    batch its new checkpoint ingests, the one that goes on after the gap."""

    topic: str
    partition: int
    first_offset: int
    end_offset: int
    ingest_batch: int

    @property
    def records(self) -> int:
        return self.end_offset - self.first_offset

    def to_document(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "first_offset": self.first_offset,
            "end_offset": self.end_offset,
            "records": self.records,
            "ingest_batch": self.ingest_batch,
        }

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> LostInput:
        lost = cls(
            topic=str(document["topic"]),
            partition=int(document["partition"]),
            first_offset=int(document["first_offset"]),
            end_offset=int(document["end_offset"]),
            ingest_batch=int(document["ingest_batch"]),
        )
        if not 0 <= lost.first_offset < lost.end_offset or lost.partition < 0:
            raise ValueError(f"not a range of lost records: {dict(document)}")
        return lost


@dataclass(frozen=True)
class BatchVersion:
    """One published version: what ``CURRENT`` holds while it is served.

    ``horizon`` is the published time boundary: the version holds every event
    date before it. ``ingest_batch`` is the last master-dataset ingest batch the
    version has seen; records ingested after it mark their dates for recompute.
    ``view_settings`` are the settings its rows were computed under
    (``ViewSettings.labels``). ``lost_input`` lists every range of input records
    the master dataset will never hold (:class:`LostInput`), so the version's rows
    lack them too.
    """

    version: int
    horizon: datetime
    created_at: datetime
    dates: tuple[date, ...]
    recomputed_dates: tuple[date, ...]
    row_counts: dict[str, int]
    ingest_batch: int | None
    view_settings: dict[str, str]
    lost_input: tuple[LostInput, ...] = ()
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
            "lost_input": [lost.to_document() for lost in self.lost_input],
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
            view_settings={
                str(name): str(text) for name, text in document["view_settings"].items()
            },
            # a version published before lost input was recorded has none listed
            lost_input=tuple(
                LostInput.from_document(lost) for lost in document.get("lost_input", [])
            ),
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
