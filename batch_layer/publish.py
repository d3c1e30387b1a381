"""Publishing batch views: immutable DuckDB versions behind an atomic ``CURRENT`` pointer.

A new version is built as a hidden temporary file, closed and fsynced, then
renamed into ``versions/``; only then is ``CURRENT`` replaced (write a
temporary file, fsync, rename, fsync the directory). A run killed at any point
before that last rename leaves ``CURRENT``, and so what is served, untouched;
the next run removes the temporary files it left. Old versions are deleted
only after the pointer has moved, and never the one ``CURRENT`` names.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from datetime import UTC, date, datetime
from pathlib import Path

import duckdb
import pyarrow as pa

from batch_layer.corrections import SpeedSide, record_corrections
from shared.platform.batch_store import (
    MANIFEST_TABLE,
    POINTER_FILE,
    ROLLED_BACK_FILE,
    STORE_TABLES,
    VERSIONS_DIR,
    BatchStoreError,
    BatchVersion,
    LostInput,
    read_current,
    read_manifest,
    read_rolled_back,
    version_file,
    version_numbers,
)
from shared.platform.failpoints import failpoint
from shared.platform.files import fsync_path, replace_atomically
from shared.platform.locks import LockHeldError, exclusive_lock
from shared.platform.logs import log_event
from shared.settings import describe_view_settings

logger = logging.getLogger("lambdaline.batch")


@contextmanager
def run_lock(store: Path) -> Iterator[None]:
    """Hold the run lock of the batch store's root (``Settings.batch_store_root``): one batch
    run (ingest, recompute, publish) at a time, whatever its generation, as they share the
    master dataset's ingest."""
    with ExitStack() as held:
        try:
            held.enter_context(
                exclusive_lock(store / "run.lock", "another batch run", "wait for it to finish")
            )
        except LockHeldError as error:
            raise BatchStoreError(str(error)) from None
        yield


def empty_store_tables() -> dict[str, pa.Table]:
    """Every store table with no rows, as Arrow: the fresh rows of a run that recomputes
    nothing. A new dict each call (callers replace its tables); the tables are immutable."""
    return dict(_empty_store_tables())


@functools.cache
def _empty_store_tables() -> Mapping[str, pa.Table]:
    # the store's DDL read back by DuckDB itself (a connection costs ~25 ms: once)
    with duckdb.connect() as connection:
        tables = {}
        for spec in STORE_TABLES:
            connection.execute(spec.ddl())
            tables[spec.name] = connection.sql(f'SELECT * FROM "{spec.name}"').to_arrow_table()
    return tables


ROW_GROUP_ROWS = 16_384
"""Rows per row group in a version file (DuckDB's default: 122,880). The API reads
a booth or a day at a time from tables stored in key order, and DuckDB skips row
groups by their min/max: a booth-day query measured 2.2 -> 1.5 ms."""


def _copy_table(
    connection: duckdb.DuckDBPyConnection, table_name: str, fresh: pa.Table, has_previous: bool
) -> None:
    """Create a table from the previous version's rows of dates not recomputed plus fresh
    rows, stored in key order: the API reads the batch side's rows unsorted
    (``serving.queries.ViewQuery.sql``), and skips row groups by their min/max."""
    table = next(spec for spec in STORE_TABLES if spec.name == table_name)
    columns = ", ".join(f'"{name}"' for name in table.column_names)
    order = ", ".join(f'"{name}"' for name in table.key)
    connection.execute(table.ddl())
    connection.register("fresh_rows", fresh)
    sources = [f"SELECT {columns} FROM fresh_rows"]
    # a version of an earlier release may lack a column added since (null there),
    # or a whole view (its days not recomputed stay empty until a full recompute)
    had = (
        {
            row[0]
            for row in connection.execute(
                "SELECT column_name FROM duckdb_columns() "
                "WHERE database_name = 'previous' AND table_name = ?",
                [table.name],
            ).fetchall()
        }
        if has_previous
        else set()
    )
    if had:
        kept = ", ".join(
            f'"{name}"' if name in had else f'NULL AS "{name}"' for name in table.column_names
        )
        sources.append(
            f'SELECT {kept} FROM previous."{table.name}" '
            f'WHERE CAST("{table.date_column}" AS DATE) NOT IN (SELECT day FROM recomputed)'
        )
    union = " UNION ALL ".join(sources)
    connection.execute(f'INSERT INTO "{table.name}" SELECT * FROM ({union}) ORDER BY {order}')
    connection.unregister("fresh_rows")


def publish_version(
    store: Path,
    fresh: Mapping[str, pa.Table],
    recomputed_dates: list[date],
    horizon: datetime,
    ingest_batch: int | None,
    keep_versions: int,
    *,
    view_settings: dict[str, str],
    lost_input: Sequence[LostInput] = (),
    speed: SpeedSide | None = None,
    generation: int = 1,
) -> BatchVersion:
    """Publish a new version: the served one with ``recomputed_dates`` replaced by ``fresh``.

    ``fresh`` holds every table of :data:`STORE_TABLES` (rows of the recomputed
    dates only), computed under ``view_settings``; ``lost_input`` lists every range of
    input records the master dataset will never hold; ``speed``: the speed store to
    compare the days it newly covers with (``batch_layer.corrections``); ``generation``: of
    the views (the store is that generation's). The horizon never moves
    backward: it is the later of the served one and ``horizon``. Raises
    :class:`BatchStoreError`, before writing anything, if rows of the served
    version computed under other view settings would be kept.
    """
    previous = read_current(store)
    if previous is not None and previous.view_settings != view_settings:
        kept = sorted(set(previous.dates) - set(recomputed_dates))
        if kept:
            raise BatchStoreError(
                f"version {previous.version} was computed with "
                f"{describe_view_settings(previous.view_settings)}, this one with "
                f"{describe_view_settings(view_settings)}: its rows of "
                f"{', '.join(day.isoformat() for day in kept)} cannot be kept beside the new "
                "ones; recompute those dates too"
            )
    versions = store / VERSIONS_DIR
    versions.mkdir(parents=True, exist_ok=True)
    for leftover in versions.glob(".*.tmp*"):
        leftover.unlink()  # from a run killed while publishing
    number = max([0, *version_numbers(store), previous.version if previous else 0]) + 1
    if previous is not None:
        horizon = max(horizon, previous.horizon)
    temporary = versions / f".{number:08d}.duckdb.tmp"

    with duckdb.connect() as connection:
        connection.execute(
            f"ATTACH ? AS version (ROW_GROUP_SIZE {ROW_GROUP_ROWS})", [str(temporary)]
        )
        connection.execute("USE version")
        connection.execute("CREATE TEMP TABLE recomputed (day DATE)")
        if recomputed_dates:
            connection.executemany(
                "INSERT INTO recomputed VALUES (?)", [[day] for day in recomputed_dates]
            )
        if previous is not None:
            connection.execute(
                "ATTACH ? AS previous (READ_ONLY)", [str(version_file(store, previous.version))]
            )
        for table in STORE_TABLES:
            _copy_table(connection, table.name, fresh[table.name], previous is not None)
            failpoint("publish_tables")
        counts = {table.name: _count(connection, table.name) for table in STORE_TABLES}
        corrections = None
        if speed is not None:
            late_before = (previous.corrections or {}).get("late_rows_total") if previous else None
            since = previous.horizon if previous is not None else None
            corrections = record_corrections(connection, speed, since, horizon, late_before)
        held_dates = sorted(set(previous.dates if previous else ()) | set(recomputed_dates))
        manifest = BatchVersion(
            version=number,
            horizon=horizon,
            created_at=datetime.now(UTC),
            dates=tuple(held_dates),
            recomputed_dates=tuple(recomputed_dates),
            row_counts=counts,
            ingest_batch=ingest_batch,
            view_settings=view_settings,
            lost_input=tuple(lost_input),
            corrections=corrections,
            generation=generation,
        )
        connection.execute(f"CREATE TABLE {MANIFEST_TABLE} (manifest VARCHAR NOT NULL)")
        connection.execute(f"INSERT INTO {MANIFEST_TABLE} VALUES (?)", [manifest.to_json()])
        if previous is not None:
            connection.execute("DETACH previous")
        connection.execute("CHECKPOINT")
    fsync_path(temporary)
    final = version_file(store, number)
    temporary.replace(final)
    fsync_path(versions)
    failpoint("publish_before_pointer")

    replace_atomically(store / POINTER_FILE, manifest.to_json())
    log_event(logger, "batch_published", version=number, horizon=horizon.isoformat())
    prune_versions(store, keep_versions)
    return manifest


def _count(connection: duckdb.DuckDBPyConnection, table_name: str) -> int:
    row = connection.execute(f'SELECT count(*) FROM "{table_name}"').fetchone()
    return int(row[0]) if row else 0


def prune_versions(store: Path, keep_versions: int) -> list[int]:
    """Delete all but the newest ``keep_versions`` files, never the current one."""
    current = read_current(store)
    numbers = version_numbers(store)
    kept = set(numbers[-keep_versions:]) | ({current.version} if current else set())
    deleted = [number for number in numbers if number not in kept]
    for number in deleted:
        version_file(store, number).unlink()
    if deleted:
        log_event(logger, "batch_versions_deleted", versions=deleted)
    return deleted


def rollback(store: Path, version: int) -> BatchVersion:
    """Point ``CURRENT`` at an older (or newer) kept version.

    Every kept version newer than it is withdrawn (``ROLLED_BACK``): the API
    refuses to serve it by ``version=``, and ``batch versions`` marks it. A later
    rollback to a withdrawn version restores it.
    """
    path = version_file(store, version)
    if not path.exists():
        kept = ", ".join(str(n) for n in version_numbers(store)) or "none"
        raise BatchStoreError(f"version {version} is not in {store} (kept versions: {kept})")
    manifest = read_manifest(path)
    withdrawn = (read_rolled_back(store) - {version}) | {
        number for number in version_numbers(store) if number > version
    }
    # withdrawn first: a crash between the two leaves CURRENT as it was, to roll back again
    replace_atomically(store / ROLLED_BACK_FILE, json.dumps(sorted(withdrawn)) + "\n")
    replace_atomically(store / POINTER_FILE, manifest.to_json())
    log_event(logger, "batch_rolled_back", version=version, withdrawn=sorted(withdrawn))
    return manifest
