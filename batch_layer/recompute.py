"""Which event dates a batch run recomputes, and the recompute itself.

The views come from the registered views' functions
(``shared.settings.views.REGISTERED``), the same the speed layer calls; this module
only chooses dates and reads their inputs. A view row belongs to the date of its
entry (``entry_time`` or the window that holds it), or of its start (a hopping
window, a visit), so recomputing date *d* needs:

- the entries of *d*, and for the views whose rows span time (``View.spanning``: a
  hopping window, a visit) those of the days either side: a window or a visit that
  starts on *d* may end on *d* + 1, and an entry just after midnight may belong
  to a visit of *d* - 1. A visit is computed from the entries up to the end of
  *d* + 1: one whose entries stay under its gap apart for longer than
  that is cut there;
- the events a view looks up, of the dates in its reach (``View.reaches``): a best
  match's right events, of the days its interval spans from *d* (exits up to days
  after the entries they end, registrations from days before the entries they
  apply to).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date, timedelta

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from batch_layer import master
from batch_layer.master import MasterDataset
from shared.domain.events import EVENT_TYPES, TOLL_ENTRY, TOLL_EXIT, VEHICLE_REGISTRATION, EventType
from shared.domain.validation import SOURCE_COLUMNS
from shared.domain.views import Reaches, compute_views, reaches_of, read_columns
from shared.domain.views.rules import COUNTED_INPUTS, without_duplicates
from shared.domain.views.view import Inputs
from shared.settings import ViewSettings
from shared.settings.views import REGISTERED

DEAD_LETTERS = "dead_letters"
VIEW_INPUTS = read_columns(REGISTERED)
"""The event columns the views read, by event type name: all a recompute keeps."""

PERSISTED = StorageLevel.MEMORY_AND_DISK_DESER
"""How the events several views read are persisted. PySpark's ``MEMORY_AND_DISK`` is
the serialized level (Python RDDs are pickled), which would serialize every cached
column batch again; ``_DESER`` is what Scala's ``MEMORY_AND_DISK`` and PySpark's
``DataFrame.persist()`` default (what ``shared.domain.views.view.Inputs.shared`` uses) mean."""


@dataclass(frozen=True)
class Inventory:
    """The (date, ingest batch) partitions the master dataset holds, per part.

    Parts are the event type names and ``dead_letters``. Read from partition
    directory names only, never from the data.
    """

    parts: Mapping[str, frozenset[tuple[date, int]]]

    def batches(self) -> set[int]:
        """The ingest batches any part holds."""
        return {batch for found in self.parts.values() for _, batch in found}

    def newest_batch(self) -> int | None:
        """The newest ingest batch any part holds (None: the master dataset is empty)."""
        return max(self.batches(), default=None)

    def dates(self) -> set[date]:
        return {day for found in self.parts.values() for day, _ in found}

    def touched(self, part: str, after_batch: int | None) -> set[date]:
        """Dates of a part that received records in an ingest batch after this one."""
        return {
            day
            for day, batch in self.parts.get(part, frozenset())
            if after_batch is None or batch > after_batch
        }


def read_inventory(spark: SparkSession, dataset: MasterDataset) -> Inventory:
    parts = {}
    for event_type in EVENT_TYPES:
        location = dataset.events(event_type)
        parts[event_type.name] = frozenset(master.partitions(spark, location, master.EVENT_DATE))
    parts[DEAD_LETTERS] = frozenset(
        master.partitions(spark, dataset.dead_letters, master.RECORD_DATE)
    )
    return Inventory(parts)


def _days(first: date, last: date) -> set[date]:
    return {first + timedelta(days=n) for n in range((last - first).days + 1)}


def _around(day: date) -> set[date]:
    """A date and the days either side: what rows spanning time (a hopping window, a
    visit) of one date may share with the next or the previous."""
    return _days(day - timedelta(days=1), day + timedelta(days=1))


def days_spanned(duration: timedelta) -> int:
    """How many days after its start's date a span this long may end on."""
    return math.ceil(duration / timedelta(days=1))


def _day_offsets(reach: tuple[timedelta, timedelta]) -> tuple[int, int]:
    """The first and last day, relative to a row's date, an event in ``reach`` may be of."""
    day = timedelta(days=1)
    return math.floor(reach[0] / day), math.ceil(reach[1] / day)


def dates_to_recompute(
    *,
    run_date: date,
    inventory: Inventory,
    published_horizon: date | None,
    published_ingest_batch: int | None,
    lookback_days: int,
    reaches: Reaches,
    rows_start_before: timedelta,
    views_changed: bool = False,
) -> list[date]:
    """The event dates <= run_date whose rows the next version must recompute.

    A date has rows if it has data, or if a row that starts on it holds an entry of
    a later date: a hopping window starts up to ``rows_start_before`` (its length)
    before an entry it holds, so the day before the first entries has windows too.

    A date is recomputed if it has rows and (a) the published version does not
    hold it yet (on or after its horizon, or nothing published), (b) this or an
    earlier unpublished ingest added records that change it (late data), or
    (c) it lies in the lookback (the ``lookback_days`` days ending on run_date).
    If ``views_changed`` (the published rows were computed under other view
    settings), every date with rows is recomputed: those <= run_date and those
    the published version holds (below its horizon).

    Records change these dates: an entry its own date and the days either side
    (a window or a visit of the day before may hold it; it may join a visit of
    the next day to one of its own); an event a view looks up, the dates of the
    rows it is in ``reaches`` of (an exit the days before it, back to the entries
    whose trip it may end; a registration the days after it, up to the last entry
    it may apply to); a dead letter its date.
    """
    windows_back = days_spanned(rows_start_before)
    with_rows = inventory.dates() | {
        day - timedelta(days=n)
        for day, _ in inventory.parts.get(TOLL_ENTRY.name, ())
        for n in range(1, windows_back + 1)
    }
    if views_changed:
        last = (
            run_date
            if published_horizon is None
            else max(run_date, published_horizon - timedelta(days=1))
        )
        return sorted(day for day in with_rows if day <= last)
    with_data = {day for day in with_rows if day <= run_date}
    new = {day for day in with_data if published_horizon is None or day >= published_horizon}

    after = published_ingest_batch if published_horizon is not None else None
    touched = set()
    for day in inventory.touched(TOLL_ENTRY.name, after):
        touched |= _around(day)
    touched |= inventory.touched(DEAD_LETTERS, after)
    for event_type, reach in reaches.items():
        nearest, farthest = _day_offsets(reach)
        for day in inventory.touched(event_type, after):
            # the rows whose reach holds the day: dated from `farthest` days before it
            earliest, latest = day - timedelta(days=farthest), day - timedelta(days=nearest)
            touched |= _days(earliest, max(earliest, min(latest, run_date)))

    # by distance, not by a first date: any lookback is valid (a huge one recomputes everything)
    lookback = {day for day in with_data if (run_date - day).days < lookback_days}
    return sorted((new | touched | lookback) & with_data)


def _events(
    spark: SparkSession,
    dataset: MasterDataset,
    event_type: EventType,
    dates: Iterable[date],
    persist: bool = False,
) -> DataFrame:
    """Valid events of these dates, without duplicates where a view counts them, persisted if asked.

    Only entries are counted (``shared.domain.views.rules.COUNTED_INPUTS``): copies of an
    exit or a registration cannot change the earliest exit or the latest
    registration of an entry, so they are not worth a shuffle and a sort. Only
    the columns the views read are kept (half the time of keeping whole events,
    measured at 1M entries); Parquet reads no others, so the raw key and value
    bytes stay on disk. Entries feed three views and are persisted; exits and
    registrations each feed one persisted join (``Inputs.shared``), so
    caching them would only cost the time to build the cache.
    """
    kept = VIEW_INPUTS[event_type.name]
    events = master.read_events(spark, dataset, event_type, dates)
    if event_type.name in COUNTED_INPUTS:
        dedup = dict.fromkeys(["event_id", *kept, *SOURCE_COLUMNS])  # ordered, without repeats
        events = events.select(*dedup).transform(without_duplicates)
    events = events.select(*kept)
    return events.persist(PERSISTED) if persist else events


def recompute(
    spark: SparkSession,
    dataset: MasterDataset,
    views: ViewSettings,
    inventory: Inventory,
    dates: list[date],
) -> dict[str, DataFrame]:
    """Every view, and the dead letters, for these event dates from the master dataset.

    The frames are lazy and share persisted inputs: collect them, then call
    :func:`release`. Entries are read for these dates (and the days either side
    for the views whose rows span time), the events the views look up for the
    dates in their reach (``View.reaches``).
    """
    sizes = views.sizes
    in_reach = {
        event_type: _in_reach(inventory, event_type, reach, dates)
        for event_type, reach in reaches_of(REGISTERED, sizes).items()
    }
    entries = _events(spark, dataset, TOLL_ENTRY, dates, persist=True)
    around = set().union(*(_around(day) for day in dates), in_reach.pop(TOLL_ENTRY.name, set()))
    spanning = _events(spark, dataset, TOLL_ENTRY, around, persist=True)
    looked_up = {
        event_type.name: _events(spark, dataset, event_type, in_reach.get(event_type.name, set()))
        for event_type in (TOLL_EXIT, VEHICLE_REGISTRATION)
    }
    exits, registrations = looked_up[TOLL_EXIT.name], looked_up[VEHICLE_REGISTRATION.name]
    rows = compute_views(REGISTERED, Inputs(entries, exits, registrations, spanning), sizes)
    for view in REGISTERED:  # spanning: the rows of the dates asked for, the others lack entries
        if view.spanning:
            day = F.to_date(view.spec.time_column)
            rows[view.name] = rows[view.name].where(day.isin(sorted(dates)))
    rows[DEAD_LETTERS] = master.read_dead_letters(spark, dataset, dates)
    return rows


def _in_reach(
    inventory: Inventory, event_type: str, reach: tuple[timedelta, timedelta], dates: list[date]
) -> set[date]:
    """The dates of ``event_type``'s partitions in ``reach`` of any of ``dates``."""
    first, last = _day_offsets(reach)
    wanted = {day + timedelta(days=n) for day in dates for n in range(first, last + 1)}
    return {day for day, _ in inventory.parts.get(event_type, ()) if day in wanted}


def release(spark: SparkSession) -> None:
    """Drop what :func:`recompute` kept in memory (the batch job caches nothing else)."""
    spark.catalog.clearCache()
