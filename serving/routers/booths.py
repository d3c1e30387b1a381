"""Booth statistics: one booth, or all booths, at 5m, 1h or 1d; one booth's rolling hour."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Literal

from fastapi import HTTPException, Query, Response
from starlette.concurrency import run_in_threadpool

from serving.deps import (
    Limit,
    SettingsDep,
    StoresDep,
    TimeRangeDep,
    invalid_query,
    keyed_router,
)
from serving.models import response_model
from serving.queries import ViewQuery, key_known
from serving.responses import one_key_response, view_response, view_rows
from shared.domain.views.booth_rolling import SPEC as BOOTH_ROLLING
from shared.domain.views.booth_stats import SPEC as BOOTH_STATS
from shared.settings import duration_label

router = keyed_router("/v1", "booth stats", views=True)

Granularity = Literal["5m", "1h", "1d"]
GRANULARITIES = {"5m": timedelta(minutes=5), "1h": timedelta(hours=1), "1d": timedelta(days=1)}
GranularityQuery = Annotated[
    Granularity | None,
    Query(
        description="bucket size of the rows, a multiple of the view's window; "
        "left out, the window's own rows (5 minutes unless the `window` setting says otherwise)"
    ),
]


async def _stats(
    booth_id: str | None,
    time_range: TimeRangeDep,
    granularity: Granularity | None,
    limit: int,
    stores: StoresDep,
    settings: SettingsDep,
) -> Response:
    window = settings.views.sizes["window"]
    size = window if granularity is None else GRANULARITIES[granularity]
    if size < window or size % window:
        raise invalid_query(
            "granularity", granularity,
            f"must be a multiple of the window, {duration_label(window)} "
            "(leave it out for the window's own rows)",
        )  # fmt: skip
    filters = {"booth_id": booth_id} if booth_id is not None else {}
    query = ViewQuery(BOOTH_STATS, time_range.start, time_range.end, filters, limit)
    rows = await view_rows(query, stores, None if size == window else size)
    if (
        booth_id is not None
        and not rows.rows.count
        and not await run_in_threadpool(key_known, "booth_id", booth_id, stores.batch, stores.speed)
    ):
        raise HTTPException(404, detail="booth not found")
    return view_response(rows, granularity or duration_label(window))


@router.get(
    "/booths/{booth_id}/stats",
    response_model=response_model(BOOTH_STATS),
)
async def booth_stats(
    booth_id: str,
    time_range: TimeRangeDep,
    stores: StoresDep,
    settings: SettingsDep,
    granularity: GranularityQuery = None,
    limit: Limit = 10_000,
) -> Response:
    """Vehicles and tolls at one booth in [from, to), batch below the horizon, speed from it."""
    return await _stats(booth_id, time_range, granularity, limit, stores, settings)


@router.get("/stats", response_model=response_model(BOOTH_STATS))
async def all_booth_stats(
    time_range: TimeRangeDep,
    stores: StoresDep,
    settings: SettingsDep,
    granularity: GranularityQuery = None,
    limit: Limit = 10_000,
) -> Response:
    """Vehicles and tolls at every booth in [from, to)."""
    return await _stats(None, time_range, granularity, limit, stores, settings)


@router.get(
    "/booths/{booth_id}/rolling",
    response_model=response_model(BOOTH_ROLLING),
)
async def booth_rolling(
    booth_id: str,
    time_range: TimeRangeDep,
    stores: StoresDep,
    limit: Limit = 10_000,
) -> Response:
    """Vehicles and tolls at one booth in hopping windows (1 hour every 5 minutes unless the
    `rolling_window` and `rolling_slide` settings say otherwise) starting in [from, to).

    A window is the batch store's if it ends at or before the horizon, else the speed
    store's, whole: windows overlap, so they are never rolled up."""
    query = ViewQuery(
        BOOTH_ROLLING, time_range.start, time_range.end, {"booth_id": booth_id}, limit
    )
    return await one_key_response(query, stores, "booth not found")
