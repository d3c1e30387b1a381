"""The speed layer's one stateful operator, and the query around it.

One query (:data:`VIEWS_QUERY`) reads the three input topics with one Kafka
source, decodes every record once by the shared validation
(``shared.domain.validation.decode_together``) and groups the events, in one
shuffle, through one event-time ``transformWithState`` operator: the Java
processor ``jvm/lambdaline/speed/SpeedOperator.java``. Its output goes straight
to Kafka through Spark's Kafka sink, each row to its topic: no Python runs per
micro-batch.

Each input row is keyed by the part that reads it (:class:`Layout`):

- an event of the roll-up views' type by the key they all share (``Lane.ROLL_UP``:
  booth_stats and booth_rolling group by booth), for the **roll-up**: every roll-up
  view's buckets in one state per key;
- an event a best match or the sessions read by the key they all share (the plate),
  for the **best matches** (``Lane.BEST_MATCH``: for each left event, the right event
  its rule ranks best within its interval) and the **sessions** (``Lane.SESSIONS``);
- a dead letter by ``d:``, passed through to ``dead.letters`` as it came, so
  that the plan is one pipeline and no record is decoded twice.

What each part computes is the views' own declarations
(``shared.domain.views.declarations``), serialised by :meth:`Layout.config` and
handed to the processor as JSON, each event column laid out in a numbered slot
(:class:`Layout`); the processor holds no view's rule, name or column, and the batch
layer runs the same declarations as DataFrame functions. It is Java because the
Python state API crosses to the JVM on every state call
(``benchmarks/plate_state.py``, docs/performance.md).

**Watermark.** One, on the left events' time (each copy of one, its plate's and its
roll-up group's: ``event_time``). Right events have none of their own: an exit can
still end a trip while its entry is held (until the watermark passes the end of the
match's interval), and a registration is recorded days before the entries it applies
to, so a watermark of theirs would hold every entry back, or drop them. The operator
judges them itself. Spark drops each copy of a left event at or before the previous
micro-batch's watermark before the operator sees it, counted as late (a late entry:
two rows, one per part); the parts take every other, so the late rows are all that
the speed layer leaves out.

**Records.** A candidate (a trip, a registration) is written when an event makes it
better than what its left event had, except a candidate its view hides (its
``shown_if`` false) while none was written for the left event; a left event missing a
match, once the watermark passes its interval's end, goes to the internal topic
(:func:`diagnostic_counts` counts them per window in a small query of its own);
a roll-up window's row each micro-batch an event changes it; a session once, when
the watermark passes its end. A record's ``version`` orders the records of one
view key (the operator's, past the key's last; a replayed micro-batch writes the
same records again: the compacted topic and the serving layer keep one).
"""

from __future__ import annotations

import json
import math
from datetime import timedelta
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.readwriter import DataStreamWriter

from shared.domain.events import TOLL_ENTRY, TOLL_EXIT, VEHICLE_REGISTRATION
from shared.domain.views.declarations import (
    BestMatchRule,
    Measure,
    Measured,
    RollUpRule,
    SessionsRule,
)
from shared.domain.views.diagnostics import REASONS, count_diagnostics, decided_within
from shared.domain.views.rules import MONEY_TOTAL
from shared.domain.views.spec import Aggregate, ColumnType
from shared.domain.views.view import Lane, View, ViewSizes
from shared.platform.jvm import compiled_jar
from shared.platform.streaming import kafka_stream
from shared.settings import Settings
from shared.settings.views import REGISTERED
from speed_layer.checkpoint import checkpoint_dir
from speed_layer.speed_store import (
    JSON_OPTIONS,
    dead_letter_value,
    kafka_sink_options,
    record_key,
    record_value,
)

OPERATORS_SOURCES = Path(__file__).with_name("jvm")
"""The speed layer's Java operator (compiled by ``make setup``: :func:`operators_jar`)."""

VIEWS_QUERY = "speed.views"
"""The query of :func:`views_writer`: every view the operator computes."""

DEAD_LETTER = "dead_letter"
"""The kind of a dead letter's input and output row (the others are event types and views)."""

ROLL_UP_KEY, PLATE_KEY, DEAD_LETTER_KEY = "r:", "p:", "d:"
"""What an input row's key begins with: which part of the operator it is for."""

DIAGNOSTIC_KINDS = REASONS
"""The kinds of output row that are entries missing a match (``missing_exit``,
``missing_registration``): what the internal topic carries."""

DIAGNOSTIC_ENTRY_SCHEMA = "event_id string, booth_id string, entry_time timestamp, reason string"
"""An internal-topic record: one entry missing an exit or a registration."""

SWEEP = timedelta(minutes=1)
"""How often, in event time, the roll-up forgets the event ids of entries the
watermark has passed (the copies it drops)."""

MEASURE_CODES = {
    Measure.COUNT: "events",
    Measure.SUM: "sum",
    Measure.MIN: "min",
    Measure.MAX: "max",
}
"""A measure as the operator names it (``Measures.java``)."""

STRING, NUMBER, FLAG = "s", "n", "f"
"""The slot types of the operator's rows (``Input.java``, ``Output.java``)."""


def operators_jar(cache_dir: Path) -> Path:
    """The jar of :data:`OPERATORS_SOURCES`, compiled into ``cache_dir`` if not there yet."""
    return compiled_jar(OPERATORS_SOURCES, cache_dir, "lambdaline-speed-operators")


def _ms(duration: timedelta) -> int:
    return duration // timedelta(milliseconds=1)


OPERATOR_LANES = (Lane.ROLL_UP, Lane.BEST_MATCH, Lane.SESSIONS)


def operator_views(views: tuple[View, ...] = REGISTERED) -> tuple[View, ...]:
    """The registered views the operator computes."""
    return tuple(view for view in views if view.speed.lane in OPERATOR_LANES)


class OperatorPlanError(ValueError):
    """Views the operator cannot compute together (say, roll-ups with no key in common)."""


def _common_key(rules: list[tuple[str, ...]], what: str) -> str:
    shared = [key for key in rules[0] if all(key in keys for keys in rules)]
    if not shared:
        raise OperatorPlanError(f"the {what} views share no key to keep their state by: {rules}")
    return shared[0]


class Layout:
    """How the operator's rows carry the views' columns: which event column is in which
    numbered slot of an input row (per event type: a row is of one), and which output
    slot holds each view column (per view: a row is of one). The configuration the
    operator is handed (:meth:`config`) names slots only; this class names columns."""

    def __init__(self, views: tuple[View, ...]) -> None:
        self.views = operator_views(views)
        self.slots: dict[str, dict[tuple[str, str], int]] = {}
        by_lane = {lane: [v for v in self.views if v.speed.lane is lane] for lane in OPERATOR_LANES}
        self.roll_ups = by_lane[Lane.ROLL_UP]
        self.matches = by_lane[Lane.BEST_MATCH]
        self.sessions = by_lane[Lane.SESSIONS]
        self.roll_up_events = self._one_event_type(self.roll_ups, "roll-up")
        self.roll_up_key = (
            _common_key([self._roll_up(v).keys for v in self.roll_ups], "roll-up")
            if self.roll_ups else None
        )  # fmt: skip
        plate_rules = [self._match(v).keys for v in self.matches] + [
            self._sessions(v).keys for v in self.sessions
        ]
        self.plate_key = (
            _common_key(plate_rules, "best-match and sessions") if plate_rules else None
        )
        self.left = self._one_event_type(self.matches + self.sessions, "best-match and sessions")
        if self.left and self.roll_up_events and self.roll_up_events != self.left:
            raise OperatorPlanError(
                f"the operator's one watermark is on the time of the events it matches "
                f"({self.left}): its roll-up views must read those too, not "
                f"{self.roll_up_events}"
            )
        self.timed_events = self.left or self.roll_up_events
        """The event type whose time is the watermark's (a roll-up's or a best match's
        events; the events a best match looks up have none of their own)."""
        key = self.plate_key
        left_columns = [
            c
            for v in self.matches
            for c in (*v.spec.key, *self._match(v).keys)
            if c not in (key, self._match(v).left_time)
        ]
        self.left_strings = list(dict.fromkeys(left_columns))
        self.families: list[tuple[str, ...]] = list(
            dict.fromkeys(self._roll_up(v).keys[1:] for v in self.roll_ups)
        )

    @staticmethod
    def _roll_up(view: View) -> RollUpRule:
        assert isinstance(view.rule, RollUpRule), view.name
        return view.rule

    @staticmethod
    def _match(view: View) -> BestMatchRule:
        assert isinstance(view.rule, BestMatchRule), view.name
        return view.rule

    @staticmethod
    def _sessions(view: View) -> SessionsRule:
        assert isinstance(view.rule, SessionsRule), view.name
        return view.rule

    @staticmethod
    def _one_event_type(views: list[View], what: str) -> str | None:
        types = {getattr(v.rule, "events", None) or getattr(v.rule, "left", None) for v in views}
        if len(types) > 1:
            raise OperatorPlanError(f"the {what} views read more than one event type: {types}")
        return next(iter(types), None)

    def slot(self, event_type: str, kind: str, column: str) -> int:
        """The input slot of an event column, given one if it has none yet."""
        held = self.slots.setdefault(event_type, {})
        if (kind, column) not in held:
            held[(kind, column)] = sum(1 for k, _ in held if k == kind)
        return held[(kind, column)]

    def count(self, kind: str) -> int:
        return max(
            (sum(1 for k, _ in held if k == kind) for held in self.slots.values()), default=0
        )

    def config(self, sizes: ViewSizes) -> dict[str, Any]:
        """What the operator computes for these sizes (``OperatorConfig.java``)."""
        roll_up = self._roll_up_config(sizes) if self.roll_ups else None
        left = self.left
        left_strings = [self.slot(left, STRING, c) for c in self.left_strings] if left else []
        matches = [self._match_config(v, sizes) for v in self.matches]
        sessions = [self._sessions_config(v, sizes) for v in self.sessions]
        if len(sessions) > 1:
            raise OperatorPlanError("the operator keeps one sessions view per plate")
        family_keys = max(map(len, self.families), default=0)
        outputs = {
            "strings": 2 + len(self.left_strings)
            + max([len(m["right_strings"]) for m in matches] + [family_keys]),
            "longs": 2 + max(
                [len(w["measures"]) for w in (roll_up or {}).get("windows", [])]
                + [len(s["measures"]) for s in sessions] + [0]
            ),
            "flags": max([len(m["right_flags"]) for m in matches] + [0]),
            "lists": 1 if sessions else 0,
        }  # fmt: skip
        inputs = {
            "strings": self.count(STRING),
            "longs": self.count(NUMBER),
            "flags": self.count(FLAG),
            "lists": 0,
        }
        return {
            "slots": {"input": inputs, "output": outputs},
            "roll_up": roll_up,
            "plates": {
                "left": left, "left_strings": left_strings, "matches": matches,
                "sessions": sessions[0] if sessions else None,
            },
            "sweep_ms": _ms(SWEEP),
        }  # fmt: skip

    def _measures(self, event_type: str, measures: tuple[Measured, ...]) -> list[dict[str, Any]]:
        return [
            {"measure": MEASURE_CODES[m.measure],
             "input": -1 if m.of is None else self.slot(event_type, NUMBER, m.of)}
            for m in measures
        ]  # fmt: skip

    def _roll_up_config(self, sizes: ViewSizes) -> dict[str, Any]:
        events = self.roll_up_events
        assert events is not None
        families: list[dict[str, Any]] = [
            {"keys": [self.slot(events, STRING, k) for k in keys], "measures": []}
            for keys in self.families
        ]
        windows: list[dict[str, Any]] = []
        for view in self.roll_ups:
            rule = self._roll_up(view)
            family = self.families.index(rule.keys[1:])
            held = families[family]["measures"]
            chosen = []
            for measure in self._measures(events, rule.measures):
                if measure not in held:
                    held.append(measure)
                chosen.append(held.index(measure))
            size, slide = rule.window(sizes)
            windows.append({
                "view": view.name, "family": family, "size_ms": _ms(size), "slide_ms": _ms(slide),
                "measures": chosen,
            })  # fmt: skip
        bucket = math.gcd(*(w["size_ms"] for w in windows), *(w["slide_ms"] for w in windows))
        return {"bucket_ms": bucket, "families": families, "windows": windows}

    def _right_columns(self, view: View) -> tuple[list[str], list[str]]:
        """A match's right strings and flags, as event columns (``event_id``: the id)."""
        rule = self._match(view)
        flags = [e for c, e in rule.carries.items() if view.spec.type_of(c) is ColumnType.FLAG]
        strings = [k for k in rule.keys if k != self.plate_key]
        strings += [e for e in rule.carries.values() if e != rule.right_time and e not in flags]
        return list(dict.fromkeys(strings)), flags

    def _match_config(self, view: View, sizes: ViewSizes) -> dict[str, Any]:
        rule, rank = self._match(view), view.spec.candidates
        assert rank is not None
        strings, flags = self._right_columns(view)
        start, end = rule.interval(sizes)
        event_of = {c: e for c, e in rule.carries.items()}
        order = [
            -1 if event_of[c] == rule.right_time else strings.index(event_of[c]) for c in rank.rank
        ]
        shown = -1 if rank.shown_if is None else flags.index(event_of[rank.shown_if])
        return {
            "view": view.name, "right": rule.right,
            "right_strings": [-1 if c == "event_id" else self.slot(rule.right, STRING, c)
                              for c in strings],
            "right_flags": [self.slot(rule.right, FLAG, c) for c in flags],
            "equal": [[self.left_strings.index(k), strings.index(k)]
                      for k in rule.keys if k != self.plate_key],
            "from_ms": _ms(start), "to_ms": _ms(end), "order": order,
            "best": "max" if rank.best is Aggregate.MAX else "min",
            "shown_if": shown, "missing": rule.missing,
        }  # fmt: skip

    def _sessions_config(self, view: View, sizes: ViewSizes) -> dict[str, Any]:
        rule = self._sessions(view)
        [listed] = rule.lists.values()
        return {
            "view": view.name, "gap_ms": _ms(sizes[rule.gap.name]),
            "measures": self._measures(rule.events, rule.measures),
            "list": self.slot(rule.events, STRING, listed),
        }  # fmt: skip

    # -- the input rows

    def input(self, decoded: DataFrame, watermark: timedelta, sizes: ViewSizes) -> DataFrame:
        """The operator's input rows (``Input.java``) from ``decode_together``'s: an event once
        per part that reads it (a roll-up's row keyed by its group, a plate's by its plate),
        a dead letter once; ``event_time``, the watermark's column, is the time of a left
        event's plate row and null on every other."""
        self.config(sizes)  # gives every column it reads a slot
        event_type = F.col("event_type")
        types = [TOLL_ENTRY, TOLL_EXIT, VEHICLE_REGISTRATION]
        kind = F.lit(DEAD_LETTER)
        for event in reversed(types):
            kind = F.when(event_type == event.name, F.lit(event.name)).otherwise(kind)
        keys: Column = F.array(F.lit(DEAD_LETTER_KEY))
        for event in types:
            parts = []
            if event.name == self.roll_up_events and self.roll_up_key:
                parts.append(F.concat(F.lit(ROLL_UP_KEY), F.col(self.roll_up_key)))
            rights = {self._match(v).right for v in self.matches}
            if self.plate_key and (event.name == self.left or event.name in rights):
                parts.append(F.concat(F.lit(PLATE_KEY), F.col(self.plate_key)))
            keys = (
                F.when(event_type == event.name, F.array(*parts)).otherwise(keys) if parts else keys
            )
        time = F.coalesce(*(F.col(event.time_field) for event in types))
        dead = kind == DEAD_LETTER
        slotted = [
            self._slot_column(decoded, slot_kind, n).alias(f"{slot_kind}{n}")
            for slot_kind in (STRING, NUMBER, FLAG)
            for n in range(self.count(slot_kind))
        ]
        timed = next((e for e in types if e.name == self.timed_events), None)
        rows = decoded.select(
            kind.alias("kind"), keys.alias("_keys"), F.unix_millis(time).alias("time_ms"),
            F.col("event_id").alias("id"),
            (F.col(timed.time_field) if timed else F.lit(None).cast("timestamp")).alias("_time"),
            *slotted,
            F.when(dead, F.col("key")).alias("dead_key"),
            F.when(dead, dead_letter_value()).alias("dead_value"),
        )  # fmt: skip
        exploded = rows.select(F.explode("_keys").alias("key"), "*").drop("_keys")
        # every part's copy of a timed event carries its time, so that Spark drops each
        # copy of a late one (counted) and the parts take the same events
        return (
            exploded.withColumn("event_time", F.when(F.col("kind") == (timed.name if timed else ""),
                                                     F.col("_time")))
            .drop("_time")
            .withWatermark("event_time", f"{int(watermark.total_seconds())} seconds")
        )  # fmt: skip

    def _slot_column(self, decoded: DataFrame, slot_kind: str, n: int) -> Column:
        types = dict(decoded.dtypes)
        chosen: Column = F.lit(None)
        for event_type, held in self.slots.items():
            for (kind, column), at in held.items():
                if kind == slot_kind and at == n:
                    value = _as_slot(F.col(column), types[column], slot_kind)
                    chosen = F.when(F.col("event_type") == event_type, value).otherwise(chosen)
        target = {STRING: "string", NUMBER: "long", FLAG: "boolean"}[slot_kind]
        return chosen.cast(target)

    # -- the output rows

    def columns(self, view: View) -> dict[str, Column]:
        """A view's columns from the operator's output slots (``Output.java``), typed."""
        spec = view.spec

        def typed(name: str, slot: str) -> Column:
            return _from_slot(F.col(slot), spec.type_of(name))

        found: dict[str, Column] = {}
        if view.speed.lane is Lane.ROLL_UP:
            rule = self._roll_up(view)
            for n, key in enumerate(rule.keys):
                found[key] = typed(key, f"s{n}")
            found[rule.start], found[rule.end] = typed(rule.start, "n0"), typed(rule.end, "n1")
            for n, m in enumerate(rule.measures):
                found[m.column] = typed(m.column, f"n{2 + n}")
        elif view.speed.lane is Lane.SESSIONS:
            rule_s = self._sessions(view)
            found[rule_s.keys[0]] = typed(rule_s.keys[0], "s0")
            found[rule_s.start], found[rule_s.end] = (
                typed(rule_s.start, "n0"),
                typed(rule_s.end, "n1"),
            )
            for n, m in enumerate(rule_s.measures):
                found[m.column] = typed(m.column, f"n{2 + n}")
            [listed] = rule_s.lists
            found[listed] = F.col("l0")
        else:
            rule_m = self._match(view)
            found.update(self._left_columns(view, rule_m.left_time))
            strings, flags = self._right_columns(view)
            after = 2 + len(self.left_strings)
            for column, event in rule_m.carries.items():
                if event == rule_m.right_time:
                    found[column] = typed(column, "n1")
                elif event in flags:
                    found[column] = typed(column, f"f{flags.index(event)}")
                else:
                    found[column] = typed(column, f"s{after + strings.index(event)}")
            for name, make in rule_m.derived.items():
                found[name] = make(lambda column: found[column])
        return {name: value.alias(name) for name, value in found.items()}

    def _left_columns(self, view: View, left_time: str) -> dict[str, Column]:
        spec = view.spec
        found = {left_time: _from_slot(F.col("n0"), ColumnType.INSTANT)}
        if self.plate_key:
            found[self.plate_key] = F.col("s0")
        for n, column in enumerate(self.left_strings):
            found[column] = _from_slot(F.col(f"s{1 + n}"), spec.type_of(column))
        found["event_id"] = F.col(f"s{1 + len(self.left_strings)}")
        return found

    def records(self, found: DataFrame, settings: Settings) -> DataFrame:
        """The Kafka records (topic, key, value) of the operator's output rows: each view's to
        its speed-store topic, entries missing a match to the internal topic, dead letters to
        ``dead.letters``."""
        kind = F.col("kind")
        by_kind: list[tuple[Column, str, Column, Column]] = []
        for view in self.views:
            columns = self.columns(view)
            by_kind.append((
                kind == view.name, settings.speed_topics.speed(view.name),
                record_key(view.spec, columns), record_value(view.spec, F.col("version"), columns),
            ))  # fmt: skip
        if self.matches:
            left = self._left_columns(self.matches[0], self._match(self.matches[0]).left_time)
            # the internal topic's record (DIAGNOSTIC_ENTRY_SCHEMA)
            diagnostic = F.struct(
                left["event_id"].alias("event_id"), left["booth_id"].alias("booth_id"),
                left[self._match(self.matches[0]).left_time].alias("entry_time"),
                kind.alias("reason"),
            )  # fmt: skip
            by_kind.append((
                kind.isin(*DIAGNOSTIC_KINDS), settings.speed_topics.diagnostic_entries,
                F.col("s0"), F.to_json(diagnostic, JSON_OPTIONS),
            ))  # fmt: skip
        by_kind.append(
            (
                kind == DEAD_LETTER,
                settings.topics.dead_letters,
                F.col("dead_key"),
                F.col("dead_value"),
            )
        )

        def case(part: int) -> Column:
            chosen: Column = F.lit(None)
            for condition, topic, key, value in reversed(by_kind):
                picked = (F.lit(topic), key.cast("binary"), value)[part]
                chosen = F.when(condition, picked).otherwise(chosen)
            return chosen

        return found.select(
            case(0).alias("topic"), case(1).alias("key"), case(2).cast("string").alias("value")
        )


def _as_slot(column: Column, dtype: str, slot_kind: str) -> Column:
    """An event column as a slot holds it: money in cents, instants in epoch milliseconds."""
    if slot_kind != NUMBER:
        return column
    if dtype.startswith("decimal"):
        return (column * 100).cast("long")
    if dtype.startswith("timestamp"):
        return F.unix_millis(column)
    return column.cast("long")


def _from_slot(column: Column, column_type: ColumnType) -> Column:
    """A slot's value as a view column of this type."""
    if column_type is ColumnType.INSTANT:
        return F.timestamp_millis(column)
    if column_type is ColumnType.MONEY:
        return (column.cast("decimal(20,0)") / 100).cast(MONEY_TOTAL)
    if column_type is ColumnType.COUNT:
        return column.cast("long")
    return column


def operator_config(sizes: ViewSizes, views: tuple[View, ...] = REGISTERED) -> dict[str, Any]:
    """What the operator computes for these views and sizes (``OperatorConfig.java``)."""
    return Layout(views).config(sizes)


def operator_input(
    decoded: DataFrame, watermark: timedelta, sizes: ViewSizes, views: tuple[View, ...] = REGISTERED
) -> DataFrame:
    """The operator's input rows for these views (:meth:`Layout.input`)."""
    return Layout(views).input(decoded, watermark, sizes)


def apply_operator(rows: DataFrame, config: dict[str, Any]) -> DataFrame:
    """``SpeedOperator`` over :func:`operator_input` rows. The session must have
    :func:`operators_jar` on its classpath (``speed_layer.job.speed_spark_session``)."""
    spark = rows.sparkSession
    operator = spark.sparkContext._jvm.lambdaline.speed.SpeedOperator  # type: ignore[union-attr]
    return DataFrame(operator.apply(rows._jdf, json.dumps(config)), spark)


def operator_records(
    found: DataFrame, settings: Settings, views: tuple[View, ...] = REGISTERED
) -> DataFrame:
    """The Kafka records of the operator's output rows (:meth:`Layout.records`)."""
    return Layout(views).records(found, settings)


def views_writer(rows: DataFrame, settings: Settings) -> DataStreamWriter:
    """The operator's query: its records to Kafka (not started; add the trigger)."""
    found = apply_operator(rows, operator_config(settings.views.sizes))
    return (
        operator_records(found, settings)
        .writeStream.queryName(VIEWS_QUERY)
        .outputMode("append")
        .format("kafka")
        .options(**kafka_sink_options(settings.kafka))
        .option("checkpointLocation", str(checkpoint_dir(settings) / "views"))
    )


def diagnostic_counts(spark: SparkSession, settings: Settings) -> DataFrame:
    """``diagnostics``: the internal topic's entries counted per booth, window and reason.

    The internal topic is written at least once: a micro-batch of the operator that is
    replayed after a crash (its records written, its commit not) writes its entries
    again. So the count drops copies (same ``event_id`` and reason) within its
    watermark, as the views drop duplicate events.

    The watermark is on entry_time, and its delay is the longest a best match takes to
    decide (its interval's end after the entry, ``decided_within``) + the watermark: an
    entry's missing registration is decided once the operator's watermark passes its
    entry_time, its missing exit only once it passes the end of the trip's interval, so
    the count sees entries that far apart in entry_time, and with a shorter delay it
    would drop the missing exits as late. The delay only keeps state longer: in update mode a
    count is written as it changes.
    """
    delay = decided_within(settings.views.sizes) + settings.views.watermark
    entries = (
        kafka_stream(spark, settings.kafka, [settings.speed_topics.diagnostic_entries])
        .load()
        .select(
            F.from_json(F.col("value").cast("string"), DIAGNOSTIC_ENTRY_SCHEMA, JSON_OPTIONS).alias(
                "entry"
            )
        )
        .select("entry.*")
        .withWatermark("entry_time", f"{int(delay.total_seconds())} seconds")
        .dropDuplicatesWithinWatermark(["event_id", "reason"])
    )
    return count_diagnostics(entries, settings.views.sizes)
