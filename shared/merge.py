"""The merge rule of the serving layer, written once as pure functions.

For a query, rows whose time (``window_start`` or ``entry_time``) lies before
the batch horizon H come from the batch store, rows at or after H from the
speed store; speed rows below H are ignored (the batch layer has recomputed
those times from all the data), and so are batch rows at or after H. With no
batch version published yet (H is None) every row comes from the speed store.

Coarser granularities are rolled up from the merged base rows, after the
merge: a bucket that takes rows of both sources is ``mixed``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

Row = dict[str, Any]


class Source(StrEnum):
    BATCH = "batch"
    SPEED = "speed"
    MIXED = "mixed"


def sources_for(start: datetime, end: datetime, horizon: datetime | None) -> tuple[Source, ...]:
    """The stores the merge can take rows from for times in [start, end), in merge order.

    A range wholly below the horizon is answered by the batch store alone, one
    from the horizon on (or any range before a batch version exists) by the
    speed store alone; one that straddles it needs both, and an empty range none.
    """
    if horizon is None:
        return (Source.SPEED,) if start < end else ()
    sides = []
    if start < min(end, horizon):
        sides.append(Source.BATCH)
    if max(start, horizon) < end:
        sides.append(Source.SPEED)
    return tuple(sides)


def merge_at_horizon(
    batch_rows: Iterable[Mapping[str, Any]],
    speed_rows: Iterable[Mapping[str, Any]],
    horizon: datetime | str | None,
    time_column: str,
) -> list[Row]:
    """Batch rows before the horizon plus speed rows from it, each tagged with its source.

    Times and horizon are datetimes, or ISO-8601 UTC strings of one fixed format
    (``shared.events.format_instant``), which order exactly as their instants.
    """
    merged: list[Row] = []
    batch, speed = Source.BATCH.value, Source.SPEED.value  # looked up once, not per row
    if horizon is not None:
        merged += [{**row, "source": batch} for row in batch_rows if row[time_column] < horizon]
    merged += [
        {**row, "source": speed}
        for row in speed_rows
        if horizon is None or row[time_column] >= horizon
    ]
    return merged


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
"""Buckets of every size align to it (so a day is a UTC day)."""


def bucket_start(moment: datetime, size: timedelta) -> datetime:
    """The start of the size-aligned bucket (aligned to the Unix epoch, in UTC) holding moment."""
    epoch = EPOCH if moment.tzinfo is not None else EPOCH.replace(tzinfo=None)
    return moment - (moment - epoch) % size


class Aggregate(StrEnum):
    """How a value column rolls up; the values are also DuckDB's names for them.

    Each is associative and commutative, so a bucket can be rolled up in parts
    (say, per store, in SQL) and the parts rolled up again: the result is the same.
    """

    SUM = "sum"
    MIN = "min"
    MAX = "max"


_COMBINE: dict[Aggregate, Callable[[Any, Any], Any]] = {
    Aggregate.SUM: operator.add,
    Aggregate.MIN: min,
    Aggregate.MAX: max,
}

BOOTH_STATS_ROLL_UP: dict[str, Aggregate] = {
    "vehicle_count": Aggregate.SUM,
    "total_toll": Aggregate.SUM,
    "first_entry_time": Aggregate.MIN,
    "last_entry_time": Aggregate.MAX,
}
"""``booth_stats``' value columns and how each rolls up: counts and tolls add up,
first/last entry times are the min/max. Buckets are per ``booth_id`` and
size-aligned ``window_start`` (:func:`bucket_start`)."""


def roll_up_booth_stats(rows: Iterable[Mapping[str, Any]], size: timedelta) -> list[Row]:
    """Merged ``booth_stats`` rows rolled up to buckets of ``size`` per booth, in key order.

    Values roll up as :data:`BOOTH_STATS_ROLL_UP` says; the source is that of
    the rows taken, ``mixed`` where they differ. Rows that are themselves
    rolled-up parts of buckets of ``size`` (each tagged with its store) roll up
    to the same buckets as the rows they came from.
    """
    buckets: dict[tuple[str, datetime], Row] = {}
    for row in rows:
        start = bucket_start(row["window_start"], size)
        key = (row["booth_id"], start)
        held = buckets.get(key)
        if held is None:
            buckets[key] = {
                "booth_id": row["booth_id"],
                "window_start": start,
                "window_end": start + size,
                **{column: row[column] for column in BOOTH_STATS_ROLL_UP},
                "source": row["source"],
            }
            continue
        for column, aggregate in BOOTH_STATS_ROLL_UP.items():
            held[column] = _COMBINE[aggregate](held[column], row[column])
        if held["source"] != row["source"]:
            held["source"] = Source.MIXED.value
    return [buckets[key] for key in sorted(buckets)]
