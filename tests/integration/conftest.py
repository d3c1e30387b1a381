"""A real embedded Kafka broker for the integration tests: one per test session.

It runs on free ports with its own state folder and is stopped (by pid) at the end.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from lambdaline import kafka_broker
from lambdaline.topics import create_topics
from shared.settings import Settings


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def broker_settings(state_dir: Path) -> Settings:
    return Settings(
        state_dir=state_dir,
        kafka_bootstrap=f"127.0.0.1:{free_port()}",
        kafka_controller_port=free_port(),
        kafka_heap="512m",
    )


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """Settings pointing at a running broker with every lambdaline topic created."""
    settings = broker_settings(tmp_path_factory.mktemp("kafka-state"))
    kafka_broker.start(settings)
    try:
        create_topics(settings)
        yield settings
    finally:
        kafka_broker.stop(settings)
