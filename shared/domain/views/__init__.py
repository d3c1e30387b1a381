"""The views: one module each, and the registry that lists them.

A view module holds ``VIEW``, a :class:`~shared.domain.views.view.View` (or ``VIEWS``,
several): its rows
(spec), its Spark function (which both layers compute it with), its rule again in
DuckDB SQL, its speed plan, its sizes and the event columns it reads
(docs/adding-a-view.md walks through writing one). :data:`VIEW_MODULES` lists the
project's views; the settings add any others a deployment names
(``shared.settings.views``). Everything else derives from the list: topics, both
stores, the API, the speed job's queries, the batch recompute, the bench's peer
and the tests' oracle.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from datetime import timedelta

from pyspark.sql import DataFrame

from shared.domain.views.view import Inputs, Size, View, ViewSizes

VIEW_MODULES: tuple[str, ...] = tuple(
    f"shared.domain.views.{name}"
    for name in (
        "booth_stats", "vehicle_trips", "expired_registrations", "diagnostics", "booth_rolling",
        "vehicle_visits",
    )
)  # fmt: skip
"""The project's views, in the contract's order: the registry."""


class ViewModuleError(Exception):
    """A module named as a view is not one, or two views clash."""


def load_views(modules: Sequence[str]) -> tuple[View, ...]:
    """The ``VIEW`` of each module, in order; :class:`ViewModuleError` naming what is wrong."""
    views: dict[str, View] = {}
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ImportError as error:
            raise ViewModuleError(f"view module {name!r} cannot be imported: {error}") from error
        declared = getattr(module, "VIEWS", None)
        found = declared if declared is not None else (getattr(module, "VIEW", None),)
        if not isinstance(found, tuple) or not all(isinstance(v, View) for v in found):
            raise ViewModuleError(f"view module {name!r} has no VIEW (a View) or VIEWS (Views)")
        for view in found:
            if view.name in views:
                raise ViewModuleError(f"view {view.name!r} of {name!r} is registered twice")
            views[view.name] = view
    sizes_of(tuple(views.values()))  # sizes of one name must be one declaration
    return tuple(views.values())


def sizes_of(views: Sequence[View]) -> tuple[Size, ...]:
    """Every size the views read, each once, in the order the views declare them."""
    sizes: dict[str, Size] = {}
    for view in views:
        for size in view.sizes:
            if sizes.setdefault(size.name, size) != size:
                raise ViewModuleError(
                    f"size {size.name!r} of view {view.name!r} differs from another view's "
                    "(import the one declaration)"
                )
    return tuple(sizes.values())


def read_columns(views: Sequence[View]) -> dict[str, tuple[str, ...]]:
    """The event columns the views read, by event type name: what a caller keeps."""
    columns: dict[str, dict[str, None]] = {}
    for view in views:
        for event_type, names in view.reads.items():
            columns.setdefault(event_type, {}).update(dict.fromkeys(names))
    return {event_type: tuple(names) for event_type, names in columns.items()}


Reaches = Mapping[str, tuple[timedelta, timedelta]]
"""Per event type looked up, the interval of its events' time relative to a row's."""


def reaches_of(views: Sequence[View], sizes: ViewSizes) -> dict[str, tuple[timedelta, timedelta]]:
    """Per event type the views look up (``View.reaches``), the widest interval of all."""
    reaches: dict[str, tuple[timedelta, timedelta]] = {}
    for view in views:
        for event_type, (start, end) in view.reaches(sizes).items():
            known = reaches.get(event_type, (start, end))
            reaches[event_type] = (min(start, known[0]), max(end, known[1]))
    return reaches


def compute_views(views: Sequence[View], inputs: Inputs, sizes: ViewSizes) -> dict[str, DataFrame]:
    """Every view over static, deduplicated events: the definition of truth.

    Intermediate results several views read (the registration lookup, one trip join)
    are computed once and persisted (``Inputs.shared``): ``spark.catalog.clearCache()``
    releases them."""
    return {view.name: view.compute(inputs, sizes) for view in views}


def reference_sql(
    views: Sequence[View], sizes: ViewSizes, first_copy: str
) -> tuple[str, dict[str, str]]:
    """Every view's rule stated again in DuckDB SQL over raw events, apart from the Spark
    functions: the one reference the bench's DuckDB peer and the tests' oracle run.

    Input: tables (or views) ``entries``, ``exits`` and ``registrations`` of the events'
    fields, instants as zone-less UTC ``TIMESTAMP``, every copy of a record.
    ``first_copy``: the ``ORDER BY`` that makes an entry's first copy first (the one
    counted). Returns the statements that make the table ``once_entries`` and the views'
    reference tables, and per view a ``SELECT`` of its columns in the spec's order, rows
    in key order, typed as the batch store's.
    """
    tables = {table.name: table for view in views for table in view.reference_tables}
    prepare = f"""
        CREATE OR REPLACE TEMP TABLE once_entries AS
            SELECT * FROM entries
            QUALIFY row_number() OVER (PARTITION BY event_id ORDER BY {first_copy}) = 1;
    """ + "".join(
        f"CREATE OR REPLACE TEMP TABLE {name} AS {table.sql(sizes)};\n"
        for name, table in tables.items()
    )
    selects = {
        view.name: f"{view.reference_sql(sizes)} ORDER BY {', '.join(view.spec.key)}"
        for view in views
    }
    return prepare, selects
