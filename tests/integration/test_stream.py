"""``GET /v1/stream`` from a real server (``lambdaline serve``) following a real broker:
rows arrive in order, a resume loses none, an old id gets ``reset``, a client that never
reads is dropped.

The rows are written to the speed store's topic by hand, as the speed layer writes
them, so that their number and their partitions are the test's own; the producer's
answers say where each one went.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx2
import pytest

from lambdaline.processes import wait_until_answers
from shared.platform.kafka_admin import kafka_producer
from shared.settings import Settings
from tests.integration.helpers import isolated_settings, spawn_api

pytestmark = [pytest.mark.integration]

KEY = {"X-API-Key": "stream-key"}
BUFFER, QUEUE = 20_000, 10_000
START = datetime(2026, 1, 6)


@dataclass
class Server:
    settings: Settings
    client: httpx2.Client
    log: Path
    url: str


@pytest.fixture(scope="module")
def server(kafka: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    state = tmp_path_factory.mktemp("stream")
    settings = isolated_settings(kafka, state)
    log = state / "serve.log"
    process, url = spawn_api(
        settings, KEY["X-API-Key"], log, LAMBDALINE_SERVING_STREAM_BUFFER=str(BUFFER),
        LAMBDALINE_SERVING_STREAM_QUEUE=str(QUEUE), LAMBDALINE_SERVING_STREAM_HEARTBEAT="1s",
    )  # fmt: skip
    try:
        with httpx2.Client(base_url=url, headers=KEY, timeout=30) as client:
            assert wait_until_answers(client, 60, process=process), log.read_text()
            yield Server(settings, client, log, url)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)


def write_rows(settings: Settings, first: int, count: int) -> dict[str, tuple[int, int]]:
    """``count`` booth_stats rows of booth ``s<n>`` (n from ``first``), alternately to
    partitions 0 and 1; returns each booth's (partition, offset)."""
    producer = kafka_producer(settings.kafka, "stream-test", linger_ms=20)
    sent = {}
    try:
        for n in range(first, first + count):
            start = START + timedelta(minutes=5 * (n % 200))
            value = {
                "booth_id": f"s{n}", "window_start": f"{start.isoformat()}.000Z",
                "window_end": f"{(start + timedelta(minutes=5)).isoformat()}.000Z",
                "vehicle_count": n, "total_toll": 1.5, "first_entry_time": f"{start.isoformat()}.000Z",
                "last_entry_time": f"{start.isoformat()}.000Z", "version": 1,
            }  # fmt: skip
            key = f"s{n}|{start.isoformat()}".encode()
            sent[f"s{n}"] = producer.send(
                settings.topics.speed("booth_stats"), key=key, value=json.dumps(value).encode(),
                partition=n % 2,
            )  # fmt: skip
        producer.flush(timeout=60)
        return {
            booth: (future.get(timeout=30).partition, future.get(timeout=30).offset)
            for booth, future in sent.items()
        }
    finally:
        producer.close()


@dataclass
class Received:
    kind: str
    id: str | None
    data: dict[str, Any]


def read_events(
    server: Server, rows: int, last_event_id: str | None = None, timeout_s: float = 60
) -> list[Received]:
    """Events of the stream until ``rows`` row events have come (parsed by hand)."""
    headers = {**KEY, **({"Last-Event-ID": last_event_id} if last_event_id is not None else {})}
    events: list[Received] = []
    seen_rows = 0
    deadline = time.monotonic() + timeout_s
    with httpx2.stream(
        "GET", f"{server.url}/v1/stream", params={"views": "booth_stats"}, headers=headers,
        timeout=timeout_s,
    ) as response:  # fmt: skip
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        fields: dict[str, str] = {}
        for line in response.iter_lines():
            if line:
                name, _, value = line.partition(": ")
                fields[name] = value
                continue
            events.append(Received(fields["event"], fields.get("id"), json.loads(fields["data"])))
            seen_rows += fields["event"] == "row"
            fields = {}
            if seen_rows >= rows or time.monotonic() > deadline:
                break
    return events


def rows_of(events: list[Received]) -> list[str]:
    return [event.data["row"]["booth_id"] for event in events if event.kind == "row"]


def in_order(booths: list[str], where: dict[str, tuple[int, int]]) -> bool:
    for partition in (0, 1):
        offsets = [where[b][1] for b in booths if where[b][0] == partition]
        if offsets != sorted(offsets):
            return False
    return True


def test_rows_arrive_in_order_and_a_resume_inside_the_buffer_loses_none(server: Server) -> None:
    got: list[list[Received]] = []
    reader = threading.Thread(target=lambda: got.append(read_events(server, 120)))
    reader.start()
    time.sleep(1.5)  # connected: it asked for rows from now on
    where = write_rows(server.settings, 0, 160)
    reader.join(timeout=90)
    [first] = got
    assert [event.kind for event in first[:3]] == ["generation", "horizon", "watermark"]
    assert first[0].data["generation"] == 1 and first[0].data["view_settings"]["window"] == "5m"
    assert first[1].data == {"batch_version": None, "horizon": None, "corrections": None}
    booths = rows_of(first)
    assert len(booths) == 120 and len(set(booths)) == 120
    assert in_order(booths, where)
    row = next(event for event in first if event.kind == "row")
    assert row.data["row"]["source"] == "speed" and row.data["row"]["final"] is False
    assert row.data["row"]["total_toll"] == "1.50" and row.data["shown"] is True
    # the id names the next offset of each partition once the client has the row
    last = [event for event in first if event.kind == "row"][-1]
    sent = {p: max(where[b][1] for b in booths if where[b][0] == p) + 1 for p in (0, 1)}
    assert last.id == f"booth_stats.0:{sent[0]},booth_stats.1:{sent[1]}"

    more = write_rows(server.settings, 160, 40)
    where |= more
    resumed = read_events(server, 80, last_event_id=last.id)
    rest = rows_of(resumed)
    assert sorted(rest) == sorted(set(where) - set(booths)), "lost or twice"
    assert in_order(rest, where)


def test_an_id_older_than_the_buffer_gets_reset(server: Server) -> None:
    write_rows(server.settings, 1000, BUFFER + 300)  # the first rows leave the buffer
    time.sleep(2)
    events = read_events(server, 0, last_event_id="booth_stats.0:0,booth_stats.1:0", timeout_s=5)
    assert events[0].kind == "reset" and events[0].id == ""
    assert "older than the buffer" in events[0].data["reason"]
    garbled = httpx2.get(
        f"{server.url}/v1/stream", headers={**KEY, "Last-Event-ID": "not-an-id"}, timeout=5
    )
    assert garbled.status_code == 422  # not an id of this stream (tests/unit/test_api_abuse)


def metric(server: Server, name: str) -> float:
    text = server.client.get("/metrics").text
    [line] = [line for line in text.splitlines() if line.startswith(name + " ")]
    return float(line.split()[1])


def test_a_client_that_never_reads_is_dropped_and_the_others_are_not_slowed(
    server: Server,
) -> None:
    dropped_before = metric(server, "lambdaline_stream_clients_dropped_total")
    slow = socket.socket()
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window, never read
    slow.connect(("127.0.0.1", int(server.url.rsplit(":", 1)[1])))
    slow.sendall(
        b"GET /v1/stream?views=booth_stats HTTP/1.1\r\nHost: x\r\n"
        + f"X-API-Key: {KEY['X-API-Key']}\r\n\r\n".encode()
    )
    time.sleep(1)
    queued: list[float] = []
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.is_set():
            queued.append(metric(server, "lambdaline_stream_queued_events"))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    fast: list[list[Received]] = []
    count = 60_000  # ~20 MB of events: more than the kernel's buffers and the queue hold
    reader = threading.Thread(target=lambda: fast.append(read_events(server, count, timeout_s=120)))
    reader.start()
    time.sleep(1.5)
    try:
        write_rows(server.settings, 10_000, count)
        reader.join(timeout=150)
    finally:
        sampling.set()
        sampler.join()
    assert len(rows_of(fast[0])) == count, "a reading client missed rows"
    assert metric(server, "lambdaline_stream_clients_dropped_total") == dropped_before + 1
    assert max(queued) >= 1, "the slow client's queue never showed"
    [drop] = [
        json.loads(line[line.index("{"):]) for line in server.log.read_text().splitlines()
        if '"stream_client_dropped"' in line
    ]  # fmt: skip
    assert drop["queued"] >= QUEUE
    # its connection is gone: what the kernel held, then the end (or a reset)
    slow.settimeout(10)
    try:
        while slow.recv(1 << 16):
            pass
    except ConnectionResetError:
        pass
    slow.close()


def test_a_stopping_server_ends_its_open_streams_and_exits(kafka: Settings, tmp_path: Path) -> None:
    """A stream never ends by itself; `lambdaline serve` stops anyway, ending it cleanly
    (its client sees the end of the response, and reconnects elsewhere)."""
    settings = isolated_settings(kafka, tmp_path / "state")
    log = tmp_path / "serve.log"
    process, url = spawn_api(settings, KEY["X-API-Key"], log)
    ended: list[str] = []
    try:
        with httpx2.Client(base_url=url, timeout=30) as client:
            assert wait_until_answers(client, 60, process=process), log.read_text()

        def read() -> None:
            with httpx2.stream("GET", f"{url}/v1/stream", headers=KEY, timeout=60) as response:
                for _ in response.iter_lines():
                    pass
            ended.append("cleanly")

        reader = threading.Thread(target=read)
        reader.start()
        time.sleep(1.5)
        started = time.monotonic()
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=20)
        took = time.monotonic() - started
        reader.join(timeout=10)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
    assert took < 15, took
    assert ended == ["cleanly"]
    assert '"stream_ended"' in log.read_text()
