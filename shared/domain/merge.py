"""The merge rule of the serving layer, written once as pure functions.

For a query, a view's rows come from the batch store below the batch horizon H
and from the speed store from H on, as its spec's ``horizon`` rule says
(:class:`shared.domain.view_specs.Horizon`): speed rows below H are ignored (the
batch layer has recomputed those times from all the data), and so are batch
rows at or after H. With no batch version published yet (H is None) every row
comes from the speed store.

Coarser granularities are rolled up from the merged base rows, after the
merge, as the spec's ``roll_up`` says: a bucket that takes rows of both sources
is ``mixed``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from shared.domain.view_specs import Aggregate, Horizon, ViewSpec

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
    view: ViewSpec,
    batch_rows: Iterable[Mapping[str, Any]],
    speed_rows: Iterable[Mapping[str, Any]],
    horizon: datetime | str | None,
) -> list[Row]:
    """Batch rows before the horizon plus speed rows from it, each tagged with its source.

    Times and horizon are datetimes, or ISO-8601 UTC strings of one fixed format
    (``shared.domain.events.format_instant``), which order exactly as their instants.
    """
    assert view.horizon is Horizon.TIME_BEFORE, view.horizon
    time_column = view.time_column
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


_COMBINE: dict[Aggregate, Callable[[Any, Any], Any]] = {
    Aggregate.SUM: operator.add,
    Aggregate.MIN: min,
    Aggregate.MAX: max,
}


def roll_up(view: ViewSpec, rows: Iterable[Mapping[str, Any]], size: timedelta) -> list[Row]:
    """A view's merged rows rolled up to buckets of ``size``, in key order.

    Buckets are per the key's other columns and the size-aligned bucket of the
    roll-up's ``start`` (:func:`bucket_start`); values roll up by their
    aggregates, and the source is that of the rows taken, ``mixed`` where they
    differ. Rows that are themselves rolled-up parts of buckets of ``size``
    (each tagged with its store) roll up to the same buckets as the rows they
    came from.
    """
    rule = view.roll_up
    assert rule is not None, f"{view.name} does not roll up"
    group = [name for name in view.key if name != rule.start]
    combine = [(name, _COMBINE[aggregate]) for name, aggregate in rule.values.items()]
    buckets: dict[tuple[Any, ...], Row] = {}
    for row in rows:
        start = bucket_start(row[rule.start], size)
        key = (*(row[name] for name in group), start)
        held = buckets.get(key)
        if held is None:
            bucket = {rule.start: start, rule.end: start + size}
            buckets[key] = {
                **{name: bucket.get(name, row.get(name)) for name in view.column_names},
                "source": row["source"],
            }
            continue
        for name, combined in combine:
            held[name] = combined(held[name], row[name])
        if held["source"] != row["source"]:
            held["source"] = Source.MIXED.value
    return [buckets[key] for key in sorted(buckets)]
