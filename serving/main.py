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

import duckdb
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi_offline import FastAPIOffline
from starlette.concurrency import run_in_threadpool

from serving.batch_reader import BatchReader
from serving.deps import ConflictError
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
from serving.routers import alerts, booths, diagnostics, sql, status, vehicles, versions
from serving.speed_consumer import SpeedConsumer
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
    """The API; stores not given are created from settings and started with the app."""
    settings = settings or get_settings()
    threads = settings.serving.duckdb_threads
    tables = speed_tables or SpeedTables(threads, settings.views)
    reader = batch_reader or BatchReader(
        settings.batch_store, cache_bytes=settings.serving.cache_mb * 2**20, threads=threads
    )
    consumer = SpeedConsumer(settings, tables) if follow_kafka else None

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        reader.start()
        if consumer is not None:
            consumer.start()
        tasks = [asyncio.create_task(_prune_speed_store(reader, tables, settings.speed.retention))]
        if multiprocess_mode():  # its gauges must be current whichever worker a scrape reaches
            tasks.append(asyncio.create_task(_refresh_gauges(app)))
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            if consumer is not None:
                consumer.stop()
            reader.stop()
            if (sandbox := getattr(app.state, "sql_sandbox", None)) is not None:
                sandbox.close()  # the one of no batch version; a version's closes with it
            process_stopped()

    # /docs and /redoc with their scripts served by the app itself: FastAPI's own
    # pages load them from a CDN, which a host without Internet access never reaches
    app = FastAPIOffline(
        title="lambdaline",
        summary="Batch truth merged with speed-layer results at a published horizon.",
        version="0.1.0",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.batch_reader = reader
    app.state.speed_tables = tables
    app.state.speed_consumer = consumer
    app.state.metrics = Metrics()
    app.add_middleware(LatencyMiddleware, metrics=app.state.metrics)
    app.add_exception_handler(ConflictError, _conflict)  # type: ignore[arg-type]
    for router in (
        booths.router, vehicles.router, alerts.router, diagnostics.router, status.keyed,
        versions.router, sql.router,
    ):  # fmt: skip
        app.include_router(router)
    app.include_router(status.router)
    app.include_router(metrics_router)
    return app


async def _conflict(request: Request, error: ConflictError) -> JSONResponse:
    """409 with what the request asked that this worker could not give (``after=``,
    ``max_staleness=``)."""
    return JSONResponse(error.conflict.model_dump(mode="json"), status_code=409)


async def _refresh_gauges(app: FastAPI) -> None:
    while True:
        refresh_gauges(app)
        forget_dead_workers()
        await asyncio.sleep(1.0)


async def _prune_speed_store(
    reader: BatchReader, tables: SpeedTables, retention: timedelta
) -> None:
    """Keep the speed store bounded: every ``PRUNE_EVERY_S``, delete the speed rows
    before H - ``retention`` (H: the served batch horizon; nothing without a version).

    Rows below H are never served from the speed store (the merge rule), so only a
    rollback could want them, and the speed topics themselves keep no more than
    ``retention``: a process started now would not hold them either. Without this, a
    long-running API would keep every speed row it ever read.
    """
    while True:
        version = reader.version
        if version is not None:
            before = naive_utc(version.horizon - retention)
            try:
                deleted = await run_in_threadpool(tables.prune, before)
            except duckdb.Error as error:  # the store keeps serving; say why, try again later
                log_event(logger, "speed_prune_failed", before=before, error=str(error))
            else:
                if any(deleted.values()):
                    log_event(logger, "speed_rows_pruned", before=before, rows=deleted)
        await asyncio.sleep(PRUNE_EVERY_S)
