"""The FastAPI application: created by a factory, stores started in its lifespan.

``uvicorn serving.main:create_app --factory`` (what ``lambdaline serve`` runs)
builds one app per worker process; each opens the batch store and its own
speed-store consumer. Tests pass their own stores instead.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path

import duckdb
from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from fastapi_offline import FastAPIOffline
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from serving.batch_reader import BatchReader
from serving.deps import ConflictError
from serving.generations import Generations, served_stores
from serving.limits import KeyRates, RequestLimits
from serving.metrics import (
    LatencyMiddleware,
    Metrics,
    forget_dead_workers,
    multiprocess_mode,
    process_stopped,
    refresh_gauges,
)
from serving.metrics import router as metrics_router
from serving.queries import naive_utc
from serving.routers import (
    alerts,
    booths,
    diagnostics,
    sql,
    status,
    stream,
    vehicles,
    versions,
    views,
)
from serving.routers.stream import ABORT
from shared.platform.logs import log_event
from shared.platform.speed_tables import SpeedTables
from shared.settings import Settings, get_settings

logger = logging.getLogger("lambdaline.serving")

PRUNE_EVERY_S = 60.0
"""How often the API deletes the speed rows it can no longer use (``_prune_speed_store``)."""


def create_app(
    settings: Settings | None = None,
    batch_reader: BatchReader | None = None,
    speed_tables: SpeedTables | None = None,
    follow_kafka: bool = True,
) -> FastAPI:
    """The API; stores not given are created from settings and started with the app.

    Without stores given, it serves the generation ``ACTIVE`` names and follows it
    (:mod:`serving.generations`); with them, those stores only."""
    settings = settings or get_settings()
    fixed = None
    if batch_reader is not None or speed_tables is not None:
        fixed = served_stores(settings, None, follow_kafka, batch_reader, speed_tables)
    generations = Generations(settings, follow_kafka, fixed)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        generations.start(asyncio.get_running_loop())
        tasks = [
            asyncio.create_task(_prune_speed_store(generations, settings.speed.retention)),
            asyncio.create_task(stream.announce(app)),
            asyncio.create_task(generations.follow()),
            asyncio.create_task(generations.follow_input_ends()),
        ]
        if multiprocess_mode():  # its gauges must be current whichever worker a scrape reaches
            tasks.append(asyncio.create_task(_refresh_gauges(app)))
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            generations.stop()
            process_stopped()

    # /docs and /redoc with their scripts served by the app itself: FastAPI's own
    # pages load them from a CDN, which a host without Internet access never reaches
    app = FastAPIOffline(
        title="lambdaline",
        summary="Batch truth merged with speed-layer results at a published horizon.",
        version="0.1.0",
        lifespan=lifespan,
    )
    build_stack = app.build_middleware_stack  # outside Starlette's own error handling,
    # whose `send` is its own: uvicorn's must be reached
    app.build_middleware_stack = lambda: AbortableConnections(  # type: ignore[method-assign]
        RequestLimits(build_stack(), settings.serving)
    )
    app.state.settings = settings
    app.state.generations = generations
    app.state.metrics = Metrics()
    generations.on_drop = app.state.metrics.stream_dropped.inc
    app.state.key_rates = KeyRates(settings.serving.rate_per_key)
    app.add_middleware(LatencyMiddleware, metrics=app.state.metrics)
    app.add_exception_handler(ConflictError, _conflict)  # type: ignore[arg-type]
    for router in (
        booths.router, vehicles.router, alerts.router, diagnostics.router, status.keyed,
        versions.router, sql.router, stream.router, views.router,
    ):  # fmt: skip
        app.include_router(router)
    app.include_router(status.router)
    app.include_router(metrics_router)
    app.mount("/dashboard", StaticFiles(directory=DASHBOARD), name="dashboard")
    app.add_api_route("/", _dashboard, include_in_schema=False)
    return app


DASHBOARD = Path(__file__).parent / "dashboard"
"""The dashboard's page, script and style: in the package, so it needs no other host."""


async def _dashboard() -> FileResponse:
    """The dashboard (it asks for the API key, then reads /v1 with it)."""
    return FileResponse(DASHBOARD / "index.html")


class AbortableConnections:
    """Outermost ASGI layer: gives each HTTP request a way to abort its connection
    (``serving.routers.stream.ABORT``).

    An ASGI app that stops answering leaves the server to ``close()`` the
    connection, and asyncio closes it only once its unsent bytes are written:
    a stream client that never reads would keep its connection, and its
    buffers, for good. uvicorn's ``send`` is its request cycle's, whose
    transport can ``abort()`` at once; under another server nothing is added,
    and a stream dropped for being slow ends as that server ends a response.
    """

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        transport = getattr(getattr(send, "__self__", None), "transport", None)
        if scope["type"] == "http" and hasattr(transport, "abort"):
            scope[ABORT] = transport.abort  # type: ignore[union-attr]
        await self.app(scope, receive, send)


async def _conflict(request: Request, error: ConflictError) -> JSONResponse:
    """409 with what the request asked that this worker could not give (``after=``,
    ``max_staleness=``)."""
    return JSONResponse(error.conflict.model_dump(mode="json"), status_code=409)


async def _refresh_gauges(app: FastAPI) -> None:
    while True:
        refresh_gauges(app)
        forget_dead_workers()
        await asyncio.sleep(1.0)


async def _prune_speed_store(generations: Generations, retention: timedelta) -> None:
    """Keep the speed stores bounded: every ``PRUNE_EVERY_S``, delete each generation's
    speed rows before H - ``retention`` (H: its served batch horizon; nothing without a
    version).

    Rows below H are never served from the speed store (the merge rule), so only a
    rollback could want them, and the speed topics themselves keep no more than
    ``retention``: a process started now would not hold them either. Without this, a
    long-running API would keep every speed row it ever read.
    """
    while True:
        for served in generations.all:
            version = served.reader.version
            if version is None:
                continue
            before = naive_utc(version.horizon - retention)
            try:
                deleted = await run_in_threadpool(served.tables.prune, before)
            except duckdb.Error as error:  # the store keeps serving; say why, try again later
                log_event(logger, "speed_prune_failed", before=before, error=str(error))
            else:
                if any(deleted.values()):
                    log_event(
                        logger, "speed_rows_pruned", generation=served.number, before=before,
                        rows=deleted,
                    )  # fmt: skip
        await asyncio.sleep(PRUNE_EVERY_S)
