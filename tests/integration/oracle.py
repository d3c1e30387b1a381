"""The views' reference SQL (:func:`shared.domain.views.reference_sql`, the rules stated
apart from the Spark functions) run over raw events, with its rows written as the API
writes them: the oracle of the generated cross-layer test.

Input: three DuckDB tables of the events as sent, ``entries``, ``exits`` and
``registrations``, each with a ``sent`` column (the order the records were
produced in: an entry's first copy is its first sent). Output: each view's rows as
the API writes them (instants ISO-8601 UTC with milliseconds, money a string with two
decimals), in key order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import duckdb

from shared.domain.views import reference_sql
from shared.domain.views.spec import ColumnType
from shared.domain.views.view import View, ViewSizes
from shared.settings.views import REGISTERED

INSTANT = "%Y-%m-%dT%H:%M:%S.%gZ"


def _as_written(name: str, kind: ColumnType) -> str:
    """A column of the reference's rows as the API writes it."""
    if kind is ColumnType.INSTANT:
        return f'strftime("{name}", \'{INSTANT}\') AS "{name}"'
    if kind is ColumnType.MONEY:
        return f'CAST("{name}" AS VARCHAR) AS "{name}"'
    return f'"{name}"'


ENTRY_COLUMNS = "(event_id, booth_id, license_plate, entry_time, toll, sent)"
"""The columns an entry is inserted with (``vehicle_type`` is 1 unless given)."""


def create_event_tables(connection: duckdb.DuckDBPyConnection, sent_type: str = "INTEGER") -> None:
    """Empty ``entries``, ``exits`` and ``registrations`` as the reference reads them (every
    copy of an event; ``sent``, of ``sent_type``, orders an entry's copies)."""
    connection.execute(f"""
        CREATE TABLE entries (event_id VARCHAR, booth_id VARCHAR, license_plate VARCHAR,
                              entry_time TIMESTAMP, toll DECIMAL(18, 2), sent {sent_type},
                              vehicle_type INTEGER DEFAULT 1);
        CREATE TABLE exits (event_id VARCHAR, booth_id VARCHAR, license_plate VARCHAR,
                            exit_time TIMESTAMP);
        CREATE TABLE registrations (event_id VARCHAR, registration_id VARCHAR,
                                    license_plate VARCHAR, registration_time TIMESTAMP,
                                    expired BOOLEAN);
    """)


def oracle_views(
    connection: duckdb.DuckDBPyConnection,
    sizes: ViewSizes,
    views: Sequence[View] = REGISTERED,
) -> dict[str, list[dict[str, Any]]]:
    """Each view's rows from the connection's ``entries``, ``exits`` and ``registrations``."""
    prepare, selects = reference_sql(views, sizes, first_copy="sent")
    connection.execute("SET TimeZone = 'UTC'")
    connection.execute(prepare)
    rows = {}
    for spec in (view.spec for view in views):
        columns = ", ".join(_as_written(column.name, column.type) for column in spec.columns)
        key = ", ".join(spec.key)  # the written instants order as the instants
        result = connection.execute(f"SELECT {columns} FROM ({selects[spec.name]}) ORDER BY {key}")
        names = [column[0] for column in result.description]
        rows[spec.name] = [dict(zip(names, row, strict=True)) for row in result.fetchall()]
    return rows
