"""The serving layer's reads: one parameterised query text for both stores, then the merge.

Table and column names come from ``shared.batch_store.STORE_TABLES`` (code,
never a request); every value a request brings is a query parameter.

Rows are read *wire-ready* where nothing is computed on them after the merge:
DuckDB formats instants (``shared.events.INSTANT_STRFTIME``) and money as
strings in the query, which costs it far less than Python formatting 1,000
datetimes per 288-row response (measured: 5 ms of a 10 ms request). The merge
still compares each row's time with the horizon: ISO-8601 UTC strings of one
fixed format order exactly as the instants do, so the horizon is formatted the
same way. Rolled-up responses read typed values, since buckets need arithmetic.

A response that is not rolled up is written by DuckDB (:func:`encoded_rows`):
each store is asked for its side of the horizon only (``shared.merge.sources_for``),
so the side's filter in the SQL is the merge rule, and each row comes as a JSON
object tagged with its store's ``source``. Python only joins the strings, and
interleaves the two sides by key when a range straddles the horizon. Building
288 dicts, tagging them and ``json.dumps`` held the GIL for ~2 ms of a miss;
DuckDB's ``to_json`` runs without it. Rolled-up responses go through
:func:`merged_rows` (``shared.merge``) and are encoded in Python.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from itertools import islice
from typing import Any

import duckdb

from serving.batch_reader import BatchSnapshot
from serving.result_cache import Encoded
from serving.speed_tables import SpeedTables
from shared.batch_store import STORE_TABLE_BY_NAME
from shared.events import INSTANT_STRFTIME, format_instant
from shared.merge import Row, Source, merge_at_horizon, roll_up_booth_stats, sources_for


def naive_utc(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(tzinfo=None)


@dataclass(frozen=True)
class ViewQuery:
    """Rows of a view whose time column lies in [start, end), with equality filters."""

    view: str
    start: datetime
    end: datetime
    filters: Mapping[str, str]
    limit: int | None = None
    wire: bool = True
    """Instants and money as the response writes them (strings), else typed values."""

    def key(self) -> tuple[Any, ...]:
        """Everything that decides the query's rows, hashable (a result cache's key)."""
        filters = tuple(sorted(self.filters.items()))
        return (self.view, self.start, self.end, filters, self.limit, self.wire)

    @property
    def time_column(self) -> str:
        return STORE_TABLE_BY_NAME[self.view].date_column

    def sql(
        self, side: Source, horizon: datetime | None, as_json: bool = False, keyed: bool = False
    ) -> tuple[str, list[Any]]:
        """The query for one side of the horizon: ``batch`` (time < H) or ``speed`` (time >= H).

        ``as_json``: one column, each row as a JSON object of the wire values
        and the side as its ``source`` (the response's encoding), in key order;
        ``keyed`` puts the view's key columns (typed) before it.
        """
        table = STORE_TABLE_BY_NAME[self.view]
        time = f'"{table.name}"."{self.time_column}"'  # the stored column, not its wire alias
        conditions = [f"{time} >= ?", f"{time} < ?"]
        params: list[Any] = [naive_utc(self.start), naive_utc(self.end)]
        for column, value in sorted(self.filters.items()):
            assert column in table.column_names  # names come from code, values are parameters
            conditions.append(f'"{table.name}"."{column}" = ?')
            params.append(value)
        conditions.append(f"{time} < ?" if side is Source.BATCH else f"{time} >= ?")
        params.append(naive_utc(horizon) if horizon is not None else datetime.min)
        values = [(name, _value(name, sql_type, self.wire)) for name, sql_type in table.columns]
        order = ", ".join(f'"{table.name}"."{name}"' for name in table.key)
        if as_json:  # the source is an enum member's value (code), not a request's
            fields = [f'"{name}" := {value}' for name, value in values]
            columns = f"to_json(struct_pack({', '.join(fields)}, \"source\" := '{side.value}'))"
            if keyed:
                columns = f"{order}, {columns}"
        else:
            columns = ", ".join(f'{value} AS "{name}"' for name, value in values)
        where = " AND ".join(conditions)
        text = f'SELECT {columns} FROM "{table.name}" WHERE {where} ORDER BY {order}'
        if self.limit is not None:
            text += " LIMIT ?"
            params.append(self.limit)
        return text, params


def _value(name: str, sql_type: str, wire: bool) -> str:
    """A stored column as the query reads it: as the response writes it if ``wire``."""
    column = f'"{name}"'
    if wire and sql_type.startswith("TIMESTAMP"):
        return f"strftime({column}, '{INSTANT_STRFTIME}')"
    if wire and sql_type.startswith("DECIMAL"):
        return f"CAST({column} AS VARCHAR)"
    return column


def _fetch(cursor: duckdb.DuckDBPyConnection, text: str, params: list[Any]) -> list[Row]:
    try:
        result = cursor.execute(text, params)
        names = [column[0] for column in result.description]
        return [dict(zip(names, values, strict=True)) for values in result.fetchall()]
    finally:
        cursor.close()


def merged_rows(
    query: ViewQuery,
    batch: BatchSnapshot | None,
    speed: SpeedTables,
    roll_up_to: timedelta | None = None,
) -> list[Row]:
    """Batch rows before the horizon, speed rows from it (``shared.merge``), rolled up if asked.

    The API calls it for roll-ups; without one it is the plain-Python statement
    of what :func:`encoded_rows` must give, which the tests hold DuckDB's JSON to.
    """
    final_limit = query.limit
    if roll_up_to is not None:  # rolled-up buckets are counted (and typed) after the merge
        query = replace(query, limit=None, wire=False)
    horizon = batch.version.horizon if batch is not None else None
    # each store is asked only for its side of the horizon, and not at all if the
    # range lies wholly on the other side (the merge would drop those rows anyway)
    sides = sources_for(query.start, query.end, horizon)
    batch_rows: list[Row] = []
    if Source.BATCH in sides:
        batch_rows = _fetch(_cursor(Source.BATCH, batch, speed), *query.sql(Source.BATCH, horizon))
    speed_rows: list[Row] = []
    if Source.SPEED in sides:
        speed_rows = _fetch(_cursor(Source.SPEED, batch, speed), *query.sql(Source.SPEED, horizon))
    if horizon is None:
        merge_horizon: datetime | str | None = None
    else:  # the horizon in the same form as the rows' times
        merge_horizon = format_instant(horizon) if query.wire else naive_utc(horizon)
    rows = merge_at_horizon(batch_rows, speed_rows, merge_horizon, query.time_column)
    if roll_up_to is not None:
        rows = roll_up_booth_stats(rows, roll_up_to)
    elif batch_rows and speed_rows:  # each store's rows come in key order; two interleave
        key = STORE_TABLE_BY_NAME[query.view].key
        rows.sort(key=lambda row: tuple(row[name] for name in key))
    if final_limit is not None:
        rows = rows[:final_limit]
    return rows


def encoded_rows(query: ViewQuery, batch: BatchSnapshot | None, speed: SpeedTables) -> Encoded:
    """A query's merged rows as the response's JSON array, each row written by DuckDB.

    The same rows, order and values as ``merged_rows`` gives (a test holds the
    two to that): each store's rows of its side of the horizon, tagged with it,
    in key order; a range across the horizon interleaves the two sides by key
    (their times differ, so no key is in both).
    """
    assert query.wire, "the JSON holds wire values"
    horizon = batch.version.horizon if batch is not None else None
    sides = sources_for(query.start, query.end, horizon)
    keyed = len(sides) > 1
    parts = []
    for side in sides:
        text, params = query.sql(side, horizon, as_json=True, keyed=keyed)
        cursor = _cursor(side, batch, speed)
        try:
            parts.append(cursor.execute(text, params).fetchall())
        finally:
            cursor.close()
    if keyed:
        merged = heapq.merge(*parts, key=lambda row: row[:-1])
        objects = [row[-1] for row in islice(merged, query.limit)]
    else:
        objects = [row for part in parts for (row,) in part]
    return Encoded(f"[{','.join(objects)}]".encode(), len(objects))


def _cursor(
    source: Source, batch: BatchSnapshot | None, speed: SpeedTables
) -> duckdb.DuckDBPyConnection:
    if source is Source.SPEED:
        return speed.cursor()
    assert batch is not None, "the batch store takes part only once a version is published"
    return batch.cursor()


def booth_known(booth_id: str, batch: BatchSnapshot | None, speed: SpeedTables) -> bool:
    """True if either store has ever counted a vehicle at this booth."""
    text = 'SELECT 1 FROM "booth_stats" WHERE "booth_id" = ? LIMIT 1'
    cursors = [speed.cursor()] + ([batch.cursor()] if batch is not None else [])
    return any(_fetch(cursor, text, [booth_id]) for cursor in cursors)
