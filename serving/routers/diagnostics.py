"""Diagnostics: entries that miss an exit or a registration, per booth and window."""

from __future__ import annotations

from fastapi import Response

from serving.deps import Limit, StoresDep, TimeRangeDep, keyed_router
from serving.models import response_model
from serving.queries import ViewQuery
from serving.responses import view_response, view_rows
from shared.domain.views.diagnostics import SPEC as DIAGNOSTICS

router = keyed_router("/v1", "diagnostics", views=True)


@router.get("/diagnostics", response_model=response_model(DIAGNOSTICS))
async def diagnostics(
    time_range: TimeRangeDep, stores: StoresDep, limit: Limit = 10_000
) -> Response:
    """Counts of entries in [from, to) missing an exit (within max_trip) or a registration."""
    query = ViewQuery(DIAGNOSTICS, time_range.start, time_range.end, {}, limit)
    return view_response(await view_rows(query, stores))
