"""``POST /v1/sql``: one read-only query over the merged views (:mod:`serving.sql`)."""

from __future__ import annotations

import threading
from typing import Any

from fastapi import HTTPException, Request, Response
from starlette.concurrency import run_in_threadpool

from serving.batch_reader import BatchSnapshot
from serving.deps import SettingsDep, SpeedConsumerDep, SpeedDep, keyed_router, worker_token
from serving.models import Problem, SqlRequest, SqlResponse
from serving.responses import wire_instant
from serving.sql import SqlAnswer, SqlRefusedError, SqlSandbox, check_read_only, encode_answer
from shared.platform.speed_tables import SpeedTables
from shared.settings import Settings

router = keyed_router("/v1", "sql")


def _sandbox(app_state: Any, batch: BatchSnapshot | None, settings: Settings) -> SqlSandbox:
    """The sandbox of the batch version ``batch`` (built on first use, closed with it), or
    the app's sandbox of none."""
    memory = settings.serving.sql_memory_mb

    def make() -> SqlSandbox:
        return SqlSandbox(batch.path if batch is not None else None, memory)

    if batch is not None:
        return batch.kept("sql", make, SqlSandbox.intact)
    with _NO_VERSION_LOCK:
        held: SqlSandbox | None = getattr(app_state, "sql_sandbox", None)
        if held is None:
            held = app_state.sql_sandbox = make()
    return held


_NO_VERSION_LOCK = threading.Lock()


def _answer(
    app_state: Any, speed: SpeedTables, batch: BatchSnapshot | None, query: str,
    settings: Settings,
) -> SqlAnswer:  # fmt: skip
    """Build (or reuse) the sandbox, define the views, run the query: all blocking."""
    box = _sandbox(app_state, batch, settings)
    horizon = batch.version.horizon if batch is not None else None
    cursor = box.views_cursor(speed, horizon, query)
    return box.run(cursor, query, settings.serving.sql_rows, settings.serving.sql_timeout)


@router.post(
    "/sql",
    response_model=SqlResponse,
    responses={400: {"model": Problem, "description": "not one SELECT, or DuckDB's error"}},
)
async def sql(
    body: SqlRequest,
    request: Request,
    settings: SettingsDep,
    speed: SpeedDep,
    consumer: SpeedConsumerDep,
) -> Response:
    """Run one read-only query over the merged views, in a sandbox with no file, network,
    extension or setting within reach; at most `sql_rows` rows, interrupted after
    `sql_timeout`."""
    try:
        check_read_only(body.query)
    except SqlRefusedError as error:
        raise HTTPException(400, detail=str(error)) from None
    reader = request.app.state.batch_reader
    with reader.snapshot() as batch:
        token = worker_token(batch.version if batch is not None else None, consumer).encode()
        watermark = speed.watermark
        try:
            answer = await run_in_threadpool(
                _answer, request.app.state, speed, batch, body.query, settings
            )
        except SqlRefusedError as error:
            raise HTTPException(400, detail=str(error)) from None
        horizon = batch.version.horizon if batch is not None else None
    head = {
        "horizon": wire_instant(horizon) if horizon else None,
        "batch_version": batch.version.version if batch is not None else None,
        "speed_watermark": wire_instant(watermark) if watermark else None,
        "consistency": token,
    }
    return Response(encode_answer(answer, head), media_type="application/json")
