"""The views as plain SQL over raw events: an oracle written apart from ``shared/`` (the
rules of docs/architecture.md, "Views", read again), for the generated cross-layer test.

Input: three DuckDB tables of the events as sent, ``entries``, ``exits`` and
``registrations``, each with a ``sent`` column (the order the records were
produced in). Output: each view's rows as the API writes them (instants
ISO-8601 UTC with milliseconds, money a string with two decimals), in key order.
"""

from __future__ import annotations

from typing import Any

import duckdb

INSTANT = "%Y-%m-%dT%H:%M:%S.%gZ"


def _t(column: str) -> str:
    return f"strftime({column}, '{INSTANT}')"


VIEWS_SQL = {
    "booth_stats": f"""
        SELECT booth_id, {_t("ws")} AS window_start, {_t("ws + INTERVAL 5 MINUTE")} AS window_end,
               count(*) AS vehicle_count, CAST(sum(toll) AS VARCHAR) AS total_toll,
               {_t("min(entry_time)")} AS first_entry_time,
               {_t("max(entry_time)")} AS last_entry_time
        FROM (SELECT *, time_bucket(INTERVAL 5 MINUTE, entry_time) AS ws FROM e)
        GROUP BY booth_id, ws ORDER BY booth_id, ws
    """,
    "booth_rolling": f"""
        SELECT booth_id, {_t("ws")} AS window_start, {_t("ws + INTERVAL 1 HOUR")} AS window_end,
               count(*) AS vehicle_count, CAST(sum(toll) AS VARCHAR) AS total_toll
        FROM (
            SELECT booth_id, toll,
                   time_bucket(INTERVAL 5 MINUTE, entry_time) - k * INTERVAL 5 MINUTE AS ws
            FROM e, range(12) AS r(k)
        )
        GROUP BY booth_id, ws ORDER BY booth_id, ws
    """,
    "vehicle_trips": f"""
        SELECT booth_id, license_plate, {_t("entry_time")} AS entry_time,
               {_t("exit_time")} AS exit_time,
               (epoch_ms(exit_time) - epoch_ms(entry_time)) / 1000.0 AS duration_seconds
        FROM (
            SELECT e.booth_id, e.license_plate, e.entry_time, min(x.exit_time) AS exit_time
            FROM e JOIN exits x ON x.booth_id = e.booth_id AND x.license_plate = e.license_plate
             AND x.exit_time >= e.entry_time AND x.exit_time <= e.entry_time + INTERVAL 1 HOUR
            GROUP BY e.booth_id, e.license_plate, e.entry_time
        )
        ORDER BY booth_id, license_plate, entry_time
    """,
    "expired_registrations": f"""
        SELECT booth_id, license_plate, {_t("entry_time")} AS entry_time, registration_id
        FROM applied WHERE expired
        ORDER BY booth_id, license_plate, applied.entry_time
    """,
    "diagnostics": f"""
        SELECT booth_id, {_t("ws")} AS window_start, reason, count(*) AS count
        FROM (
            SELECT booth_id, time_bucket(INTERVAL 5 MINUTE, entry_time) AS ws,
                   'missing_exit' AS reason
            FROM e WHERE NOT EXISTS (
                SELECT 1 FROM exits x WHERE x.booth_id = e.booth_id
                AND x.license_plate = e.license_plate AND x.exit_time >= e.entry_time
                AND x.exit_time <= e.entry_time + INTERVAL 1 HOUR)
            UNION ALL
            SELECT booth_id, time_bucket(INTERVAL 5 MINUTE, entry_time), 'missing_registration'
            FROM applied WHERE registration_id IS NULL
        )
        GROUP BY booth_id, ws, reason ORDER BY booth_id, ws, reason
    """,
    "vehicle_visits": f"""
        SELECT license_plate, {_t("min(entry_time)")} AS session_start,
               {_t("max(entry_time) + INTERVAL 30 MINUTE")} AS session_end,
               count(*) AS entry_count, list(booth_id ORDER BY entry_time) AS booths,
               CAST(sum(toll) AS VARCHAR) AS total_toll
        FROM (
            SELECT *, sum(new_visit) OVER (PARTITION BY license_plate ORDER BY entry_time) AS visit
            FROM (
                SELECT *, CASE WHEN entry_time - lag(entry_time) OVER (
                    PARTITION BY license_plate ORDER BY entry_time) < INTERVAL 30 MINUTE
                    THEN 0 ELSE 1 END AS new_visit
                FROM e
            )
        )
        GROUP BY license_plate, visit ORDER BY license_plate, min(entry_time)
    """,
}

PREPARE = """
    SET TimeZone = 'UTC';
    -- an entry sent twice counts once: its first copy
    CREATE TEMP TABLE e AS
        SELECT * FROM entries QUALIFY row_number() OVER (PARTITION BY event_id ORDER BY sent) = 1;
    -- the registration that applies to an entry: recorded in the 400 days up to it,
    -- the greatest by (registration_time, registration_id, event_id); none: NULLs
    CREATE TEMP TABLE applied AS
        SELECT e.booth_id, e.license_plate, e.entry_time,
               arg_max(r.registration_id, (r.registration_time, r.registration_id, r.event_id))
                   AS registration_id,
               arg_max(r.expired, (r.registration_time, r.registration_id, r.event_id)) AS expired
        FROM e LEFT JOIN registrations r ON r.license_plate = e.license_plate
         AND r.registration_time <= e.entry_time
         AND r.registration_time >= e.entry_time - INTERVAL 400 DAY
        GROUP BY e.booth_id, e.license_plate, e.entry_time, e.event_id;
"""


def oracle_views(connection: duckdb.DuckDBPyConnection) -> dict[str, list[dict[str, Any]]]:
    """Every view's rows from the connection's ``entries``, ``exits`` and ``registrations``."""
    connection.execute(PREPARE)
    views = {}
    for name, text in VIEWS_SQL.items():
        result = connection.execute(text)
        columns = [column[0] for column in result.description]
        views[name] = [dict(zip(columns, row, strict=True)) for row in result.fetchall()]
    return views
