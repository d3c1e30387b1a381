"""The batch store's contract: its layout, its tables and the ``CURRENT`` pointer.

The batch layer writes the store and the serving layer reads it; both import
this module and nothing of each other. Layout under ``settings.batch_store`` (each
generation's, ``shared.platform.generations``)::

    CURRENT                      JSON pointer to the served version (see BatchVersion)
    versions/00000007.duckdb     one immutable DuckDB file per published version
    ROLLED_BACK                  JSON list of the kept versions `batch rollback` withdrew

A version file holds one table per view (shaped by its spec, :class:`StoreTable.of`), the
``dead_letters`` table, ``lambdaline_version`` (one row: the version's own
manifest, the same JSON as ``CURRENT`` holds when it is served) and
``corrections`` (its rows that differ from the speed layer's final ones, each side
as JSON, when the run compared them). Times are
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

import duckdb

from shared.domain.events import INSTANT_STRFTIME, format_instant, parse_instant
from shared.domain.views.spec import Column, ColumnType, ViewSpec
from shared.settings.views import VIEWS

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


def wire_sql(column: Column, qualifier: str | None = None) -> str:
    """A stored column as the API writes it, in DuckDB SQL: instants (ISO-8601 UTC with
    milliseconds) and money as strings; ``qualifier``: the table or alias it is of."""
    name = f'"{column.name}"' if qualifier is None else f'{qualifier}."{column.name}"'
    if column.type is ColumnType.INSTANT:
        return f"strftime({name}, '{INSTANT_STRFTIME}')"
    if column.type is ColumnType.MONEY:
        return f"CAST({name} AS VARCHAR)"
    return name


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
ROLLED_BACK_FILE = "ROLLED_BACK"
CORRECTIONS_TABLE = "corrections"
"""A version's rows that differ from the speed layer's (``batch_layer.corrections``)."""


class BatchStoreError(Exception):
    """The batch store cannot do what was asked; the message says why."""


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
    lack them too. ``corrections`` summarises how its rows of the days it newly
    covers differ from the speed layer's final rows (``batch_layer.corrections``;
    None: not compared). ``generation``: the generation of the views it holds
    (``shared.platform.generations``).
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
    corrections: Mapping[str, Any] | None = None
    generation: int = 1
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
            "corrections": self.corrections,
            "generation": self.generation,
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
            corrections=document.get("corrections"),
            generation=int(document.get("generation", 1)),  # published before generations
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


def version_numbers(store: Path) -> list[int]:
    """The numbers of the version files kept, oldest first."""
    versions = store / VERSIONS_DIR
    if not versions.is_dir():
        return []
    return sorted(int(path.stem) for path in versions.glob("[0-9]*.duckdb"))


def read_manifest(path: Path, threads: int | None = None) -> BatchVersion:
    """The manifest a version file carries about itself. ``threads``: as the process's
    other connections to the file have it (DuckDB refuses a connection of other
    settings to a file the process has open)."""
    config: dict[str, str | bool | int | float | list[str]] = (
        {"threads": threads} if threads else {}
    )
    with duckdb.connect(str(path), read_only=True, config=config) as connection:
        row = connection.execute(f"SELECT manifest FROM {MANIFEST_TABLE}").fetchone()
    if row is None:
        raise BatchStoreError(f"{path} has no manifest")
    return BatchVersion.from_json(str(row[0]))


def read_rolled_back(store: Path) -> frozenset[int]:
    """The versions ``batch rollback`` withdrew: each kept version newer than the one it
    went back to, until a rollback goes to it again. Their rows are not served."""
    try:
        text = (store / ROLLED_BACK_FILE).read_text(encoding="utf-8")
    except FileNotFoundError:
        return frozenset()
    return frozenset(int(number) for number in json.loads(text))


@dataclass(frozen=True)
class ListedVersion:
    manifest: BatchVersion
    current: bool
    rolled_back: bool


def list_versions(store: Path, threads: int | None = None) -> list[ListedVersion]:
    """Every version file in the store, oldest first; exactly one is current if any is
    (``threads``: :func:`read_manifest`'s)."""
    current = read_current(store)
    withdrawn = read_rolled_back(store)
    listed = []
    for number in version_numbers(store):
        path = version_file(store, number)
        try:
            manifest = read_manifest(path, threads)
        except duckdb.Error:
            if path.exists():
                raise
            continue  # deleted meanwhile (a run keeps the newest batch_keep_versions)
        is_current = current is not None and current.version == number
        listed.append(ListedVersion(manifest, is_current, number in withdrawn))
    return listed
