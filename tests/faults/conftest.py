"""The fault-injection suite's shared parts: a Kafka cluster of three brokers for the
session, and how many times each fault is injected (``FAULTS_FULL=1``: the full counts).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from lambdaline.kafka_broker import ephemeral_broker
from shared.platform.topic_admin import create_topics
from shared.settings import Settings

FULL = os.environ.get("FAULTS_FULL") == "1"


def times(reduced: int, full: int) -> int:
    """How many times a case injects its fault: ``reduced`` in CI, ``full`` with FAULTS_FULL=1."""
    return full if FULL else reduced


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """A running cluster of three brokers with every lambdaline topic (replication 3)."""
    folder = tmp_path_factory.mktemp("faults-kafka")
    with ephemeral_broker(folder, brokers=3, kafka_heap="512m") as settings:
        create_topics(settings)
        yield settings
