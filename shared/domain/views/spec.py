"""One declaration per view: its columns, key, time, and how its rows merge and roll up.

A :class:`ViewSpec` is everything about a view's rows that is not how they are
computed (that is the view's function in :mod:`shared.domain.views`). The
stores and the API derive their shapes from it, so a column is added in the
spec and in the view function, and nowhere else:

- the batch store's DuckDB table and key order
  (``shared.platform.batch_store.StoreTable.of``), which the speed store's
  tables copy (``shared.platform.speed_tables``);
- the speed record, keyed by the view key (a candidate's by the view key and
  its rank), with the columns as its value
  (``speed_layer.speed_store.speed_records``), and how the records of one key
  combine (:class:`Combine`);
- when a speed row is final (:class:`Final`);
- the API's row model (``serving.models.row_model``) and the SQL that reads and
  rolls up rows (``serving.queries``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class ColumnType(StrEnum):
    """What a view column holds; each store and wire format has one type for each."""

    TEXT = "text"
    INSTANT = "instant"
    """A UTC instant with milliseconds."""
    COUNT = "count"
    """A whole number (64 bits)."""
    MONEY = "money"
    """A sum of money with two decimal places."""
    SECONDS = "seconds"
    """A duration in seconds, with a fraction."""
    FLAG = "flag"
    """True or false."""
    TEXT_LIST = "text_list"
    """Texts in order."""


class Aggregate(StrEnum):
    """How a value column rolls up; the values are also DuckDB's names for them.

    Each is associative and commutative, so a bucket can be rolled up in parts
    (say, per store, in SQL) and the parts rolled up again: the result is the same.
    """

    SUM = "sum"
    MIN = "min"
    MAX = "max"


class Horizon(StrEnum):
    """How a view's rows of the two stores meet at the batch horizon H."""

    TIME_BEFORE = "time_before"
    """The batch store's rows whose time column lies before H, the speed store's from H
    on: a row is wholly on one side, since its time is one instant."""
    END_AT_OR_BEFORE = "end_at_or_before"
    """The batch store's rows that end at or before H, the speed store's that end after
    it. A row spans time (a hopping window, a session): one that straddles H is the
    speed store's, whole, since the speed layer saw its events on both sides of H;
    the batch layer saw only those before H, so its row of it is a part, or it cannot
    tell the row is over (a session ending just before H may go on after it)."""


class Combine(StrEnum):
    """How the speed records of one view key combine at read time."""

    LATEST_MICRO_BATCH = "latest_micro_batch"
    """The record of the latest micro-batch (its highest ``version``) is the row: a
    replayed micro-batch writes the same row again, an older one never replaces a
    newer."""
    BEST_CANDIDATE = "best_candidate"
    """Each record is a candidate for its view key, written as soon as the speed layer
    finds it; the candidate ranked best (:class:`Candidates`) is the row, whichever
    micro-batch wrote it. Candidates of one view key have keys of their own (the
    view key and the rank), so a compacted topic keeps every one that can still win."""


@dataclass(frozen=True)
class Candidates:
    """How the candidates of one view key are ranked, and which of them are rows.

    The same rule picks a view's row from its candidates in both layers: the
    batch layer by an aggregate per view key (``shared.domain.views.rules.best_candidates``),
    the serving layer as it materialises the speed store (``shared.platform.speed_tables``).
    """

    rank: tuple[str, ...]
    """Columns compared in order; the first differing one decides."""
    best: Aggregate
    """``MIN``: the least rank wins; ``MAX``: the greatest."""
    hidden: tuple[Column, ...] = ()
    """Columns a candidate carries that the view's rows do not (its rank, its flag)."""
    shown_if: str | None = None
    """A flag column: the winning candidate is a row of the view only where it is true
    (else it withdraws the candidates it beats)."""


@dataclass(frozen=True)
class Final:
    """When a speed row is final: once the watermark W passes ``column`` plus the view
    settings named in ``plus`` (``window``, ``max_trip``): no event the speed layer
    can still accept changes it. Batch rows are always final.

    ``own_watermark``: W is the watermark of the derived query that writes the
    view (``shared.domain.topics.DERIVED_QUERY_PREFIX``), which Spark evicts its
    rows by; otherwise the speed watermark (the earliest of the input queries').
    """

    column: str
    plus: tuple[str, ...] = ()
    own_watermark: bool = False


@dataclass(frozen=True)
class Column:
    name: str
    type: ColumnType
    description: str | None = None
    """What the API documents for it, where its name and type do not say enough."""


@dataclass(frozen=True)
class RollUp:
    """How rows roll up to coarser buckets of time: per the key's other columns and the
    bucket of ``start`` (aligned to the Unix epoch), each value by its aggregate."""

    start: str
    end: str
    values: Mapping[str, Aggregate]


@dataclass(frozen=True)
class ViewSpec:
    """A view's rows: their columns in order, their key, their time, how they merge."""

    name: str
    columns: tuple[Column, ...]
    key: tuple[str, ...]
    """The key columns, in the order both stores keep rows in."""
    time_column: str
    """The instant that dates a row: its event date, and its side of the horizon."""
    api_row: str
    """The name of one row's schema in the API."""
    final: Final
    horizon: Horizon = Horizon.TIME_BEFORE
    end_column: str | None = None
    """The instant a row ends (with ``horizon`` ``END_AT_OR_BEFORE``)."""
    combine: Combine = Combine.LATEST_MICRO_BATCH
    candidates: Candidates | None = None
    """How candidates rank (with ``combine`` ``BEST_CANDIDATE``)."""
    roll_up: RollUp | None = None
    by_name: Mapping[str, Column] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_name", {column.name: column for column in self.columns})
        if (self.candidates is None) != (self.combine is not Combine.BEST_CANDIDATE):
            raise ValueError(f"view {self.name}: candidates go with {Combine.BEST_CANDIDATE}")
        if (self.end_column is None) != (self.horizon is not Horizon.END_AT_OR_BEFORE):
            raise ValueError(f"view {self.name}: end_column goes with {Horizon.END_AT_OR_BEFORE}")
        named = [*self.key, self.time_column, self.final.column, self.horizon_column]
        if self.candidates is not None:
            shown = [self.candidates.shown_if] if self.candidates.shown_if else []
            named += [*self.candidates.rank, *shown]
        if self.roll_up is not None:
            named += [self.roll_up.start, self.roll_up.end, *self.roll_up.values]
        columns = [column.name for column in self.record_columns]
        unknown = [name for name in named if name not in columns]
        if unknown or len(set(columns)) != len(columns):
            raise ValueError(f"view {self.name}: no column or a repeated one: {unknown}")

    @property
    def horizon_column(self) -> str:
        """The column whose instant puts a row on its side of the horizon."""
        return self.end_column if self.end_column is not None else self.time_column

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(column.name for column in self.columns)

    @property
    def record_key(self) -> tuple[str, ...]:
        """The columns that key a speed record: the view key, and a candidate's rank."""
        return self.key if self.candidates is None else (*self.key, *self.candidates.rank)

    def type_of(self, name: str) -> ColumnType:
        """The type of a column of a speed record (a view column or a hidden one)."""
        for column in self.record_columns:
            if column.name == name:
                return column.type
        raise KeyError(f"view {self.name} has no column {name!r}")

    @property
    def record_columns(self) -> tuple[Column, ...]:
        """The columns of a speed record's value: the view's, and a candidate's hidden ones."""
        hidden = self.candidates.hidden if self.candidates is not None else ()
        return (*self.columns, *hidden)
