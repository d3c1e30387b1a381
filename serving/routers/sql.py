"""``POST /v1/sql``: one read-only query over the merged views (:mod:`serving.sql`)."""

from __future__ import annotations

import asyncio

from fastapi import HTTPException, Request, Response
from starlette.concurrency import run_in_threadpool

from serving.deps import (
    RETRY_AFTER,
    BatchReaderDep,
    ServedDep,
    SettingsDep,
    SpeedConsumerDep,
    SpeedDep,
    keyed_router,
    worker_token,
)
from serving.limits import retry_after
from serving.models import Problem, SqlRequest, SqlResponse
from serving.responses import wire_instant
from serving.sql import SqlLimits, SqlRefusedError, SqlSandbox

router = keyed_router("/v1", "sql")


def _slots(request: Request, most: int) -> asyncio.Semaphore:
    """The worker's count of queries running (``serving_sql_concurrency``)."""
    state = request.app.state
    slots: asyncio.Semaphore | None = getattr(state, "sql_slots", None)
    if slots is None:
        slots = state.sql_slots = asyncio.Semaphore(most)
    return slots


@router.post(
    "/sql",
    response_model=SqlResponse,
    responses={
        400: {"model": Problem, "description": "not one SELECT of the views, or DuckDB's error"},
        413: {"model": Problem, "description": "the body is over `serving_max_body_bytes`"},
        429: {
            "model": Problem,
            "description": "`serving_sql_concurrency` queries already run on this worker, "
            "or the key is over `serving_rate_per_key`",
            "headers": {"Retry-After": RETRY_AFTER},
        },
    },
)
async def sql(
    body: SqlRequest,
    request: Request,
    generation: ServedDep,
    settings: SettingsDep,
    reader: BatchReaderDep,
    speed: SpeedDep,
    consumer: SpeedConsumerDep,
) -> Response:
    """Run one read-only query over the merged views, in a sandbox with no file, network,
    extension, setting or other table within reach; at most `sql_rows` rows and
    `sql_answer_mb` megabytes, interrupted after `sql_timeout`."""
    serving = settings.serving
    slots = _slots(request, serving.sql_concurrency)
    if slots.locked():  # checked and taken with no await between: no other request in between
        raise HTTPException(
            429, detail=f"{serving.sql_concurrency} queries already run on this worker "
            "(serving_sql_concurrency)", headers=retry_after(1),
        )  # fmt: skip
    limits = SqlLimits(
        rows=serving.sql_rows, answer_bytes=serving.sql_answer_mb * 2**20,
        timeout=serving.sql_timeout, memory_mb=serving.sql_memory_mb,
    )  # fmt: skip
    async with slots:
        with reader.snapshot() as batch:
            horizon = batch.version.horizon if batch is not None else None
            watermark = speed.watermark
            head = {
                "horizon": wire_instant(horizon) if horizon else None,
                "batch_version": batch.version.version if batch is not None else None,
                "generation": generation.number,
                "speed_watermark": wire_instant(watermark) if watermark else None,
                "consistency": worker_token(
                    batch.version if batch else None, consumer, generation.number
                ).encode(),
            }
            sandbox = SqlSandbox(batch.path if batch is not None else None, limits.memory_mb)
            try:
                answer = await run_in_threadpool(
                    sandbox.run, body.query, speed, horizon, limits, head
                )
            except SqlRefusedError as error:
                raise HTTPException(400, detail=str(error)) from None
    return Response(answer, media_type="application/json")
