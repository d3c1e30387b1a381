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

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from decimal import Decimal
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


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def bucket_start(moment: datetime, size: timedelta) -> datetime:
    """The start of the size-aligned bucket (aligned to the Unix epoch, in UTC) holding moment."""
    epoch = _EPOCH if moment.tzinfo is not None else _EPOCH.replace(tzinfo=None)
    return moment - (moment - epoch) % size


def roll_up_booth_stats(rows: Iterable[Mapping[str, Any]], size: timedelta) -> list[Row]:
    """Merged ``booth_stats`` rows rolled up to buckets of ``size`` per booth.

    Counts and tolls add up, first/last entry times are the min/max, and the
    source is that of the rows taken, ``mixed`` where they differ.
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
                "vehicle_count": row["vehicle_count"],
                "total_toll": Decimal(row["total_toll"]),
                "first_entry_time": row["first_entry_time"],
                "last_entry_time": row["last_entry_time"],
                "source": row["source"],
            }
            continue
        held["vehicle_count"] += row["vehicle_count"]
        held["total_toll"] += Decimal(row["total_toll"])
        held["first_entry_time"] = min(held["first_entry_time"], row["first_entry_time"])
        held["last_entry_time"] = max(held["last_entry_time"], row["last_entry_time"])
        if held["source"] != row["source"]:
            held["source"] = Source.MIXED.value
    return [buckets[key] for key in sorted(buckets)]
