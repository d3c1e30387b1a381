"""One declaration per view: its columns, key, time, and how its rows merge and roll up.

A :class:`ViewSpec` is everything about a view's rows that is not how they are
computed (that is the view's function in :mod:`shared.domain.views`). The
stores and the API derive their shapes from it, so a column is added in the
spec and in the view function, and nowhere else:

- the batch store's DuckDB table and key order
  (``shared.platform.batch_store.StoreTable.of``), which the speed store's
  tables copy (``serving.speed_tables``);
- the speed record, keyed by the view key, with the columns as its value
  (``speed_layer.speed_store.speed_records``);
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


class Combine(StrEnum):
    """How the speed records of one view key combine at read time."""

    LATEST_MICRO_BATCH = "latest_micro_batch"
    """The record of the latest micro-batch is the row: a replayed micro-batch writes
    the same row again, an older one never replaces a newer."""


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
    horizon: Horizon = Horizon.TIME_BEFORE
    combine: Combine = Combine.LATEST_MICRO_BATCH
    roll_up: RollUp | None = None
    by_name: Mapping[str, Column] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_name = {column.name: column for column in self.columns}
        object.__setattr__(self, "by_name", by_name)
        named = [*self.key, self.time_column]
        if self.roll_up is not None:
            named += [self.roll_up.start, self.roll_up.end, *self.roll_up.values]
        unknown = [name for name in named if name not in by_name]
        if unknown or len(by_name) != len(self.columns):
            raise ValueError(f"view {self.name}: no column or a repeated one: {unknown}")

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(column.name for column in self.columns)


BOOTH_STATS = ViewSpec(
    name="booth_stats",
    columns=(
        Column("booth_id", ColumnType.TEXT),
        Column("window_start", ColumnType.INSTANT),
        Column("window_end", ColumnType.INSTANT),
        Column("vehicle_count", ColumnType.COUNT),
        Column("total_toll", ColumnType.MONEY, "sum of tolls, two decimal places"),
        Column("first_entry_time", ColumnType.INSTANT),
        Column("last_entry_time", ColumnType.INSTANT),
    ),
    key=("booth_id", "window_start"),
    time_column="window_start",
    api_row="BoothStatsRow",
    # counts and tolls add up, first/last entry times are the min/max
    roll_up=RollUp(
        start="window_start",
        end="window_end",
        values={
            "vehicle_count": Aggregate.SUM,
            "total_toll": Aggregate.SUM,
            "first_entry_time": Aggregate.MIN,
            "last_entry_time": Aggregate.MAX,
        },
    ),
)

VEHICLE_TRIPS = ViewSpec(
    name="vehicle_trips",
    columns=(
        Column("booth_id", ColumnType.TEXT),
        Column("license_plate", ColumnType.TEXT),
        Column("entry_time", ColumnType.INSTANT),
        Column("exit_time", ColumnType.INSTANT),
        Column("duration_seconds", ColumnType.SECONDS),
    ),
    key=("booth_id", "license_plate", "entry_time"),
    time_column="entry_time",
    api_row="VehicleTripRow",
)

EXPIRED_REGISTRATIONS = ViewSpec(
    name="expired_registrations",
    columns=(
        Column("booth_id", ColumnType.TEXT),
        Column("license_plate", ColumnType.TEXT),
        Column("entry_time", ColumnType.INSTANT),
        Column("registration_id", ColumnType.TEXT),
    ),
    key=("booth_id", "license_plate", "entry_time"),
    time_column="entry_time",
    api_row="ExpiredRegistrationRow",
)

DIAGNOSTICS = ViewSpec(
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
)

VIEWS: tuple[ViewSpec, ...] = (BOOTH_STATS, VEHICLE_TRIPS, EXPIRED_REGISTRATIONS, DIAGNOSTICS)
"""Every view, in the contract's order."""

VIEW_BY_NAME: Mapping[str, ViewSpec] = {view.name: view for view in VIEWS}

VIEW_NAMES: tuple[str, ...] = tuple(VIEW_BY_NAME)
"""The views' names; each has a speed-store topic and a batch-store table."""
