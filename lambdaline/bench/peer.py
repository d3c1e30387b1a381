"""The batch recompute as plain DuckDB SQL over the master dataset: a single-machine peer.

It is an independent implementation of the view rules of docs/architecture.md (not
the shared Spark functions), so equal row counts also cross-check the Spark result.
Entries keep each event_id's first record in source order, as the batch layer
does; exits and registrations keep their copies, as the batch layer does too
(``shared.domain.views.COUNTED_INPUTS``: a copy cannot change a ``min`` or an as-of match).
"""

from __future__ import annotations

import time

import duckdb

from shared.platform.batch_store import STORE_TABLES
from shared.settings import Settings


def peer_statements(settings: Settings, threads: int) -> str:
    master, topics = settings.master_location, settings.topics
    window = f"to_seconds({int(settings.views.window.total_seconds())})"
    max_trip = f"to_seconds({int(settings.views.max_trip.total_seconds())})"
    views = settings.views
    size, slide = (
        f"to_seconds({int(d.total_seconds())})" for d in (views.rolling_window, views.rolling_slide)
    )
    windows_per_entry = views.rolling_window // views.rolling_slide
    gap = f"to_seconds({int(views.session_gap.total_seconds())})"

    def events(topic: str, deduplicated: bool) -> str:
        read = (
            f"SELECT * FROM read_parquet('{master}/topic={topic}/*/*/*.parquet', "
            "hive_partitioning = true)"
        )
        if not deduplicated:
            return read
        return (
            f"{read} QUALIFY row_number() OVER (PARTITION BY event_id "
            "ORDER BY source_timestamp, source_topic, source_partition, source_offset) = 1"
        )

    return f"""
        SET threads = {threads};
        SET TimeZone = 'UTC';
        CREATE TEMP TABLE entries AS {events(topics.entries, True)};
        CREATE TEMP TABLE exits AS {events(topics.exits, False)};
        CREATE TEMP TABLE registrations AS {events(topics.registrations, False)};
        CREATE TEMP TABLE booth_stats AS
            SELECT booth_id, window_start, window_start + {window} AS window_end,
                   vehicle_count, total_toll, first_entry_time, last_entry_time
            FROM (
                SELECT booth_id, time_bucket({window}, entry_time::TIMESTAMP) AS window_start,
                       count(*) AS vehicle_count, sum(toll)::DECIMAL(18, 2) AS total_toll,
                       min(entry_time) AS first_entry_time, max(entry_time) AS last_entry_time
                FROM entries GROUP BY ALL
            );
        CREATE TEMP TABLE booth_rolling AS
            SELECT booth_id, window_start, window_start + {size} AS window_end,
                   count(*) AS vehicle_count, sum(toll)::DECIMAL(18, 2) AS total_toll
            FROM (  -- the slide-aligned windows holding the entry: the latest and those before
                SELECT booth_id, toll,
                       time_bucket({slide}, entry_time::TIMESTAMP) - r.k * {slide} AS window_start
                FROM entries, range({windows_per_entry}) AS r(k)
            ) GROUP BY ALL;
        CREATE TEMP TABLE vehicle_visits AS
            SELECT license_plate, min(entry_time) AS session_start,
                   max(entry_time) + {gap} AS session_end, count(*) AS entry_count,
                   list(booth_id ORDER BY entry_time, event_id) AS booths,
                   sum(toll)::DECIMAL(18, 2) AS total_toll
            FROM (  -- a visit starts at an entry a gap or more after the plate's previous one
                SELECT *, sum(starts) OVER (PARTITION BY license_plate
                                            ORDER BY entry_time, event_id) AS visit
                FROM (
                    SELECT *, CASE WHEN entry_time - lag(entry_time) OVER (
                                  PARTITION BY license_plate ORDER BY entry_time, event_id
                              ) < {gap} THEN 0 ELSE 1 END AS starts
                    FROM entries
                )
            ) GROUP BY license_plate, visit;
        CREATE TEMP TABLE vehicle_trips AS
            SELECT *, (epoch_ms(exit_time) - epoch_ms(entry_time)) / 1000.0 AS duration_seconds
            FROM (
                SELECT e.booth_id, e.license_plate, e.entry_time, min(x.exit_time) AS exit_time
                FROM entries e JOIN exits x
                  ON e.booth_id = x.booth_id AND e.license_plate = x.license_plate
                 AND x.exit_time BETWEEN e.entry_time AND e.entry_time + {max_trip}
                GROUP BY ALL
            );
        CREATE TEMP TABLE at_entry AS
            SELECT e.booth_id, e.license_plate, e.entry_time, r.registration_id, r.expired
            FROM entries e ASOF LEFT JOIN registrations r
              ON e.license_plate = r.license_plate AND e.entry_time >= r.registration_time;
        CREATE TEMP TABLE expired_registrations AS
            SELECT booth_id, license_plate, entry_time, registration_id FROM at_entry WHERE expired;
        CREATE TEMP TABLE diagnostics AS
            SELECT booth_id, time_bucket({window}, entry_time::TIMESTAMP) AS window_start,
                   reason, count(*) AS count
            FROM (
                SELECT booth_id, entry_time, 'missing_exit' AS reason FROM entries e
                WHERE NOT EXISTS (
                    SELECT 1 FROM exits x
                    WHERE e.booth_id = x.booth_id AND e.license_plate = x.license_plate
                      AND x.exit_time BETWEEN e.entry_time AND e.entry_time + {max_trip})
                UNION ALL
                SELECT booth_id, entry_time, 'missing_registration' FROM at_entry
                WHERE registration_id IS NULL
            ) GROUP BY ALL;
        CREATE TEMP TABLE dead_letters AS
            SELECT * FROM read_parquet(
                '{master}/dead_letters/*/*/*.parquet', hive_partitioning = true);
    """


def peer_views(settings: Settings, threads: int) -> tuple[dict[str, int], float]:
    """Recompute every view in DuckDB (in this process); (row counts, wall seconds)."""
    started = time.monotonic()
    with duckdb.connect() as connection:
        connection.execute(peer_statements(settings, threads))
        seconds = time.monotonic() - started
        counts = {}
        for table in STORE_TABLES:
            row = connection.execute(f'SELECT count(*) FROM "{table.name}"').fetchone()
            counts[table.name] = int(row[0]) if row else 0
    return counts, seconds
