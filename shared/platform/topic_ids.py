"""Which input topics a checkpoint read: their Kafka ids, recorded and checked at each start.

Spark's Kafka source keeps offsets per topic name and partition, not per topic.
When a topic is deleted and created again, it notices only if the new topic's
end offsets are below the checkpoint's (``failOnDataLoss``: "offset was changed
from 5 to 1"). If the new topic has been given more records than the checkpoint
read of the old one before the job starts again, Spark goes on from the old
offsets and skips the new topic's records below them, without an error (five
entries read, the topics created again with eight: the next run counts the last
three). Kafka gives each topic an id that a topic created
again does not share (KIP-516), so each layer records the ids beside its
checkpoint and refuses to start when one has changed (:func:`recreated`).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from typing import NamedTuple

from kafka.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError

from shared.platform.kafka_admin import admin_client, describe_present, unreachable
from shared.settings import KafkaSettings

FILE_NAME = "input_topic_ids.json"
"""The file beside (or in) a checkpoint that holds the ids of the topics it reads."""


class TopicsRecreatedError(Exception):
    """An input topic is not the one a checkpoint read; the message says which and what to do."""


class Recreated(NamedTuple):
    topic: str
    then: str
    now: str


def current(kafka: KafkaSettings, topics: Collection[str]) -> dict[str, str]:
    """The id of each of ``topics`` that exists and has one (a broker before 2.8 gives none).

    Raises KafkaUnreachableError if the cluster does not answer.
    """
    try:
        admin = admin_client(kafka, client_id="lambdaline-check")
        try:
            described = describe_present(admin, topics)
        finally:
            admin.close()
    except (KafkaConnectionError, KafkaTimeoutError, KafkaError) as error:
        raise unreachable(kafka, error) from None
    return {name: str(facts.topic_id) for name, facts in described.items() if facts.topic_id}


def recreated(recorded: Mapping[str, str], now: Mapping[str, str]) -> list[Recreated]:
    """The topics whose id differs between what a checkpoint recorded and what Kafka says now.

    A topic missing from either side is not counted: one the checkpoint did not
    record yet is recorded next, and a missing topic is for the caller's check of
    the cluster to name.
    """
    return [
        Recreated(topic, recorded[topic], now[topic])
        for topic in sorted(recorded.keys() & now.keys())
        if recorded[topic] != now[topic]
    ]


def require_same(recorded: Mapping[str, str], now: Mapping[str, str], checkpoint: str) -> None:
    """Raise :class:`TopicsRecreatedError` if a topic's id differs between what
    ``checkpoint`` (described for the message) recorded and what Kafka says now."""
    if changed := recreated(recorded, now):
        which = ", ".join(f"{item.topic} (id {item.then}, now {item.now})" for item in changed)
        raise TopicsRecreatedError(
            f"input topics were deleted and created again since {checkpoint} first read them: "
            f"{which}. Spark would go on from the old topics' offsets and skip the new "
            "topics' records below them without an error"
        )


def claim(recorded: str | None, now: Mapping[str, str], where: str, checkpoint: str) -> str | None:
    """Check a checkpoint's record of ids (the text of its file at ``where``, None if
    it has none) against ``now``; return the text to record for a checkpoint without one.

    Raises ValueError for a record that cannot be read and :class:`TopicsRecreatedError`
    (see :func:`require_same`) for a changed id. A checkpoint without a record is new:
    it records the ids it starts with.
    """
    if recorded is None:
        return render(now)
    require_same(parse(recorded, where), now, checkpoint)
    return None


def parse(text: str, where: str) -> dict[str, str]:
    """The ids a checkpoint recorded, from the file's text; ValueError naming ``where``."""
    try:
        ids = json.loads(text)
        if not isinstance(ids, dict) or not all(isinstance(v, str) for v in ids.values()):
            raise ValueError("not an object of topic names to ids")
    except ValueError as error:
        raise ValueError(
            f"cannot read {where} ({error}); it holds the ids of the input topics the "
            'checkpoint read, as JSON, e.g. {"toll.entries": "…"}'
        ) from None
    return ids


def render(ids: Mapping[str, str]) -> str:
    return json.dumps(dict(sorted(ids.items())), indent=2) + "\n"
