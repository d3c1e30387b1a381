"""Read-only SQL over the merged views (``POST /v1/sql``), in a sandboxed DuckDB.

Every view is a DuckDB view of the rows its endpoints return: the batch
version's rows below the horizon H (attached read-only as ``batch``) and the
speed store's rows from H on, each with ``final`` and ``source``, by the same
merge rule (``serving.queries.side_sql`` and ``final_sql``). Only the views
the query names get the speed store's rows copied in (as Arrow tables, per
query); the others get an empty table of the same shape.

The sandbox is a DuckDB database of its own, built once per batch version
(:meth:`serving.batch_reader.BatchSnapshot.kept`):

- ``memory_limit`` and ``threads`` set, and no temporary directory: a query
  that needs more memory fails instead of spilling to disk;
- no Python replacement scans: a query cannot read a variable of this process
  by naming it;
- no extension installed or loaded automatically;
- ``enable_external_access`` off once the version is attached: no file, no
  extension, no network, no ``ATTACH``/``COPY``/``read_csv``;
- ``lock_configuration`` on: no ``SET``/``PRAGMA`` can undo any of it.

Each query runs on a cursor of its own (its views are temporary, the
cursor's) and is interrupted after ``sql_timeout``. The endpoint refuses,
before anything runs, what is not a single ``SELECT`` (:func:`check_read_only`);
the sandbox holds without that check, and drops itself if a query detached
the batch version (:meth:`SqlSandbox.intact`).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from serving.queries import final_sql, side_sql
from shared.domain.events import format_instant
from shared.domain.merge import Source
from shared.domain.view_specs import VIEWS, ViewSpec
from shared.platform.speed_tables import SpeedTables

BATCH_ALIAS = "batch"
"""The name the batch version is attached under in the sandbox."""


class SqlRefusedError(ValueError):
    """A query refused, before or while it ran: the message says why (answered 400)."""


def check_read_only(query: str) -> None:
    """Raise SqlRefusedError unless ``query`` is a single ``SELECT`` (DuckDB's parser says)."""
    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error as error:
        raise SqlRefusedError(str(error)) from None
    if len(statements) != 1:
        raise SqlRefusedError(f"one statement per request: this holds {len(statements)}")
    kind = statements[0].type
    if kind is not duckdb.StatementType.SELECT:
        raise SqlRefusedError(
            f"only a read-only query (SELECT, FROM, WITH, DESCRIBE, SUMMARIZE, SHOW) runs "
            f"here; this is {kind.name}"
        )


def _literal(value: Any) -> str:
    """A parameter of ``side_sql``/``final_sql`` (a zone-less datetime from code, never
    from a request) as a SQL literal: a view cannot take parameters."""
    assert isinstance(value, datetime) and value.tzinfo is None, value
    return f"TIMESTAMP '{value.isoformat(sep=' ')}'"


def _inlined(text: str, params: Sequence[Any]) -> str:
    pieces = text.split("?")
    assert len(pieces) == len(params) + 1, (text, params)
    return "".join(
        piece + (_literal(params[n]) if n < len(params) else "") for n, piece in enumerate(pieces)
    )


def _side_select(
    view: ViewSpec, side: Source, horizon: datetime | None, final_before: datetime | None,
    table: str,
) -> tuple[str, list[Any]]:  # fmt: skip
    """One side's rows of a view as its endpoints return them: its columns, ``final``,
    ``source``."""
    conditions, params = side_sql(view, side, horizon)
    final, final_params = final_sql(view, side, final_before)
    columns = ", ".join(f'"{view.name}"."{column.name}"' for column in view.columns)
    text = (
        f'SELECT {columns}, {final} AS "final", \'{side.value}\' AS "source" '
        f'FROM {table} AS "{view.name}" WHERE {" AND ".join(conditions)}'
    )
    return text, [*final_params, *params]


def speed_side(
    speed: SpeedTables, view: ViewSpec, horizon: datetime | None, empty: bool = False
) -> pa.Table:
    """The speed store's rows of a view from the horizon on, as its endpoints return them
    (``empty``: none, the same columns)."""
    watermark = speed.watermark
    text, params = _side_select(
        view, Source.SPEED, horizon, speed.final_before(view, watermark), f'"{view.name}"'
    )
    if empty:
        text += " LIMIT 0"
    cursor = speed.cursor()
    try:
        return cursor.sql(text, params=params).to_arrow_table()
    finally:
        cursor.close()


def mentioned(query: str) -> set[str]:
    """The views whose name the query holds as a word (those that get speed rows)."""
    words = {word.lower() for word in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", query)}
    return {view.name for view in VIEWS if view.name in words}


@dataclass(frozen=True)
class SqlAnswer:
    columns: list[tuple[str, str]]
    """Each column's name and DuckDB type."""
    rows: list[tuple[Any, ...]]
    truncated: bool


class SqlSandbox:
    """A locked-down DuckDB database with one batch version attached read-only (or none)."""

    def __init__(self, batch_file: Path | None, memory_mb: int, threads: int = 1):
        self.batch_file = batch_file
        self.connection = duckdb.connect(
            config={
                "threads": threads,
                "memory_limit": f"{memory_mb}MB",
                "temp_directory": "",
                "python_enable_replacements": False,
                "autoinstall_known_extensions": False,
                "autoload_known_extensions": False,
            }
        )
        try:
            if batch_file is not None:
                path = str(batch_file).replace("'", "''")
                self.connection.execute(f"ATTACH '{path}' AS {BATCH_ALIAS} (READ_ONLY)")
            self.connection.execute("SET enable_external_access = false")
            self.connection.execute("SET lock_configuration = true")
        except BaseException:
            self.connection.close()
            raise
        self._lock = threading.Lock()
        self._closed = False

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A cursor of the sandbox with nothing defined: what a query sees if every check
        before it is bypassed."""
        return self.connection.cursor()

    def intact(self) -> bool:
        """True while the batch version is still attached (a ``DETACH`` that got past the
        endpoint's check would leave every later query without it)."""
        if self.batch_file is None:
            return True
        cursor = self.connection.cursor()
        try:
            names = {name for (name,) in cursor.execute(
                "SELECT database_name FROM duckdb_databases()"
            ).fetchall()}  # fmt: skip
        finally:
            cursor.close()
        return BATCH_ALIAS in names

    def views_cursor(
        self, speed: SpeedTables, horizon: datetime | None, query: str
    ) -> duckdb.DuckDBPyConnection:
        """A cursor holding every view as a temporary view of the merged rows."""
        cursor = self.connection.cursor()
        try:
            wanted = mentioned(query)
            for view in VIEWS:
                speed_table = f"speed_{view.name}"
                cursor.register(
                    speed_table, speed_side(speed, view, horizon, empty=view.name not in wanted)
                )
                text = f'SELECT * FROM "{speed_table}"'
                if self.batch_file is not None:
                    batch, params = _side_select(
                        view, Source.BATCH, horizon, None, f'{BATCH_ALIAS}."{view.name}"'
                    )
                    text = f"{_inlined(batch, params)} UNION ALL {text}"
                cursor.execute(f'CREATE TEMP VIEW "{view.name}" AS {text}')
        except BaseException:
            cursor.close()
            raise
        return cursor

    def run(
        self,
        cursor: duckdb.DuckDBPyConnection,
        query: str,
        rows: int,
        timeout: timedelta,
    ) -> SqlAnswer:
        """Run ``query`` on ``cursor`` (closed after), at most ``rows`` rows, interrupted
        after ``timeout``. Raises SqlRefusedError with DuckDB's message if it fails."""
        interrupted = threading.Event()

        def interrupt() -> None:
            interrupted.set()
            cursor.interrupt()

        timer = threading.Timer(timeout.total_seconds(), interrupt)
        timer.start()
        started = time.monotonic()
        try:
            result = cursor.execute(query)
            if result.description is None:
                raise SqlRefusedError("the statement returned no rows to answer with")
            columns = [(name, str(kind)) for name, kind, *_ in result.description]
            fetched = result.fetchmany(rows + 1)
        except duckdb.Error as error:
            if interrupted.is_set():
                raise SqlRefusedError(
                    f"interrupted after {time.monotonic() - started:.1f} s: the limit is "
                    f"{timeout.total_seconds():g} s (the sql_timeout setting)"
                ) from None
            raise SqlRefusedError(f"{type(error).__name__}: {error}") from None
        finally:
            timer.cancel()
            cursor.close()
        return SqlAnswer(columns, fetched[:rows], len(fetched) > rows)

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self.connection.close()


def _json_value(value: Any) -> Any:
    """``json.dumps``'s fallback: instants as the API writes them, money (DECIMAL) as text."""
    if isinstance(value, datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        return format_instant(moment)
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bytes):
        return value.hex()
    return str(value)  # UUID, time, interval parts: their text


def _finite(value: Any) -> Any:
    """NaN and the infinities are not JSON: null."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    return value


def encode_answer(answer: SqlAnswer, head: dict[str, Any]) -> bytes:
    """``{...head, "columns": [...], "rows": [[...]], "truncated": ...}`` as JSON."""
    body = {
        **head,
        "columns": [{"name": name, "type": kind} for name, kind in answer.columns],
        "rows": [[_finite(value) for value in row] for row in answer.rows],
        "truncated": answer.truncated,
    }
    return json.dumps(body, separators=(",", ":"), default=_json_value).encode()
