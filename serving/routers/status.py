"""Status, liveness and readiness."""

from __future__ import annotations

from collections.abc import Mapping

from fastapi import APIRouter, Request, Response

from serving.deps import (
    BatchReaderDep,
    ServedDep,
    SettingsDep,
    SpeedConsumerDep,
    SpeedDep,
    keyed_router,
    worker_token,
)
from serving.generations import Generations
from serving.models import LostInputRange, StateOperator, StatusResponse
from shared.platform.batch_store import BatchVersion
from shared.settings import Settings, describe_view_settings
from shared.settings.views import VIEW_NAMES

router = APIRouter(tags=["status"])
keyed = keyed_router("/v1", "status")


def _speed_counts(speed: SpeedDep) -> dict[str, int]:
    cursor = speed.cursor()
    try:
        counts = {}
        for view in VIEW_NAMES:
            row = cursor.execute(f'SELECT count(*) FROM "{view}"').fetchone()
            counts[view] = int(row[0]) if row else 0
        return counts
    finally:
        cursor.close()


def _other_view_settings(
    made_with: Mapping[str, str], made_by: str, layer: str, settings: Settings
) -> str | None:
    """Why rows made with ``made_with`` do not fit this API's ``window``/``max_trip``, if
    they do not.

    The rows still answer (each carries its own window_start and window_end), but
    the window's own granularity label and the check that a granularity is a
    multiple of the window would use the API's value.
    """
    if made_with == settings.views.labels:
        return None
    return (
        f"{made_by} with {describe_view_settings(made_with)}; this API runs with "
        f"{describe_view_settings(settings.views.labels)}: give it the {layer}'s settings"
    )


def _view_settings_errors(
    version: BatchVersion | None, speed: SpeedDep, settings: Settings
) -> list[str | None]:
    batch = None
    if version is not None:
        made_by = f"batch version {version.version} was computed"
        batch = _other_view_settings(version.view_settings, made_by, "batch layer", settings)
    speed_made = "the speed store was written"
    return [batch] + [
        _other_view_settings(made_with, speed_made, "speed layer", settings)
        for made_with in speed.view_settings
    ]


@keyed.get("/status")
def status(
    request: Request,
    generation: ServedDep,
    settings: SettingsDep,
    reader: BatchReaderDep,
    speed: SpeedDep,
    consumer: SpeedConsumerDep,
) -> StatusResponse:
    """Which generation and batch version are served, the horizon, how far the speed store
    has got, and each live generation (whether a new one may be promoted)."""
    generations: Generations = request.app.state.generations
    version = reader.version
    consistency = worker_token(version, consumer, generation.number).encode()
    found = (
        generations.error,
        reader.error,
        consumer.error if consumer else None,
        *_view_settings_errors(version, speed, settings),
    )
    errors = [error for error in found if error]
    return StatusResponse(
        generation=generation.number,
        generations=generations.statuses(),
        batch_version=version.version if version else None,
        horizon=version.horizon if version else None,
        batch_created_at=version.created_at if version else None,
        batch_row_counts=version.row_counts if version else {},
        batch_lost_input=[
            LostInputRange.model_validate(lost.to_document())
            for lost in (version.lost_input if version else ())
        ],
        speed_watermark=speed.watermark,
        speed_lag_records=consumer.lag if consumer else None,
        speed_caught_up=consumer.caught_up.is_set() if consumer else False,
        speed_row_counts=_speed_counts(speed),
        speed_state={
            query: [StateOperator.model_validate(op) for op in operators]
            for query, operators in sorted(speed.state_by_query.items())
        },
        speed_records_rejected=speed.rejected,
        errors=errors,
        consistency=consistency,
    )


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """Liveness: the process answers. On the event loop, never in the thread pool, which
    other requests may all hold."""
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"description": "not ready; the body says which store"}})
async def readyz(
    response: Response, reader: BatchReaderDep, consumer: SpeedConsumerDep
) -> dict[str, object]:
    """Ready once the speed store has caught up and the published batch version is attached.
    On the event loop, from what the stores' threads last saw; why a store is not ready
    (an exception's text) is for `/v1/status`, which needs a key."""
    waiting = []
    if consumer is None or not consumer.caught_up.is_set():
        waiting.append("speed store not caught up")
    if reader.published is not None and reader.version is None:
        waiting.append(f"batch version {reader.published} not attached")
    if waiting:
        response.status_code = 503
        return {"status": "not ready", "waiting_for": waiting}
    return {"status": "ready"}
