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
  is older than the replay buffer or of another generation, or a speed topic was
  created again): reload.
- ``generation``: another generation of the views is served (a promotion or a
  rollback): ``{generation, fingerprint, view_settings}``, then ``reset``, ``horizon``
  and ``watermark`` of the new one, whose rows follow. Its ids start ``g<N>/``.

A ``row`` event's id says where in the speed topics the client is once it has
it: each partition of the asked views with the next offset, as
``booth_stats.0:1235,booth_stats.1:998``. Every worker reads every partition,
so the id means the same to each of them: a client resuming with
``Last-Event-ID`` gets the buffered rows from those offsets on (none twice: a
row below its offset is skipped), from whichever worker answers, starting at
its own first unread row of the log. If the buffer no longer holds every row
since, it gets ``reset`` instead (with an empty id, so that a browser's next
reconnection starts afresh); an id that is not one of ours is answered 422, and
of a valid one only the partitions the speed topics have are kept. The other
events carry no id, so they leave the client's position as it was.

Every event goes once into one log per worker, the replay buffer
(``stream_buffer`` events, oldest out first); each client holds only its place
in it, and its own connection's task reads from there, a chunk at a time,
adding the client's ids: a row costs the consumer one append, whatever the
number of clients, and no client's encoding holds up the event loop for long.
A client more than ``stream_queue`` events behind when more arrive (or whose
place the log has dropped: ``stream_buffer`` bounds it too) is dropped and its
connection aborted; no other client, nor the consumer, waits for it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kafka.consumer.fetcher import ConsumerRecord

from shared.domain.merge import on_batch_side
from shared.platform.logs import log_event
from shared.platform.speed_tables import ChangedRow
from shared.settings.views import VIEW_BY_NAME

logger = logging.getLogger("lambdaline.serving")

ROW, HORIZON, WATERMARK, HEARTBEAT, RESET = "row", "horizon", "watermark", "heartbeat", "reset"
GENERATION = "generation"

Partition = tuple[str, int]
"""A view and a partition of its speed topic."""


class Event:
    """One event of the stream; its ``data:`` line encoded once, whoever it goes to."""

    __slots__ = ("after", "data", "kind", "offset", "partition", "payload", "rendered", "view")

    def __init__(
        self,
        kind: str,
        data: str,
        view: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
    ):
        self.kind, self.data = kind, data
        self.view, self.partition, self.offset = view, partition, offset
        """A row's view, and where in its speed topic it came from (a reset's view)."""
        self.payload = f"data: {data}\n\n".encode()
        self.after: dict[Partition, int] = {}
        """A row's: the log's position in every partition once it is appended (its id)."""
        self.rendered: dict[frozenset[str], bytes] = {}
        """A row as the clients of each set of views that read along with the log get it."""

    def for_views(self, views: frozenset[str], generation: int = 1) -> bytes:
        """The row with the id of a client of ``views`` that has read the log along (one
        encoding per set of views, however many clients share it; an event is of one
        hub's log, so of one ``generation``)."""
        found = self.rendered.get(views)
        if found is None:
            positions = {p: o for p, o in self.after.items() if p[0] in views}
            found = self.rendered[views] = wire(self, encode_id(positions, generation))
        return found


def encode_id(positions: dict[Partition, int], generation: int = 1) -> str:
    """An event id: each partition's next offset; led by ``g<N>/`` from generation 2 on,
    whose speed topics are others."""
    prefix = f"g{generation}/" if generation > 1 else ""
    return prefix + ",".join(
        f"{view}.{number}:{offset}" for (view, number), offset in sorted(positions.items())
    )


class BadEventIdError(ValueError):
    """A ``Last-Event-ID`` that is not one of this stream's ids; the message says why."""


EVENT_ID_PART = re.compile(r"([a-z_]+)\.([0-9]{1,9}):([0-9]{1,19})")
"""One partition of an id: ``<view>.<partition>:<next offset>``, ASCII digits."""


EVENT_ID_GENERATION = re.compile(r"g([0-9]{1,9})/")


def decode_id(text: str, max_partitions: int) -> tuple[int, dict[Partition, int]]:
    """A ``Last-Event-ID`` as its generation and positions; raises :class:`BadEventIdError`
    if it is not one of ours or names more than ``max_partitions`` partitions."""
    generation = 1
    if (lead := EVENT_ID_GENERATION.match(text)) is not None:
        generation, text = int(lead.group(1)), text[lead.end() :]
        if generation < 2:
            raise BadEventIdError(f"generation {generation} has no g<N>/ in its ids")
    parts = [part for part in text.split(",") if part]
    if len(parts) > max_partitions:
        raise BadEventIdError(
            f"names {len(parts)} partitions; at most {max_partitions} are read "
            "(serving_token_partitions)"
        )
    positions: dict[Partition, int] = {}
    for part in parts:
        found = EVENT_ID_PART.fullmatch(part)
        if found is None or found.group(1) not in VIEW_BY_NAME:
            shown = part if len(part) <= 40 else part[:37] + "..."
            raise BadEventIdError(f"{shown!r} is not <view>.<partition>:<offset>")
        positions[(found.group(1), int(found.group(2)))] = int(found.group(3))
    return generation, positions


def wire(event: Event, event_id: str | None) -> bytes:
    """An event as SSE text (``event_id`` None: no id line; "": an empty one)."""
    head = f"event: {event.kind}\n" + (f"id: {event_id}\n" if event_id is not None else "")
    return head.encode() + event.payload


CHUNK = 256
"""Events a client's task turns into one write before it lets the event loop run others."""


@dataclass(eq=False)
class Client:
    """One connection: its views, its position in the speed topics (its ids), its place in
    the hub's log, and what it is told before that (greeting, reset)."""

    views: frozenset[str]
    cursor: int
    """The sequence number of the next event of the log it reads."""
    since: int
    """Where it joined: a horizon or watermark event before it is not its news."""
    positions: dict[Partition, int] = field(default_factory=dict)
    first: list[bytes] = field(default_factory=list)
    dropped: asyncio.Event = field(default_factory=asyncio.Event)
    along: bool = True
    """It joined at the log's end and has read every event since, so its position is the
    log's (:meth:`Event.for_views`); False for a resume, which keeps its own."""
    generation: int = 1
    """Of the hub it reads (its ids say so)."""

    def render(self, seq: int, event: Event) -> bytes | None:
        """The event as this client gets it (with its id), or None if it is not for it."""
        if event.kind == ROW:
            assert event.view is not None and event.partition is not None
            assert event.offset is not None
            if event.view not in self.views:
                return None
            if self.along:
                return event.for_views(self.views, self.generation)
            where = (event.view, event.partition)
            if event.offset < self.positions.get(where, 0):
                return None  # the client has it (a resume from another worker's id)
            self.positions[where] = event.offset + 1
            return wire(event, encode_id(self.positions, self.generation))
        if event.kind == RESET:
            if event.view not in self.views:
                return None
            self.positions = {p: o for p, o in self.positions.items() if p[0] != event.view}
            return wire(event, "")  # that view's topic was created again: from its start
        return wire(event, None) if seq >= self.since else None


class StreamHub:
    """The log (the replay buffer) and the connected clients of one worker."""

    def __init__(self, buffer_size: int, queue_size: int, generation: int = 1):
        self.generation = generation
        """Of the speed store this hub's rows come from (:mod:`serving.generations`)."""
        self.buffer_size = buffer_size
        self.queue_size = queue_size
        self._log: list[Event] = []
        self._slack = max(1, min(CHUNK, buffer_size // 8))
        """Events past ``buffer_size`` the log may hold before it is trimmed back to it."""
        self._base = 0
        """The sequence number of ``_log[0]``; the next event gets ``_base + len(_log)``."""
        self._evicted: dict[Partition, int] = {}
        """Per partition, the offset after the newest row no longer in the log."""
        self.positions: dict[Partition, int] = {}
        """Per partition, the offset after the newest row logged."""
        self.partitions: dict[str, int] = {}
        """Per view, the partitions of its speed topic (the consumer says, once it knows)."""
        self.clients: set[Client] = set()
        self.horizon: datetime | None = None
        """The served horizon (zone-less UTC): rows below it are not sent."""
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._news: asyncio.Event | None = None
        self.dropped = 0
        self.on_drop: Callable[[], None] = lambda: None

    @property
    def next_seq(self) -> int:
        return self._base + len(self._log)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._news = asyncio.Event()

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
            self._append(events)

    def restarted(self, view: str) -> None:
        """From the consumer thread: a view's speed topic was created again."""
        with self._lock:
            for positions in (self.positions, self._evicted):
                for where in [p for p in positions if p[0] == view]:
                    del positions[where]
        reason = json.dumps({"reason": f"{view}'s topic was created again"})
        self._append([Event(RESET, reason, view)])

    def announce(self, kind: str, document: dict[str, Any]) -> None:
        """A ``horizon`` or ``watermark`` event to every client."""
        self._append([Event(kind, json.dumps(document, separators=(",", ":"), default=str))])

    def _append(self, events: list[Event]) -> None:
        with self._lock:
            before = self.next_seq
            for event in events:
                self._log.append(event)
                if event.kind == ROW:
                    assert event.view is not None and event.partition is not None
                    assert event.offset is not None
                    self.positions[(event.view, event.partition)] = event.offset + 1
                    event.after = dict(self.positions)
            if len(self._log) > self.buffer_size + self._slack:  # now and then, not per event
                gone = len(self._log) - self.buffer_size
                for old in self._log[:gone]:
                    if old.kind == ROW:
                        assert old.view is not None and old.partition is not None
                        assert old.offset is not None
                        self._evicted[(old.view, old.partition)] = old.offset + 1
                del self._log[:gone]
                self._base += gone
            loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._wake, before)

    def _wake(self, before: int) -> None:
        """On the event loop: drop the clients already ``queue_size`` behind before the new
        events (one poll's rows at once are no sign of slowness), wake the others."""
        for client in list(self.clients):
            if before - client.cursor >= self.queue_size or client.cursor < self._base:
                self._drop(client, before - client.cursor)
        assert self._news is not None
        self._news.set()
        self._news = asyncio.Event()

    def _drop(self, client: Client, behind: int) -> None:
        if client.dropped.is_set():
            return
        client.dropped.set()
        self.clients.discard(client)
        self.dropped += 1
        self.on_drop()
        log_event(
            logger, "stream_client_dropped", queued=behind, limit=self.queue_size,
            why="it reads slower than events arrive",
        )  # fmt: skip

    async def news(self, timeout_s: float) -> bool:
        """Wait until events are appended (True) or ``timeout_s`` pass (False)."""
        assert self._news is not None
        try:
            await asyncio.wait_for(self._news.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    def take(self, client: Client) -> list[bytes]:
        """On the event loop: the client's next writes (its first events, then at most
        ``CHUNK`` events of the log), its place moved past them."""
        if client.dropped.is_set():
            return []
        if client.cursor < self._base:  # the log moved past what it had still to read
            self._drop(client, self.next_seq - client.cursor)
            return []
        out, client.first = client.first, []
        with self._lock:
            start = client.cursor - self._base
            events = self._log[start : start + CHUNK]
            seq = client.cursor
            client.cursor += len(events)
        for n, event in enumerate(events):
            rendered = client.render(seq + n, event)
            if rendered is not None:
                out.append(rendered)
        return out

    def subscribe(
        self,
        views: frozenset[str],
        resume: dict[Partition, int] | None,
        greeting: Iterable[Event] = (),
        resume_generation: int = 1,
    ) -> Client:
        """On the event loop: a client of ``views``, from ``resume`` (a decoded
        ``Last-Event-ID``, of ``resume_generation``) if given, of this hub's generation and
        still in the log (else a ``reset`` first), else from now on; ``greeting``: events
        it gets before any row (the horizon and watermark as they are)."""
        with self._lock:
            now = {p: o for p, o in self.positions.items() if p[0] in views}
            client = Client(
                views, cursor=self.next_seq, since=self.next_seq, positions=now,
                generation=self.generation,
            )  # fmt: skip
            if resume is not None and resume_generation != self.generation:
                reason = json.dumps(
                    {"reason": f"Last-Event-ID is of generation {resume_generation}; the "
                     f"stream is of generation {self.generation}"}
                )  # fmt: skip
                client.first.append(wire(Event(RESET, reason), ""))
            elif resume is not None and any(
                resume.get(where, 0) < evicted
                for where, evicted in self._evicted.items()
                if where[0] in views
            ):
                reason = json.dumps({"reason": "Last-Event-ID older than the buffer"})
                client.first.append(wire(Event(RESET, reason), ""))
            elif resume is not None:
                # only partitions the speed topics have: an id cannot make every event's
                # id longer than the partitions the stream has
                known = self.positions.keys() | self._evicted.keys()
                client.positions = {
                    (view, number): offset
                    for (view, number), offset in resume.items()
                    if view in views
                    and ((view, number) in known or number < self.partitions.get(view, 0))
                }
                client.cursor = self._first_unread(client)
                client.along = False
            client.first += [wire(event, None) for event in greeting]
            self.clients.add(client)
        return client

    def _first_unread(self, client: Client) -> int:
        """The sequence number of the first row of the log ``client`` does not have (its
        real place: it is behind by what it has still to read, not by the whole log)."""
        for n, event in enumerate(self._log):
            if (
                event.kind == ROW
                and event.view in client.views
                and event.offset is not None
                and event.offset >= client.positions.get((event.view, event.partition or 0), 0)
            ):
                return self._base + n
        return self.next_seq

    def unsubscribe(self, client: Client) -> None:
        self.clients.discard(client)

    @property
    def most_queued(self) -> int:
        """How many events the client furthest behind has still to read (0 without any)."""
        end = self.next_seq
        return max((end - client.cursor for client in list(self.clients)), default=0)
