"""The topics lambdaline reads and writes, by role, and the names of the speed queries.

The input topics carry one event type each; ``dead.letters`` is an append-only
log of the records validation refused. The speed store is one compacted topic
per view, ``<speed_prefix><view>``, keyed by the view key, beside
``speed.progress`` (one record per speed micro-batch) and the speed layer's
internal topic. A deployment may rename any of them (``Settings.topics``); the
defaults are the contract's names.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass

from shared.domain.events import EVENT_TYPES, EventType

DIAGNOSTIC_ENTRIES = "internal.diagnostic_entries"
"""The speed layer's internal topic (after the speed prefix) between its operator's
entries missing a match and its ``diagnostics`` counts (see speed_layer/operator.py)."""

DERIVED_QUERY_PREFIX = "speed.derived."
"""Names the speed queries that read the speed layer's own internal topics, not the
input topics: their watermarks trail the input's and do not count towards the
speed watermark the serving layer publishes."""

TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
"""What Kafka accepts as a topic name."""


def check_topic_name(value: str) -> str:
    """``value`` if Kafka accepts it as a topic name (or prefix); else ValueError."""
    if not TOPIC_NAME.fullmatch(value):
        raise ValueError(f"{value!r} is not a valid Kafka topic name")
    return value


@dataclass(frozen=True)
class Topics:
    """Kafka topic names by role. Speed-store topics are ``<speed_prefix><view name>``.

    A plain value: the settings read it (``shared.settings.TopicNames``, the same
    fields, each checked where it is given)."""

    entries: str = "toll.entries"
    exits: str = "toll.exits"
    registrations: str = "vehicle.registrations"
    dead_letters: str = "dead.letters"
    speed_prefix: str = "speed."
    speed_progress: str = "speed.progress"

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            check_topic_name(getattr(self, field.name))

    def of(self, event_type: EventType) -> str:
        """The topic that carries this event type."""
        return str(getattr(self, event_type.topic_role))

    def inputs(self, event_types: tuple[EventType, ...] = EVENT_TYPES) -> list[str]:
        """The topics of these event types (default: every input topic)."""
        return [self.of(event_type) for event_type in event_types]

    def speed(self, view_name: str) -> str:
        """The speed-store topic of a view (or of the internal :data:`DIAGNOSTIC_ENTRIES`)."""
        return f"{self.speed_prefix}{view_name}"

    @property
    def diagnostic_entries(self) -> str:
        return self.speed(DIAGNOSTIC_ENTRIES)

    def of_generation(self, generation: int) -> Topics:
        """The topics a generation of the views writes (``lambdaline generation``): the
        first generation's are these; generation N's speed store, progress and internal
        topic are ``<speed_prefix>gN.<view>``, ``<speed_progress>.gN`` and
        ``<speed_prefix>gN.internal.diagnostic_entries``. The inputs and
        ``dead.letters`` are every generation's."""
        if generation < 1:
            raise ValueError(f"a generation is numbered from 1, not {generation}")
        if generation == 1:
            return self
        return dataclasses.replace(
            self,
            speed_prefix=f"{self.speed_prefix}g{generation}.",
            speed_progress=f"{self.speed_progress}.g{generation}",
        )

    def speed_store(self, views: Iterable[str]) -> list[str]:
        """Every topic the speed job writes its state of the views to: the views' own, its
        progress reports and its internal topic (not ``dead.letters``, an append-only log),
        for the views named.

        They hold the output of one checkpoint; ``lambdaline speed reset`` deletes them
        with it (speed_layer/checkpoint.py says why they go together)."""
        return [
            *(self.speed(view) for view in views),
            self.speed_progress,
            self.diagnostic_entries,
        ]
