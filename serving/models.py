"""Response models: what every endpoint returns, typed, so /docs is a usable OpenAPI."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Annotated, Generic, TypeVar

from pydantic import AfterValidator, BaseModel, Field, PlainSerializer

from shared.events import format_instant
from shared.merge import Source


def _as_utc(moment: datetime) -> datetime:
    """Stores hold zone-less UTC; responses say so (``...Z``)."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


Instant = Annotated[
    datetime,
    AfterValidator(_as_utc),
    PlainSerializer(format_instant, return_type=str, when_used="json"),
]
"""A UTC instant, written as in the events and the speed store: ``2026-01-05T06:00:00.250Z``."""


class BoothStatsRow(BaseModel):
    booth_id: str
    window_start: Instant
    window_end: Instant
    vehicle_count: int
    total_toll: Decimal = Field(description="sum of tolls, two decimal places")
    first_entry_time: Instant
    last_entry_time: Instant
    source: Source


class VehicleTripRow(BaseModel):
    booth_id: str
    license_plate: str
    entry_time: Instant
    exit_time: Instant
    duration_seconds: float
    source: Source


class ExpiredRegistrationRow(BaseModel):
    booth_id: str
    license_plate: str
    entry_time: Instant
    registration_id: str
    source: Source


class DiagnosticRow(BaseModel):
    booth_id: str
    window_start: Instant
    reason: str = Field(description="missing_exit or missing_registration")
    count: int
    source: Source


RowT = TypeVar("RowT", bound=BaseModel)


class ViewResponse(BaseModel, Generic[RowT]):
    """Rows merged from both layers, and the boundary they were merged at."""

    horizon: Instant | None = Field(
        description="batch rows before it, speed rows from it; null before the first batch run"
    )
    batch_version: int | None
    speed_watermark: Instant | None = Field(
        description="event time up to which the speed layer's results are complete"
    )
    granularity: str | None = None
    truncated: bool = Field(
        description="true when the range holds more rows than `limit`: these are the first "
        "`limit` in key order; narrow the range or raise `limit` for the rest"
    )
    rows: list[RowT]


class StatusResponse(BaseModel):
    batch_version: int | None
    horizon: Instant | None
    batch_created_at: Instant | None
    batch_row_counts: dict[str, int]
    speed_watermark: Instant | None
    speed_lag_records: int | None = Field(
        description="speed-store records on the broker this process has not read yet "
        "(until caught up, of those there at its start; then asked for every 5 s)"
    )
    speed_caught_up: bool
    speed_row_counts: dict[str, int]
    speed_records_rejected: int = Field(
        description="speed-store records skipped since start: not rows of their view "
        "(the log names the first ones by topic, partition and offset)"
    )
    errors: list[str]


class Problem(BaseModel):
    detail: str
