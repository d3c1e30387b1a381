"""What a view module declares: :class:`View`, the one object each module of
:mod:`shared.domain.views` holds as ``VIEW``.

A view is its rows (:class:`~shared.domain.views.spec.ViewSpec`), the Spark function
both layers compute them with, its rule again in DuckDB SQL (the reference the
bench's peer and the tests' oracle run), how the speed layer runs it
(:class:`SpeedPlan`), the sizes it reads (:class:`Size`, each one setting) and the
event columns it reads. Everything else (topics, stores, the API, the batch
recompute, the speed job's queries) derives from these.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum

from pyspark.sql import DataFrame

from shared.domain.views.spec import ViewSpec

ViewSizes = Mapping[str, timedelta]
"""The sizes (:class:`Size`) by name, as the settings give them: the same in both layers."""


@dataclass(frozen=True)
class Size:
    """A duration that shapes a view's rows; one setting (``LAMBDALINE_<NAME>``).

    Views that read the same size share one declaration (a module imports another's).
    """

    name: str
    default: timedelta
    description: str
    divides_a_day: bool = False
    """Windows of it tile each day from midnight (the batch layer recomputes by date)."""


class Lane(StrEnum):
    """Which part of the speed job computes a view."""

    BOOTHS = "booths"
    """The speed operator's roll-up per booth (``speed_layer.operator``): tumbling and
    hopping counts of entries from one state, for the views whose rows it makes."""
    PLATES = "plates"
    """The speed operator's part per plate (``speed_layer.operator``): an entry's best
    matches (trip and registration candidates) and the plate's sessions."""
    DERIVED = "derived"
    """Counted from the operator's internal topic (``speed_layer.operator.diagnostic_counts``)."""
    OWN_QUERY = "own_query"
    """A query of its own: the view's function over the watermarked, deduplicated entries
    stream. A view added to the registry usually runs here."""


@dataclass(frozen=True)
class SpeedPlan:
    """How the speed job runs a view."""

    lane: Lane
    output_mode: str = "update"
    """Spark's output mode for an own query: ``update`` rewrites a row as it changes,
    ``append`` writes it once the watermark closes it."""


@dataclass(frozen=True)
class ReferenceTable:
    """A table the reference SQL of one or more views reads (``at_entry``): made once
    before their ``SELECT`` statements."""

    name: str
    sql: Callable[[ViewSizes], str]


class Inputs:
    """The events a view's function reads, and what several views share.

    ``entries`` (deduplicated), ``exits`` and ``registrations`` are events with the
    columns the views read; ``spanning`` the entries a view whose rows span time
    computes from (the batch layer gives the days either side as well). The speed
    layer's own queries get entries only (streams, watermarked on entry_time).

    :meth:`shared` computes an intermediate result once per set of inputs, for the
    views that read it (the batch layer persists it).
    """

    def __init__(
        self,
        entries: DataFrame,
        exits: DataFrame | None = None,
        registrations: DataFrame | None = None,
        spanning: DataFrame | None = None,
    ) -> None:
        self.entries = entries
        self.spanning = entries if spanning is None else spanning
        self._exits, self._registrations = exits, registrations
        self._shared: dict[str, DataFrame] = {}

    @property
    def exits(self) -> DataFrame:
        return _given(self._exits, "exits")

    @property
    def registrations(self) -> DataFrame:
        return _given(self._registrations, "registrations")

    def shared(self, name: str, build: Callable[[], DataFrame]) -> DataFrame:
        """``build()`` persisted, once per name (``spark.catalog.clearCache()`` frees it)."""
        if name not in self._shared:
            self._shared[name] = build().persist()  # MEMORY_AND_DISK_DESER
        return self._shared[name]


def _given(events: DataFrame | None, what: str) -> DataFrame:
    if events is None:
        raise ValueError(
            f"these inputs have no {what} (the speed layer's own queries read entries)"
        )
    return events


@dataclass(frozen=True)
class View:
    """One view: its rows, its rule in Spark and in SQL, its speed plan, its sizes."""

    spec: ViewSpec
    compute: Callable[[Inputs, ViewSizes], DataFrame]
    """The rows over static (batch) or streaming (speed, :attr:`Lane.OWN_QUERY`) inputs,
    with the spec's columns in order: the definition of truth."""
    reference_sql: Callable[[ViewSizes], str]
    """The same rule as a DuckDB ``SELECT`` over the tables ``once_entries`` (entries, first
    copy only), ``exits``, ``registrations`` and :attr:`reference_tables`, instants as
    zone-less UTC, typed as the batch store's; written apart from :attr:`compute`."""
    speed: SpeedPlan
    reads: Mapping[str, tuple[str, ...]]
    """The event columns it reads, by event type name (``toll_entry``, ...)."""
    sizes: tuple[Size, ...] = ()
    reference_tables: tuple[ReferenceTable, ...] = ()
    spanning: bool = False
    """Its rows span time (a hopping window, a visit): the batch layer computes a date's
    rows from the entries of the days either side too, and keeps that date's."""
    starts_before: Callable[[ViewSizes], timedelta] = field(default=lambda sizes: timedelta(0))
    """How long before an entry a row holding it may start (a hopping window's length):
    the batch layer has rows to recompute on the days before the first entries."""
    check_sizes: Callable[[ViewSizes], None] | None = None
    """Raises ValueError naming the settings if the sizes cannot go together."""

    @property
    def name(self) -> str:
        return self.spec.name
