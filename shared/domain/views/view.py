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
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame

from shared.domain.events import TOLL_ENTRY, TOLL_EXIT, VEHICLE_REGISTRATION
from shared.domain.views.spec import ViewSpec

if TYPE_CHECKING:
    from shared.domain.views.declarations import BestMatchRule, RollUpRule, SessionsRule

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

    ROLL_UP = "roll_up"
    """The speed operator's roll-up (``speed_layer.operator``), which interprets the view's
    :class:`~shared.domain.views.declarations.RollUpRule`: every roll-up view in one state
    keyed by the group all their keys share."""
    BEST_MATCH = "best_match"
    """The speed operator's best match, which interprets the view's
    :class:`~shared.domain.views.declarations.BestMatchRule`: every best-match view over
    one key in one state keyed by it, beside the sessions."""
    SESSIONS = "sessions"
    """The speed operator's sessions per plate (``speed_layer.operator``)."""
    DERIVED = "derived"
    """Counted from the operator's internal topic (``speed_layer.operator.diagnostic_counts``)."""
    OWN_QUERY = "own_query"
    """A query of its own: the view's function over the watermarked, deduplicated entries
    stream. A view whose rule is a Spark function of its own runs here."""


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

    def events(self, event_type: str, spanning: bool = False) -> DataFrame:
        """The events of a type, by name; of entries, :attr:`spanning` ones if asked."""
        if event_type == TOLL_ENTRY.name:
            return self.spanning if spanning else self.entries
        if event_type == TOLL_EXIT.name:
            return self.exits
        if event_type == VEHICLE_REGISTRATION.name:
            return self.registrations
        raise ValueError(f"no events of type {event_type!r}")

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
    rule: RollUpRule | BestMatchRule | SessionsRule | None = None
    """Its rule as data (``shared.domain.views.declarations``), which both layers interpret;
    none for a view computed by its Spark function alone."""
    reaches: Callable[[ViewSizes], Mapping[str, tuple[timedelta, timedelta]]] = field(
        default=lambda sizes: {}
    )
    """Per event type it looks up (a best match's right events), the interval of their time
    relative to the time of the event a row is dated by: the batch layer reads the events
    of those dates, and recomputes the dates an event in reach of them changes."""

    @property
    def name(self) -> str:
        return self.spec.name
