"""Booth statistics: one booth, or all booths, at 5m, 1h or 1d."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, HTTPException, Query

from serving.deps import BatchDep, Limit, SettingsDep, SpeedDep, TimeRangeDep, require_api_key
from serving.models import BoothStatsRow, Problem, ViewResponse
from serving.queries import ViewQuery, booth_known, merged_rows

router = APIRouter(prefix="/v1", tags=["booth stats"], dependencies=[Depends(require_api_key)])

Granularity = Literal["5m", "1h", "1d"]
GRANULARITIES = {"5m": timedelta(minutes=5), "1h": timedelta(hours=1), "1d": timedelta(days=1)}
GranularityQuery = Annotated[Granularity, Query(description="bucket size of the rows")]


def _stats(
    booth_id: str | None,
    time_range: TimeRangeDep,
    granularity: Granularity,
    limit: int,
    batch: BatchDep,
    speed: SpeedDep,
    settings: SettingsDep,
) -> ViewResponse[BoothStatsRow]:
    size = GRANULARITIES[granularity]
    if size < settings.window or size % settings.window:
        raise HTTPException(
            422,
            detail=f"granularity {granularity} is not a multiple of the window {settings.window}",
        )
    filters = {"booth_id": booth_id} if booth_id is not None else {}
    query = ViewQuery("booth_stats", time_range.start, time_range.end, filters, limit)
    merged = merged_rows(query, batch, speed, roll_up_to=None if size == settings.window else size)
    return ViewResponse[BoothStatsRow](
        horizon=merged.horizon, batch_version=merged.batch_version,
        speed_watermark=speed.watermark, granularity=granularity,
        rows=[BoothStatsRow.model_validate(row) for row in merged.rows],
    )  # fmt: skip


@router.get("/booths/{booth_id}/stats", responses={404: {"model": Problem}})
def booth_stats(
    booth_id: str,
    time_range: TimeRangeDep,
    batch: BatchDep,
    speed: SpeedDep,
    settings: SettingsDep,
    granularity: GranularityQuery = "5m",
    limit: Limit = 10_000,
) -> ViewResponse[BoothStatsRow]:
    """Vehicles and tolls at one booth in [from, to), batch below the horizon, speed from it."""
    if not booth_known(booth_id, batch, speed):
        raise HTTPException(404, detail="booth not found")
    return _stats(booth_id, time_range, granularity, limit, batch, speed, settings)


@router.get("/stats")
def all_booth_stats(
    time_range: TimeRangeDep,
    batch: BatchDep,
    speed: SpeedDep,
    settings: SettingsDep,
    granularity: GranularityQuery = "5m",
    limit: Limit = 10_000,
) -> ViewResponse[BoothStatsRow]:
    """Vehicles and tolls at every booth in [from, to)."""
    return _stats(None, time_range, granularity, limit, batch, speed, settings)
