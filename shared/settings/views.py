"""The registered views: the project's (``shared.domain.views.VIEW_MODULES``) and those a
deployment adds by naming their modules in ``LAMBDALINE_VIEW_MODULES``.

Read once, when this module is first imported: the view settings, the stores'
tables, the API's routes and models and the speed job's queries are all built from
it, so every process of a deployment (speed job, batch job, API workers) must see
the same variable.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from shared.domain.views import VIEW_MODULES, load_views
from shared.domain.views.spec import ViewSpec
from shared.domain.views.view import View

VIEW_MODULES_ENV = "LAMBDALINE_VIEW_MODULES"
"""Comma-separated modules of views to serve besides the project's (importable
names, say ``mycompany.views.heavy_vehicles``); not a setting of its own."""


def registered_modules(environ: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    """The project's view modules, then those the variable adds (each once, in order)."""
    extra = [name.strip() for name in environ.get(VIEW_MODULES_ENV, "").split(",")]
    return tuple(dict.fromkeys([*VIEW_MODULES, *(name for name in extra if name)]))


REGISTERED: tuple[View, ...] = load_views(registered_modules())
"""Every view, in order: the project's, then the added ones."""

VIEWS: tuple[ViewSpec, ...] = tuple(view.spec for view in REGISTERED)
"""Every view's rows (its spec)."""

VIEW_BY_NAME: Mapping[str, ViewSpec] = {spec.name: spec for spec in VIEWS}

VIEW_NAMES: tuple[str, ...] = tuple(VIEW_BY_NAME)
"""The views' names; each has a speed-store topic and a batch-store table."""
