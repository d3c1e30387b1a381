"""The registry: which modules are views, in which order, and what it refuses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from shared.domain.views import VIEW_MODULES, ViewModuleError, load_views, read_columns, sizes_of
from shared.settings import Settings
from shared.settings.views import REGISTERED, VIEW_NAMES, registered_modules
from tests.views import heavy_vehicles


def test_the_registry_is_the_six_views_in_the_contracts_order() -> None:
    assert VIEW_NAMES == (
        "booth_stats", "vehicle_trips", "expired_registrations", "diagnostics", "booth_rolling",
        "vehicle_visits",
    )  # fmt: skip
    assert [view.name for view in load_views(VIEW_MODULES)] == list(VIEW_NAMES)


def test_added_modules_come_after_the_projects_once_each() -> None:
    environ = {
        "LAMBDALINE_VIEW_MODULES": " tests.views.heavy_vehicles, ,tests.views.heavy_vehicles"
    }
    assert registered_modules(environ) == (*VIEW_MODULES, "tests.views.heavy_vehicles")
    assert registered_modules({}) == VIEW_MODULES
    views = load_views(registered_modules(environ))
    assert [view.name for view in views][-1] == "heavy_vehicles"


@pytest.mark.parametrize(
    ("modules", "message"),
    [
        (["no.such.views"], "view module 'no.such.views' cannot be imported"),
        (["json"], "view module 'json' has no VIEW"),
        (
            ["shared.domain.views.booth_stats", "shared.domain.views.booth_stats"],
            "view 'booth_stats' of 'shared.domain.views.booth_stats' is registered twice",
        ),
    ],
)
def test_a_module_that_is_not_a_new_view_is_refused_by_name(
    modules: list[str], message: str
) -> None:
    with pytest.raises(ViewModuleError, match=message):
        load_views(modules)


def test_two_declarations_of_one_size_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "other_window.py").write_text(
        "import dataclasses\n"
        "from datetime import timedelta\n"
        "from shared.domain.views.view import Size\n"
        "from tests.views import heavy_vehicles\n"
        "VIEW = dataclasses.replace(\n"
        "    heavy_vehicles.VIEW,\n"
        "    sizes=(Size('window', timedelta(minutes=10), 'another window'),),\n"
        ")\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ViewModuleError, match="size 'window' of view 'heavy_vehicles' differs"):
        load_views([*VIEW_MODULES, "other_window"])


def test_each_size_a_view_declares_is_a_setting() -> None:
    assert [size.name for size in sizes_of(REGISTERED)] == [
        "window", "max_trip", "registration_lookback", "rolling_window", "rolling_slide",
        "session_gap",
    ]  # fmt: skip
    sizes = Settings(rolling_window="2h", session_gap="20m").views.sizes
    assert sizes["rolling_window"].total_seconds() == 7200
    assert sizes["session_gap"].total_seconds() == 1200
    assert sizes["window"].total_seconds() == 300  # the default


def test_the_batch_layer_keeps_the_columns_any_view_reads() -> None:
    columns = read_columns([*REGISTERED, heavy_vehicles.VIEW])
    assert "vehicle_type" in columns["toll_entry"]
    assert "vehicle_type" not in read_columns(REGISTERED)["toll_entry"]
    assert set(read_columns(REGISTERED)) == {"toll_entry", "toll_exit", "vehicle_registration"}


def test_a_command_names_a_view_module_it_cannot_load() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "lambdaline.cli", "topics", "create"],
        env={"PATH": "/usr/bin:/bin", "LAMBDALINE_VIEW_MODULES": "no.such.views"},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode != 0
    assert "view module 'no.such.views' cannot be imported" in done.stderr
