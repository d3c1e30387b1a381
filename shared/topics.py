"""Every Kafka topic lambdaline uses, and how each is configured.

The input topics and ``dead.letters`` are plain append-only logs, kept for
``input_retention`` (default: forever). Kafka ages records by their timestamps,
which the generator sets to simulated time, and the batch layer's ingest reads
these topics, so a short retention would silently lose history. The speed
store is one compacted topic per view, ``speed.<view>``: keyed by the view key,
so compaction keeps the latest row per key, with ``delete`` as well so a key the
batch layer has long taken over ages out after ``speed_retention``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shared.events import EVENT_TYPES
from shared.settings import Settings
from shared.views import VIEW_KEYS

VIEW_NAMES: tuple[str, ...] = tuple(VIEW_KEYS)
"""The views of DESIGN.md; each has a speed-store topic and a batch-store table."""


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    config: dict[str, str] = field(default_factory=dict)


def input_topics(settings: Settings) -> list[str]:
    return [event_type.topic(settings.topics) for event_type in EVENT_TYPES]


def speed_topic(settings: Settings, view_name: str) -> str:
    return f"{settings.topics.speed_prefix}{view_name}"


DERIVED_QUERY_PREFIX = "speed.derived."
"""Names the speed queries that read the speed layer's own internal topics, not the
input topics: their watermarks trail the input's and do not count towards the
speed watermark the serving layer publishes."""

DIAGNOSTIC_ENTRIES = "internal.diagnostic_entries"
"""The speed layer's internal topic between its per-entry lookups and its
``diagnostics`` counts (see speed_layer/lookups.py)."""


def speed_store_topics(settings: Settings) -> list[str]:
    """Every topic the speed job writes its state of the views to: the views' own, its
    progress reports and its internal topic (not ``dead.letters``, an append-only log).

    They hold the output of one checkpoint; ``lambdaline speed reset`` deletes them
    with it (speed_layer/checkpoint.py says why they go together)."""
    return [
        *(speed_topic(settings, view) for view in VIEW_NAMES),
        settings.topics.speed_progress,
        speed_topic(settings, DIAGNOSTIC_ENTRIES),
    ]


def all_topics(settings: Settings) -> list[TopicSpec]:
    """The topics `lambdaline topics create` makes, in a stable order."""
    partitions = settings.kafka_partitions
    retention_ms = str(int(settings.speed_retention.total_seconds() * 1000))
    speed_config = {"cleanup.policy": "compact,delete", "retention.ms": retention_ms}
    kept = settings.input_retention
    input_config = {"retention.ms": "-1" if kept is None else str(int(kept.total_seconds() * 1000))}
    topics = [TopicSpec(name, partitions, input_config) for name in input_topics(settings)]
    topics.append(TopicSpec(settings.topics.dead_letters, partitions, input_config))
    topics += [
        TopicSpec(speed_topic(settings, view), partitions, speed_config) for view in VIEW_NAMES
    ]
    topics.append(TopicSpec(settings.topics.speed_progress, 1, speed_config))
    internal_config = {"retention.ms": retention_ms}
    topics.append(TopicSpec(speed_topic(settings, DIAGNOSTIC_ENTRIES), partitions, internal_config))
    return topics
