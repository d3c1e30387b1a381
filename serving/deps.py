"""Dependencies of the endpoints: settings, the two stores, the API key, the time range.

They do no blocking I/O, so they are ``async``: FastAPI runs them on the event
loop instead of handing each to the thread pool (a thread hop per dependency
per request). The endpoints are ``async`` too: they answer from the batch
version's result cache, and read one key's day from DuckDB, on the event loop,
and hand larger reads (DuckDB blocks) to the thread pool
(``serving.responses.view_rows``).
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.security import APIKeyHeader

from serving.batch_reader import BatchReader, BatchSnapshot
from serving.models import Problem
from serving.speed_consumer import SpeedConsumer
from serving.speed_tables import SpeedTables
from shared.settings import Settings


async def app_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


SettingsDep = Annotated[Settings, Depends(app_settings)]


async def batch_reader(request: Request) -> BatchReader:
    reader: BatchReader = request.app.state.batch_reader
    return reader


BatchReaderDep = Annotated[BatchReader, Depends(batch_reader)]


async def batch_snapshot(reader: BatchReaderDep) -> AsyncIterator[BatchSnapshot | None]:
    """The batch version current when the request started, held until it ends."""
    with reader.snapshot() as snapshot:
        yield snapshot


BatchDep = Annotated[BatchSnapshot | None, Depends(batch_snapshot)]


async def speed_tables(request: Request) -> SpeedTables:
    tables: SpeedTables = request.app.state.speed_tables
    return tables


SpeedDep = Annotated[SpeedTables, Depends(speed_tables)]


async def speed_consumer(request: Request) -> SpeedConsumer | None:
    consumer: SpeedConsumer | None = request.app.state.speed_consumer
    return consumer


SpeedConsumerDep = Annotated[SpeedConsumer | None, Depends(speed_consumer)]


API_KEY_HEADER = APIKeyHeader(
    name="X-API-Key", auto_error=False, description="one of LAMBDALINE_API_KEYS"
)
"""The scheme /docs offers under "Authorize" (a declaration; it holds no state)."""


async def require_api_key(
    settings: SettingsDep, x_api_key: Annotated[str | None, Security(API_KEY_HEADER)]
) -> None:
    """Every /v1 route: the X-API-Key header must be one of the configured keys."""
    if x_api_key is None or not any(
        secrets.compare_digest(x_api_key, key) for key in settings.serving.api_keys
    ):
        raise HTTPException(401, detail="missing or unknown X-API-Key")


def keyed_router(prefix: str, tag: str) -> APIRouter:
    """A router of /v1 routes: each needs the API key, and its OpenAPI says so (401)."""
    return APIRouter(
        prefix=prefix,
        tags=[tag],
        dependencies=[Depends(require_api_key)],
        responses={401: {"model": Problem, "description": "X-API-Key missing or unknown"}},
    )


def invalid_query(name: str, value: Any, message: str) -> RequestValidationError:
    """A 422 of the same shape as FastAPI's own (the one /docs documents): one list of
    ``{type, loc, msg, input}``, whether pydantic or a rule of ours found the fault."""
    error = {"type": "value_error", "loc": ("query", name), "msg": message, "input": value}
    return RequestValidationError([error])


@dataclass(frozen=True)
class TimeRange:
    """``from`` and ``to`` in UTC (given with any zone), from <= to; rows in [from, to)."""

    start: datetime
    end: datetime


async def time_range(
    start: Annotated[datetime, Query(alias="from", description="ISO-8601 instant, inclusive")],
    end: Annotated[datetime, Query(alias="to", description="ISO-8601 instant, exclusive")],
) -> TimeRange:
    """The request's ``from``/``to`` (a function, not a class dependency: FastAPI runs a
    class's ``__init__`` in the thread pool, a thread hop per request for no I/O)."""
    instants = []
    for name, moment in (("from", start), ("to", end)):
        if moment.tzinfo is None:
            raise invalid_query(
                name, moment.isoformat(), "must carry a time zone, e.g. 2026-01-05T00:00:00Z"
            )
        try:
            instants.append(moment.astimezone(UTC))
        except OverflowError:  # e.g. 0001-01-01T00:00:00+01:00 is in year 0 in UTC
            raise invalid_query(
                name, moment.isoformat(), "must lie in the years 1 to 9999 in UTC"
            ) from None
    if start > end:  # aware instants compare as instants, whatever their zones
        raise invalid_query("to", end.isoformat(), "must not be before from")
    return TimeRange(*instants)


TimeRangeDep = Annotated[TimeRange, Depends(time_range)]
Limit = Annotated[
    int,
    Query(
        ge=1,
        le=100_000,
        description="at most this many rows (the response's `truncated` says if there were more)",
    ),
]
