"""Create lambdaline's topics on the configured Kafka cluster (idempotently), and delete some.

The command line creates them (`lambdaline topics create`); the speed layer's
reset deletes its store's topics and creates them again empty.

The input topics and ``dead.letters`` are plain append-only logs, kept for
``input_retention`` (default: forever). Kafka ages records by their timestamps,
which the generator sets to simulated time, and the batch layer's ingest reads
these topics, so a short retention would silently lose history. The speed
store's topics are compacted, keeping the latest row per view key, with
``delete`` as well so a key the batch layer has long taken over ages out after
``speed_retention``.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from kafka.admin import NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError

from shared.platform.kafka_admin import admin_client, partition_counts
from shared.settings import KafkaSettings, Settings
from shared.settings.views import VIEW_NAMES


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    config: dict[str, str] = field(default_factory=dict)


def all_topics(settings: Settings) -> list[TopicSpec]:
    """The topics `lambdaline topics create` makes, in a stable order: the inputs,
    `dead.letters`, and the speed store of the settings' generation."""
    topics, partitions = settings.speed_topics, settings.kafka.partitions
    retention_ms = str(int(settings.speed.retention.total_seconds() * 1000))
    speed_config = {"cleanup.policy": "compact,delete", "retention.ms": retention_ms}
    kept = settings.kafka.input_retention
    input_config = {"retention.ms": "-1" if kept is None else str(int(kept.total_seconds() * 1000))}
    specs = [TopicSpec(name, partitions, input_config) for name in topics.inputs()]
    specs.append(TopicSpec(topics.dead_letters, partitions, input_config))
    specs += [TopicSpec(topics.speed(view), partitions, speed_config) for view in VIEW_NAMES]
    specs.append(TopicSpec(topics.speed_progress, 1, speed_config))
    specs.append(TopicSpec(topics.diagnostic_entries, partitions, {"retention.ms": retention_ms}))
    return specs


def replication(brokers: int) -> tuple[int, int]:
    """(replication factor, min.insync.replicas) of a topic on a cluster of that many brokers.

    Three copies, two of them needed for a write (with ``acks=all``), from three
    brokers on: a broker may then die without an acknowledged record being lost or
    writes stopping. Fewer brokers cannot give both, so a write needs one copy.
    """
    factor = min(3, brokers)
    return factor, 2 if factor >= 3 else 1


@dataclass(frozen=True)
class TopicOutcome:
    spec: TopicSpec
    created: bool
    partitions: int
    """On the cluster: an existing topic keeps its own count, whatever the settings say."""


def create_topics(settings: Settings, extra: Sequence[TopicSpec] = ()) -> list[TopicOutcome]:
    """Create every topic (:func:`all_topics`, and ``extra`` ones) that does not exist yet;
    existing topics are left as they are."""
    admin = admin_client(settings.kafka, client_id="lambdaline-topics")
    try:
        specs = [*all_topics(settings), *extra]
        existing = partition_counts(admin, [spec.name for spec in specs])
        factor, min_isr = replication(len(admin.describe_cluster()["brokers"]))
        outcomes = []
        for spec in specs:
            created = False
            if spec.name not in existing:
                new_topic = NewTopic(
                    name=spec.name,
                    num_partitions=spec.partitions,
                    replication_factor=factor,
                    topic_configs={"min.insync.replicas": str(min_isr), **spec.config},
                )
                try:
                    admin.create_topics([new_topic])
                    created = True
                except TopicAlreadyExistsError:  # created meanwhile by someone else
                    pass
            partitions = existing.get(spec.name, spec.partitions)
            outcomes.append(TopicOutcome(spec, created, partitions))
        return outcomes
    finally:
        admin.close()


class TopicDeletionError(Exception):
    """Topics could not be deleted; the message names them and the cluster's answer."""


def delete_topics(kafka: KafkaSettings, topics: Collection[str]) -> list[str]:
    """Delete those of ``topics`` that exist and wait until the cluster no longer lists
    them (at most ``kafka_timeout``); returns the names deleted.

    Kafka deletes a topic's data in the background; a topic of the same name
    created afterwards is a new topic, with an id of its own and its offsets from 0.
    """
    admin = admin_client(kafka, client_id="lambdaline-topics")
    try:
        present = sorted(set(admin.list_topics()) & set(topics))
        if not present:
            return []
        try:
            answer = admin.delete_topics(present)
        except KafkaError as error:
            raise TopicDeletionError(
                f"{kafka.bootstrap} refused to delete {', '.join(present)}: {error}"
            ) from None
        failed = [
            f"{topic['name']} ({topic.get('error_message') or topic['error_code']})"
            for topic in answer.get("topics", [])
            if topic.get("error_code")
        ]
        if failed:
            raise TopicDeletionError(
                f"{kafka.bootstrap} did not delete {', '.join(failed)} (is "
                "delete.topic.enable off on the brokers, or is the user not allowed to?)"
            )
        deadline = time.monotonic() + kafka.timeout.total_seconds()
        while left := sorted(set(admin.list_topics()) & set(present)):
            if time.monotonic() > deadline:
                raise TopicDeletionError(
                    f"{kafka.bootstrap} still lists {', '.join(left)} "
                    f"{kafka.timeout.total_seconds():g} s after deleting them"
                )
            time.sleep(0.2)
        return present
    finally:
        admin.close()
