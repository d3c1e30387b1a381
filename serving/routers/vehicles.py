"""A vehicle's trips."""

from __future__ import annotations

from fastapi import HTTPException, Response
from starlette.concurrency import run_in_threadpool

from serving.deps import BatchDep, Limit, SpeedDep, TimeRangeDep, keyed_router
from serving.models import Problem, response_model
from serving.queries import ViewQuery, key_known
from serving.responses import view_response, view_rows
from shared.domain.view_specs import VEHICLE_TRIPS

router = keyed_router("/v1", "vehicles")


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
    query = ViewQuery(
        VEHICLE_TRIPS, time_range.start, time_range.end, {"license_plate": license_plate}, limit
    )
    rows = await view_rows(query, batch, speed)
    if not rows.rows.count and not await run_in_threadpool(
        key_known, "license_plate", license_plate, batch, speed
    ):
        raise HTTPException(404, detail="vehicle not found")
    return view_response(rows)
