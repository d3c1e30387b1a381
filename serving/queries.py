"""The serving layer's reads: one parameterised query text for both stores, then the merge.

Table and column names come from the views' specs (``shared.domain.views.spec``:
code, never a request); every value a request brings is a query parameter.

Each store is asked for its side of the horizon only (``shared.domain.merge.sources_for``),
so the side's filter in the SQL is the merge rule: batch rows below H, speed
rows from it. A range wholly on one side reads one store.

A response that is not rolled up is written by DuckDB (:func:`encoded_rows`):
each row comes as a JSON object of its wire values (instants formatted with
``shared.domain.events.INSTANT_STRFTIME``, money as a string), whether it is
``final`` (the view's rule against the query's ``final_before``) and its
store's ``source``. Python only joins the strings, and interleaves the two sides by key
when a range straddles the horizon. Formatting ~1,000 datetimes per 288-row
response in Python, building the row dicts and ``json.dumps`` cost most of a
miss's CPU and held the GIL; DuckDB's ``to_json`` runs without it.

A rolled-up response (:func:`rolled_up_rows`) has each store roll up its side
in SQL, as the view's ``roll_up`` says, and ``shared.domain.merge.roll_up``
combine the parts; only the buckets reach Python, where they are encoded.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import islice
from typing import Any, TypeVar

import duckdb

from serving.batch_reader import BatchSnapshot
from serving.result_cache import Encoded
from shared.domain.merge import EPOCH, HORIZON_SQL, Row, Source, roll_up, sources_for
from shared.domain.views.booth_stats import SPEC as BOOTH_STATS
from shared.domain.views.expired_registrations import SPEC as EXPIRED_REGISTRATIONS
from shared.domain.views.spec import ViewSpec
from shared.domain.views.vehicle_trips import SPEC as VEHICLE_TRIPS
from shared.domain.views.vehicle_visits import SPEC as VEHICLE_VISITS
from shared.platform.batch_store import wire_sql
from shared.platform.speed_tables import SpeedTables

T = TypeVar("T")


def naive_utc(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(tzinfo=None)


def side_sql(view: ViewSpec, side: Source, horizon: datetime | None) -> tuple[list[str], list[Any]]:
    """The merge rule for one side of the horizon H as SQL conditions on the view's table
    and their parameters: the view's horizon rule (``shared.domain.merge.merge_at_horizon``'s),
    and on the speed side, a withdrawn candidate is no row."""
    side_column = f'"{view.name}"."{view.horizon_column}"'
    batch_side, speed_side = HORIZON_SQL[view.horizon]
    conditions = [f"{side_column} {batch_side if side is Source.BATCH else speed_side} ?"]
    params: list[Any] = [naive_utc(horizon) if horizon is not None else datetime.min]
    shown_if = view.candidates.shown_if if view.candidates is not None else None
    if side is Source.SPEED and shown_if is not None:
        conditions.append(f'"{view.name}"."{shown_if}"')
    return conditions, params


def final_sql(view: ViewSpec, side: Source, final_before: datetime | None) -> tuple[str, list[Any]]:
    """Whether a row of one side is final, as SQL: every batch row is; a speed row once
    the watermark has passed its view's ``final`` rule (``final_before``:
    ``shared.platform.speed_tables.SpeedTables.final_before``; None: no speed row is)."""
    if side is Source.BATCH:
        return "true", []
    if final_before is None:
        return "false", []
    return f'("{view.name}"."{view.final.column}" <= ?)', [naive_utc(final_before)]


@dataclass(frozen=True)
class ViewQuery:
    """Rows of a view whose time column lies in [start, end), with equality filters."""

    view: ViewSpec
    start: datetime
    end: datetime
    filters: Mapping[str, str]
    limit: int | None = None
    final_before: datetime | None = None
    """Speed rows whose ``final.column`` is at or before it are final (None: none is;
    ``shared.platform.speed_tables.SpeedTables.final_before``). Batch rows always are."""

    def key(self) -> tuple[Any, ...]:
        """What decides a batch-only query's rows, hashable (a result cache's key)."""
        filters = tuple(sorted(self.filters.items()))
        return (self.view.name, self.start, self.end, filters, self.limit)

    def _where(self, side: Source, horizon: datetime | None) -> tuple[str, list[Any]]:
        """The rows of one side of the horizon in [start, end) that pass the filters: the
        view's horizon rule, ``shared.domain.merge.merge_at_horizon``'s, as SQL."""
        view = self.view
        time = f'"{view.name}"."{view.time_column}"'  # the stored column, not an alias
        conditions = [f"{time} >= ?", f"{time} < ?"]
        params: list[Any] = [naive_utc(self.start), naive_utc(self.end)]
        for column, value in sorted(self.filters.items()):
            assert column in view.by_name  # names come from code, values are parameters
            conditions.append(f'"{view.name}"."{column}" = ?')
            params.append(value)
        side_conditions, side_params = side_sql(view, side, horizon)
        return " AND ".join([*conditions, *side_conditions]), [*params, *side_params]

    def _final(self, side: Source) -> tuple[str, list[Any]]:
        return final_sql(self.view, side, self.final_before)

    def _limited(self, text: str, params: list[Any]) -> tuple[str, list[Any]]:
        """One row more than the limit, so that the answer can say whether the range holds more."""
        if self.limit is None:
            return text, params
        return f"{text} LIMIT ?", [*params, self.limit + 1]

    def sql(
        self, side: Source, horizon: datetime | None, keyed: bool = False
    ) -> tuple[str, list[Any]]:
        """The query for one side of the horizon (``batch``: time < H, ``speed``: time >= H;
        a row's end against H under ``END_AT_OR_BEFORE``).

        One column, each row as a JSON object of its wire values with the side
        as its ``source`` (the response's encoding), in key order; ``keyed``
        puts the view's key columns (typed) before it.

        Only the speed side sorts. A batch version's tables are written in key
        order (``batch_layer.publish``), and DuckDB keeps a single table's row
        order through ``WHERE`` and ``LIMIT`` (its "order preservation" rules),
        so the batch side's rows come in key order without a sort, which took
        about a tenth of a booth-day request's CPU.
        """
        view = self.view
        where, params = self._where(side, horizon)
        final, final_params = self._final(side)
        fields = ", ".join(f'"{column.name}" := {wire_sql(column)}' for column in view.columns)
        # the source is an enum member's value (code), not a request's
        columns = (
            f'to_json(struct_pack({fields}, "final" := {final}, "source" := \'{side.value}\'))'
        )
        order = ", ".join(f'"{view.name}"."{name}"' for name in view.key)
        if keyed:
            columns = f"{order}, {columns}"
        text = f'SELECT {columns} FROM "{view.name}" WHERE {where}'
        if side is not Source.BATCH:  # a version's tables are in key order already
            text += f" ORDER BY {order}"
        return self._limited(text, [*final_params, *params])

    def rolled_up_sql(
        self, side: Source, horizon: datetime | None, size: timedelta
    ) -> tuple[str, list[Any]]:
        """One side of the horizon rolled up to buckets of ``size``, typed, as the view's
        ``roll_up`` says: per the key's other columns and the epoch-aligned bucket of its
        start (as ``shared.domain.merge.bucket_start``), in key order. A bucket the
        horizon cuts is only this side's part of it: ``shared.domain.merge.roll_up``
        combines the two parts.
        """
        view, rule = self.view, self.view.roll_up
        assert rule is not None, f"{view.name} does not roll up"
        where, params = self._where(side, horizon)
        group = [f'"{view.name}"."{name}" AS "{name}"' for name in view.key if name != rule.start]
        bucket = f'time_bucket(?, "{view.name}"."{rule.start}", ?) AS "{rule.start}"'
        values = [
            f'{aggregate.value}("{view.name}"."{column}") AS "{column}"'
            for column, aggregate in rule.values.items()
        ]  # the aggregates' names are an enum's values (code), not a request's
        final, final_params = self._final(side)
        values.append(f'bool_and({final}) AS "final"')  # a bucket is final if all its rows are
        by = ", ".join(str(n) for n in range(1, len(group) + 2))
        text = (
            f"SELECT {', '.join([*group, bucket, *values])} "
            f'FROM "{view.name}" WHERE {where} GROUP BY {by} ORDER BY {by}'
        )
        return self._limited(text, [size, naive_utc(EPOCH), *final_params, *params])


def _fetch(cursor: duckdb.DuckDBPyConnection, text: str, params: list[Any]) -> list[Row]:
    try:
        result = cursor.execute(text, params)
        names = [column[0] for column in result.description]
        return [dict(zip(names, values, strict=True)) for values in result.fetchall()]
    finally:
        cursor.close()


def at_most(rows: list[T], limit: int | None) -> tuple[list[T], bool]:
    """The first ``limit`` rows, and whether there were more (the queries read one more)."""
    if limit is None or len(rows) <= limit:
        return rows, False
    return rows[:limit], True


def rolled_up_rows(
    query: ViewQuery, batch: BatchSnapshot | None, speed: SpeedTables, size: timedelta
) -> tuple[list[Row], bool]:
    """A view's rows merged at the horizon and rolled up to buckets of ``size``, typed.

    Each store rolls up its own side of the horizon in SQL (``rolled_up_sql``:
    a day of one booth is one row instead of 288), and
    ``shared.domain.merge.roll_up`` combines the parts. That is the roll-up
    of the merged rows, since every roll-up is associative: a bucket the horizon
    cuts gets one part from each store and is ``mixed``. The limit counts
    buckets; each store's first ``limit`` parts hold every part of the first
    ``limit`` buckets, so the SQL applies it too (plus one, as :func:`at_most`
    needs). Also says whether the limit cut buckets off.
    """
    horizon = batch.version.horizon if batch is not None else None
    parts: list[Row] = []
    for side in sources_for(query.start, query.end, horizon, query.view.horizon):
        rows = _fetch(_cursor(side, batch, speed), *query.rolled_up_sql(side, horizon, size))
        parts += [{**row, "source": side.value} for row in rows]
    return at_most(roll_up(query.view, parts, size), query.limit)


def encoded_rows(query: ViewQuery, batch: BatchSnapshot | None, speed: SpeedTables) -> Encoded:
    """A query's merged rows as the response's JSON array, each row written by DuckDB.

    ``shared.domain.merge.merge_at_horizon``'s rows, in key order, as ``json.dumps``
    would write them (``tests/unit/test_serving_queries.py`` holds it to that):
    each store's rows of its side of the horizon, tagged with it; a range across
    the horizon interleaves the two sides by key (their times differ, so no key
    is in both).
    """
    horizon = batch.version.horizon if batch is not None else None
    sides = sources_for(query.start, query.end, horizon, query.view.horizon)
    keyed = len(sides) > 1
    parts = []
    for side in sides:
        text, params = query.sql(side, horizon, keyed=keyed)
        cursor = _cursor(side, batch, speed)
        try:
            parts.append(cursor.execute(text, params).fetchall())
        finally:
            cursor.close()
    if keyed:
        merged = heapq.merge(*parts, key=lambda row: row[:-1])
        read = (row[-1] for row in merged)
        firsts = list(read if query.limit is None else islice(read, query.limit + 1))
    else:
        firsts = [row for part in parts for (row,) in part]
    objects, truncated = at_most(firsts, query.limit)
    return Encoded(f"[{','.join(objects)}]".encode(), len(objects), truncated)


def _cursor(
    source: Source, batch: BatchSnapshot | None, speed: SpeedTables
) -> duckdb.DuckDBPyConnection:
    if source is Source.SPEED:
        return speed.cursor()
    assert batch is not None, "the batch store takes part only once a version is published"
    return batch.cursor()


KNOWN_IN = {
    "booth_id": (BOOTH_STATS.name,),
    "license_plate": (VEHICLE_TRIPS.name, VEHICLE_VISITS.name, EXPIRED_REGISTRATIONS.name),
}
"""Where a path key is looked up when its answer is empty: a key none of these views
holds, in either store, is unknown (404), not merely quiet in the range asked for."""


def key_known(column: str, value: str, batch: BatchSnapshot | None, speed: SpeedTables) -> bool:
    """True if either store holds a row with this ``column`` value in a table of ``KNOWN_IN``."""
    texts = [f'SELECT 1 FROM "{table}" WHERE "{column}" = ? LIMIT 1' for table in KNOWN_IN[column]]
    stores = [speed.cursor] + ([batch.cursor] if batch is not None else [])
    return any(_fetch(cursor(), text, [value]) for cursor in stores for text in texts)
