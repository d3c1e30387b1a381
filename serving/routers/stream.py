"""``GET /v1/stream``: Server-Sent Events of speed rows, horizons and watermarks
(:mod:`serving.stream`)."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import FastAPI, Header, HTTPException, Query, Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from serving.batch_reader import BatchReader
from serving.deps import RETRY_AFTER, invalid_input, invalid_query, keyed_router
from serving.limits import retry_after
from serving.models import Problem
from serving.queries import naive_utc
from serving.responses import wire_instant
from serving.speed_consumer import SpeedConsumer
from serving.stream import (
    HEARTBEAT,
    HORIZON,
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


def greeting(app: FastAPI) -> list[Event]:
    """What a new client is told first: the horizon and the watermark as they are."""
    return [
        Event(HORIZON, _json(_horizon_document(app.state.batch_reader.version))),
        Event(WATERMARK, _json(_watermark_document(app.state.speed_tables))),
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


def heartbeat_status(app: FastAPI) -> dict[str, Any]:
    """A ``heartbeat`` event's: the speed consumer's health and lag."""
    consumer: SpeedConsumer | None = app.state.speed_consumer
    return {
        "time": wire_instant(datetime.now(UTC)),
        "speed_consumer_following": consumer.following if consumer else False,
        "speed_caught_up": consumer.caught_up.is_set() if consumer else False,
        "speed_lag_records": consumer.lag if consumer else None,
        "speed_error": consumer.error if consumer else None,
    }


ANNOUNCE_EVERY_S = 0.5
"""How often the stream looks for a new batch version or speed watermark to announce."""


async def announce(app: FastAPI) -> None:
    """Run with the app: tell the clients of each new batch version (``horizon``) and
    speed watermark, and keep the hub's horizon (rows below it are not sent)."""
    hub: StreamHub = app.state.stream_hub
    reader: BatchReader = app.state.batch_reader
    tables: SpeedTables = app.state.speed_tables
    announced: tuple[Any, ...] = ()
    watermark = tables.watermark
    while True:
        version = reader.version
        hub.horizon = naive_utc(version.horizon) if version else None
        now = (version.version, version.horizon) if version else ()
        if now != announced:
            if announced or now:
                hub.announce(HORIZON, _horizon_document(version))
            announced = now
        if tables.watermark != watermark:
            watermark = tables.watermark
            hub.announce(WATERMARK, _watermark_document(tables))
        await asyncio.sleep(ANNOUNCE_EVERY_S)


class EventStream(Response):
    """The stream of one client: its events, heartbeats; ends when the client goes, or
    aborts the connection if the hub dropped it."""

    media_type = "text/event-stream"

    def __init__(self, hub: StreamHub, client: Client, heartbeat_s: float, status: Any):
        super().__init__(
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            media_type=self.media_type,
        )
        self.raw_headers = [h for h in self.raw_headers if h[0] != b"content-length"]  # open-ended
        self.hub, self.client, self.heartbeat_s, self.status = hub, client, heartbeat_s, status

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        tasks = {
            asyncio.create_task(self._send_events(send)),
            asyncio.create_task(self._until_disconnect(receive)),
            asyncio.create_task(self.client.dropped.wait()),
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
        has come for ``heartbeat_s``."""
        while True:
            chunk = self.hub.take(self.client)
            if chunk:
                await send(
                    {"type": "http.response.body", "body": b"".join(chunk), "more_body": True}
                )
                continue
            if not await self.hub.news(self.heartbeat_s):
                heartbeat = Event(HEARTBEAT, json.dumps(self.status(), default=str))
                await send(
                    {"type": "http.response.body", "body": wire(heartbeat, None), "more_body": True}
                )

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
    """Speed rows as this worker materialises them (`row`), with `horizon`, `watermark`,
    `heartbeat` and `reset` events; ids say where in the speed topics a row came from."""
    asked = frozenset(filter(None, (name.strip() for name in views.split(","))))
    unknown = sorted(asked - set(VIEW_NAMES))
    if unknown or not asked:
        raise invalid_query("views", views, f"unknown view(s) {', '.join(unknown) or '(none)'}; "
                            f"choose from {', '.join(VIEW_NAMES)}")  # fmt: skip
    state = request.app.state
    serving = state.settings.serving
    resume = None
    if last_event_id:  # "" (what a reset sets): from now on
        try:
            if len(last_event_id) > serving.token_bytes:
                raise BadEventIdError(
                    f"{len(last_event_id)} characters; at most {serving.token_bytes} are read "
                    "(serving_token_bytes)"
                )
            resume = decode_id(last_event_id, serving.token_partitions)
        except BadEventIdError as error:
            raise invalid_input(
                "header", "last-event-id", last_event_id[:100], f"not an id of this stream: {error}"
            ) from None
    hub: StreamHub = state.stream_hub
    if len(hub.clients) >= serving.stream_clients:
        raise HTTPException(
            503, detail=f"this worker streams to {len(hub.clients)} clients, its most "
            "(serving_stream_clients); try again, or another worker",
            headers=retry_after(STREAM_RETRY_S),
        )  # fmt: skip
    client = hub.subscribe(asked, resume, greeting(request.app))
    heartbeat = serving.stream_heartbeat.total_seconds()
    return EventStream(hub, client, heartbeat, lambda: heartbeat_status(request.app))


STREAM_RETRY_S = 5.0
"""The ``Retry-After`` of a stream refused for having too many clients."""
