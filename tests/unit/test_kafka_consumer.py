"""A consumer that cannot reach its cluster leaves no network thread behind (no broker needed)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from kafka.errors import KafkaTimeoutError

from lambdaline.kafka_broker import free_port
from shared.platform.kafka_admin import kafka_consumer
from shared.settings import Settings


def network_threads(client_id: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"kafka-io-{client_id}" and t.is_alive()]


def test_a_consumer_that_cannot_bootstrap_stops_its_network_thread(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path, kafka_bootstrap=f"127.0.0.1:{free_port()}")
    for _ in range(3):  # a caller that retries, as the API's speed consumer does
        with pytest.raises(KafkaTimeoutError, match="Unable to bootstrap"):
            kafka_consumer(settings.kafka, "lambdaline-test-retry", bootstrap_timeout_ms=300)
    assert network_threads("lambdaline-test-retry") == []


@pytest.mark.parametrize(
    ("configs", "auto_commit"),
    [
        ({}, False),  # kafka-python's default group_id is None
        ({"group_id": None}, False),
        ({"group_id": "lambdaline-api"}, None),  # kafka-python's own default applies
        ({"group_id": None, "enable_auto_commit": True}, True),  # the caller's word stands
    ],
)
def test_a_consumer_without_a_group_does_not_auto_commit(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, configs: dict[str, object], auto_commit: object
) -> None:
    built: dict[str, object] = {}
    monkeypatch.setattr(
        "shared.platform.kafka_admin._Consumer", lambda **kwargs: built.update(kwargs)
    )
    kafka_consumer(Settings(state_dir=tmp_path).kafka, "lambdaline-test", **configs)
    assert built.get("enable_auto_commit") == auto_commit
