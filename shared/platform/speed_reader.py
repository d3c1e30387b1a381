"""Reading the speed store into :class:`SpeedTables`: each poll's records applied, and
the whole store read once to its end (what a batch run compares its rows with).

The API's consumer (``serving.speed_consumer``) follows the store for good and
applies each poll with :func:`apply_polled`; :func:`read_speed_store` reads it
once, to the end offsets it found, with the same function.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kafka import TopicPartition
from kafka.consumer.fetcher import ConsumerRecord

from shared.platform.kafka_admin import (
    KafkaTopicsMissingError,
    kafka_consumer,
    records_to_end,
)
from shared.platform.speed_tables import BadSpeedRecordError, ChangedRow, SpeedTables
from shared.settings import Settings
from shared.settings.views import VIEW_NAMES

Rejected = Callable[[ConsumerRecord, str], None]
"""Told of a record skipped as not a row of its view (or not a progress report), and why."""


Changed = Callable[[str, list[ConsumerRecord], list[ChangedRow]], None]
"""Told the view, the records applied and the rows they changed (each naming its record)."""


def apply_polled(
    tables: SpeedTables,
    views_by_topic: Mapping[str, str],
    records: list[ConsumerRecord],
    rejected: Rejected | None = None,
    changed: Changed | None = None,
) -> list[dict[str, Any]]:
    """Apply polled records of one topic (of one or more of its partitions): rows of a
    ``speed.<view>`` topic (a topic of ``views_by_topic``), else progress reports.
    Returns the progress reports read; ``changed`` is told the rows that changed."""
    if not records:
        return []
    view = views_by_topic.get(records[0].topic)
    if view is not None:

        def reject(position: int, why: str) -> None:
            if rejected is not None:
                rejected(records[position], why)

        pairs = ((r.key, r.value) for r in records)
        if changed is None:
            tables.apply(view, pairs, reject)
        else:
            changed(view, records, tables.apply_changed(view, pairs, reject))
        return []
    reports = []
    for record in records:
        try:
            reports.append(tables.note_progress(record.value))
        except BadSpeedRecordError as error:
            if rejected is not None:
                rejected(record, str(error))
    return reports


def read_speed_store(
    settings: Settings, views: Sequence[str] = VIEW_NAMES, timeout_s: float = 300.0
) -> SpeedTables:
    """The speed store as it is now: the ``speed.<view>`` topics of ``views`` and
    ``speed.progress`` read from the start to the end offsets found at the start.

    Raises ``KafkaTopicsMissingError`` if a topic is missing, ``TimeoutError`` if
    the end is not reached within ``timeout_s``, and Kafka's errors if the cluster
    cannot be reached.
    """
    views_by_topic = {settings.speed_topics.speed(view): view for view in views}
    topics = [*views_by_topic, settings.speed_topics.speed_progress]
    tables = SpeedTables(views=settings.views)
    consumer = kafka_consumer(
        settings.kafka, "lambdaline-speed-reader", group_id=None, auto_offset_reset="earliest"
    )
    try:
        found = {topic: consumer.partitions_for_topic(topic) for topic in topics}
        if missing := [topic for topic, numbers in found.items() if not numbers]:
            raise KafkaTopicsMissingError(settings.kafka.bootstrap, missing)
        partitions = [
            TopicPartition(topic, number)
            for topic, numbers in found.items()
            for number in sorted(numbers or ())
        ]
        for records in records_to_end(consumer, partitions, timeout_s):
            apply_polled(tables, views_by_topic, records)
    except BaseException:
        tables.close()
        raise
    finally:
        consumer.close()
    return tables
