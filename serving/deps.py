"""Dependencies of the endpoints: settings, the two stores, the API key, the time range.

They do no blocking I/O, so they are ``async``: FastAPI runs them on the event
loop instead of handing each to the thread pool (a thread hop per dependency
per request). The endpoints are ``async`` too: they answer from the batch
version's result cache, and read one key's day from DuckDB, on the event loop,
and hand larger reads (DuckDB blocks) to the thread pool
(``serving.responses.view_rows``).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.security import APIKeyHeader

from serving.batch_reader import BatchReader, BatchSnapshot, VersionRefusedError
from serving.consistency import BadTokenError, ConsistencyToken
from serving.generations import Generations, Served
from serving.limits import KeyRates, retry_after
from serving.models import Conflict, Problem
from serving.speed_consumer import SpeedConsumer
from shared.platform.batch_store import BatchVersion
from shared.platform.speed_tables import SpeedTables
from shared.settings import Settings


async def served(request: Request) -> Served:
    """The generation a request reads, taken once when it starts (FastAPI gives every
    dependency of one request the same value): a switch of generation happens between
    requests, never within one (:mod:`serving.generations`)."""
    generations: Generations = request.app.state.generations
    return generations.active


ServedDep = Annotated[Served, Depends(served)]


async def app_settings(generation: ServedDep) -> Settings:
    """The settings of the generation served: the API's, with its view settings."""
    return generation.settings


SettingsDep = Annotated[Settings, Depends(app_settings)]


async def batch_reader(generation: ServedDep) -> BatchReader:
    return generation.reader


BatchReaderDep = Annotated[BatchReader, Depends(batch_reader)]


async def speed_tables(generation: ServedDep) -> SpeedTables:
    return generation.tables


SpeedDep = Annotated[SpeedTables, Depends(speed_tables)]


async def speed_consumer(generation: ServedDep) -> SpeedConsumer | None:
    return generation.consumer


SpeedConsumerDep = Annotated[SpeedConsumer | None, Depends(speed_consumer)]


API_KEY_HEADER = APIKeyHeader(
    name="X-API-Key", auto_error=False, description="one of LAMBDALINE_API_KEYS"
)
"""The scheme /docs offers under "Authorize" (a declaration; it holds no state)."""


async def require_api_key(
    request: Request,
    settings: SettingsDep,
    x_api_key: Annotated[str | None, Security(API_KEY_HEADER)],
) -> None:
    """Every /v1 route: the X-API-Key header must be one of the configured keys, and the
    key within its rate (``serving_rate_per_key``)."""
    # compared as bytes: compare_digest refuses a str holding non-ASCII characters
    if x_api_key is None or not any(
        secrets.compare_digest(x_api_key.encode(), key.encode())
        for key in settings.serving.api_keys
    ):
        raise HTTPException(401, detail="missing or unknown X-API-Key")
    rates: KeyRates = request.app.state.key_rates
    if wait := rates.take(x_api_key):
        raise HTTPException(
            429, detail=f"this X-API-Key made more than {rates.rate:g} requests a second "
            "(serving_rate_per_key)", headers=retry_after(wait),
        )  # fmt: skip


RETRY_AFTER = {"description": "seconds to wait", "schema": {"type": "integer"}}


def keyed_router(prefix: str, tag: str, views: bool = False) -> APIRouter:
    """A router of /v1 routes: each needs the API key, and its OpenAPI says so (401);
    ``views``: routes that read the stores (:data:`StoresDep`), with its answers."""
    responses: dict[int | str, dict[str, Any]] = {
        401: {"model": Problem, "description": "X-API-Key missing or unknown"},
        429: {
            "model": Problem,
            "description": "the key made more than `serving_rate_per_key` requests a second",
            "headers": {"Retry-After": RETRY_AFTER},
        },
    }
    if views:
        responses |= {
            404: {"model": Problem, "description": "the booth or vehicle, or `version`, unknown"},
            409: {
                "model": Conflict,
                "description": "`after`: not materialised in time; `max_staleness`: the speed "
                "watermark is older",
            },
            410: {"model": Problem, "description": "`version` was rolled back"},
        }
    return APIRouter(
        prefix=prefix, tags=[tag], dependencies=[Depends(require_api_key)], responses=responses
    )


def invalid_input(where: str, name: str, value: Any, message: str) -> RequestValidationError:
    """A 422 of the same shape as FastAPI's own (the one /docs documents): one list of
    ``{type, loc, msg, input}``, whether pydantic or a rule of ours found the fault;
    ``where``: ``query`` or ``header``."""
    error = {"type": "value_error", "loc": (where, name), "msg": message, "input": value}
    return RequestValidationError([error])


def invalid_query(name: str, value: Any, message: str) -> RequestValidationError:
    """A 422 naming the query parameter ``name``."""
    return invalid_input("query", name, value, message)


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


class ConflictError(Exception):
    """Answered 409 with its :class:`serving.models.Conflict` (``serving.main``'s handler)."""

    def __init__(self, conflict: Conflict):
        super().__init__(conflict.detail)
        self.conflict = conflict


AFTER_POLL_S = 0.05
"""How often a request with ``after=`` looks again at what its worker has materialised."""


def worker_token(
    version: BatchVersion | None, consumer: SpeedConsumer | None, generation: int = 1
) -> ConsistencyToken:
    """What this worker has materialised of ``generation``: the batch version (its
    horizon) and the speed store (:mod:`serving.consistency`)."""
    speed, inputs = consumer.materialised() if consumer is not None else ({}, {})
    return ConsistencyToken(
        generation=generation,
        batch_version=version.version if version is not None else None,
        horizon=version.horizon if version is not None else None,
        speed=speed,
        input=inputs,
    )


@dataclass(frozen=True)
class Stores:
    """What a view request reads (the batch snapshot, current or ``version=``; the speed
    store) and what it asks of them."""

    batch: BatchSnapshot | None
    speed: SpeedTables
    consumer: SpeedConsumer | None
    max_staleness: timedelta | None = None
    generation: int = 1
    after_generation: int | None = None
    """The generation of the ``after=`` token, if not this one's (it was waited for by its
    input offsets only, and the answer says so)."""

    def token(self) -> ConsistencyToken:
        """What the answer is consistent with, taken before its rows are read: the
        speed tables only grow past it."""
        batch = self.batch.version if self.batch else None
        return worker_token(batch, self.consumer, self.generation)

    def check_staleness(self, watermark: datetime | None) -> None:
        """Raise ConflictError if ``max_staleness`` was asked and the speed watermark is
        older than that (or there is none yet)."""
        if self.max_staleness is None:
            return
        # the stores hold zone-less UTC
        staleness = datetime.now(UTC) - watermark.replace(tzinfo=UTC) if watermark else None
        if staleness is not None and staleness <= self.max_staleness:
            return
        limit = self.max_staleness.total_seconds()
        detail = (
            f"the speed watermark is {staleness.total_seconds():.1f} s old, more than "
            f"max_staleness {limit:g} s"
            if staleness is not None
            else "the speed layer has no watermark yet"
        )
        raise ConflictError(
            Conflict(
                detail=detail,
                consistency=self.token().encode(),
                staleness_seconds=staleness.total_seconds() if staleness is not None else None,
                speed_watermark=watermark,
            )
        )


async def _materialised(
    wanted: ConsistencyToken,
    reader: BatchReader,
    consumer: SpeedConsumer | None,
    generation: int,
    wait: timedelta,
) -> None:
    """Return once this worker has materialised what ``wanted`` names; after ``wait``,
    raise ConflictError naming what is missing."""
    deadline = time.monotonic() + wait.total_seconds()
    while True:
        have = worker_token(reader.version, consumer, generation)
        behind = have.behind(wanted)
        if not behind:
            return
        if time.monotonic() >= deadline:
            shown = "; ".join(behind[:4]) + (
                f"; and {len(behind) - 4} more" if len(behind) > 4 else ""
            )
            raise ConflictError(
                Conflict(
                    detail=f"not materialised within {wait.total_seconds():g} s: {shown}",
                    consistency=have.encode(),
                    behind=behind,
                )
            )
        await asyncio.sleep(AFTER_POLL_S)


async def view_stores(
    generation: ServedDep,
    settings: SettingsDep,
    reader: BatchReaderDep,
    speed: SpeedDep,
    consumer: SpeedConsumerDep,
    version: Annotated[
        int | None,
        Query(
            ge=1,
            description="read the batch side from this kept version, as it was "
            "published (the speed side from its horizon on); 410 if it was rolled back",
        ),
    ] = None,
    after: Annotated[
        str | None,
        Query(
            description="a consistency token: first wait (at most `serving_after_wait`) "
            "until this worker has materialised what it names, else 409"
        ),
    ] = None,
    max_staleness: Annotated[
        float | None,
        Query(
            ge=0,
            le=1e9,
            description="seconds: 409 if the answer takes speed rows and "
            "the speed watermark is older than this",
        ),
    ] = None,
) -> AsyncIterator[Stores]:
    """The stores a view request reads (of the generation served when it started), after
    waiting for ``after``."""  # fmt: skip
    serving, number = settings.serving, generation.number
    after_generation = None
    if after is not None:
        try:
            wanted = ConsistencyToken.decode(after, serving.token_bytes, serving.token_partitions)
        except BadTokenError as error:
            raise invalid_query("after", after[:100], f"not a consistency token: {error}") from None
        if ConsistencyToken(generation=number).other_generation(wanted):
            after_generation = wanted.generation
        await _materialised(wanted, reader, consumer, number, serving.after_wait)
    try:
        batch = reader.acquire(version)
    except VersionRefusedError as error:
        raise HTTPException(error.status, detail=str(error)) from None
    try:
        staleness = timedelta(seconds=max_staleness) if max_staleness is not None else None
        yield Stores(batch, speed, consumer, staleness, number, after_generation)
    finally:
        if batch is not None:
            batch.release()


StoresDep = Annotated[Stores, Depends(view_stores)]
