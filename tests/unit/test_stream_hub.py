"""The stream's hub without a broker: what each client reads, with which ids; a resume on
another worker; the buffer's bound; a slow client dropped. The rows are written by hand as
the consumer hands them over (``ChangedRow``s of records at known offsets)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from types import SimpleNamespace
from typing import Any

import pytest

from serving.stream import (
    RESET,
    ROW,
    BadEventIdError,
    Client,
    StreamHub,
    decode_id,
    encode_id,
)
from shared.platform.speed_tables import ChangedRow

H = datetime(2026, 1, 6)


def changed(booth: str, start: str, position: int = 0, shown: bool = True) -> ChangedRow:
    at = datetime.fromisoformat(start)
    row = f'{{"booth_id":"{booth}","window_start":"{start}"}}'
    return ChangedRow(position, row, at, at, shown)


def publish(hub: StreamHub, partition: int, offset: int, booth: str, start: str) -> None:
    """One record of ``speed.booth_stats`` at (partition, offset), as one poll."""
    record = SimpleNamespace(partition=partition, offset=offset)
    hub.rows("booth_stats", [record], [changed(booth, start)], None)  # type: ignore[list-item]


def drained(hub: StreamHub, client: Client) -> list[tuple[str, str | None, str]]:
    """(kind, id, the row's booth or the data) of every event the client has to read."""
    out = []
    while chunk := hub.take(client):
        for text in (part.decode() for part in chunk):
            fields = dict(line.split(": ", 1) if ": " in line else (line.rstrip(":"), "")
                          for line in text.strip().split("\n"))  # fmt: skip
            data = fields["data"]
            booth = data.split('"booth_id":"')[1].split('"')[0] if fields["event"] == ROW else ""
            out.append((fields["event"], fields.get("id"), booth or data))
    return out


def on_loop(test: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(test())  # type: ignore[arg-type]


async def settle() -> None:
    """Let the fan-outs the hub scheduled run."""
    for _ in range(3):
        await asyncio.sleep(0)


def test_ids_name_each_partitions_next_offset_and_read_back() -> None:
    positions = {("booth_stats", 1): 998, ("booth_stats", 0): 1235, ("vehicle_trips", 0): 7}
    text = encode_id(positions)
    assert text == "booth_stats.0:1235,booth_stats.1:998,vehicle_trips.0:7"
    assert decode_id(text, 3) == (1, positions)
    for bad in ("x", "booth_stats.0:-1", "nope.0:1", "booth_stats:1", "booth_stats.a:1",
                "booth_stats.\u00b2:1", "booth_stats.0:" + "9" * 4400):  # fmt: skip
        with pytest.raises(BadEventIdError, match=r"is not <view>\.<partition>:<offset>"):
            decode_id(bad, 3)
    with pytest.raises(BadEventIdError, match="names 3 partitions; at most 2"):
        decode_id(text, 2)


def resume(text: str) -> dict[tuple[str, int], int]:
    return decode_id(text, 1000)[1]


def test_a_client_gets_its_views_rows_from_now_on_in_order_with_ids() -> None:
    async def test() -> None:
        hub = StreamHub(buffer_size=100, queue_size=100)
        hub.start(asyncio.get_running_loop())
        publish(hub, 0, 0, "before", "2026-01-06T00:00")  # before the client: not sent
        await settle()
        client = hub.subscribe(frozenset({"booth_stats"}), None)
        publish(hub, 1, 0, "a", "2026-01-06T00:05")
        publish(hub, 0, 1, "b", "2026-01-06T00:10")
        other = SimpleNamespace(partition=0, offset=5)
        trip = ChangedRow(0, '{"booth_id":"t"}', H, H, True)
        hub.rows("vehicle_trips", [other], [trip], None)  # type: ignore[list-item]
        await settle()
        assert drained(hub, client) == [
            ("row", "booth_stats.0:1,booth_stats.1:1", "a"),
            ("row", "booth_stats.0:2,booth_stats.1:1", "b"),
        ]

    on_loop(test)


def test_rows_below_the_horizon_are_not_sent_and_a_withdrawn_one_says_so() -> None:
    async def test() -> None:
        hub = StreamHub(buffer_size=100, queue_size=100)
        hub.start(asyncio.get_running_loop())
        hub.horizon = H
        client = hub.subscribe(frozenset({"booth_stats"}), None)
        record = SimpleNamespace(partition=0, offset=0)
        rows = [changed("old", "2026-01-05T23:55"), changed("new", "2026-01-06T00:00", shown=False)]
        hub.rows("booth_stats", [record], rows, datetime(2026, 1, 6, 0, 0))  # type: ignore[list-item]
        await settle()
        [written] = hub.take(client)
        assert written.startswith(b"event: row\nid: booth_stats.0:1\ndata: ")
        assert b'"booth_id":"new"' in written and b'"booth_id":"old"' not in written
        assert b'"final":true,"source":"speed"}' in written  # 00:00 <= the cut
        assert written.endswith(b'"shown":false}\n\n')

    on_loop(test)


def test_a_resume_on_another_worker_loses_none_and_repeats_none() -> None:
    """Two workers read the same partitions in another interleaving: an id of one resumes
    on the other with every row after it, once."""

    async def test() -> None:
        loop = asyncio.get_running_loop()
        first, second = StreamHub(100, 100), StreamHub(100, 100)
        first.start(loop)
        second.start(loop)
        client = first.subscribe(frozenset({"booth_stats"}), None)
        records = [(0, 0, "p0-0"), (1, 0, "p1-0"), (0, 1, "p0-1"), (1, 1, "p1-1")]
        for partition, offset, booth in records:
            publish(first, partition, offset, booth, "2026-01-06T01:00")
        for partition, offset, booth in [records[1], records[3], records[0], records[2]]:
            publish(second, partition, offset, booth, "2026-01-06T01:00")
        await settle()
        seen = drained(first, client)
        assert [booth for _, _, booth in seen] == ["p0-0", "p1-0", "p0-1", "p1-1"]
        _, after_two, _ = seen[1]  # the client had p0-0 and p1-0, then lost its connection
        resumed = second.subscribe(frozenset({"booth_stats"}), resume(after_two))
        assert [booth for _, _, booth in drained(second, resumed)] == ["p1-1", "p0-1"]

    on_loop(test)


def test_an_id_older_than_the_buffer_gets_reset_then_rows_from_now_on() -> None:
    async def test() -> None:
        hub = StreamHub(buffer_size=2, queue_size=100)
        hub.start(asyncio.get_running_loop())
        for offset in range(4):  # past 2 + 1 events, the log keeps the last 2: r2, r3
            publish(hub, 0, offset, f"r{offset}", "2026-01-06T01:00")
        await settle()
        kept = hub.subscribe(frozenset({"booth_stats"}), resume("booth_stats.0:2"))
        assert [booth for _, _, booth in drained(hub, kept)] == ["r2", "r3"]
        old = hub.subscribe(frozenset({"booth_stats"}), resume("booth_stats.0:1"))
        [(kind, event_id, data)] = drained(hub, old)
        assert (kind, event_id) == (RESET, "") and "older than the buffer" in data
        publish(hub, 0, 4, "r4", "2026-01-06T01:00")
        await settle()
        assert drained(hub, old) == [("row", "booth_stats.0:5", "r4")]

    on_loop(test)


def test_a_recreated_topic_resets_its_clients_and_restarts_their_offsets() -> None:
    async def test() -> None:
        hub = StreamHub(buffer_size=10, queue_size=100)
        hub.start(asyncio.get_running_loop())
        client = hub.subscribe(frozenset({"booth_stats"}), None)
        publish(hub, 0, 7, "before", "2026-01-06T01:00")
        await settle()
        hub.restarted("booth_stats")
        publish(hub, 0, 0, "after", "2026-01-06T01:00")  # the new topic starts at 0
        await settle()
        assert [(kind, event_id) for kind, event_id, _ in drained(hub, client)] == [
            (ROW, "booth_stats.0:8"), (RESET, ""), (ROW, "booth_stats.0:1"),
        ]  # fmt: skip

    on_loop(test)


def test_a_client_still_behind_when_more_rows_come_is_dropped_and_the_others_not() -> None:
    async def test() -> None:
        hub = StreamHub(buffer_size=100, queue_size=3)
        drops: list[int] = []
        hub.on_drop = lambda: drops.append(1)
        hub.start(asyncio.get_running_loop())
        slow = hub.subscribe(frozenset({"booth_stats"}), None)
        fast = hub.subscribe(frozenset({"booth_stats"}), None)
        record = [SimpleNamespace(partition=0, offset=n) for n in range(5)]
        burst = [changed(f"b{n}", "2026-01-06T01:00", position=n) for n in range(5)]
        hub.rows("booth_stats", record, burst, None)  # type: ignore[arg-type]
        await settle()
        assert not slow.dropped.is_set()  # one poll's 5 rows at once: no sign of slowness
        assert hub.most_queued == 5
        drained(hub, fast)
        assert hub.most_queued == 5  # the slow one's
        publish(hub, 0, 5, "b5", "2026-01-06T01:00")
        await settle()
        assert slow.dropped.is_set() and slow not in hub.clients and drops == [1]
        assert not fast.dropped.is_set() and [b for _, _, b in drained(hub, fast)] == ["b5"]

    on_loop(test)


def test_clients_reading_along_share_one_encoding_of_each_row() -> None:
    async def test() -> None:
        hub = StreamHub(buffer_size=100, queue_size=100)
        hub.start(asyncio.get_running_loop())
        views = frozenset({"booth_stats"})
        first, second = hub.subscribe(views, None), hub.subscribe(views, None)
        publish(hub, 1, 4, "a", "2026-01-06T01:00")
        await settle()
        [one], [other] = hub.take(first), hub.take(second)
        assert one is other and b"id: booth_stats.1:5\n" in one
        hub.partitions = {"booth_stats": 2}  # what the consumer says the topic has
        resumed = hub.subscribe(views, resume("booth_stats.0:9,booth_stats.1:4"))  # its own
        [own] = hub.take(resumed)
        assert b"id: booth_stats.0:9,booth_stats.1:5\n" in own

    on_loop(test)


def test_a_resumed_id_keeps_only_partitions_the_topic_has() -> None:
    """A forged id naming partitions no speed topic has would make every event's id repeat
    them; they are dropped, the real ones kept."""

    async def test() -> None:
        hub = StreamHub(buffer_size=100, queue_size=100)
        hub.start(asyncio.get_running_loop())
        hub.partitions = {"booth_stats": 2}
        forged = ",".join(f"booth_stats.{n}:0" for n in range(2, 500))
        client = hub.subscribe(frozenset({"booth_stats"}), resume(f"booth_stats.1:3,{forged}"))
        publish(hub, 1, 3, "a", "2026-01-06T01:00")
        publish(hub, 0, 0, "b", "2026-01-06T01:00")
        await settle()
        assert drained(hub, client) == [
            ("row", "booth_stats.1:4", "a"), ("row", "booth_stats.0:1,booth_stats.1:4", "b"),
        ]  # fmt: skip

    on_loop(test)


def test_a_resume_starts_at_the_clients_own_place_in_the_log() -> None:
    """A client resuming near the log's end is behind by what it has not read, not by the
    whole log: more rows do not drop it."""

    async def test() -> None:
        hub = StreamHub(buffer_size=100, queue_size=10)
        hub.start(asyncio.get_running_loop())
        for offset in range(50):
            publish(hub, 0, offset, f"r{offset}", "2026-01-06T01:00")
        await settle()
        client = hub.subscribe(frozenset({"booth_stats"}), resume("booth_stats.0:47"))
        assert hub.most_queued == 3  # r47, r48, r49
        publish(hub, 0, 50, "r50", "2026-01-06T01:00")
        await settle()
        assert not client.dropped.is_set()
        assert [booth for _, _, booth in drained(hub, client)] == ["r47", "r48", "r49", "r50"]

    on_loop(test)
