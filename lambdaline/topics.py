"""Create lambdaline's topics on the configured Kafka cluster, idempotently."""

from __future__ import annotations

from dataclasses import dataclass

from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError

from shared.kafka_admin import admin_client, partition_counts
from shared.settings import Settings
from shared.topics import TopicSpec, all_topics


@dataclass(frozen=True)
class TopicOutcome:
    spec: TopicSpec
    created: bool
    partitions: int
    """On the cluster: an existing topic keeps its own count, whatever the settings say."""


def create_topics(settings: Settings) -> list[TopicOutcome]:
    """Create every topic that does not exist yet; existing topics are left as they are."""
    admin = admin_client(settings, client_id="lambdaline-topics")
    try:
        specs = all_topics(settings)
        existing = partition_counts(admin, [spec.name for spec in specs])
        replication = min(3, len(admin.describe_cluster()["brokers"]))
        outcomes = []
        for spec in specs:
            created = False
            if spec.name not in existing:
                new_topic = NewTopic(
                    name=spec.name,
                    num_partitions=spec.partitions,
                    replication_factor=replication,
                    topic_configs=spec.config,
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
