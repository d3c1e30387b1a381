"""Read-only SQL over the merged views (``POST /v1/sql``), in a sandboxed DuckDB.

Every view is a DuckDB view of the rows its endpoints return: the batch
version's rows below the horizon H (attached read-only) and the speed store's
rows from H on, each with ``final`` and ``source``, by the same merge rule
(``serving.queries.side_sql`` and ``final_sql``). Only the views the query
names get the speed store's rows copied in (as Arrow tables, per query); the
others get an empty table of the same shape.

A query reads the six views and nothing else (:func:`check_query`, which
:meth:`SqlSandbox.run` applies itself): no table of the batch version (its
dead letters hold raw input), no registered speed table, no catalog
(``information_schema``, ``duckdb_tables()``, ``SHOW TABLES``), no table
function but ``range``, ``generate_series`` and ``unnest``. DuckDB's own
parser says what the query names (``json_serialize_sql``), so a name inside a
subquery, a CTE or a ``DESCRIBE`` is seen as well.

Each query gets a DuckDB database of its own (:meth:`SqlSandbox.connect`),
closed after it, so nothing one query creates is seen by another:

- ``memory_limit`` and ``threads`` set, and no temporary directory: a query
  that needs more memory fails instead of spilling to disk;
- no Python replacement scans: a query cannot read a variable of this process
  by naming it;
- no extension installed or loaded automatically;
- ``enable_external_access`` off once the version is attached: no file, no
  extension, no network, no ``ATTACH``/``COPY``/``read_csv``;
- ``lock_configuration`` on: no ``SET``/``PRAGMA`` can undo any of it.

A query is interrupted after ``sql_timeout``. Its answer is fetched a few rows
at a time and encoded to JSON in the same worker thread, against two budgets:
``sql_rows`` rows and ``sql_answer_mb`` bytes; past either it ends, with
``truncated``. DuckDB's error text is passed on with the host's paths taken
out.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator, Sequence
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
from shared.domain.views.spec import ViewSpec
from shared.platform.speed_tables import SpeedTables
from shared.settings.views import VIEW_NAMES, VIEWS

BATCH_ALIAS = "batch"
"""The name the batch version is attached under in the sandbox."""


class SqlRefusedError(ValueError):
    """A query refused, before or while it ran: the message says why (answered 400)."""


TABLE_FUNCTIONS = frozenset({"range", "generate_series", "unnest"})
"""The table functions a query may call: they read nothing but their arguments."""

SHOWN = frozenset({"DESCRIBE", "SUMMARY"})
"""``DESCRIBE`` and ``SUMMARIZE`` of what a query may read; ``SHOW TABLES`` and the like
list the catalog, and are refused."""

JOINING_REFS = frozenset({"JOIN", "SUBQUERY", "EXPRESSION_LIST", "EMPTY", "PIVOT"})
"""Parts of a FROM clause that read nothing by themselves (what they hold is checked)."""


def check_query(connection: duckdb.DuckDBPyConnection, query: str) -> None:
    """Raise SqlRefusedError unless ``query`` is a single ``SELECT`` that reads only the
    views (DuckDB's parser says, on ``connection``)."""
    try:
        statements = connection.extract_statements(query)
    except duckdb.Error as error:
        raise SqlRefusedError(str(error)) from None
    if len(statements) != 1:
        raise SqlRefusedError(f"one statement per request: this holds {len(statements)}")
    kind = statements[0].type
    if kind is not duckdb.StatementType.SELECT:
        raise SqlRefusedError(
            f"only a read-only query (SELECT, FROM, WITH, DESCRIBE, SUMMARIZE) runs "
            f"here; this is {kind.name}"
        )
    [(text,)] = connection.execute("SELECT json_serialize_sql(?)", [query]).fetchall()
    try:
        tree = json.loads(text)
        defined = set(_cte_names(tree))
        refs = list(_table_refs(tree))
    except RecursionError:
        raise SqlRefusedError("nested too deep for this endpoint") from None
    if tree.get("error"):
        raise SqlRefusedError(f"only a plain SELECT runs here: {tree.get('error_message')}")
    for ref in refs:
        if (why := _refused(ref, defined)) is not None:
            raise SqlRefusedError(f"{why}; a query reads the views {', '.join(VIEW_NAMES)}")


def _nodes(tree: Any) -> Iterator[dict[str, Any]]:
    """Every object of a parsed query, at any depth (a stack, not recursion: a deep
    tree must not exhaust Python's)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            yield node
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def _cte_names(tree: dict[str, Any]) -> Iterator[str]:
    for node in _nodes(tree):
        for entry in (node.get("cte_map") or {}).get("map", []):
            yield str(entry["key"]).lower()


def _table_refs(tree: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every part of a FROM clause, at any depth (a table reference has an ``alias`` and
    a ``sample``; an expression has a ``class``, a query node ``modifiers``)."""
    for node in _nodes(tree):
        if {"type", "alias", "sample"} <= node.keys() and not {"class", "modifiers"} & node.keys():
            yield node


def _refused(ref: dict[str, Any], defined: set[str]) -> str | None:
    kind = ref["type"]
    if kind == "BASE_TABLE":
        name = str(ref.get("table_name", ""))
        if ref.get("schema_name") or ref.get("catalog_name"):
            qualified = ".".join(ref.get("qualified_name", {}).get("path", [name]))
            return f"{qualified} is not a view"
        if name.lower() not in set(VIEW_NAMES) | defined:
            return f"{name} is not a view"
        return None
    if kind == "TABLE_FUNCTION":
        function = ref.get("function", {})
        name = str(function.get("function_name", ""))
        if function.get("schema") or function.get("catalog") or name not in TABLE_FUNCTIONS:
            return f"the table function {name} is not one of {', '.join(sorted(TABLE_FUNCTIONS))}"
        return None
    if kind == "SHOW_REF":
        return None if ref.get("show_type") in SHOWN else "SHOW lists the catalog"
    if kind in JOINING_REFS:
        return None
    return f"a {kind} reference"


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
class SqlLimits:
    """What one query may take (settings ``serving_sql_*``)."""

    rows: int
    answer_bytes: int
    timeout: timedelta
    memory_mb: int


FIRST_FETCH = 1
"""Rows of a query's first fetch; later fetches take as many as the byte budget left
holds at the rows' mean size (at most :data:`MOST_FETCHED`), so that very large values
are never turned into Python objects many at a time past the budget."""
MOST_FETCHED = 2048


class SqlSandbox:
    """Runs queries over the views of one batch version (or none) and the speed store,
    each in a locked-down DuckDB database of its own."""

    def __init__(self, batch_file: Path | None, memory_mb: int, threads: int = 1):
        self.batch_file = batch_file
        self.memory_mb = memory_mb
        self.threads = threads

    def connect(self) -> duckdb.DuckDBPyConnection:
        """A new locked-down database with the batch version attached read-only and
        nothing else defined: what a query would meet if every check were bypassed."""
        connection = duckdb.connect(
            config={
                "threads": self.threads,
                "memory_limit": f"{self.memory_mb}MB",
                "temp_directory": "",
                "python_enable_replacements": False,
                "autoinstall_known_extensions": False,
                "autoload_known_extensions": False,
            }
        )
        try:
            if self.batch_file is not None:
                path = str(self.batch_file).replace("'", "''")
                connection.execute(f"ATTACH '{path}' AS {BATCH_ALIAS} (READ_ONLY)")
            connection.execute("SET enable_external_access = false")
            connection.execute("SET lock_configuration = true")
        except BaseException:
            connection.close()
            raise
        return connection

    def define_views(
        self,
        connection: duckdb.DuckDBPyConnection,
        speed: SpeedTables,
        horizon: datetime | None,
        query: str,
    ) -> None:
        """Every view as a temporary view of the merged rows (speed rows only for the views
        ``query`` names)."""
        wanted = mentioned(query)
        for view in VIEWS:
            speed_table = f"speed_{view.name}"
            connection.register(
                speed_table, speed_side(speed, view, horizon, empty=view.name not in wanted)
            )
            text = f'SELECT * FROM "{speed_table}"'
            if self.batch_file is not None:
                batch, params = _side_select(
                    view, Source.BATCH, horizon, None, f'{BATCH_ALIAS}."{view.name}"'
                )
                text = f"{_inlined(batch, params)} UNION ALL {text}"
            connection.execute(f'CREATE TEMP VIEW "{view.name}" AS {text}')

    def run(
        self,
        query: str,
        speed: SpeedTables,
        horizon: datetime | None,
        limits: SqlLimits,
        head: dict[str, Any],
    ) -> bytes:
        """The answer to ``query`` as JSON: ``{...head, columns, rows, truncated}``.
        Raises SqlRefusedError (with DuckDB's message, paths taken out) if the query is
        not one SELECT of the views, fails, or is still running after ``limits.timeout``.
        Blocking: run it in a thread."""
        connection = self.connect()
        interrupted = threading.Event()

        def interrupt() -> None:
            interrupted.set()
            connection.interrupt()

        timer = threading.Timer(limits.timeout.total_seconds(), interrupt)
        started = time.monotonic()
        timer.start()
        try:
            check_query(connection, query)
            self.define_views(connection, speed, horizon, query)
            result = connection.execute(query)
            if result.description is None:
                raise SqlRefusedError("the statement returned no rows to answer with")
            columns = [{"name": name, "type": str(kind)} for name, kind, *_ in result.description]
            rows, truncated = _encoded_rows(result, limits)
        except duckdb.Error as error:
            if interrupted.is_set():
                raise SqlRefusedError(
                    f"interrupted after {time.monotonic() - started:.1f} s: the limit is "
                    f"{limits.timeout.total_seconds():g} s (the sql_timeout setting)"
                ) from None
            raise SqlRefusedError(
                f"{type(error).__name__}: {self.without_paths(str(error))}"
            ) from None
        finally:
            timer.cancel()
            connection.close()
        return b"".join([
            json.dumps({**head, "columns": columns}, separators=(",", ":"))[:-1].encode(),
            b',"rows":[', b",".join(rows), b'],"truncated":',
            b"true" if truncated else b"false", b"}",
        ])  # fmt: skip

    def without_paths(self, message: str) -> str:
        """DuckDB's message with the batch version's path and any other absolute path of
        this host replaced (a client learns nothing of the server's disk)."""
        if self.batch_file is not None:
            message = message.replace(str(self.batch_file), "<batch version>")
        return ABSOLUTE_PATH.sub("<path>", message)


ABSOLUTE_PATH = re.compile(r"(?<![\w.:/])/(?:[\w.@+-]+/)*[\w.@+-]+")
"""A path such as ``/home/user/.lambdaline/batch/v7.duckdb`` (not ``a/b`` nor a URL's)."""


def _encoded_rows(result: duckdb.DuckDBPyConnection, limits: SqlLimits) -> tuple[list[bytes], bool]:
    """The result's rows, each encoded as a JSON array, until ``limits.rows`` rows or
    ``limits.answer_bytes`` bytes; True if there were more."""
    rows: list[bytes] = []
    used = 0
    fetch = FIRST_FETCH
    while True:
        fetched = result.fetchmany(min(fetch, limits.rows + 1 - len(rows)))
        if not fetched:
            return rows, False
        for row in fetched:
            encoded = json.dumps(
                [_finite(value) for value in row], separators=(",", ":"), default=_json_value
            ).encode()
            if len(rows) == limits.rows or used + len(encoded) + 1 > limits.answer_bytes:
                return rows, True
            rows.append(encoded)
            used += len(encoded) + 1
        mean = max(1, used // max(1, len(rows)))
        fetch = max(1, min(MOST_FETCHED, (limits.answer_bytes - used) // mean))


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
