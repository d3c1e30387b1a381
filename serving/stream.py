"""Pushed updates (``GET /v1/stream``): Server-Sent Events of the speed rows this worker
materialises, and of the horizon and watermark as they move.

Events:

- ``row``: a speed row an upsert inserted or replaced (``{"view", "row", "shown"}``;
  ``row`` as the endpoints write it, ``final`` and ``source`` included; ``shown``
  false: a candidate its view withdrew, which a client removes). Rows below the
  horizon are the batch store's and are not sent.
- ``horizon``: a batch version was published (or rolled back): ``batch_version``,
  ``horizon`` and what it corrected. A client reloads what lies below the new horizon.
- ``watermark``: the speed watermark moved: ``speed_watermark`` and, per view, the
  latest ``final.column`` value of a final row (``final_before``).
- ``heartbeat``: every ``stream_heartbeat``: the consumer's health and lag.
- ``reset``: the stream cannot continue where the client was (its ``Last-Event-ID``
  is older than the replay buffer, or a speed topic was created again): reload.

A ``row`` event's id says where in the speed topics the client is once it has
it: each partition of the asked views with the next offset, as
``booth_stats.0:1235,booth_stats.1:998``. Every worker reads every partition,
so the id means the same to each of them: a client resuming with
``Last-Event-ID`` gets the buffered rows from those offsets on (none twice: a
row below its offset is skipped), from whichever worker answers. If the buffer
no longer holds every row since, it gets ``reset`` instead (with an empty id,
so that a browser's next reconnection starts afresh). The other events carry
no id, so they leave the client's position as it was.

Rows are handed from the consumer thread to the event loop and queued per
client without waiting (``put_nowait``), a poll's rows at once: a client whose
queue still holds ``stream_queue`` events when more arrive is dropped and its
connection aborted, and no other client, nor the consumer, waits for it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kafka.consumer.fetcher import ConsumerRecord

from shared.domain.merge import on_batch_side
from shared.domain.view_specs import VIEW_BY_NAME
from shared.platform.logs import log_event
from shared.platform.speed_tables import ChangedRow

logger = logging.getLogger("lambdaline.serving")

ROW, HORIZON, WATERMARK, HEARTBEAT, RESET = "row", "horizon", "watermark", "heartbeat", "reset"

Partition = tuple[str, int]
"""A view and a partition of its speed topic."""


@dataclass(frozen=True)
class Event:
    kind: str
    data: str
    """The event's JSON."""
    view: str | None = None
    partition: int | None = None
    offset: int | None = None
    """A row's: where in its view's speed topic it came from."""


def encode_id(positions: dict[Partition, int]) -> str:
    return ",".join(
        f"{view}.{number}:{offset}" for (view, number), offset in sorted(positions.items())
    )


def decode_id(text: str) -> dict[Partition, int] | None:
    """A ``Last-Event-ID`` as positions; None if it is not one of ours."""
    positions: dict[Partition, int] = {}
    try:
        for part in filter(None, text.split(",")):
            where, offset = part.rsplit(":", 1)
            view, number = where.rsplit(".", 1)
            if view not in VIEW_BY_NAME or int(offset) < 0:
                return None
            positions[(view, int(number))] = int(offset)
    except ValueError:
        return None
    return positions


def wire(event: Event, event_id: str | None) -> bytes:
    """An event as SSE text (``event_id`` None: no id line; "": an empty one)."""
    head = f"event: {event.kind}\n" + (f"id: {event_id}\n" if event_id is not None else "")
    return f"{head}data: {event.data}\n\n".encode()


@dataclass(eq=False)
class Client:
    """One connection's views, position and queue of (event, id) not yet sent."""

    views: frozenset[str]
    limit: int
    positions: dict[Partition, int] = field(default_factory=dict)
    queue: asyncio.Queue[tuple[Event, str | None]] = field(default_factory=asyncio.Queue)
    dropped: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def behind(self) -> bool:
        """Its queue holds ``limit`` events or more: it reads slower than rows arrive."""
        return self.queue.qsize() >= self.limit

    def offer(self, event: Event) -> None:
        """Queue an event if it is for this client."""
        event_id: str | None = None
        if event.kind == ROW:
            assert event.view is not None and event.partition is not None
            assert event.offset is not None
            if event.view not in self.views:
                return
            where = (event.view, event.partition)
            if event.offset < self.positions.get(where, 0):
                return  # the client has it (a resume from another worker's id)
            self.positions[where] = event.offset + 1
            event_id = encode_id(self.positions)
        elif event.kind == RESET:
            if event.view is not None:  # that view's topic was created again: from its start
                self.positions = {p: o for p, o in self.positions.items() if p[0] != event.view}
            event_id = ""
        self.queue.put_nowait((event, event_id))


class StreamHub:
    """The replay buffer and the connected clients of one worker."""

    def __init__(self, buffer_size: int, queue_size: int):
        self.buffer_size = buffer_size
        self.queue_size = queue_size
        self._buffer: deque[Event] = deque()
        self._evicted: dict[Partition, int] = {}
        """Per partition, the offset after the newest row no longer buffered."""
        self.positions: dict[Partition, int] = {}
        """Per partition, the offset after the newest row buffered."""
        self.clients: set[Client] = set()
        self.horizon: datetime | None = None
        """The served horizon (zone-less UTC): rows below it are not sent."""
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.dropped = 0
        self.on_drop: Callable[[], None] = lambda: None
        self.events = 0

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def rows(
        self,
        view: str,
        records: list[ConsumerRecord],
        changed: list[ChangedRow],
        final_before: datetime | None,
    ) -> None:
        """From the consumer thread: the rows a poll of one partition changed."""
        spec = VIEW_BY_NAME[view]
        events = []
        for row in changed:
            if on_batch_side(spec, row.side, self.horizon):
                continue
            final = final_before is not None and row.final_at <= final_before
            record = records[row.position]
            body = f'{row.row[:-1]},"final":{"true" if final else "false"},"source":"speed"}}'
            data = f'{{"view":"{view}","row":{body},"shown":{"true" if row.shown else "false"}}}'
            events.append(Event(ROW, data, view, record.partition, record.offset))
        if events:
            self._publish(events)

    def restarted(self, view: str) -> None:
        """From the consumer thread: a view's speed topic was created again."""
        with self._lock:
            self._buffer = deque(event for event in self._buffer if event.view != view)
            for positions in (self.positions, self._evicted):
                for where in [p for p in positions if p[0] == view]:
                    del positions[where]
        self._publish(
            [Event(RESET, json.dumps({"reason": f"{view}'s topic was created again"}), view)]
        )

    def announce(self, kind: str, document: dict[str, Any]) -> None:
        """From the event loop: a ``horizon`` or ``watermark`` event to every client."""
        self._fan_out([Event(kind, json.dumps(document, separators=(",", ":"), default=str))])

    def _publish(self, events: list[Event]) -> None:
        with self._lock:
            for event in events:
                if event.kind != ROW:
                    continue
                assert event.view is not None and event.partition is not None
                assert event.offset is not None
                self._buffer.append(event)
                self.positions[(event.view, event.partition)] = event.offset + 1
            while len(self._buffer) > self.buffer_size:
                old = self._buffer.popleft()
                assert old.view is not None and old.partition is not None
                assert old.offset is not None
                self._evicted[(old.view, old.partition)] = old.offset + 1
            loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._fan_out, events)

    def _fan_out(self, events: Iterable[Event]) -> None:
        """On the event loop: queue the events for every client, dropping the full ones."""
        events = list(events)
        self.events += len(events)
        for client in list(self.clients):
            if client.behind:  # one poll's rows are queued whole: a burst is not slowness
                self._drop(client)
                continue
            for event in events:
                client.offer(event)

    def _drop(self, client: Client) -> None:
        client.dropped.set()
        self.clients.discard(client)
        self.dropped += 1
        self.on_drop()
        log_event(
            logger, "stream_client_dropped", queued=client.queue.qsize(), limit=self.queue_size,
            why="its queue is full: it reads slower than rows arrive",
        )  # fmt: skip

    def subscribe(
        self, views: frozenset[str], last_event_id: str | None, greeting: Iterable[Event] = ()
    ) -> Client:
        """On the event loop: a client of ``views``, from ``last_event_id`` if given and still
        buffered (else a ``reset`` first), else from now on; ``greeting``: events it gets
        before any row (the horizon and watermark as they are)."""
        client = Client(views, self.queue_size)
        with self._lock:
            now = {p: o for p, o in self.positions.items() if p[0] in views}
            resume = decode_id(last_event_id) if last_event_id else None
            if last_event_id and (
                resume is None
                or any(
                    resume.get(where, 0) < evicted
                    for where, evicted in self._evicted.items()
                    if where[0] in views
                )
            ):
                client.positions = now
                why = "not an id of this stream" if resume is None else "older than the buffer"
                client.offer(Event(RESET, json.dumps({"reason": f"Last-Event-ID {why}"})))
                resume = None
            else:
                client.positions = now if resume is None else {
                    p: o for p, o in resume.items() if p[0] in views
                }  # fmt: skip
            for event in greeting:
                client.offer(event)
            for event in self._buffer if resume is not None else ():
                client.offer(event)
            self.clients.add(client)
        return client

    def unsubscribe(self, client: Client) -> None:
        self.clients.discard(client)

    @property
    def most_queued(self) -> int:
        """The events queued for the client furthest behind (0 without clients)."""
        return max((client.queue.qsize() for client in list(self.clients)), default=0)
