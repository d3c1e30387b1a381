"""The batch recompute as plain DuckDB SQL over the master dataset: a single-machine peer.

It runs the registered views' reference SQL (:func:`shared.domain.views.reference_sql`:
the view rules stated again apart from the Spark functions) over the same Parquet the batch
layer reads, so equal row counts also cross-check the Spark result. An entry's first
copy is the first in source order, as the batch layer keeps it; exits and
registrations keep their copies (a copy cannot change a ``min`` or the registration
rule's greatest).
"""

from __future__ import annotations

import time

import duckdb

from shared.domain.views import reference_sql
from shared.platform.batch_store import STORE_TABLES
from shared.settings import Settings
from shared.settings.views import REGISTERED

SOURCE_ORDER = "source_timestamp, source_topic, source_partition, source_offset"


def peer_statements(settings: Settings, threads: int) -> str:
    master, topics = settings.master_location, settings.topics

    def events(topic: str) -> str:
        read = (
            f"SELECT * FROM read_parquet('{master}/topic={topic}/*/*/*.parquet', "
            "hive_partitioning = true)"
        )
        return f"SELECT * REPLACE ({_naive_instants(topic, settings)}) FROM ({read})"

    prepare, selects = reference_sql(REGISTERED, settings.views.sizes, SOURCE_ORDER)
    views = "\n".join(f"CREATE TEMP TABLE {name} AS {text};" for name, text in selects.items())
    return f"""
        SET threads = {threads};
        SET TimeZone = 'UTC';
        CREATE TEMP TABLE entries AS {events(topics.entries)};
        CREATE TEMP TABLE exits AS {events(topics.exits)};
        CREATE TEMP TABLE registrations AS {events(topics.registrations)};
        {prepare}
        {views}
        CREATE TEMP TABLE dead_letters AS
            SELECT * FROM read_parquet(
                '{master}/dead_letters/*/*/*.parquet', hive_partitioning = true);
    """


def _naive_instants(topic: str, settings: Settings) -> str:
    """The event's instant as zone-less UTC (the reference SQL's input)."""
    column = {
        settings.topics.entries: "entry_time", settings.topics.exits: "exit_time",
        settings.topics.registrations: "registration_time",
    }[topic]  # fmt: skip
    return f"{column}::TIMESTAMP AS {column}"


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
