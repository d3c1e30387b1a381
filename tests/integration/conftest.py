"""A real embedded Kafka broker for the integration tests: one per test session.

It runs on free ports with its own state folder and is stopped (by pid) at the end.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lambdaline.kafka_broker import ephemeral_broker, free_port
from shared.platform.topic_admin import create_topics
from shared.settings import Settings


def broker_settings(state_dir: Path) -> Settings:
    """Settings for a broker of a test's own (started by the test), on free ports."""
    return Settings(
        state_dir=state_dir,
        kafka_bootstrap=f"127.0.0.1:{free_port()}",
        kafka_controller_port=free_port(),
        kafka_heap="512m",
    )


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """Settings pointing at a running broker with every lambdaline topic created."""
    with ephemeral_broker(tmp_path_factory.mktemp("kafka-state"), kafka_heap="512m") as settings:
        create_topics(settings)
        yield settings
