"""A vehicle's trips and visits."""

from __future__ import annotations

from fastapi import Response

from serving.deps import Limit, StoresDep, TimeRangeDep, keyed_router
from serving.models import response_model
from serving.queries import ViewQuery
from serving.responses import one_key_response
from shared.domain.views.vehicle_trips import SPEC as VEHICLE_TRIPS
from shared.domain.views.vehicle_visits import SPEC as VEHICLE_VISITS

router = keyed_router("/v1", "vehicles", views=True)
PLATE = "license_plate"


@router.get(
    "/vehicles/{license_plate}/trips",
    response_model=response_model(VEHICLE_TRIPS),
)
async def vehicle_trips(
    license_plate: str,
    time_range: TimeRangeDep,
    stores: StoresDep,
    limit: Limit = 1000,
) -> Response:
    """Trips of one vehicle entering in [from, to): entry joined to its earliest exit."""
    query = ViewQuery(
        VEHICLE_TRIPS, time_range.start, time_range.end, {PLATE: license_plate}, limit
    )
    return await one_key_response(query, stores, "vehicle not found")


@router.get(
    "/vehicles/{license_plate}/visits",
    response_model=response_model(VEHICLE_VISITS),
)
async def vehicle_visits(
    license_plate: str,
    time_range: TimeRangeDep,
    stores: StoresDep,
    limit: Limit = 1000,
) -> Response:
    """Visits of one vehicle starting in [from, to): runs of its entries less than the
    `session_gap` setting (30 minutes by default) apart.

    The speed layer writes a visit once the watermark passes its end (last entry plus
    the gap), so a visit still going on is not shown. A visit is the batch store's if it
    ends at or before the horizon, else the speed store's, whole."""
    query = ViewQuery(
        VEHICLE_VISITS, time_range.start, time_range.end, {PLATE: license_plate}, limit
    )
    return await one_key_response(query, stores, "vehicle not found")
