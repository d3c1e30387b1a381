"""booth_rolling and vehicle_visits on static DataFrames: the batch layer's definition
of truth (``tests.scenarios.Windows``, whose docstring works out every row)."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

import pytest
from pyspark.sql import DataFrame, SparkSession

from shared.domain.events import TOLL_ENTRY
from shared.domain.views import booth_rolling, vehicle_visits
from shared.domain.views.rules import without_duplicates
from shared.domain.views.view import Inputs
from tests.scenarios import Windows
from tests.unit.test_views import events


@pytest.fixture(scope="module")
def entries(spark: SparkSession) -> DataFrame:
    return without_duplicates(events(spark, TOLL_ENTRY, Windows.ENTRIES))


def test_an_entry_counts_in_every_hopping_window_that_holds_it(entries: DataFrame) -> None:
    sizes = {"rolling_window": Windows.ROLLING_WINDOW, "rolling_slide": Windows.ROLLING_SLIDE}
    rows = booth_rolling.VIEW.compute(Inputs(entries), sizes).collect()

    assert sorted(
        (r.booth_id, r.window_start, r.window_end - r.window_start, r.vehicle_count, r.total_toll)
        for r in rows
    ) == [
        (booth, datetime.fromisoformat(start), Windows.ROLLING_WINDOW, count, Decimal(toll))
        for booth, start, count, toll in Windows.BOOTH_ROLLING
    ]


def test_visits_split_by_the_gap_joined_by_an_entry_in_it_and_across_midnight(
    entries: DataFrame,
) -> None:
    rows = vehicle_visits.VIEW.compute(Inputs(entries), {"session_gap": Windows.GAP}).collect()

    assert sorted(
        (r.license_plate, r.session_start, r.session_end, r.entry_count, r.booths, r.total_toll)
        for r in rows
    ) == [
        (plate, datetime.fromisoformat(start), datetime.fromisoformat(end), count, booths,
         Decimal(toll))
        for plate, start, end, count, booths, toll in Windows.VISITS
    ]  # fmt: skip
