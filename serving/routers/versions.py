"""The kept batch versions, and what each corrected of the speed layer's answers."""

from __future__ import annotations

import json
from typing import Annotated, Literal

from fastapi import HTTPException, Path, Query
from starlette.concurrency import run_in_threadpool

from serving.batch_reader import BatchReader, VersionRefusedError
from serving.deps import BatchReaderDep, ServedDep, SpeedConsumerDep, keyed_router, worker_token
from serving.models import (
    CorrectedRow,
    CorrectionsResponse,
    CorrectionsSummary,
    KeptVersion,
    Problem,
    VersionsResponse,
)
from shared.platform.batch_store import CORRECTIONS_TABLE, BatchVersion, list_versions
from shared.settings.views import VIEW_NAMES

router = keyed_router("/v1", "versions")

ViewName = Literal[VIEW_NAMES]  # type: ignore[valid-type]


def _summary(version: BatchVersion) -> CorrectionsSummary | None:
    if version.corrections is None:
        return None
    return CorrectionsSummary.model_validate(version.corrections)


@router.get("/versions")
async def versions(
    reader: BatchReaderDep, consumer: SpeedConsumerDep, generation: ServedDep
) -> VersionsResponse:
    """The kept batch versions of the generation served, oldest first: horizon, creation
    time, whether served or rolled back, and what each corrected of the speed layer's final
    rows."""
    listed = await run_in_threadpool(list_versions, reader.store, reader.threads)
    return VersionsResponse(
        consistency=worker_token(reader.version, consumer, generation.number).encode(),
        versions=[
            KeptVersion(
                version=kept.manifest.version,
                horizon=kept.manifest.horizon,
                created_at=kept.manifest.created_at,
                current=kept.current,
                rolled_back=kept.rolled_back,
                row_counts=kept.manifest.row_counts,
                corrections=_summary(kept.manifest),
            )
            for kept in listed
        ],
    )


def _corrected_rows(
    reader: BatchReader, number: int, view: str | None, limit: int
) -> CorrectionsResponse:
    try:
        snapshot = reader.acquire(number)
    except VersionRefusedError as error:
        raise HTTPException(error.status, detail=str(error)) from None
    assert snapshot is not None  # a number was asked for
    try:
        cursor = snapshot.cursor()
        try:
            [(compared,)] = cursor.execute(
                "SELECT count(*) FROM duckdb_tables() WHERE table_name = ?", [CORRECTIONS_TABLE]
            ).fetchall()
            if not compared:
                raise HTTPException(
                    404,
                    detail=f"batch version {number} was published without comparing the "
                    "speed store",
                )
            where, params = ("WHERE view = ?", [view]) if view is not None else ("", [])
            rows = cursor.execute(
                f"SELECT view, kind, key, batch, speed FROM {CORRECTIONS_TABLE} {where} LIMIT ?",
                [*params, limit + 1],
            ).fetchall()
        finally:
            cursor.close()
        return CorrectionsResponse(
            version=number,
            corrections=_summary(snapshot.version),
            truncated=len(rows) > limit,
            rows=[
                CorrectedRow(
                    view=name,
                    kind=kind,
                    key=json.loads(key),
                    batch=json.loads(batch) if batch is not None else None,
                    speed=json.loads(speed) if speed is not None else None,
                )
                for name, kind, key, batch, speed in rows[:limit]
            ],
        )
    finally:
        snapshot.release()


@router.get(
    "/versions/{version}/corrections",
    responses={
        404: {"model": Problem, "description": "the version is not kept, or was not compared"},
        410: {"model": Problem, "description": "the version was rolled back"},
    },
)
async def corrections(
    reader: BatchReaderDep,
    version: Annotated[int, Path(ge=1)],
    view: Annotated[
        ViewName | None, Query(description="one view's rows (else every view's)")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=100_000)] = 10_000,
) -> CorrectionsResponse:
    """The rows a version corrected of the days it newly covered, both sides shown: the
    version's row and the speed layer's final row (one of them null where only one
    store had the key)."""
    return await run_in_threadpool(_corrected_rows, reader, version, view, limit)
