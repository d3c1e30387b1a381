"""What the views' rules share: money, durations in Spark and in SQL, duplicates, and
picking the best of a view key's candidates."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from shared.domain.views.spec import Aggregate, ViewSpec

MONEY_TOTAL = T.DecimalType(18, 2)

ENTRY_COLUMNS = ("event_id", "booth_id", "license_plate", "entry_time")
"""The entry columns a row of several views is keyed or joined by."""

COUNTED_INPUTS: frozenset[str] = frozenset({"toll_entry"})
"""The event types (by name) whose copies a view would count twice: booth_stats
counts and sums entries, so entries lose their duplicates (:func:`without_duplicates`)
before any view reads them. Exits and registrations reach the views only through
a ``min`` per entry (its earliest exit) or a ``max`` (its latest registration),
which copies of them do not change; neither layer spends a shuffle and a sort
(or a state store) on their duplicates."""


def seconds(duration: timedelta) -> str:
    """A duration as Spark's window functions take it."""
    return f"{int(duration.total_seconds())} seconds"


def interval(duration: timedelta) -> Column:
    """A literal interval (a session window's gap, a join's time bound)."""
    return F.expr(f"INTERVAL '{duration.total_seconds():.3f}' SECOND")


def sql_interval(duration: timedelta) -> str:
    """A duration as a DuckDB interval (the reference SQL's)."""
    return f"to_microseconds({int(duration / timedelta(microseconds=1))})"


def without_duplicates(events: DataFrame) -> DataFrame:
    """Keep one event per ``event_id``.

    A static DataFrame keeps the first copy by (source timestamp, topic,
    partition, offset), so reruns choose the same row. A streaming DataFrame
    drops copies within its watermark (``dropDuplicatesWithinWatermark``).
    """
    if events.isStreaming:
        return events.dropDuplicatesWithinWatermark(["event_id"])
    first_copy = Window.partitionBy("event_id").orderBy(
        "source_timestamp", "source_topic", "source_partition", "source_offset"
    )
    return (
        events.withColumn("_copy", F.row_number().over(first_copy))
        .where(F.col("_copy") == 1)
        .drop("_copy")
    )


def best_candidates(view: ViewSpec, candidates: DataFrame, by: Sequence[str]) -> DataFrame:
    """Per ``by``, the candidate the view's rule ranks best (``ViewSpec.candidates``).

    The rule's ``best`` over a struct of the rank columns and then the other
    columns, which compare field by field: the rank decides. A row with no
    candidate (an outer join's, its first rank column null) ranks below every
    real one; with none at all the candidate columns are null. The serving
    layer combines the speed layer's candidate records by the same rule
    (``shared.platform.speed_tables``).
    """
    rule = view.candidates
    assert rule is not None, f"{view.name} has no candidates"
    others = [name for name in candidates.columns if name not in (*by, *rule.rank)]
    # null where there is no candidate: min and max skip it
    ranked = F.when(F.col(rule.rank[0]).isNotNull(), F.struct(*rule.rank, *others))
    pick = {Aggregate.MIN: F.min, Aggregate.MAX: F.max}[rule.best]
    return (
        candidates.groupBy(*by)
        .agg(pick(ranked).alias("best"))
        .select(*by, *(F.col(f"best.{name}").alias(name) for name in (*rule.rank, *others)))
    )
