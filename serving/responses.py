"""Writing view responses: JSON built directly from the merged rows.

The routes declare their pydantic response models (so /docs documents every
field) but return this already-encoded body: validating and serialising 288
rows through pydantic three times (rows, response model, JSON) cost about 9 ms
of a ~19 ms request. DuckDB writes each row's JSON (``serving.queries.encoded_rows``);
only rolled-up buckets are encoded here, by ``json.dumps``. The encoding is the
models' own: instants ISO-8601 UTC with milliseconds, money as a string with
two decimals, ``source`` per row.

A query that lies wholly below the horizon reads the batch store only, so its
encoded rows are kept in the version's :class:`serving.result_cache.ResultCache`
and answered from there the next time. The ``X-Cache`` header says which:
``hit``, ``miss`` (computed, now kept) or ``bypass`` (it reads the speed store,
or the cache is off).

A read of one key's rows over at most a day (a booth's day, a vehicle's day)
runs on the event loop: it reads one row group, about a millisecond of DuckDB,
and under load the hand-over to the thread pool and back cost more CPU than
the read itself (docs/performance.md, "The serving layer"). Larger reads go to
the thread pool, so that they do not hold up the worker's other requests.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from fastapi import HTTPException, Response
from starlette.concurrency import run_in_threadpool

from serving.batch_reader import BatchSnapshot
from serving.deps import Stores
from serving.queries import ViewQuery, encoded_rows, key_known, rolled_up_rows
from serving.result_cache import Encoded
from shared.domain.events import format_instant
from shared.domain.merge import Row, Source, sources_for
from shared.platform.speed_tables import SpeedTables


def wire_instant(moment: datetime) -> str:
    """ISO-8601 UTC with milliseconds; zone-less values are UTC (as both stores hold them)."""
    return format_instant(moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC))


def _json_value(value: Any) -> str:
    """``json.dumps``'s fallback for the values it cannot encode itself."""
    if isinstance(value, datetime):
        return wire_instant(value)
    if isinstance(value, Decimal):
        return str(value)
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def encode_rows(rows: list[Row], truncated: bool = False) -> Encoded:
    text = json.dumps(rows, separators=(",", ":"), default=_json_value)
    return Encoded(text.encode(), len(rows), truncated)


@dataclass(frozen=True)
class ViewRows:
    """A view's merged rows, encoded, with what the response says about where they came from."""

    rows: Encoded
    horizon: datetime | None
    batch_version: int | None
    cache: str
    """``hit``, ``miss`` or ``bypass`` (see the module's docstring)."""
    speed_watermark: datetime | None
    """The speed watermark the rows' ``final`` was decided by."""
    consistency: str
    """The answer's consistency token (:mod:`serving.consistency`)."""
    generation: int = 1
    after_generation: int | None = None


async def view_rows(
    query: ViewQuery, stores: Stores, roll_up_to: timedelta | None = None
) -> ViewRows:
    """A query's merged rows, encoded (``serving.queries``); cached if batch-only.

    The speed watermark is read once: it decides which speed rows are final,
    and the response reports it. The consistency token is taken before the
    rows are read; an answer that takes speed rows is refused (409) if the
    speed watermark is older than the request's ``max_staleness``.

    A cache hit is answered on the event loop, and so is a small read
    (:func:`reads_on_event_loop`); a larger one reads the stores (DuckDB, which
    blocks) and encodes in the thread pool, as a plain endpoint would.
    """
    batch, speed = stores.batch, stores.speed
    watermark = speed.watermark
    query = dataclasses.replace(query, final_before=speed.final_before(query.view, watermark))
    token = stores.token().encode()
    generations = (stores.generation, stores.after_generation)
    if batch is None:
        stores.check_staleness(watermark)
        rows = await _read(query, batch, speed, roll_up_to)
        return ViewRows(rows, None, None, "bypass", watermark, token, *generations)
    horizon, version = batch.version.horizon, batch.version.version
    speed_takes_part = Source.SPEED in sources_for(
        query.start, query.end, horizon, query.view.horizon
    )
    if speed_takes_part:
        stores.check_staleness(watermark)
    if not batch.cache.enabled or speed_takes_part:
        rows = await _read(query, batch, speed, roll_up_to)
        return ViewRows(rows, horizon, version, "bypass", watermark, token, *generations)
    key = (query.key(), roll_up_to)  # batch rows only: final whatever the watermark
    found = batch.cache.get(key)
    if found is not None:
        return ViewRows(found, horizon, version, "hit", watermark, token, *generations)
    rows = await _read(query, batch, speed, roll_up_to)
    batch.cache.put(key, rows)
    return ViewRows(rows, horizon, version, "miss", watermark, token, *generations)


EVENT_LOOP_SPAN = timedelta(days=1)
"""The longest range of one key's rows read on the event loop (the module's docstring)."""


def reads_on_event_loop(query: ViewQuery) -> bool:
    """True for a read of one key's rows (a filter) over at most :data:`EVENT_LOOP_SPAN`."""
    return bool(query.filters) and query.end - query.start <= EVENT_LOOP_SPAN


async def _read(
    query: ViewQuery,
    batch: BatchSnapshot | None,
    speed: SpeedTables,
    roll_up_to: timedelta | None,
) -> Encoded:
    if reads_on_event_loop(query):
        return _encoded(query, batch, speed, roll_up_to)
    return await run_in_threadpool(_encoded, query, batch, speed, roll_up_to)


def _encoded(
    query: ViewQuery,
    batch: BatchSnapshot | None,
    speed: SpeedTables,
    roll_up_to: timedelta | None,
) -> Encoded:
    if roll_up_to is not None:
        return encode_rows(*rolled_up_rows(query, batch, speed, roll_up_to))
    return encoded_rows(query, batch, speed)


def view_response(view: ViewRows, granularity: str | None = None) -> Response:
    speed_watermark = view.speed_watermark
    head: dict[str, Any] = {
        "horizon": wire_instant(view.horizon) if view.horizon else None,
        "batch_version": view.batch_version,
        "generation": view.generation,
        "speed_watermark": wire_instant(speed_watermark) if speed_watermark else None,
    }
    if view.after_generation is not None:
        head["after_generation"] = view.after_generation
    if granularity is not None:
        head["granularity"] = granularity
    head["truncated"] = view.rows.truncated
    head["consistency"] = view.consistency
    opened = json.dumps(head, separators=(",", ":"))[:-1].encode()  # without the closing brace
    return Response(
        b"".join((opened, b',"rows":', view.rows.json, b"}")),
        media_type="application/json",
        headers={"X-Cache": view.cache},
    )


async def one_key_response(query: ViewQuery, stores: Stores, not_found: str) -> Response:
    """The answer to a query of one key's rows (its single filter); 404 with ``not_found``
    if the range holds none and neither store has ever held the key."""
    [(column, value)] = query.filters.items()
    rows = await view_rows(query, stores)
    if not rows.rows.count and not await run_in_threadpool(
        key_known, column, value, stores.batch, stores.speed
    ):
        raise HTTPException(404, detail=not_found)
    return view_response(rows)
