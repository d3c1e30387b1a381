"""Response models: what every endpoint returns, typed, so /docs is a usable OpenAPI."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Annotated, Any, Generic, TypeVar

from pydantic import AfterValidator, BaseModel, Field, PlainSerializer, create_model

from shared.domain.events import format_instant
from shared.domain.merge import Source
from shared.domain.views.spec import ColumnType, ViewSpec
from shared.settings.views import VIEW_NAMES


def _as_utc(moment: datetime) -> datetime:
    """Stores hold zone-less UTC; responses say so (``...Z``)."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


Instant = Annotated[
    datetime,
    AfterValidator(_as_utc),
    PlainSerializer(format_instant, return_type=str, when_used="json"),
]
"""A UTC instant, written as in the events and the speed store: ``2026-01-05T06:00:00.250Z``."""


ROW_TYPES: dict[ColumnType, Any] = {
    ColumnType.TEXT: str,
    ColumnType.INSTANT: Instant,
    ColumnType.COUNT: int,
    ColumnType.MONEY: Decimal,
    ColumnType.SECONDS: float,
    ColumnType.TEXT_LIST: list[str],
}
"""Each view column type as the API's rows hold it."""


def final_description(view: ViewSpec) -> str:
    """What ``final`` means for a view's rows: its spec's ``final`` rule, in words."""
    rule = view.final
    watermark = "the counting query's watermark" if rule.own_watermark else "the speed watermark"
    passed = " + ".join((rule.column, *rule.plus))
    return (
        f"true for batch rows, and for speed rows once {watermark} has passed {passed}; "
        "false: provisional, an event the speed layer can still accept may change or "
        "withdraw the row"
    )


def row_model(view: ViewSpec) -> type[BaseModel]:
    """One row of a view as the API returns it: the view's columns, whether it is
    ``final``, then its ``source``."""
    fields: dict[str, Any] = {
        column.name: (ROW_TYPES[column.type], Field(description=column.description))
        for column in view.columns
    }
    fields["final"] = (bool, Field(description=final_description(view)))
    fields["source"] = (Source, ...)
    return create_model(view.api_row, **fields)


RowT = TypeVar("RowT", bound=BaseModel)

CONSISTENCY = (
    "what the answer is consistent with: the batch version and horizon, and the speed "
    "store's and input topics' offsets this worker had materialised (base64url JSON, "
    "docs/architecture.md); pass it as `after` to read at least as much later"
)


class ViewResponse(BaseModel, Generic[RowT]):
    """Rows merged from both layers, and the boundary they were merged at."""

    horizon: Instant | None = Field(
        description="batch rows before it, speed rows from it; null before the first batch run"
    )
    batch_version: int | None
    generation: int = Field(
        description="the generation of the views the rows are of (`lambdaline generation`)"
    )
    after_generation: int | None = Field(
        None,
        description="present when `after=` was a token of another generation (served before "
        "a promotion or rollback): nothing of it orders against `generation`, so it was "
        "answered at once",
    )
    speed_watermark: Instant | None = Field(
        description="event time up to which the speed layer's results are complete"
    )
    granularity: str | None = None
    truncated: bool = Field(
        description="true when the range holds more rows than `limit`: these are the first "
        "`limit` in key order; narrow the range or raise `limit` for the rest"
    )
    consistency: str = Field(description=CONSISTENCY)
    rows: list[RowT]


_RESPONSE_MODELS: dict[str, type[BaseModel]] = {}


def response_model(view: ViewSpec) -> type[BaseModel]:
    """The response of a view's endpoints: :class:`ViewResponse` of its :func:`row_model`,
    one class per view however many endpoints answer with it."""
    if view.name not in _RESPONSE_MODELS:
        response: type[BaseModel] = ViewResponse[row_model(view)]  # type: ignore[misc,assignment]
        _RESPONSE_MODELS[view.name] = response
    return _RESPONSE_MODELS[view.name]


class StateOperator(BaseModel):
    operator: str = Field(
        description="Spark's name of a stateful operator (symmetricHashJoin, stateStoreSave, "
        "dedupeWithinWatermark), numbered where a query has several"
    )
    rows: int | None = Field(
        None,
        description="rows in its state, over every partition (null where the state store "
        "counts none: the speed job's RocksDB tuning; `disk_bytes` is its size then)",
    )
    memory_bytes: int | None = Field(None, description="memory its state stores use")
    disk_bytes: int | None = Field(
        None, description="its state at rest (RocksDB: SST files on local disk)"
    )
    time_ms: dict[str, int] = Field(
        default_factory=dict,
        description="its last micro-batch's time in ms, summed over partitions: updates, "
        "removals, commit, and within RocksDB its writer stalls, compaction, commit's "
        "flush/compact/checkpoint and load",
    )


class LostInputRange(BaseModel):
    """Input records Kafka deleted before the batch layer ingested them."""

    topic: str
    partition: int
    first_offset: int = Field(description="the first offset lost")
    end_offset: int = Field(description="the offset after the last one lost")
    records: int
    ingest_batch: int = Field(description="the first ingest batch after the gap")


class GenerationStatus(BaseModel):
    """One live generation of the views, as this worker sees it."""

    generation: int
    fingerprint: str | None = Field(description="of its view modules' code and view settings")
    view_settings: dict[str, str]
    served: bool
    materialised: bool = Field(description="this worker holds its stores")
    caught_up: bool = Field(description="this worker has read its speed store to the end")
    batch_version: int | None
    batch_horizon: Instant | None
    speed_watermark: Instant | None
    speed_lag_records: int | None = Field(
        description="input records its speed job has not read yet (by its progress reports)"
    )
    ready: bool = Field(description="it may be promoted (`lambdaline generation promote`)")
    waiting_for: list[str]


class StatusResponse(BaseModel):
    generation: int = Field(description="the generation of the views served")
    generations: list[GenerationStatus] = Field(
        description="every live generation (one, unless `lambdaline generation start` ran)"
    )
    batch_version: int | None
    horizon: Instant | None
    batch_created_at: Instant | None
    batch_row_counts: dict[str, int]
    batch_lost_input: list[LostInputRange] = Field(
        description="input records the served version can never count: Kafka deleted them "
        "(retention) before the batch layer ingested them, recorded by `batch reset-ingest`"
    )
    speed_watermark: Instant | None
    speed_lag_records: int | None = Field(
        description="speed-store records on the broker this process has not read yet "
        "(until caught up, of those there at its start; then asked for every 5 s)"
    )
    speed_caught_up: bool
    speed_row_counts: dict[str, int]
    speed_state: dict[str, list[StateOperator]] = Field(
        description="each speed query's stateful operators, from its latest progress report"
    )
    speed_records_rejected: int = Field(
        description="speed-store records skipped since start: not rows of their view "
        "(the log names the first ones by topic, partition and offset)"
    )
    errors: list[str]
    consistency: str = Field(description=CONSISTENCY)


class Problem(BaseModel):
    detail: str


class ViewCorrections(BaseModel):
    """One view's rows of the days a version newly covered, against the speed layer's
    final rows of those days."""

    equal: int
    corrected: int = Field(description="in both, a column differing")
    only_in_batch: int = Field(
        description="no final speed row: dropped as late by the speed layer, or not final yet"
    )
    only_in_speed: int
    largest_difference: dict[str, float] = Field(
        description="per numeric column of the corrected rows, the largest difference "
        "(an instant's in seconds)"
    )
    rows_kept: int = Field(description="the differing rows the version keeps (at most 10,000)")


class CorrectionsSummary(BaseModel):
    compared_from: Instant | None = Field(
        description="the previous version's horizon (null: the first version, every day)"
    )
    compared_to: Instant = Field(description="this version's horizon")
    speed_watermark: Instant | None = None
    views: dict[str, ViewCorrections] = Field(default_factory=dict)
    late_rows_total: dict[str, int] = Field(
        default_factory=dict, description="rows each speed query has dropped as late"
    )
    late_rows_since_previous: dict[str, int] = Field(
        default_factory=dict, description="of those, since the previous version"
    )
    error: str | None = Field(None, description="why the speed store could not be compared")


class KeptVersion(BaseModel):
    version: int
    horizon: Instant
    created_at: Instant
    current: bool = Field(description="the version the API serves")
    rolled_back: bool = Field(description="withdrawn by `batch rollback`: not served")
    row_counts: dict[str, int]
    corrections: CorrectionsSummary | None = Field(
        description="what the version corrected of the speed layer (null: not compared)"
    )


class VersionsResponse(BaseModel):
    consistency: str = Field(description=CONSISTENCY)
    versions: list[KeptVersion] = Field(description="oldest first")


class CorrectedRow(BaseModel):
    view: str
    kind: str = Field(description="corrected, only_in_batch or only_in_speed")
    key: dict[str, Any] = Field(description="the view key")
    batch: dict[str, Any] | None = Field(description="the version's row (null: none)")
    speed: dict[str, Any] | None = Field(description="the speed layer's final row (null: none)")


class CorrectionsResponse(BaseModel):
    version: int
    corrections: CorrectionsSummary | None
    truncated: bool = Field(description="more rows than `limit`")
    rows: list[CorrectedRow] = Field(description="by view, then key")


class Conflict(BaseModel):
    """409: the answer could not be as consistent as the request asked."""

    detail: str
    consistency: str = Field(description="what this worker has materialised, as a token")
    behind: list[str] = Field(
        default_factory=list, description="`after`: what the worker lacks of the token"
    )
    staleness_seconds: float | None = Field(
        None, description="`max_staleness`: how old the speed watermark is"
    )
    speed_watermark: Instant | None = None


class SqlRequest(BaseModel):
    """A read-only query over the merged views (one ``SELECT``)."""

    query: str = Field(
        min_length=1,
        max_length=100_000,
        description=f"one SELECT over the views {', '.join(VIEW_NAMES)}: the rows their "
        "endpoints return, `final` and `source` included",
        examples=["SELECT booth_id, sum(vehicle_count) FROM booth_stats GROUP BY 1 ORDER BY 1"],
    )


class SqlColumn(BaseModel):
    name: str
    type: str = Field(description="DuckDB's type of the column")


class SqlResponse(BaseModel):
    """A query's answer: its columns, then its rows as lists in column order (instants
    ISO-8601 UTC, DECIMAL as text, as the endpoints write them)."""

    horizon: Instant | None
    batch_version: int | None
    generation: int = Field(description="the generation of the views queried")
    speed_watermark: Instant | None
    consistency: str = Field(description=CONSISTENCY)
    columns: list[SqlColumn]
    rows: list[list[Any]]
    truncated: bool = Field(description="the answer stopped at `sql_rows` rows")
