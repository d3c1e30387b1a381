"""Reading topics to their ends on the real broker while something writes to them."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from shared.platform.kafka_admin import kafka_producer
from shared.settings import Settings
from tests.integration.helpers import isolated_settings, read_all

pytestmark = pytest.mark.integration


def test_a_topic_written_meanwhile_is_read_to_the_end_it_had_when_asked(
    kafka: Settings, tmp_path: Path
) -> None:
    settings = isolated_settings(kafka, tmp_path)
    topic = settings.topics.speed_progress  # a running speed job writes it every second
    producer = kafka_producer(settings.kafka, "lambdaline-tests")
    for n in range(20):  # keys of their own: the topic is compacted
        value = f"before-{n}".encode()
        producer.send(topic, key=value, value=value, partition=0).get(timeout=10)
    stop = threading.Event()

    def write_meanwhile() -> None:
        n = 0
        while not stop.is_set():
            value = f"meanwhile-{n}".encode()
            producer.send(topic, key=value, value=value, partition=0).get(timeout=10)
            n += 1
            time.sleep(0.1)

    writer = threading.Thread(target=write_meanwhile)
    writer.start()
    try:
        time.sleep(1)  # the writer is under way: the topic never falls quiet
        began = time.monotonic()
        values = [record.value.decode() for record in read_all(settings, topic)]
        took = time.monotonic() - began
    finally:
        stop.set()
        writer.join(timeout=20)
        producer.close()
    assert took < 30
    written = len(values) - 20
    assert written >= 1  # some of the writer's, taken before the read asked for the end
    assert values == [f"before-{n}" for n in range(20)] + [f"meanwhile-{n}" for n in range(written)]
    assert read_all(settings, f"{topic}.absent") == []
