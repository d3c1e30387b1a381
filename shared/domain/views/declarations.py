"""A view's rule stated as data, in its module: the kinds both layers interpret.

- :class:`RollUpRule`: events counted and summed per group in buckets of time
  (tumbling or hopping windows);
- :class:`BestMatchRule`: for each left event, the right event that ranks best
  among those with equal keys whose time lies in an interval of the left's;
- :class:`SessionsRule`: runs of one group's events less than a gap apart;
- a Spark function (``View.compute``), for a rule none of these states: it runs as is.

The batch layer runs a declaration as the DataFrame function this module builds
from it (:func:`roll_up_rows`, :func:`best_matches`); the speed layer hands the same
declaration, serialised, to its generic operators (``speed_layer.operator``). So a
view's keys, measures, interval and preference are written once, in its module.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum

from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from shared.domain.views.rules import MONEY_TOTAL, best_candidates, interval, seconds
from shared.domain.views.spec import ColumnType, ViewSpec
from shared.domain.views.view import (
    Inputs,
    Lane,
    ReferenceTable,
    Size,
    SpeedPlan,
    View,
    ViewSizes,
)


class Measure(StrEnum):
    """What a roll-up computes of a bucket's events."""

    COUNT = "count"
    SUM = "sum"
    MIN = "min"
    MAX = "max"


@dataclass(frozen=True)
class Measured:
    """A view column that is a measure of its window's events (``of``: the event column;
    none for a count)."""

    column: str
    measure: Measure
    of: str | None = None

    def __post_init__(self) -> None:
        if (self.of is None) != (self.measure is Measure.COUNT):
            raise ValueError(f"measure {self.column}: a count has no column, the others one")


@dataclass(frozen=True)
class RollUpRule:
    """Events rolled up per ``keys`` in windows of ``size`` over ``time``: tumbling, or
    hopping every ``slide`` (each event in ``size / slide`` windows). Windows are aligned
    to the Unix epoch. A row is a window with at least one event: its keys, its bounds
    (``start``, ``end``) and its measures."""

    events: str
    """The event type rolled up (by name: ``toll_entry``)."""
    keys: tuple[str, ...]
    time: str
    size: Size
    measures: tuple[Measured, ...]
    slide: Size | None = None
    start: str = "window_start"
    end: str = "window_end"

    def sizes(self) -> tuple[Size, ...]:
        return (self.size,) if self.slide is None else (self.size, self.slide)

    def reads(self) -> tuple[str, ...]:
        """The event columns it reads."""
        named = (*self.keys, self.time, *(m.of for m in self.measures if m.of is not None))
        return tuple(dict.fromkeys(named))

    def window(self, sizes: ViewSizes) -> tuple[timedelta, timedelta]:
        """Its windows' length and slide (equal when tumbling)."""
        size = sizes[self.size.name]
        return size, (size if self.slide is None else sizes[self.slide.name])

    def check(self, sizes: ViewSizes) -> None:
        size, slide = self.window(sizes)
        if size % slide != timedelta(0):
            # every event is in the same number of windows, and a window starts on a
            # multiple of the slide (so on a day's first instant too)
            assert self.slide is not None
            raise ValueError(f"{self.slide.name} must divide {self.size.name} evenly")


@dataclass(frozen=True)
class Offset:
    """A point relative to a left event's time: ``size`` after it (``before``: before it),
    or the time itself (no size)."""

    size: Size | None = None
    before: bool = False

    def of(self, sizes: ViewSizes) -> timedelta:
        if self.size is None:
            return timedelta(0)
        duration = sizes[self.size.name]
        return -duration if self.before else duration


AT = Offset()
"""The left event's own time."""


@dataclass(frozen=True)
class BestMatchRule:
    """For each ``left`` event, of the ``right`` events with equal ``keys`` whose ``right_time``
    lies in [left time + ``start``, left time + ``end``], the one the view's candidate rank
    ranks best (``ViewSpec.candidates``); a left event with none is ``missing``.

    A row carries the view key's columns from the left event and ``carries`` (view column:
    right event column) from the match; ``derived`` columns are computed from those (Spark
    expressions, run by both layers). Where left and right are one event type, an event is
    not its own match. The row is final when the view's ``Final`` says.
    """

    left: str
    right: str
    keys: tuple[str, ...]
    left_time: str
    right_time: str
    start: Offset
    end: Offset
    carries: Mapping[str, str]
    derived: Mapping[str, Callable[[Callable[[str], SparkColumn]], SparkColumn]] = field(
        default_factory=dict
    )
    """Columns computed from the others: each from a function that gives a column by name."""
    missing: str | None = None
    """The diagnostic an unmatched left event yields once its interval is over (none: none)."""

    def sizes(self) -> tuple[Size, ...]:
        return tuple(o.size for o in (self.start, self.end) if o.size is not None)

    def interval(self, sizes: ViewSizes) -> tuple[timedelta, timedelta]:
        return self.start.of(sizes), self.end.of(sizes)

    def right_reads(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((*self.keys, self.right_time, *self.carries.values())))


@dataclass(frozen=True)
class SessionsRule:
    """Per ``keys``, runs of ``events`` less than ``gap`` apart over ``time``, as Spark's
    ``session_window`` makes them: a session is [its first event, its last + ``gap``). A
    row is a session: its keys, its bounds (``start``, ``end``), its measures and
    ``lists`` (view column: event column), the events' values in event order (ties by
    ``event_id``)."""

    events: str
    keys: tuple[str, ...]
    time: str
    gap: Size
    measures: tuple[Measured, ...]
    lists: Mapping[str, str] = field(default_factory=dict)
    start: str = "session_start"
    end: str = "session_end"

    def reads(self) -> tuple[str, ...]:
        named = (
            "event_id", *self.keys, self.time, *self.lists.values(),
            *(m.of for m in self.measures if m.of is not None),
        )  # fmt: skip
        return tuple(dict.fromkeys(named))


LEFT_ID = "event_id"
"""The left event's id: what tells its matches apart from another left event's."""


def roll_up_rows(
    rule: RollUpRule, spec: ViewSpec, events: DataFrame, sizes: ViewSizes
) -> DataFrame:
    """The view's rows: ``rule`` over ``events``, the spec's columns in order."""
    size, slide = rule.window(sizes)
    window = F.window(rule.time, seconds(size), seconds(slide)).alias("_window")
    measures = [_measure(m, spec.by_name[m.column].type).alias(m.column) for m in rule.measures]
    bounds = {rule.start: F.col("_window.start"), rule.end: F.col("_window.end")}
    rolled = events.groupBy(*rule.keys, window).agg(*measures)
    return rolled.select(
        *(bounds[name].alias(name) if name in bounds else F.col(name) for name in spec.column_names)
    )


def session_rows(
    rule: SessionsRule, spec: ViewSpec, events: DataFrame, sizes: ViewSizes
) -> DataFrame:
    """The view's rows: ``rule`` over ``events``, the spec's columns in order.

    Start and end are aggregates of the session's events (its first, its last + ``gap``:
    the session window's own bounds), not the window's fields: Spark pushes a filter on a
    grouping key below the aggregate, and a session window's key below it is each event's
    own [time, time + gap), so a filter on the window's start would drop the events that
    join a session to an earlier one (the batch layer filters rows by their start's date)."""
    gap = sizes[rule.gap.name]
    columns = {
        rule.start: F.min(rule.time),
        rule.end: F.max(rule.time) + interval(gap),
        **{m.column: _measure(m, spec.by_name[m.column].type) for m in rule.measures},
        **{
            column: F.sort_array(F.collect_list(F.struct(rule.time, "event_id", event)))
            for column, event in rule.lists.items()
        },
    }
    sessions = events.groupBy(*rule.keys, F.session_window(rule.time, seconds(gap))).agg(
        *(value.alias(name) for name, value in columns.items())
    )
    lists = {
        column: F.transform(column, _field(event)).alias(column)
        for column, event in rule.lists.items()
    }
    return sessions.select(*(lists.get(name, F.col(name)) for name in spec.column_names))


def _field(name: str) -> Callable[[SparkColumn], SparkColumn]:
    return lambda held: held[name]


def _measure(measured: Measured, column_type: ColumnType) -> SparkColumn:
    if measured.measure is Measure.COUNT:
        return F.count(F.lit(1))
    assert measured.of is not None
    value = {Measure.SUM: F.sum, Measure.MIN: F.min, Measure.MAX: F.max}[measured.measure](
        measured.of
    )
    return value.cast(MONEY_TOTAL) if column_type is ColumnType.MONEY else value


def match_pairs(
    rule: BestMatchRule, spec: ViewSpec, left: DataFrame, right: DataFrame, sizes: ViewSizes
) -> DataFrame:
    """Each left event left-outer-joined to every right event that matches it: its
    ``event_id`` and the view key's columns, then the columns the match carries (null
    for a left event nothing matches)."""
    start, end = rule.interval(sizes)
    lt, rt = F.col(f"l.{rule.left_time}"), F.col(f"r.{rule.right_time}")
    condition = (rt >= lt + interval(start)) & (rt <= lt + interval(end))
    for key in rule.keys:
        condition &= F.col(f"l.{key}") == F.col(f"r.{key}")
    if rule.left == rule.right:
        condition &= F.col(f"l.{LEFT_ID}") != F.col(f"r.{LEFT_ID}")
    lefts = left.select(*dict.fromkeys((LEFT_ID, *spec.key))).alias("l")
    rights = right.select(
        *dict.fromkeys((*rule.right_reads(), *([LEFT_ID] if rule.left == rule.right else [])))
    )
    return lefts.join(rights.alias("r"), condition, "left_outer").select(
        *(F.col(f"l.{name}").alias(name) for name in dict.fromkeys((LEFT_ID, *spec.key))),
        *(F.col(f"r.{event}").alias(column) for column, event in rule.carries.items()),
    )


def best_matches(rule: BestMatchRule, spec: ViewSpec, pairs: DataFrame) -> DataFrame:
    """The view's rows from :func:`match_pairs`: per view key, the best match by the view's
    rank, where its ``shown_if`` flag holds, with the derived columns; the spec's columns in
    order."""
    rank = spec.candidates
    assert rank is not None, f"{spec.name} has no candidates"
    matched = pairs.where(F.col(rank.rank[0]).isNotNull()).drop(LEFT_ID)
    best = best_candidates(spec, matched, spec.key)
    if rank.shown_if is not None:
        best = best.where(F.col(rank.shown_if))
    derived = {name: make(F.col).alias(name) for name, make in rule.derived.items()}
    return best.select(*(derived.get(name, F.col(name)) for name in spec.column_names))


def unmatched(spec: ViewSpec, pairs: DataFrame) -> DataFrame:
    """The left events of :func:`match_pairs` nothing matched: their view-key columns."""
    rank = spec.candidates
    assert rank is not None, f"{spec.name} has no candidates"
    return pairs.where(F.col(rank.rank[0]).isNull()).select(*spec.key)


def shared_pairs(view: View, inputs: Inputs, sizes: ViewSizes) -> DataFrame:
    """:func:`match_pairs` of a best-match view's inputs, computed once per set of inputs
    (the view's rows and the diagnostics both read them)."""
    rule = view.rule
    assert isinstance(rule, BestMatchRule), f"{view.name} is not a best match"
    return inputs.shared(
        f"{view.name}.pairs",
        lambda: match_pairs(
            rule, view.spec, inputs.events(rule.left), inputs.events(rule.right, spanning=True),
            sizes,
        ),
    )  # fmt: skip


def roll_up_view(
    spec: ViewSpec, rule: RollUpRule, reference_sql: Callable[[ViewSizes], str]
) -> View:
    """The view a roll-up declares: its rows by :func:`roll_up_rows` in the batch layer, by
    the speed operator's roll-up from the same rule."""
    hopping = rule.slide is not None
    return View(
        spec=spec,
        compute=lambda inputs, sizes: roll_up_rows(
            rule, spec, inputs.events(rule.events, spanning=hopping), sizes
        ),
        reference_sql=reference_sql,
        speed=SpeedPlan(Lane.ROLL_UP),
        reads={rule.events: rule.reads()},
        sizes=rule.sizes(),
        # an event is in every window of the last size before it
        spanning=hopping,
        starts_before=lambda sizes: rule.window(sizes)[0] if hopping else timedelta(0),
        check_sizes=rule.check,
        rule=rule,
    )


def sessions_view(
    spec: ViewSpec, rule: SessionsRule, reference_sql: Callable[[ViewSizes], str]
) -> View:
    """The view a sessions rule declares: its rows by :func:`session_rows` in the batch layer,
    by the speed operator's sessions from the same rule."""
    return View(
        spec=spec,
        compute=lambda inputs, sizes: session_rows(
            rule, spec, inputs.events(rule.events, spanning=True), sizes
        ),
        reference_sql=reference_sql,
        # a session is written once, when the watermark passes its end (last event + gap)
        # and no event can still extend it
        speed=SpeedPlan(Lane.SESSIONS),
        reads={rule.events: rule.reads()},
        sizes=(rule.gap,),
        spanning=True,
        rule=rule,
    )


def best_match_view(
    spec: ViewSpec,
    rule: BestMatchRule,
    reference_sql: Callable[[ViewSizes], str],
    reference_tables: tuple[ReferenceTable, ...] = (),
) -> View:
    """The view a best match declares: its rows by :func:`best_matches` in the batch layer,
    by the speed operator's best match from the same rule."""
    view: View

    def compute(inputs: Inputs, sizes: ViewSizes) -> DataFrame:
        return best_matches(rule, spec, shared_pairs(view, inputs, sizes))

    left_reads = (LEFT_ID, *spec.key, *rule.keys, rule.left_time)
    reads = {rule.left: tuple(dict.fromkeys(left_reads))}
    right_reads = (*rule.right_reads(), *([LEFT_ID] if rule.left == rule.right else []))
    reads[rule.right] = tuple(dict.fromkeys((*reads.get(rule.right, ()), *right_reads)))
    view = View(
        spec=spec,
        compute=compute,
        reference_sql=reference_sql,
        speed=SpeedPlan(Lane.BEST_MATCH),
        reads=reads,
        sizes=rule.sizes(),
        reference_tables=reference_tables,
        rule=rule,
        reaches=lambda sizes: {rule.right: rule.interval(sizes)},
    )
    return view
