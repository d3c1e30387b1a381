"""``GET /v1/views/{view}``: any view's merged rows, by its name, under the rules of the
typed endpoints (the horizon, `final` and `source`, the consistency token, `after=`,
`version=`, `max_staleness=`).

The typed endpoints (``/v1/booths/…``, ``/v1/vehicles/…``, …) stay as they are; this
one serves every view the same way, filtered by any of its text key columns (one
query parameter per such column of any view, made from the specs), so a view needs
no endpoint of its own.
"""

from __future__ import annotations

import inspect
from enum import StrEnum
from typing import Annotated, Union

from fastapi import Path, Query, Response

from serving.deps import Limit, StoresDep, TimeRangeDep, invalid_query, keyed_router
from serving.models import response_model
from serving.queries import ViewQuery
from serving.responses import view_response, view_rows
from shared.domain.views.spec import ColumnType
from shared.settings.views import VIEW_BY_NAME, VIEW_NAMES, VIEWS

router = keyed_router("/v1", "views", views=True)

ViewName = StrEnum("ViewName", {name: name for name in VIEW_NAMES})  # type: ignore[misc]
"""The names of the views, as the path takes them."""

FILTERS = sorted({
    column.name for view in VIEWS for column in view.columns
    if column.name in view.key and column.type is ColumnType.TEXT
})  # fmt: skip
"""The text key columns of the views: each view's rows can be filtered by those it has."""

AnyViewResponse = Union[tuple(response_model(view) for view in VIEWS)]  # type: ignore[valid-type]  # noqa: UP007


async def view(
    view: ViewName,
    time_range: TimeRangeDep,
    stores: StoresDep,
    limit: Limit = 10_000,
    **filters: str | None,
) -> Response:
    """A view's rows whose time column lies in [from, to), batch rows below the horizon and
    speed rows from it, each with `final` and `source`, in key order; filtered by any of
    the view's text key columns."""
    spec = VIEW_BY_NAME[view.value]
    given = {column: value for column, value in filters.items() if value is not None}
    for column, value in given.items():
        if column not in spec.key:
            keys = [name for name in spec.key if name in FILTERS]
            raise invalid_query(
                column, value, f"{spec.name} has no key column {column}; its text key "
                f"columns are {', '.join(keys) or 'none'}",
            )  # fmt: skip
    query = ViewQuery(spec, time_range.start, time_range.end, given, limit)
    return view_response(await view_rows(query, stores))


def _signature() -> inspect.Signature:
    """``view``'s parameters as FastAPI reads them: one optional query parameter per text
    key column of any view (:data:`FILTERS`), so a view's key needs no code here."""
    positional = inspect.Parameter.POSITIONAL_OR_KEYWORD
    name = Annotated[ViewName, Path(description=f"one of {', '.join(VIEW_NAMES)}")]
    fixed = [
        inspect.Parameter("view", positional, annotation=name),
        inspect.Parameter("time_range", positional, annotation=TimeRangeDep),
        inspect.Parameter("stores", positional, annotation=StoresDep),
        inspect.Parameter("limit", positional, annotation=Limit, default=10_000),
    ]
    filters = [
        inspect.Parameter(
            column, inspect.Parameter.KEYWORD_ONLY, default=None,
            annotation=Annotated[str | None, Query(description=f"only rows of this {column}")],
        )
        for column in FILTERS
    ]  # fmt: skip
    return inspect.Signature([*fixed, *filters], return_annotation=Response)


view.__signature__ = _signature()  # type: ignore[attr-defined]
router.get("/views/{view}", response_model=AnyViewResponse)(view)
