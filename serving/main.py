"""The FastAPI application: created by a factory, stores started in its lifespan.

``uvicorn serving.main:create_app --factory`` (what ``lambdaline serve`` runs)
builds one app per worker process; each opens the batch store and its own
speed-store consumer. Tests pass their own stores instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from serving.batch_reader import BatchReader
from serving.metrics import (
    LatencyMiddleware,
    Metrics,
    multiprocess_mode,
    process_stopped,
    refresh_gauges,
)
from serving.metrics import router as metrics_router
from serving.routers import alerts, booths, diagnostics, status, vehicles
from serving.speed_consumer import SpeedConsumer
from serving.speed_tables import SpeedTables
from shared.settings import Settings, get_settings


def create_app(
    settings: Settings | None = None,
    batch_reader: BatchReader | None = None,
    speed_tables: SpeedTables | None = None,
    follow_kafka: bool = True,
) -> FastAPI:
    """The API; stores not given are created from settings and started with the app."""
    settings = settings or get_settings()
    tables = speed_tables or SpeedTables()
    reader = batch_reader or BatchReader(
        settings.batch_store, cache_bytes=settings.serving_cache_mb * 2**20
    )
    consumer = SpeedConsumer(settings, tables) if follow_kafka else None

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        reader.start()
        if consumer is not None:
            consumer.start()
        # one of several workers: its gauges must be current whichever worker a scrape reaches
        refresher = asyncio.create_task(_refresh_gauges(app)) if multiprocess_mode() else None
        try:
            yield
        finally:
            if refresher is not None:
                refresher.cancel()
            if consumer is not None:
                consumer.stop()
            reader.stop()
            process_stopped()

    app = FastAPI(
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
    for router in (booths.router, vehicles.router, alerts.router, diagnostics.router):
        app.include_router(router)
    app.include_router(status.router)
    app.include_router(metrics_router)
    return app


async def _refresh_gauges(app: FastAPI) -> None:
    while True:
        refresh_gauges(app)
        await asyncio.sleep(1.0)
