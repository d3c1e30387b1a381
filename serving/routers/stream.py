"""``GET /v1/stream``: Server-Sent Events of speed rows, horizons and watermarks
(:mod:`serving.stream`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import FastAPI, Header, HTTPException, Query, Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from serving.deps import RETRY_AFTER, invalid_input, invalid_query, keyed_router
from serving.generations import Generations, Served
from serving.limits import retry_after
from serving.models import Problem
from serving.queries import naive_utc
from serving.responses import wire_instant
from serving.stream import (
    GENERATION,
    HEARTBEAT,
    HORIZON,
    RESET,
    WATERMARK,
    BadEventIdError,
    Client,
    Event,
    StreamHub,
    decode_id,
    wire,
)
from shared.platform.batch_store import BatchVersion
from shared.platform.logs import log_event
from shared.platform.speed_tables import SpeedTables
from shared.settings.views import VIEW_NAMES, VIEWS

logger = logging.getLogger("lambdaline.serving")
router = keyed_router("/v1", "stream")

ABORT = "lambdaline.abort"
"""The scope key of a callable that aborts the request's connection (``serving.main.App``)."""


def greeting(served: Served) -> list[Event]:
    """What a new client is told first: the generation, the horizon and the watermark as
    they are."""
    return [
        Event(GENERATION, _json(served.describe())),
        Event(HORIZON, _json(_horizon_document(served.reader.version))),
        Event(WATERMARK, _json(_watermark_document(served.tables))),
    ]


def _json(document: dict[str, Any]) -> str:
    return json.dumps(document, separators=(",", ":"), default=str)


def _maybe_instant(moment: datetime | None) -> str | None:
    return wire_instant(moment) if moment is not None else None


def _horizon_document(version: BatchVersion | None) -> dict[str, Any]:
    return {
        "batch_version": version.version if version else None,
        "horizon": _maybe_instant(version.horizon if version else None),
        "corrections": version.corrections if version else None,
    }


def _watermark_document(tables: SpeedTables) -> dict[str, Any]:
    watermark = tables.watermark
    return {
        "speed_watermark": _maybe_instant(watermark),
        "final_before": {
            view.name: _maybe_instant(tables.final_before(view, watermark)) for view in VIEWS
        },
        "final_column": {view.name: view.final.column for view in VIEWS},
    }


def heartbeat_status(served: Served) -> dict[str, Any]:
    """A ``heartbeat`` event's: the speed consumer's health and lag."""
    consumer = served.consumer
    return {
        "time": wire_instant(datetime.now(UTC)),
        "speed_consumer_following": consumer.following if consumer else False,
        "speed_caught_up": consumer.caught_up.is_set() if consumer else False,
        "speed_lag_records": consumer.lag if consumer else None,
        "speed_error": consumer.error if consumer else None,
    }


FOLLOW_S = 1.0
"""How soon an open stream notices that another generation is served."""

ANNOUNCE_EVERY_S = 0.5
"""How often the stream looks for a new batch version or speed watermark to announce."""


async def announce(app: FastAPI) -> None:
    """Run with the app: tell the clients of each new batch version (``horizon``) and
    speed watermark of the generation served, and keep each hub's horizon (rows below it
    are not sent)."""
    generations: Generations = app.state.generations
    announced: tuple[Any, ...] = ()
    served = generations.active
    watermark = served.tables.watermark
    while True:
        if generations.active is not served:  # the clients move over themselves
            served = generations.active
            announced, watermark = (), served.tables.watermark
        for held in generations.all:
            version = held.reader.version
            held.hub.horizon = naive_utc(version.horizon) if version else None
        version = served.reader.version
        now = (version.version, version.horizon) if version else ()
        if now != announced:
            if announced or now:
                served.hub.announce(HORIZON, _horizon_document(version))
            announced = now
        if served.tables.watermark != watermark:
            watermark = served.tables.watermark
            served.hub.announce(WATERMARK, _watermark_document(served.tables))
        await asyncio.sleep(ANNOUNCE_EVERY_S)


class EventStream(Response):
    """The stream of one client: its events, heartbeats; ends when the client goes, or
    aborts the connection if the hub dropped it."""

    media_type = "text/event-stream"

    def __init__(
        self, generations: Generations, served: Served, client: Client, heartbeat_s: float
    ):
        super().__init__(
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            media_type=self.media_type,
        )
        self.raw_headers = [h for h in self.raw_headers if h[0] != b"content-length"]  # open-ended
        self.generations, self.served = generations, served
        self.client, self.heartbeat_s = client, heartbeat_s

    @property
    def hub(self) -> StreamHub:
        return self.served.hub

    def _follow_generation(self) -> None:
        """Another generation is served: leave the old one's hub for the new one's, told
        ``generation``, then ``reset`` (its rows are of other topics: reload), the
        horizon and the watermark."""
        old, self.served = self.served, self.generations.active
        old.hub.unsubscribe(self.client)
        reason = _json({"reason": f"generation {self.served.number} is served now"})
        introduction = [greeting(self.served)[0], Event(RESET, reason), *greeting(self.served)[1:]]
        self.client = self.hub.subscribe(self.client.views, None, ())
        self.client.first = [
            wire(event, "" if event.kind == RESET else None) for event in introduction
        ]
        log_event(logger, "stream_generation", old=old.number, new=self.served.number)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        tasks = {
            asyncio.create_task(self._send_events(send)),
            asyncio.create_task(self._until_disconnect(receive)),
            asyncio.create_task(self._until_dropped()),
        }
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            # the server is stopping (``lambdaline serve``'s shutdown grace is over): end the
            # stream as a stream ends, so that its client reconnects elsewhere
            log_event(logger, "stream_ended", why="the server is stopping")
        finally:
            for task in tasks:
                task.cancel()
            self.hub.unsubscribe(self.client)
        if self.client.dropped.is_set() and ABORT in scope:
            scope[ABORT]()
            return
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _send_events(self, send: Send) -> None:
        """Write what the client has to read, a chunk at a time; a heartbeat when nothing
        was written for ``heartbeat_s``; the next generation's events once it is served."""
        sent = time.monotonic()
        while True:
            if self.generations.active is not self.served:
                self._follow_generation()
            chunk = self.hub.take(self.client)
            if not chunk and await self.hub.news(min(self.heartbeat_s, FOLLOW_S)):
                continue
            if not chunk and time.monotonic() - sent >= self.heartbeat_s:
                heartbeat = Event(HEARTBEAT, json.dumps(heartbeat_status(self.served), default=str))
                chunk = [wire(heartbeat, None)]
            if chunk:
                await send(
                    {"type": "http.response.body", "body": b"".join(chunk), "more_body": True}
                )
                sent = time.monotonic()

    async def _until_dropped(self) -> None:
        """Return once the hub drops the client (the one of the generation served)."""
        while True:
            client = self.client
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(client.dropped.wait(), FOLLOW_S)
            if self.client.dropped.is_set():
                return

    @staticmethod
    async def _until_disconnect(receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass


@router.get(
    "/stream",
    response_model=None,
    responses={
        200: {"content": {"text/event-stream": {}}, "description": "Server-Sent Events"},
        503: {
            "model": Problem,
            "description": "the worker streams to `serving_stream_clients` clients already",
            "headers": {"Retry-After": RETRY_AFTER},
        },
    },
)
async def stream(
    request: Request,
    views: Annotated[
        str,
        Query(
            description=f"comma-separated views whose speed rows to send: {', '.join(VIEW_NAMES)}"
        ),
    ] = "booth_stats,expired_registrations",
    last_event_id: Annotated[
        str | None, Header(description="resume after this event (what a browser sends again)")
    ] = None,
) -> Response:
    """Speed rows as this worker materialises them (`row`), with `generation`, `horizon`,
    `watermark`, `heartbeat` and `reset` events; ids say where in the speed topics (of
    which generation) a row came from."""
    asked = frozenset(filter(None, (name.strip() for name in views.split(","))))
    unknown = sorted(asked - set(VIEW_NAMES))
    if unknown or not asked:
        raise invalid_query("views", views, f"unknown view(s) {', '.join(unknown) or '(none)'}; "
                            f"choose from {', '.join(VIEW_NAMES)}")  # fmt: skip
    generations: Generations = request.app.state.generations
    served = generations.active
    serving = served.settings.serving
    resume, resume_generation = None, 1
    if last_event_id:  # "" (what a reset sets): from now on
        try:
            if len(last_event_id) > serving.token_bytes:
                raise BadEventIdError(
                    f"{len(last_event_id)} characters; at most {serving.token_bytes} are read "
                    "(serving_token_bytes)"
                )
            resume_generation, resume = decode_id(last_event_id, serving.token_partitions)
        except BadEventIdError as error:
            raise invalid_input(
                "header", "last-event-id", last_event_id[:100], f"not an id of this stream: {error}"
            ) from None
    hub = served.hub
    if len(hub.clients) >= serving.stream_clients:
        raise HTTPException(
            503, detail=f"this worker streams to {len(hub.clients)} clients, its most "
            "(serving_stream_clients); try again, or another worker",
            headers=retry_after(STREAM_RETRY_S),
        )  # fmt: skip
    client = hub.subscribe(asked, resume, greeting(served), resume_generation)
    return EventStream(generations, served, client, serving.stream_heartbeat.total_seconds())


STREAM_RETRY_S = 5.0
"""The ``Retry-After`` of a stream refused for having too many clients."""
