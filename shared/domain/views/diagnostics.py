"""diagnostics: entries that miss an exit (within ``max_trip``) or a registration (within
the lookback), counted per booth, window and reason."""

from __future__ import annotations

from datetime import timedelta
from functools import reduce

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from shared.domain.views import expired_registrations, vehicle_trips
from shared.domain.views.booth_stats import WINDOW
from shared.domain.views.declarations import BestMatchRule, shared_pairs, unmatched
from shared.domain.views.rules import seconds, sql_interval
from shared.domain.views.spec import Column, ColumnType, Final, ViewSpec
from shared.domain.views.vehicle_trips import MAX_TRIP
from shared.domain.views.view import Inputs, Lane, SpeedPlan, View, ViewSizes

MATCHES: tuple[View, ...] = (vehicle_trips.VIEW, expired_registrations.VIEW)
"""The best matches whose unmatched entries are counted, each under its rule's ``missing``."""


def missing_reason(view: View) -> str:
    """What an entry a best match found nothing for is counted as."""
    assert isinstance(view.rule, BestMatchRule) and view.rule.missing is not None
    return view.rule.missing


REASONS: tuple[str, ...] = tuple(missing_reason(view) for view in MATCHES)
"""The diagnostics' reasons: ``missing_exit``, ``missing_registration``."""


SPEC = ViewSpec(
    name="diagnostics",
    columns=(
        Column("booth_id", ColumnType.TEXT),
        Column("window_start", ColumnType.INSTANT),
        Column("reason", ColumnType.TEXT, "missing_exit or missing_registration"),
        Column("count", ColumnType.COUNT),
    ),
    key=("booth_id", "window_start", "reason"),
    time_column="window_start",
    api_row="DiagnosticRow",
    # counted by a derived query from the entries the lookups decided; Spark stops
    # changing a count once that query's watermark passes the window's end
    final=Final("window_start", plus=("window",), own_watermark=True),
)


def missing(inputs: Inputs, sizes: ViewSizes) -> DataFrame:
    """Diagnostic rows (booth_id, entry_time, reason): each entry a best match found nothing
    for, once per match."""
    rows = [
        unmatched(view.spec, shared_pairs(view, inputs, sizes)).select(
            "booth_id", "entry_time", F.lit(missing_reason(view)).alias("reason")
        )
        for view in MATCHES
    ]
    return reduce(DataFrame.unionByName, rows)


def decided_within(sizes: ViewSizes) -> timedelta:
    """How long after an entry the last of its diagnostics is decided: the latest end of
    the best matches' intervals."""
    return max(
        view.rule.interval(sizes)[1] for view in MATCHES if isinstance(view.rule, BestMatchRule)
    )


def count_diagnostics(rows: DataFrame, sizes: ViewSizes) -> DataFrame:
    """``diagnostics``: diagnostic rows counted per booth, entry window and reason."""
    window = sizes[WINDOW.name]
    return (
        rows.groupBy("booth_id", F.window("entry_time", seconds(window)).alias("window"), "reason")
        .agg(F.count(F.lit(1)).alias("count"))
        .select("booth_id", F.col("window.start").alias("window_start"), "reason", "count")
    )


def reference_sql(sizes: ViewSizes) -> str:
    """diagnostics in DuckDB SQL: entries with no exit within ``max_trip`` and entries no
    registration applies to, per booth, window and reason."""
    window = sql_interval(sizes[WINDOW.name])
    max_trip = sql_interval(sizes[MAX_TRIP.name])
    return f"""
        SELECT booth_id, window_start, reason, count(*) AS count
        FROM (
            SELECT booth_id, time_bucket({window}, entry_time) AS window_start,
                   'missing_exit' AS reason
            FROM once_entries e WHERE NOT EXISTS (
                SELECT 1 FROM exits x
                WHERE x.booth_id = e.booth_id AND x.license_plate = e.license_plate
                  AND x.exit_time BETWEEN e.entry_time AND e.entry_time + {max_trip})
            UNION ALL
            SELECT booth_id, time_bucket({window}, entry_time), 'missing_registration'
            FROM at_entry WHERE registration_id IS NULL
        )
        GROUP BY booth_id, window_start, reason
    """


def _reads() -> dict[str, tuple[str, ...]]:
    reads: dict[str, dict[str, None]] = {}
    for view in MATCHES:
        for event_type, columns in view.reads.items():
            reads.setdefault(event_type, {}).update(dict.fromkeys(columns))
    return {event_type: tuple(columns) for event_type, columns in reads.items()}


VIEW = View(
    spec=SPEC,
    compute=lambda inputs, sizes: count_diagnostics(missing(inputs, sizes), sizes),
    reference_sql=reference_sql,
    # counted from the entries the best matches decided, which wait for their deadlines
    speed=SpeedPlan(Lane.DERIVED),
    reads=_reads(),
    sizes=(WINDOW, *(size for view in MATCHES for size in view.sizes)),
    reference_tables=(expired_registrations.AT_ENTRY,),
    reaches=lambda sizes: {
        name: reach for view in MATCHES for name, reach in view.reaches(sizes).items()
    },
)
