"""A vehicle's trips and visits."""

from __future__ import annotations

from fastapi import HTTPException, Response
from starlette.concurrency import run_in_threadpool

from serving.deps import BatchDep, Limit, SpeedDep, TimeRangeDep, keyed_router
from serving.models import Problem, response_model
from serving.queries import ViewQuery, key_known
from serving.responses import view_response, view_rows
from shared.domain.view_specs import VEHICLE_TRIPS, VEHICLE_VISITS, ViewSpec

router = keyed_router("/v1", "vehicles")


async def _vehicle_rows(
    view: ViewSpec,
    license_plate: str,
    time_range: TimeRangeDep,
    batch: BatchDep,
    speed: SpeedDep,
    limit: int,
) -> Response:
    query = ViewQuery(
        view, time_range.start, time_range.end, {"license_plate": license_plate}, limit
    )
    rows = await view_rows(query, batch, speed)
    if not rows.rows.count and not await run_in_threadpool(
        key_known, "license_plate", license_plate, batch, speed
    ):
        raise HTTPException(404, detail="vehicle not found")
    return view_response(rows)


@router.get(
    "/vehicles/{license_plate}/trips",
    response_model=response_model(VEHICLE_TRIPS),
    responses={404: {"model": Problem}},
)
async def vehicle_trips(
    license_plate: str,
    time_range: TimeRangeDep,
    batch: BatchDep,
    speed: SpeedDep,
    limit: Limit = 1000,
) -> Response:
    """Trips of one vehicle entering in [from, to): entry joined to its earliest exit."""
    return await _vehicle_rows(VEHICLE_TRIPS, license_plate, time_range, batch, speed, limit)


@router.get(
    "/vehicles/{license_plate}/visits",
    response_model=response_model(VEHICLE_VISITS),
    responses={404: {"model": Problem}},
)
async def vehicle_visits(
    license_plate: str,
    time_range: TimeRangeDep,
    batch: BatchDep,
    speed: SpeedDep,
    limit: Limit = 1000,
) -> Response:
    """Visits of one vehicle starting in [from, to): runs of its entries less than the
    `session_gap` setting (30 minutes by default) apart.

    The speed layer writes a visit once the watermark passes its end (last entry plus
    the gap), so a visit still going on is not shown. A visit is the batch store's if it
    ends at or before the horizon, else the speed store's, whole."""
    return await _vehicle_rows(VEHICLE_VISITS, license_plate, time_range, batch, speed, limit)
