"""What a batch version corrected: its rows of the days it newly covers, against the
speed layer's final rows of the same days.

Before H moves from H0 (the served version's horizon) to H, the API served the
days in [H0, H) from the speed store. When the version is published, its rows of
those days (those the merge rule gives the batch store at H) are compared, per
view key, with the speed rows the API served as final: the speed store read to
its end (``shared.platform.speed_reader``), each key's row combined as the API
combines it, shown by the same rules, final under the speed watermark. Per view:

- ``equal``: the key in both, every column equal;
- ``corrected``: the key in both, a column differing; ``largest_difference``
  per numeric column (an instant's in seconds);
- ``only_in_batch``: no final speed row (an event the speed layer dropped as
  late, or its row not final yet);
- ``only_in_speed``: a final speed row the batch has no row for.

The rows that differ, both sides in the API's encoding, go into the version's
``corrections`` table (at most :data:`ROWS_KEPT` per view, in key order); the
counts, the speed watermark and the late rows the speed queries dropped (each
query's ``late_rows_total``, and the part since the previous version) into its
manifest. A speed store that cannot be read leaves ``corrections`` saying why;
the version is published all the same (the batch layer is the truth).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import duckdb
import pyarrow as pa
from kafka.errors import KafkaError

from shared.domain.events import format_instant
from shared.domain.merge import HORIZON_SQL
from shared.domain.views.spec import ColumnType, ViewSpec
from shared.platform.batch_store import CORRECTIONS_TABLE, wire_sql
from shared.platform.kafka_admin import KafkaNotReadyError
from shared.platform.logs import log_event
from shared.platform.speed_reader import read_speed_store
from shared.platform.speed_tables import SpeedTables
from shared.settings import Settings
from shared.settings.views import VIEWS

logger = logging.getLogger("lambdaline.batch")

READ_TIMEOUT_S = 600.0
"""The longest the speed store's read may take (a day of a busy store is read in seconds)."""
ROWS_KEPT = 10_000
"""Rows that differ kept per view in a version's ``corrections`` table."""
CORRECTIONS_DDL = (
    f"CREATE TABLE {CORRECTIONS_TABLE} (view VARCHAR NOT NULL, kind VARCHAR NOT NULL, "
    "key JSON NOT NULL, batch JSON, speed JSON)"
)
DIFFERENCES = (ColumnType.COUNT, ColumnType.MONEY, ColumnType.SECONDS, ColumnType.INSTANT)
"""The column types whose largest difference a corrected row reports."""


def _naive(moment: datetime) -> datetime:
    """Zone-less UTC, as both stores hold instants."""
    return moment if moment.tzinfo is None else moment.astimezone(UTC).replace(tzinfo=None)


@dataclass
class SpeedSide:
    """The speed store as the batch run found it (or why it could not be read)."""

    tables: SpeedTables | None
    error: str | None = None

    def close(self) -> None:
        if self.tables is not None:
            self.tables.close()


def read_speed_side(settings: Settings) -> SpeedSide:
    """The speed store read to its end; a store that cannot be read is named, not raised."""
    try:
        return SpeedSide(read_speed_store(settings, timeout_s=READ_TIMEOUT_S))
    except (KafkaNotReadyError, KafkaError, TimeoutError, OSError) as error:
        text = f"{type(error).__name__}: {error}"
        log_event(logger, "speed_store_unread", error=text, then="publishing without corrections")
        return SpeedSide(None, text)


def _served(view: ViewSpec) -> str:
    """The view's rows of the batch side of H in [H0, H), as SQL over its table (a
    version's or the speed store's, each named by the view); parameters: H0, H, H."""
    batch_side, _ = HORIZON_SQL[view.horizon]
    time, end = f'"{view.time_column}"', f'"{view.horizon_column}"'
    columns = ", ".join(f'"{column.name}"' for column in view.columns)
    return (
        f'SELECT {columns} FROM "{view.name}" '
        f"WHERE {time} >= ? AND {time} < ? AND {end} {batch_side} ?"
    )


def _final_speed_rows(
    tables: SpeedTables, view: ViewSpec, since: datetime, until: datetime
) -> pa.Table:
    """The speed rows the API served as final in [since, until), as Arrow."""
    final_before = tables.final_before(view, tables.watermark)
    text = _served(view)
    params: list[Any] = [since, until, until]
    shown_if = view.candidates.shown_if if view.candidates is not None else None
    if shown_if is not None:
        text += f' AND "{shown_if}"'
    if final_before is None:
        text += " AND false"
    else:
        text += f' AND "{view.final.column}" <= ?'
        params.append(final_before.replace(tzinfo=None))
    cursor = tables.cursor()
    try:
        return cursor.sql(text, params=params).to_arrow_table()
    finally:
        cursor.close()


def _compare_view(
    connection: duckdb.DuckDBPyConnection,
    view: ViewSpec,
    speed_rows: pa.Table,
    since: datetime,
    until: datetime,
) -> dict[str, Any]:
    """Count the view's rows by kind, keep the differing ones; returns its summary."""
    connection.register("speed_rows", speed_rows)
    key = [f'"{name}"' for name in view.key]
    others = [column for column in view.columns if column.name not in view.key]
    missing_speed = " AND ".join(f"s.{k} IS NULL" for k in key)
    missing_batch = " AND ".join(f"b.{k} IS NULL" for k in key)
    same = " AND ".join(f'b."{c.name}" IS NOT DISTINCT FROM s."{c.name}"' for c in others)
    kind = (
        f"CASE WHEN {missing_speed} THEN 'only_in_batch' WHEN {missing_batch} "
        f"THEN 'only_in_speed' WHEN {same or 'true'} THEN 'equal' ELSE 'corrected' END"
    )
    key_json = "to_json(struct_pack({}))".format(
        ", ".join(
            f'"{c.name}" := coalesce({wire_sql(c, "b")}, {wire_sql(c, "s")})'
            for c in view.columns
            if c.name in view.key
        )
    )

    def side(alias: str) -> str:
        fields = ", ".join(f'"{c.name}" := {wire_sql(c, alias)}' for c in view.columns)
        present = " AND ".join(f"{alias}.{k} IS NOT NULL" for k in key)
        return f"CASE WHEN {present} THEN to_json(struct_pack({fields})) END"

    differences = {
        column.name: (
            f'abs(epoch_ms(b."{column.name}") - epoch_ms(s."{column.name}")) / 1000.0'
            if column.type is ColumnType.INSTANT
            else f'abs(b."{column.name}" - s."{column.name}")'
        )
        for column in others
        if column.type in DIFFERENCES
    }  # NULL where a side is missing
    selected = [
        f"{kind} AS kind",
        f"{key_json} AS key",
        f"{side('b')} AS batch",
        f"{side('s')} AS speed",
        *(f'{difference} AS "d_{name}"' for name, difference in differences.items()),
        *(f'coalesce(b.{k}, s.{k}) AS "k_{i}"' for i, k in enumerate(key)),
    ]
    on = " AND ".join(f"b.{k} = s.{k}" for k in key)
    connection.execute(
        f"CREATE TEMP TABLE compared AS SELECT {', '.join(selected)} "
        f"FROM ({_served(view)}) b FULL OUTER JOIN speed_rows s ON {on}",
        [since, until, until],
    )
    counts = dict.fromkeys(("equal", "corrected", "only_in_batch", "only_in_speed"), 0)
    for found, count in connection.execute(
        "SELECT kind, count(*) FROM compared GROUP BY kind"
    ).fetchall():
        counts[found] = int(count)
    largest: dict[str, float] = {}
    for name in differences:
        [(value,)] = connection.execute(
            f"SELECT max(\"d_{name}\") FROM compared WHERE kind = 'corrected'"
        ).fetchall()
        if value:
            largest[name] = float(value)
    order = ", ".join(f'"k_{i}"' for i in range(len(key)))
    connection.execute(
        f"INSERT INTO {CORRECTIONS_TABLE} SELECT ?, kind, key, batch, speed FROM compared "
        f"WHERE kind <> 'equal' ORDER BY {order} LIMIT {ROWS_KEPT}",
        [view.name],
    )
    connection.execute("DROP TABLE compared")
    connection.unregister("speed_rows")
    differing = counts["corrected"] + counts["only_in_batch"] + counts["only_in_speed"]
    return {**counts, "largest_difference": largest, "rows_kept": min(differing, ROWS_KEPT)}


def record_corrections(
    connection: duckdb.DuckDBPyConnection,
    speed: SpeedSide,
    since: datetime | None,
    until: datetime,
    late_rows_before: Mapping[str, int] | None,
) -> dict[str, Any]:
    """Compare the version being written (``connection``'s default database) with the
    speed side over [since, until) (since None: everything before ``until``); write
    the ``corrections`` table and return the manifest's summary."""
    connection.execute(CORRECTIONS_DDL)
    since_naive = _naive(since) if since is not None else datetime.min
    until_naive = _naive(until)
    summary: dict[str, Any] = {
        "compared_from": format_instant(since) if since is not None else None,
        "compared_to": format_instant(until),
    }
    if speed.tables is None:
        return {**summary, "error": speed.error}
    tables = speed.tables
    watermark = tables.watermark
    totals = {
        query: int(report.get("late_rows_total") or 0) for query, report in tables.reports.items()
    }
    before = late_rows_before or {}
    summary |= {
        "speed_watermark": format_instant(watermark.replace(tzinfo=UTC)) if watermark else None,
        "views": {
            view.name: _compare_view(
                connection,
                view,
                _final_speed_rows(tables, view, since_naive, until_naive),
                since_naive,
                until_naive,
            )
            for view in VIEWS
        },
        "late_rows_total": totals,
        # a total below the previous one: `speed reset` started the store (and its counts) over
        "late_rows_since_previous": {
            query: total - before.get(query, 0) if total >= before.get(query, 0) else total
            for query, total in totals.items()
        },
    }
    return summary
