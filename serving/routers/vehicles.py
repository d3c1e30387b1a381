"""A vehicle's trips."""

from __future__ import annotations

from fastapi import Response

from serving.deps import BatchDep, Limit, SpeedDep, TimeRangeDep, keyed_router
from serving.models import VehicleTripRow, ViewResponse
from serving.queries import ViewQuery
from serving.responses import view_response, view_rows

router = keyed_router("/v1", "vehicles")


@router.get("/vehicles/{license_plate}/trips", response_model=ViewResponse[VehicleTripRow])
async def vehicle_trips(
    license_plate: str,
    time_range: TimeRangeDep,
    batch: BatchDep,
    speed: SpeedDep,
    limit: Limit = 1000,
) -> Response:
    """Trips of one vehicle entering in [from, to): entry joined to its earliest exit."""
    query = ViewQuery(
        "vehicle_trips", time_range.start, time_range.end, {"license_plate": license_plate}, limit
    )
    return view_response(await view_rows(query, batch, speed), speed.watermark)
