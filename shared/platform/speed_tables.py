"""The speed store, materialised: one in-process DuckDB table per view.

The speed layer publishes each view to a compacted topic whose JSON values hold
the view's columns and a version. The records of one view key combine
as the view's spec says (``shared.domain.views.spec.Combine``): for most views
one record per view key, the latest value kept (a record whose ``version`` is
older than the one held is ignored: a replayed micro-batch never moves a row
back); for a view of candidates, one record per candidate, the one its rule
ranks best kept (``shared.domain.merge.best_candidates`` is the rule written
plainly), with the hidden columns that rank it. The tables are shaped like the
batch store's (``shared.platform.batch_store.STORE_TABLES``) plus those hidden
columns, so one query text serves both stores. Times are zone-less UTC, as in
the batch store.

A speed row is final once the watermark passes what its spec's ``final`` rule
says (:meth:`SpeedTables.final_before`).

The ``version`` rule is the upsert's own condition, so the tables are all that
is held: a Python map of every key's version beside them would grow the process
by 344 MB per 1,000,000 trips, against 179 MB without (DuckDB's own count: 102 MB).
Rows the serving layer can no longer use are deleted with :meth:`SpeedTables.prune`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from functools import partial
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from shared.domain.events import parse_instant
from shared.domain.merge import final_cut
from shared.domain.topics import DERIVED_QUERY_PREFIX
from shared.domain.views.spec import Aggregate, Combine, ViewSpec
from shared.platform.batch_store import DUCKDB_TYPES, STORE_TABLE_BY_NAME, StoreTable, wire_sql
from shared.settings import ViewSettings
from shared.settings.views import VIEWS


def stored_instant(text: str) -> datetime:
    """An ISO-8601 instant as the stores hold it: a zone-less UTC datetime."""
    return parse_instant(text).replace(tzinfo=None)


def speed_columns(view: ViewSpec) -> tuple[tuple[str, str], ...]:
    """A speed table's columns and DuckDB types: the batch table's, a candidate's hidden
    ones, then the row's ``version`` (``speed_layer.speed_store``)."""
    hidden = view.candidates.hidden if view.candidates is not None else ()
    return (
        *StoreTable.of(view).columns,
        *((column.name, f"{DUCKDB_TYPES[column.type]} NOT NULL") for column in hidden),
        ("version", "BIGINT NOT NULL"),
    )


def _speed_ddl(view: ViewSpec) -> str:
    columns = ", ".join(f'"{name}" {sql_type}' for name, sql_type in speed_columns(view))
    key = ", ".join(f'"{name}"' for name in view.key)
    return f'CREATE TABLE "{view.name}" ({columns}, PRIMARY KEY ({key}))'


class BadSpeedRecordError(ValueError):
    """A speed-store record that is not a row of its view; the message says what is wrong."""


def _within(bound: int | Decimal, number: Any) -> Any:
    if not -bound < number < bound:
        raise ValueError
    return number


def _decimal(limit: Decimal, field: Any) -> Decimal:
    number = Decimal(str(field))
    if not number.is_finite():
        raise ValueError
    return _within(limit, number)  # type: ignore[no-any-return]


def _texts(items: list[Any]) -> list[str]:
    if any(type(item) is not str for item in items):
        raise ValueError
    return items


def _converter(sql_type: str) -> Callable[[Any], Any]:
    """A column's JSON value -> the value it holds; raises ValueError (or an
    ArithmeticError) for one it cannot hold. It runs for every field the API
    reads, so it is built once per column; ``type(...) in`` keeps bool out of
    the numbers."""
    kind = sql_type.split("(")[0].split()[0]
    accepted: tuple[type, ...]
    read: Callable[[Any], Any]
    if kind == "DECIMAL":
        precision, scale = (int(n) for n in sql_type[8 : sql_type.index(")")].split(","))
        accepted, read = (str, int, float), partial(_decimal, Decimal(10) ** (precision - scale))
    elif kind in ("BIGINT", "INTEGER"):  # symmetric bounds: -2**(n-1) itself is refused too
        accepted, read = (int,), partial(_within, 2**63 if kind == "BIGINT" else 2**31)
    else:
        readers: dict[str, tuple[tuple[type, ...], Callable[[Any], Any]]] = {
            "TIMESTAMP": ((str,), stored_instant), "DOUBLE": ((int, float), float),
            "VARCHAR": ((str,), str), "BOOLEAN": ((bool,), bool), "VARCHAR[]": ((list,), _texts),
        }  # fmt: skip
        accepted, read = readers[kind]

    def convert(field: Any) -> Any:
        if type(field) not in accepted:
            raise ValueError
        return read(field)

    return convert


_COLUMNS = {
    view.name: [
        (name, sql_type.split()[0], _converter(sql_type)) for name, sql_type in speed_columns(view)
    ]
    for view in VIEWS
}
"""Per view: each column's name, type and converter, the version last."""


def _typed(view: str, value: Any) -> list[Any]:
    """A record's JSON value as a row of ``view`` plus its version, or BadSpeedRecordError."""
    if type(value) is not dict:
        raise BadSpeedRecordError(f"the value is {type(value).__name__}, not a JSON object")
    row = []
    for name, sql_type, convert in _COLUMNS[view]:
        try:
            row.append(convert(value[name]))
        except KeyError:
            missing = [name for name, _, _ in _COLUMNS[view] if name not in value]
            raise BadSpeedRecordError(f"no {', '.join(missing)}") from None
        except (ValueError, ArithmeticError):
            shown = json.dumps(value[name])
            raise BadSpeedRecordError(f"{name} is {shown}, not a {sql_type}") from None
    return row


@dataclass(frozen=True)
class ChangedRow:
    """A row an upsert inserted or replaced, as the API writes it (its wire JSON)."""

    position: int
    """The position, in the records given to ``apply``, of the record it came from."""
    row: str
    """The view's columns as a JSON object of their wire values (``wire_sql``)."""
    side: datetime
    """Its ``horizon_column``: which side of the horizon it lies on."""
    final_at: datetime
    """Its ``final.column``: it is final once the watermark's cut passes it."""
    shown: bool
    """False for a candidate its view no longer shows (``candidates.shown_if``)."""


def _returning(view: ViewSpec) -> str:
    """What an upsert returns of each row it changed: its key, then :class:`ChangedRow`'s
    fields."""
    key = ", ".join(f'"{name}"' for name in view.key)
    fields = ", ".join(f'"{column.name}" := {wire_sql(column)}' for column in view.columns)
    shown_if = view.candidates.shown_if if view.candidates is not None else None
    shown = f'"{shown_if}"' if shown_if is not None else "true"
    return (
        f' RETURNING {key}, to_json(struct_pack({fields})), "{view.horizon_column}", '
        f'"{view.final.column}", {shown}'
    )


def _upsert(view: ViewSpec) -> str:
    """Rows of the registered Arrow table ``incoming`` into the view's table, combined
    with the held ones as the view's spec says: a new key is inserted; a held one is
    replaced unless the held row's ``version`` is newer, or, for candidates, unless
    the held candidate ranks better."""
    names = [name for name, _ in speed_columns(view)]
    quoted = ", ".join(f'"{name}"' for name in names)
    key = ", ".join(f'"{name}"' for name in view.key)
    updates = ", ".join(f'"{name}" = excluded."{name}"' for name in names if name not in view.key)
    if view.combine is Combine.LATEST_MICRO_BATCH:
        replaces = f'excluded."version" >= "{view.name}"."version"'
    else:
        assert view.combine is Combine.BEST_CANDIDATE and view.candidates is not None
        rank = view.candidates.rank
        incoming = ", ".join(f'excluded."{name}"' for name in rank)
        held = ", ".join(f'"{view.name}"."{name}"' for name in rank)
        # as good as the held one: the same candidate again replaces itself
        better = "<=" if view.candidates.best is Aggregate.MIN else ">="
        replaces = f"({incoming}) {better} ({held})"
    return (
        f'INSERT INTO "{view.name}" ({quoted}) SELECT {quoted} FROM incoming '
        f"ON CONFLICT ({key}) DO UPDATE SET {updates} WHERE {replaces}"
    )


_INSTANT = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})$"
"""The instants the batch decode reads itself; any other text :func:`stored_instant` may
still accept, on the per-record path."""


def _read_type(sql_type: str) -> pa.DataType:
    """The Arrow type the batch decode reads a column's JSON value as: one that accepts what
    :func:`_converter` accepts, or less (a record it refuses goes the per-record way).
    Instants are read as text, so that their form is checked (:data:`_INSTANT`)."""
    kind = sql_type.split("(")[0].split()[0]
    if kind == "DECIMAL":
        precision, scale = (int(n) for n in sql_type[8 : sql_type.index(")")].split(","))
        return pa.decimal128(precision, scale)
    types = {
        "BIGINT": pa.int64(), "INTEGER": pa.int32(), "DOUBLE": pa.float64(),
        "VARCHAR": pa.string(), "BOOLEAN": pa.bool_(), "VARCHAR[]": pa.list_(pa.string()),
        "TIMESTAMP": pa.string(),
    }  # fmt: skip
    return types[kind]


_READ_SCHEMAS = {
    view.name: pa.schema(
        [(name, _read_type(sql_type)) for name, sql_type, _ in _COLUMNS[view.name]]
    )
    for view in VIEWS
}
_READ_OPTIONS = pa_json.ReadOptions(use_threads=False, block_size=64 << 20)


def _decoded(view: str, values: list[bytes | None]) -> pa.Table | None:
    """The values as one Arrow table of the view's columns (instants zone-less UTC), read in
    one pass; None if any value is not plainly a row of the view (a null, a field missing,
    a number out of its column's bounds, text on more than one line ...): those records
    go the per-record way, which names what is wrong with each."""
    if any(value is None or b"\n" in value or b"\r" in value for value in values):
        return None
    schema = _READ_SCHEMAS[view]
    options = pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    try:
        table = pa_json.read_json(
            pa.py_buffer(b"\n".join(values)),  # type: ignore[arg-type]
            read_options=_READ_OPTIONS, parse_options=options,
        )  # fmt: skip
    except pa.ArrowInvalid:
        return None
    if table.num_rows != len(values):
        return None  # a line of no object, or of two
    columns: list[pa.ChunkedArray] = []
    for field, column in zip(schema, table.itercolumns(), strict=True):
        if column.null_count:
            return None
        if pa.types.is_list(field.type) and pc.list_flatten(column).null_count:
            return None
        if pa.types.is_integer(field.type):
            lowest = -(2 ** (field.type.bit_width - 1))  # the bounds are symmetric
            if pc.min(column).as_py() == lowest:
                return None
        if _COLUMNS[view][len(columns)][1] == "TIMESTAMP":
            if not pc.all(pc.match_substring_regex(column, _INSTANT)).as_py():
                return None
            column = pc.cast(pc.cast(column, pa.timestamp("us", "UTC")), pa.timestamp("us"))
        columns.append(column)
    return pa.table(columns, names=schema.names)


_KEY_NAMES = {view.name: list(view.key) for view in VIEWS}
_UPSERT = {view.name: _upsert(view) for view in VIEWS}
_POSITION = "_position"
"""The column of the records' Arrow table that says where in the records each row was."""


def _one_per_key(view: ViewSpec) -> str:
    """Of the registered Arrow table ``records``, the row per view key the upsert's rule
    (:func:`_upsert`) keeps: the newest ``version``, or the best-ranked candidate; of
    equals, the later record."""
    key = ", ".join(f'"{name}"' for name in view.key)
    if view.candidates is None:
        order = '"version" DESC'
    else:
        direction = "ASC" if view.candidates.best is Aggregate.MIN else "DESC"
        order = ", ".join(f'"{name}" {direction}' for name in view.candidates.rank)
    return (
        f"SELECT * FROM records QUALIFY row_number() OVER "
        f'(PARTITION BY {key} ORDER BY {order}, "{_POSITION}" DESC) = 1'
    )


_ONE_PER_KEY = {view.name: _one_per_key(view) for view in VIEWS}
_UPSERT_RETURNING = {view.name: _upsert(view) + _returning(view) for view in VIEWS}


Reject = Callable[[int, str], None]
"""Told a record's position in the records given to ``apply`` and why it was skipped."""


def _view_settings(value: object) -> dict[str, str]:
    """A progress record's ``view_settings``: an object of text values."""
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise TypeError(f"view_settings is {value!r}, not an object of text values")
    return {str(name): text for name, text in value.items()}


def _state_operators(value: object) -> list[dict[str, Any]]:
    """A progress record's ``state_operators``: a list of objects naming an operator."""
    if not isinstance(value, list) or not all(
        isinstance(op, dict) and isinstance(op.get("operator"), str) for op in value
    ):
        raise TypeError(f"state_operators is {value!r}, not a list of operators")
    return value


class SpeedTables:
    """In-process DuckDB tables of the speed views; safe to read while a consumer writes."""

    def __init__(self, threads: int | None = None, views: ViewSettings | None = None) -> None:
        """``threads``: DuckDB's (None: its default, one per core); ``views``: the
        settings the ``final`` rules read (None: the defaults)."""
        views = views if views is not None else ViewSettings()
        self.durations = views.sizes
        self.connection = duckdb.connect(config={"threads": threads} if threads else {})
        self._lock = threading.Lock()
        self.watermarks: dict[str, datetime] = {}
        self.view_settings_by_query: dict[str, dict[str, str]] = {}
        """Each query's ``view_settings`` as its latest progress record gave them."""
        self.state_by_query: dict[str, list[dict[str, Any]]] = {}
        """Each query's stateful operators as its latest progress record gave them."""
        self.reports: dict[str, dict[str, Any]] = {}
        """Each query's latest progress record, whole."""
        self.rejected = 0
        """Records skipped as not rows of their view (or not progress reports)."""
        for view in VIEWS:
            self.connection.execute(_speed_ddl(view))

    def apply(
        self,
        view: str,
        records: Iterable[tuple[bytes | None, bytes | None]],
        reject: Reject | None = None,
    ) -> int:
        """Upsert (key, JSON value) records of a view; returns how many rows changed.

        A record that is not a row of the view (not JSON, a field missing or of
        the wrong type, a tombstone) is skipped and passed to ``reject``: one bad
        record must not stop the store, which would otherwise retry it forever.
        """
        incoming = self._incoming(view, records, reject)
        if incoming is None:
            return 0
        [(changed,)] = self._upsert(incoming, _UPSERT[view])
        return int(changed)

    def apply_changed(
        self,
        view: str,
        records: Iterable[tuple[bytes | None, bytes | None]],
        reject: Reject | None = None,
    ) -> list[ChangedRow]:
        """:meth:`apply`, returning the rows it inserted or replaced, in the order of the
        records they came from (what ``GET /v1/stream`` sends)."""
        incoming = self._incoming(view, records, reject)
        if incoming is None:
            return []
        keys = _KEY_NAMES[view]
        position_of = {
            tuple(row[name] for name in keys): row[_POSITION]
            for row in incoming.select([*keys, _POSITION]).to_pylist()
        }
        width = len(keys)
        changed = [
            ChangedRow(position_of[tuple(returned[:width])], *returned[width:])
            for returned in self._upsert(incoming, _UPSERT_RETURNING[view])
        ]
        return sorted(changed, key=lambda row: row.position)

    def _incoming(
        self, view: str, records: Iterable[tuple[bytes | None, bytes | None]], reject: Reject | None
    ) -> pa.Table | None:
        """The records as an Arrow table of the view's typed columns and each one's
        position, one row per view key (None if none is a row): decoded in one pass
        (:func:`_decoded`) where every record is plainly a row, else record by record."""
        records = list(records)
        if not records:
            return None
        decoded = (
            None
            if any(key is None for key, _ in records)
            else _decoded(view, [value for _, value in records])
        )
        if decoded is not None:
            positions = range(len(records))
        else:
            checked = self._checked(view, records, reject)
            if not checked:
                return None
            names = [name for name, _, _ in _COLUMNS[view]]
            columns = list(zip(*(row for row, _ in checked), strict=True))
            decoded = pa.table(dict(zip(names, map(list, columns), strict=True)))
            positions = [position for _, position in checked]  # type: ignore[assignment]
        table = decoded.append_column(_POSITION, pa.array(positions, pa.int64()))
        if table.group_by(_KEY_NAMES[view]).aggregate([]).num_rows == table.num_rows:
            return table
        # one row per view key (DuckDB updates a row once per statement), combined by the
        # rule the upsert applies to the held row
        with self._lock:
            cursor = self.connection.cursor()
            try:
                cursor.register("records", table)
                return cursor.sql(_ONE_PER_KEY[view]).to_arrow_table()
            finally:
                cursor.unregister("records")
                cursor.close()

    def _checked(
        self, view: str, records: list[tuple[bytes | None, bytes | None]], reject: Reject | None
    ) -> list[tuple[list[Any], int]]:
        """The records that are rows of the view, typed, with their positions, each
        checked on its own; the others passed to ``reject``."""
        checked = []
        for position, (key, raw) in enumerate(records):
            try:
                if key is None or raw is None:
                    raise BadSpeedRecordError("no key" if key is None else "no value (a tombstone)")
                checked.append((_typed(view, json.loads(raw)), position))
            except ValueError as error:  # BadSpeedRecordError, or not JSON (UnicodeDecodeError too)
                self.rejected += 1
                if reject is not None:
                    reject(position, str(error))
        return checked

    def _upsert(self, incoming: pa.Table, statement: str) -> list[tuple[Any, ...]]:
        # one INSERT over an Arrow table: DuckDB's executemany runs a statement per
        # row (measured ~350 rows/s), far below what the speed layer publishes
        with self._lock:
            cursor = self.connection.cursor()
            try:
                cursor.register("incoming", incoming)
                returned = cursor.execute(statement).fetchall()
                cursor.unregister("incoming")
            finally:
                cursor.close()
        return returned

    def prune(self, before: datetime) -> dict[str, int]:
        """Delete each view's rows whose horizon column (its time, or its end under
        ``END_AT_OR_BEFORE``) lies before ``before`` (zone-less UTC); returns the rows
        deleted per view.

        The API calls it as the batch horizon moves on (``serving.main``): rows
        below the horizon are the batch store's to answer, so the speed store
        need only keep what a rollback could ask of it.
        """
        deleted = {}
        with self._lock:
            cursor = self.connection.cursor()
            try:
                for view in VIEWS:
                    column = view.horizon_column  # a row is served while its end is not below H
                    [(count,)] = cursor.execute(
                        f'DELETE FROM "{view.name}" WHERE "{column}" < ?', [before]
                    ).fetchall()
                    deleted[view.name] = int(count)
                if any(deleted.values()):
                    cursor.execute("CHECKPOINT").fetchall()  # compacts what is left
            finally:
                cursor.close()
        return deleted

    def clear(self, view: str) -> int:
        """Delete every row of a view (its topic was created again); returns how many."""
        table = STORE_TABLE_BY_NAME[view].name
        with self._lock:
            cursor = self.connection.cursor()
            try:
                [(count,)] = cursor.execute(f'DELETE FROM "{table}"').fetchall()
            finally:
                cursor.close()
        return int(count)

    def forget_progress(self) -> None:
        """Forget the queries' watermarks and view settings (``speed.progress`` was
        created again)."""
        self.watermarks = {}  # new dicts: readers may be iterating the old ones
        self.view_settings_by_query = {}
        self.state_by_query = {}
        self.reports = {}

    def note_progress(self, raw: bytes | None) -> dict[str, Any]:
        """Record a query's event-time watermark and view settings from a
        ``speed.progress`` record; returns the record.

        Raises BadSpeedRecordError (a ValueError) for a record that is not a progress
        report; the caller skips it.
        """
        try:
            progress = json.loads(raw or b"null")
            query, watermark = progress["query"], progress.get("watermark")
            moment = stored_instant(watermark) if watermark else None
            view_settings = _view_settings(progress["view_settings"])
            state = _state_operators(progress.get("state_operators", []))
        except (ValueError, TypeError, KeyError, AttributeError) as error:
            self.rejected += 1
            why = f"{type(error).__name__}: {error}"
            raise BadSpeedRecordError(f"not a progress report ({why})") from None
        if moment is not None and moment > datetime(1970, 1, 1):  # 0: no data yet
            self.watermarks[str(query)] = moment
        self.view_settings_by_query[str(query)] = view_settings
        self.state_by_query[str(query)] = state
        self.reports[str(query)] = progress
        return progress  # type: ignore[no-any-return]

    @property
    def view_settings(self) -> list[dict[str, str]]:
        """The distinct view settings the speed queries report (one, unless jobs of
        two settings wrote the store), in the order first seen."""
        distinct: list[dict[str, str]] = []
        for made_with in list(self.view_settings_by_query.values()):
            if made_with not in distinct:
                distinct.append(made_with)
        return distinct

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

    def watermark_of(self, view: ViewSpec) -> datetime | None:
        """The watermark the view's ``final`` rule reads: the speed watermark, or the
        watermark of the derived query that writes the view."""
        if view.final.own_watermark:
            return self.watermarks.get(f"{DERIVED_QUERY_PREFIX}{view.name}")
        return self.watermark

    def final_before(self, view: ViewSpec, watermark: datetime | None) -> datetime | None:
        """The latest ``final.column`` value of a final speed row of the view
        (``shared.domain.merge.final_cut``) under the speed watermark ``watermark``
        (taken once per answer, which reports it); None: no row is final yet."""
        if view.final.own_watermark:
            watermark = self.watermark_of(view)
        return final_cut(view, watermark, self.durations)

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A cursor of its own for one reader (DuckDB cursors are not shared across threads)."""
        return self.connection.cursor()

    def close(self) -> None:
        self.connection.close()
