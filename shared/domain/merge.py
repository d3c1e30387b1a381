"""The merge rule of the serving layer, written once as pure functions.

For a query, a view's rows come from the batch store below the batch horizon H
and from the speed store from H on, as its spec's ``horizon`` rule says
(:class:`shared.domain.views.spec.Horizon`): speed rows below H are ignored (the
batch layer has recomputed those times from all the data), and so are batch
rows at or after H. With no batch version published yet (H is None) every row
comes from the speed store.

Every row says whether it is ``final``: a batch row always is; a speed row once
the speed watermark W has passed what its view's spec says
(:class:`shared.domain.views.spec.Final`, :func:`final_cut`). A speed row that
is not final is provisional: a later event can still change it.

Coarser granularities are rolled up from the merged base rows, after the
merge, as the spec's ``roll_up`` says: a bucket that takes rows of both sources
is ``mixed``, and it is final if all its rows are.

The speed store of a view whose records are candidates
(:attr:`shared.domain.views.spec.Combine.BEST_CANDIDATE`) holds, per view key,
the candidate its rule ranks best (:func:`best_candidates`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from shared.domain.views.spec import Aggregate, Combine, Horizon, ViewSpec

Row = dict[str, Any]


class Source(StrEnum):
    BATCH = "batch"
    SPEED = "speed"
    MIXED = "mixed"


def sources_for(
    start: datetime,
    end: datetime,
    horizon: datetime | None,
    rule: Horizon = Horizon.TIME_BEFORE,
) -> tuple[Source, ...]:
    """The stores the merge can take rows from for times in [start, end), in merge order.

    A range wholly below the horizon is answered by the batch store alone, one
    from the horizon on (or any range before a batch version exists) by the
    speed store alone; one that straddles it needs both, and an empty range none.
    Under ``END_AT_OR_BEFORE`` a row that starts before H can end after it, so a
    range below H needs the speed store too.
    """
    if horizon is None:
        return (Source.SPEED,) if start < end else ()
    sides = []
    if start < min(end, horizon):
        sides.append(Source.BATCH)
    if max(start, horizon) < end or (rule is Horizon.END_AT_OR_BEFORE and start < end):
        sides.append(Source.SPEED)
    return tuple(sides)


def final_cut(
    view: ViewSpec, watermark: datetime | None, durations: Mapping[str, timedelta]
) -> datetime | None:
    """The latest value of the view's ``final.column`` that makes a speed row final under
    ``watermark`` (None: no watermark yet, no speed row is final): W minus the view
    settings the rule names, taken from ``durations`` (``window``, ``max_trip``)."""
    if watermark is None:
        return None
    return watermark - sum((durations[name] for name in view.final.plus), timedelta())


HORIZON_SQL: Mapping[Horizon, tuple[str, str]] = {
    Horizon.TIME_BEFORE: ("<", ">="),
    Horizon.END_AT_OR_BEFORE: ("<=", ">"),
}
"""Each horizon rule's comparison of a row's ``horizon_column`` with H in SQL, batch side
then speed side: :func:`merge_at_horizon`'s rule, for the stores' queries."""


def merge_at_horizon(
    view: ViewSpec,
    batch_rows: Iterable[Mapping[str, Any]],
    speed_rows: Iterable[Mapping[str, Any]],
    horizon: datetime | str | None,
    final_before: datetime | str | None = None,
) -> list[Row]:
    """The batch rows on the batch side of the horizon plus the speed rows on the other, as
    the view's ``horizon`` rule says (:class:`shared.domain.views.spec.Horizon`), each
    tagged with its source and whether it is final: every batch row, and the speed rows
    whose ``final.column`` is at or before ``final_before`` (:func:`final_cut`; None:
    none is).

    Times and horizon are datetimes, or ISO-8601 UTC strings of one fixed format
    (``shared.domain.events.format_instant``), which order exactly as their instants.
    """
    side_column, final_column = view.horizon_column, view.final.column
    batch_side = _BATCH_SIDE[view.horizon]
    merged: list[Row] = []
    batch, speed = Source.BATCH.value, Source.SPEED.value  # looked up once, not per row
    if horizon is not None:
        merged += [
            {**row, "final": True, "source": batch}
            for row in batch_rows
            if batch_side(row[side_column], horizon)
        ]
    merged += [
        {
            **row,
            "final": final_before is not None and row[final_column] <= final_before,
            "source": speed,
        }
        for row in speed_rows
        if horizon is None or not batch_side(row[side_column], horizon)
    ]
    return merged


_BATCH_SIDE: dict[Horizon, Callable[[Any, Any], bool]] = {
    Horizon.TIME_BEFORE: operator.lt,
    Horizon.END_AT_OR_BEFORE: operator.le,
}
"""Whether a row is the batch store's: its ``horizon_column`` against H, by the view's rule."""


def on_batch_side(view: ViewSpec, side: Any, horizon: datetime | str | None) -> bool:
    """Whether a row whose ``horizon_column`` is ``side`` is the batch store's to answer
    (False for every row while there is no horizon)."""
    return horizon is not None and _BATCH_SIDE[view.horizon](side, horizon)


def best_candidates(view: ViewSpec, candidates: Iterable[Mapping[str, Any]]) -> list[Row]:
    """A candidate view's rows from its speed records' values: per view key the candidate
    its rule ranks best, if it is shown, as the view's columns, in key order.

    The serving layer keeps the same rows as it reads the records
    (``shared.platform.speed_tables``); this is the rule written plainly.
    """
    rule = view.candidates
    assert view.combine is Combine.BEST_CANDIDATE and rule is not None, view.combine
    better = operator.lt if rule.best is Aggregate.MIN else operator.gt
    best: dict[tuple[Any, ...], Mapping[str, Any]] = {}
    for candidate in candidates:
        key = tuple(candidate[name] for name in view.key)
        held = best.get(key)
        rank = tuple(candidate[name] for name in rule.rank)
        if held is None or better(rank, tuple(held[name] for name in rule.rank)):
            best[key] = candidate
    return [
        {name: best[key][name] for name in view.column_names}
        for key in sorted(best)
        if rule.shown_if is None or best[key][rule.shown_if]
    ]


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
    differ, and final if every row taken is. Rows that are themselves rolled-up
    parts of buckets of ``size`` (each tagged with its store) roll up to the
    same buckets as the rows they came from.
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
                "final": row["final"],
                "source": row["source"],
            }
            continue
        for name, combined in combine:
            held[name] = combined(held[name], row[name])
        held["final"] = held["final"] and row["final"]
        if held["source"] != row["source"]:
            held["source"] = Source.MIXED.value
    return [buckets[key] for key in sorted(buckets)]
