"""A consumer that cannot reach its cluster leaves no network thread behind (no broker needed)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from kafka.errors import KafkaTimeoutError

from lambdaline.kafka_broker import free_port
from shared.kafka_admin import kafka_consumer
from shared.settings import Settings


def network_threads(client_id: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"kafka-io-{client_id}" and t.is_alive()]


def test_a_consumer_that_cannot_bootstrap_stops_its_network_thread(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path, kafka_bootstrap=f"127.0.0.1:{free_port()}")
    for _ in range(3):  # a caller that retries, as the API's speed consumer does
        with pytest.raises(KafkaTimeoutError, match="Unable to bootstrap"):
            kafka_consumer(settings, "lambdaline-test-retry", bootstrap_timeout_ms=300)
    assert network_threads("lambdaline-test-retry") == []
