"""Alerts: entries by vehicles whose registration had expired."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query, Response

from serving.deps import Limit, StoresDep, TimeRangeDep, keyed_router
from serving.models import response_model
from serving.queries import ViewQuery
from serving.responses import view_response, view_rows
from shared.domain.views.expired_registrations import SPEC as EXPIRED_REGISTRATIONS

router = keyed_router("/v1/alerts", "alerts", views=True)


@router.get("/expired-registrations", response_model=response_model(EXPIRED_REGISTRATIONS))
async def expired_registrations(
    time_range: TimeRangeDep,
    stores: StoresDep,
    booth_id: Annotated[str | None, Query(description="only this booth")] = None,
    limit: Limit = 1000,
) -> Response:
    """Entries in [from, to) whose latest registration at entry time had expired."""
    filters = {"booth_id": booth_id} if booth_id is not None else {}
    query = ViewQuery(EXPIRED_REGISTRATIONS, time_range.start, time_range.end, filters, limit)
    return view_response(await view_rows(query, stores))
